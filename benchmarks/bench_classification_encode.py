"""Classification encoding: ours (bertmodel.data.classification) against transformers'
tokenizer, on the shared GLUE training files, measured in the same run.

Baseline: `transformers.BertTokenizerFast(vocab=bert-base-uncased)` called as run_glue.py
calls it, `tokenizer(texts, pairs, truncation=True, max_length=128)` (Python lists out).
Ours: `encode_texts` to flat numpy rows, with each bulk engine (`tokenizers`, and
`nanotoken` with its sample check when installed). Both start from the texts in memory
and a loaded tokenizer; each time is the best of --repeats. Outputs are compared row by
row and the differences counted (expected 0).

Run: .venv/bin/python benchmarks/bench_classification_encode.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))

FILES = [  # (file, text, pair, label, header)
    ("glue/RTE/train.tsv", "sentence1", "sentence2", "label", True),
    ("glue/MRPC/train.tsv", "#1 String", "#2 String", "Quality", True),
    ("glue/CoLA/in_domain_train.tsv", 3, None, 1, False),
]


def best_of(repeats: int, fn):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-seq-length", type=int, default=128)
    args = parser.parse_args()
    if not SHARED_DATA.is_dir():
        sys.exit(f"skipped: {SHARED_DATA} is absent (the benchmark reads the GLUE files there)")
    import transformers

    from bertmodel.data.classification import encode_texts
    from bertmodel.data.tables import read_table
    from bertprep.tokenizer import nanotoken_available
    from bertprep.tokenizer import load_tokenizer

    vocab_path = SHARED_DATA / "bert-base-uncased-vocab.txt"
    vocab = vocab_path.read_text(encoding="utf-8").splitlines()
    reference = transformers.BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    tok = load_tokenizer(vocab_path)
    engines = ["tokenizers"] + (["nanotoken"] if nanotoken_available() else [])
    L = args.max_seq_length
    print(f"max_seq_length {L}, best of {args.repeats}; baseline: transformers BertTokenizerFast")
    for name, text, pair, label, header in FILES:
        data = read_table(SHARED_DATA / name, text, pair, label, header=header)
        base, theirs = best_of(args.repeats, lambda: reference(data.texts, data.pairs, truncation=True, max_length=L))
        tokens = sum(len(r) for r in theirs["input_ids"])
        print(f"{name}: {len(data):,} rows, {tokens:,} tokens; transformers {base * 1e3:,.0f} ms")
        for engine in engines:
            seconds, ours = best_of(args.repeats, lambda: encode_texts(tok, data.texts, data.pairs, L, engine))
            differ = sum(ours.row(i)[0].tolist() != theirs["input_ids"][i]
                         or ours.row(i)[1].tolist() != theirs["token_type_ids"][i] for i in range(len(data)))
            print(f"  ours ({ours.engine:10}) {seconds * 1e3:7,.0f} ms  {base / seconds:5.2f}x faster  "
                  f"{len(data) / seconds:10,.0f} rows/s  rows differing: {differ}")


if __name__ == "__main__":
    main()
