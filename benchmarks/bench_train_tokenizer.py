"""Benchmark: deterministic train_tokenizer against the raw `tokenizers` trainer.

Builds a >= 20 MB corpus at run time from shared/data (the WikiText head, the
WikiExtractor shards and Google's sample, repeated with seeded letter swaps so each copy
adds new words), then trains a 30,522-entry uncased vocabulary with

  (a) raw: `tokenizers.BertWordPieceTokenizer().train(files)` (the baseline), and
  (b) ours: `bertprep.tokenizer.training.train_tokenizer` reading the same files through
      `bertprep.corpus.spec.iter_documents` (reading, held-out split, alphabet, training,
      [UNK] measurement, saving: the whole command),

each in a fresh process (so Rust's hash seeds differ), reporting MB/s, peak RSS (the
child's own ru_maxrss) and ours/raw. (a) and (b) run `--repeats` times each; identical
vocab.txt sha256 across (b)'s runs is the determinism evidence, (a)'s differ.

    .venv/bin/python benchmarks/bench_train_tokenizer.py [--mb 20] [--repeats 2]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import random
import resource
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA_CANDIDATES = [REPO.parent / "shared" / "data"]
VOCAB_SIZE = 30522


def find_data() -> pathlib.Path:
    for candidate in DATA_CANDIDATES:
        if (candidate / "wikitext-2-raw-train-head.txt").is_file():
            return candidate
    sys.exit(f"shared data not found in {', '.join(map(str, DATA_CANDIDATES))}")


def build_corpus(data: pathlib.Path, target_bytes: int, out: pathlib.Path) -> list[pathlib.Path]:
    """Copies of each source file; copy k > 0 swaps two letters in ~15% of the words of
    text lines (markup and heading lines kept), seeded by k, so the vocabulary grows."""
    sources = [data / "wikitext-2-raw-train-head.txt", *sorted((data / "enwiki_wikiextractor").glob("wiki_0*")),
               data / "google_sample_text.txt"]
    texts = [(src.name, src.read_text(encoding="utf-8").split("\n")) for src in sources]
    files, written, copy = [], 0, 0
    while written < target_bytes:
        rng = random.Random(copy)
        for name, lines in texts:
            out_lines = [line if copy == 0 or line.startswith(("<", " =")) else _swap_letters(line, rng)
                         for line in lines]
            path = out / f"copy{copy:02d}-{name}"
            data_bytes = "\n".join(out_lines).encode("utf-8")
            path.write_bytes(data_bytes)
            files.append(path)
            written += len(data_bytes)
        copy += 1
    return files


def _swap_letters(line: str, rng: random.Random) -> str:
    words = line.split(" ")
    for i, word in enumerate(words):
        if len(word) > 3 and rng.random() < 0.15:
            j = rng.randrange(len(word) - 1)
            words[i] = word[:j] + word[j + 1] + word[j] + word[j + 2:]
    return " ".join(words)


def child(kind: str, corpus: pathlib.Path, out: pathlib.Path) -> None:
    files = sorted(str(p) for p in corpus.iterdir())
    start = time.perf_counter()
    if kind == "raw":
        from tokenizers import BertWordPieceTokenizer

        tok = BertWordPieceTokenizer(lowercase=True)
        tok.train(files, vocab_size=VOCAB_SIZE, min_frequency=2, limit_alphabet=1000, show_progress=False,
                  special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        out.mkdir(parents=True, exist_ok=True)
        tok.save_model(str(out))
    else:
        from bertprep.corpus import CorpusSpec, iter_documents
        from bertprep.tokenizer import TokenizerTrainingConfig, train_tokenizer

        config = TokenizerTrainingConfig(vocab_size=VOCAB_SIZE)
        train_tokenizer(iter_documents(CorpusSpec(paths=tuple(files))), config, out, progress=False)
    seconds = time.perf_counter() - start
    vocab = (out / "vocab.txt").read_bytes()
    print(json.dumps({
        "seconds": seconds, "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "vocab_sha256": hashlib.sha256(vocab).hexdigest(), "entries": vocab.count(b"\n"),
        "tokens": sorted(vocab.decode("utf-8").split("\n")),
    }))


def run_child(kind: str, corpus: pathlib.Path, out: pathlib.Path) -> dict:
    result = subprocess.run([sys.executable, __file__, "--child", kind, str(corpus), str(out)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"{kind} run failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=20.0, help="corpus size in MB (default 20)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each trainer (default 2)")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "CORPUS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], pathlib.Path(args.child[1]), pathlib.Path(args.child[2]))
        return
    with tempfile.TemporaryDirectory(prefix="bench-tok-") as tmp:
        tmp = pathlib.Path(tmp)
        corpus = tmp / "corpus"
        corpus.mkdir()
        files = build_corpus(find_data(), int(args.mb * 1e6), corpus)
        size = sum(p.stat().st_size for p in files)
        print(f"corpus: {len(files)} files, {size / 1e6:,.1f} MB; vocab_size {VOCAB_SIZE:,}, uncased")
        runs: dict[str, list[dict]] = {"raw": [], "ours": []}
        for i in range(args.repeats):
            for kind in ("raw", "ours"):
                result = run_child(kind, corpus, tmp / f"{kind}{i}")
                runs[kind].append(result)
                print(f"  {kind:4s} run {i + 1}: {result['seconds']:6.2f} s  {size / 1e6 / result['seconds']:6.2f} MB/s"
                      f"  peak {result['peak_bytes'] / 1e6:7.1f} MB  {result['entries']:,} entries"
                      f"  vocab.txt sha256 {result['vocab_sha256'][:16]}")
        best = {kind: min(r["seconds"] for r in rs) for kind, rs in runs.items()}
        peak = {kind: max(r["peak_bytes"] for r in rs) for kind, rs in runs.items()}
        print(f"time ours/raw (best of {args.repeats}): {best['ours'] / best['raw']:.2f}x (target <= 1.5x); "
              f"peak RSS ours/raw: {peak['ours'] / peak['raw']:.2f}x")
        for kind, rs in runs.items():
            shas = {r["vocab_sha256"] for r in rs}
            differ = len(set(rs[0]["tokens"]).symmetric_difference(rs[-1]["tokens"])) // 2
            print(f"{kind}: {len(shas)} distinct vocab.txt across {len(rs)} processes "
                  f"({'byte-identical' if len(shas) == 1 else f'{differ} tokens differ first vs last'})")
        common = set(runs["raw"][0]["tokens"]) & set(runs["ours"][0]["tokens"])
        print(f"token sets: {len(common):,} of {VOCAB_SIZE:,} shared between raw and ours")


if __name__ == "__main__":
    main()
