"""Draw sentence boundaries at random for checking by hand: the splitter's precision.

    .venv/bin/python benchmarks/sentence_sample.py ../shared/data/korean/petitions/* --field content --seed 99

Reads JSON Lines (the text in --field) or plain text (a paragraph per line), splits
every paragraph with bertprep's `--sentences split` rules and prints N boundaries, the
end of one sentence and the start of the next, numbered for a reader to mark right or
wrong. Prints counts first: paragraphs, characters, sentences, boundaries.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import random

from bertprep.corpus import split_sentences


def paragraphs(paths: list[str], field: str | None):
    for path in paths:
        for line in pathlib.Path(path).read_text(encoding="utf-8").split("\n"):
            if line.strip():
                yield json.loads(line)[field] if field else line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--field", help="the text field of JSON Lines input (default: plain text)")
    parser.add_argument("--seed", type=int, default=99)
    parser.add_argument("-n", type=int, default=50)
    args = parser.parse_args()
    texts = list(paragraphs(sorted(args.paths), args.field))
    boundaries = []
    sentences = 0
    for number, text in enumerate(texts):
        split = split_sentences(text)
        sentences += len(split)
        boundaries.extend((number, a, b) for a, b in zip(split, split[1:]))
    print(f"{len(texts):,} paragraphs, {sum(map(len, texts)):,} characters, {sentences:,} sentences, "
          f"{len(boundaries):,} boundaries")
    for k, (number, a, b) in enumerate(random.Random(args.seed).sample(boundaries, min(args.n, len(boundaries)))):
        print(f"{k:3d} paragraph {number}: ...{a[-40:]!r} || {b[:30]!r}")


if __name__ == "__main__":
    main()
