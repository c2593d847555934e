"""build-shards throughput and memory against two baselines measured in the same run.

    python benchmarks/bench_build_shards.py [--mb 20] [--skip-reference] [--kinds-only]

Baselines: (a) `tokenizers` alone encoding the same text (encode_batch, all cores), and
(b) ../shared/tools/reference_builder.py, a plain implementation of the reference
algorithm. Targets (2 cores): dupe 1 <= 0.5x and dupe 5 <= 1.0x the
tokenize-only time; peak RSS of the process tree for 4x the text within 1.3x.
Every build here starts with an empty tokenization cache (a cold build).

Tokenizer kinds: the same text built (dupe 1) with bert-base-uncased's WordPiece and the
byte-level BPEs of roberta-base and ModernBERT-base, each against its floor, `tokenizers`'
own encode_batch of the text with the same tokenizer.json, and against the WordPiece
build (which nanotoken encodes when installed; the others are encoded by `tokenizers`,
with word ids for whole-word masking). --kinds-only runs this part alone.
"""
from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_corpus import REPO, shared_data_or_exit, write_corpus  # noqa: E402
from measure import run_measured  # noqa: E402

PYTHON = sys.executable
BERTPREP = [str(pathlib.Path(PYTHON).with_name("bertprep"))]


def _encode_seconds(corpus: pathlib.Path, load: str) -> float:
    """Seconds `tokenizers` takes to encode the corpus lines (encode_batch, all cores),
    with the tokenizer the Python expression `load` makes."""
    code = (
        "import time\n"
        "from tokenizers import BertWordPieceTokenizer, Tokenizer\n"
        f"tok = {load}\n"
        "t = time.perf_counter()\n"
        f"lines = [l.strip() for l in open({str(corpus)!r}, encoding='utf-8') if l.strip()]\n"
        "tok.encode_batch(lines, add_special_tokens=False)\n"
        "print(time.perf_counter() - t)\n"
    )
    _, _, out = run_measured([PYTHON, "-c", code])
    return float(out.strip().splitlines()[-1])


def tokenize_only_seconds(corpus: pathlib.Path, vocab: pathlib.Path) -> float:
    return _encode_seconds(corpus, f"BertWordPieceTokenizer({str(vocab)!r}, lowercase=True)")


def encode_only_seconds(corpus: pathlib.Path, tokenizer_json: pathlib.Path) -> float:
    """`tokenizers` encoding the corpus lines with a tokenizer.json as it is: the floor."""
    return _encode_seconds(corpus, f"Tokenizer.from_file({str(tokenizer_json)!r})")


RELEASED = ("roberta-base", "modernbert-base")  # byte-level BPE, in ../shared/data/tokenizers


def tokenizer_kinds(corpus: pathlib.Path, mb: float, data: pathlib.Path, tmp: pathlib.Path) -> None:
    """Each kind's cold dupe-1 build against its own encode floor and the WordPiece build."""
    print("tokenizer kinds, dupe 1, cold cache; floor = tokenizers' encode_batch, same text, same tokenizer:")
    vocab = data / "bert-base-uncased-vocab.txt"
    floor = tokenize_only_seconds(corpus, vocab)
    wordpiece, _, _ = ours(corpus, vocab, tmp / "out", 1, tmp / "cache")
    print(f"  wordpiece bert-base-uncased: floor {floor:.2f} s ({mb / floor:.1f} MB/s); build {wordpiece:.2f} s "
          f"({mb / wordpiece:.1f} MB/s) = {wordpiece / floor:.2f}x its floor")
    for name in RELEASED:
        directory = data / "tokenizers" / name
        floor = encode_only_seconds(corpus, directory / "tokenizer.json")
        seconds, peak, _ = ours(corpus, directory, tmp / "out", 1, tmp / "cache")
        print(f"  bpe {name}: floor {floor:.2f} s ({mb / floor:.1f} MB/s); build {seconds:.2f} s ({mb / seconds:.1f} MB/s, "
              f"peak RSS {peak / 1e6:,.0f} MB) = {seconds / floor:.2f}x its floor, {seconds / wordpiece:.2f}x the WordPiece build")


def ours(corpus, vocab, out, dupe, cache, pss=False) -> tuple[float, int, str]:
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    cmd = BERTPREP + ["build-shards", str(corpus), "--tokenizer", str(vocab), "--out", str(out),
                      "--dupe-factor", str(dupe), "--cache-dir", str(cache), "--quiet"]
    return run_measured(cmd, pss=pss)


def reference(corpus, vocab, out, dupe) -> tuple[float, int, str]:
    shutil.rmtree(out, ignore_errors=True)
    tool = REPO.parent / "shared" / "tools" / "reference_builder.py"
    return run_measured([PYTHON, str(tool), str(corpus), "--tokenizer", str(vocab), "--out", str(out), "--dupe-factor", str(dupe)])


def rows_of(output: str) -> int:
    for line in output.splitlines():
        if line.startswith("Wrote "):
            return int(line.split()[1].replace(",", ""))
        if line.endswith(" instances"):
            return int(line.split()[0])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20.0, help="corpus size in MB")
    parser.add_argument("--skip-reference", action="store_true", help="skip the plain reference builder")
    parser.add_argument("--kinds-only", action="store_true",
                        help="only the tokenizer kinds (WordPiece, roberta-base, ModernBERT-base) against their floors")
    args = parser.parse_args()
    data = shared_data_or_exit()
    vocab = data / "bert-base-uncased-vocab.txt"
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        tmp = pathlib.Path(tmp)
        small, large = tmp / "corpus.txt", tmp / "corpus4x.txt"
        mb = write_corpus(small, int(args.mb * 1e6)) / 1e6
        if args.kinds_only:
            print(f"corpus: {mb:.1f} MB of real English from ../shared/data")
            tokenizer_kinds(small, mb, data, tmp)
            return
        write_corpus(large, int(4 * args.mb * 1e6))
        print(f"corpus: {mb:.1f} MB (and {4 * mb:.1f} MB for the memory check), 2 x {args.mb:g} MB of real English from ../shared/data")
        base = tokenize_only_seconds(small, vocab)
        print(f"baseline tokenizers encode_batch (tokenize only): {base:.2f} s ({mb / base:.1f} MB/s)")
        results = {}
        for dupe in (1, 5):
            seconds, peak, output = ours(small, vocab, tmp / "out", dupe, tmp / "cache")
            rows = rows_of(output)
            results[dupe] = (seconds, peak)
            print(f"bertprep dupe {dupe}: {seconds:.2f} s, {mb / seconds:.1f} MB/s, {rows / seconds:,.0f} rows/s, "
                  f"peak RSS {peak / 1e6:,.0f} MB; {seconds / base:.2f}x tokenize-only (target {'0.5' if dupe == 1 else '1.0'}x)")
        seconds4, peak4, _ = ours(large, vocab, tmp / "out", 5, tmp / "cache")
        print(f"bertprep dupe 5 on {4 * mb:.0f} MB: {seconds4:.2f} s, peak RSS {peak4 / 1e6:,.0f} MB; "
              f"memory ratio 4x/1x = {peak4 / results[5][1]:.2f} (target <= 1.3)")
        # RSS counts the pages forked workers share with the parent once per process;
        # the proportional set size (PSS) divides them, giving the tree's real footprint.
        _, pss1, _ = ours(small, vocab, tmp / "out", 5, tmp / "cache", pss=True)
        _, pss4, _ = ours(large, vocab, tmp / "out", 5, tmp / "cache", pss=True)
        print(f"bertprep dupe 5 peak PSS: {pss1 / 1e6:,.0f} MB on {mb:.0f} MB, {pss4 / 1e6:,.0f} MB on {4 * mb:.0f} MB "
              f"(ratio {pss4 / pss1:.2f})")
        tokenizer_kinds(small, mb, data, tmp)
        if not args.skip_reference:
            for dupe in (1, 5):
                seconds, peak, output = reference(small, vocab, tmp / "ref", dupe)
                print(f"reference_builder dupe {dupe}: {seconds:.2f} s, peak RSS {peak / 1e6:,.0f} MB; "
                      f"bertprep is {seconds / results[dupe][0]:.1f}x faster")


if __name__ == "__main__":
    main()
