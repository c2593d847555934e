"""A >= 20 MB English corpus in BERT's layout, made at run time from ../shared/data.

The shared data holds about 4 MB of Wikipedia and WikiText. Each copy of it has the
sentences of every document in a different (seeded) order, so documents and pairs
differ between copies while the text stays real English. Nothing is committed: the
file is written to a temporary folder by the benchmarks that need it.
"""
from __future__ import annotations

import pathlib
import random
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def shared_data_or_exit() -> pathlib.Path:
    if not SHARED_DATA.is_dir():
        sys.exit(f"skipped: {SHARED_DATA} is absent (the benchmarks read the shared corpus)")
    return SHARED_DATA


def source_documents() -> list[list[str]]:
    from bertprep.corpus import CorpusSpec, iter_documents

    data = shared_data_or_exit()
    paths = sorted(str(p) for p in (data / "enwiki_wikiextractor").iterdir())
    paths.append(str(data / "wikitext-2-raw-train-head.txt"))
    return list(iter_documents(CorpusSpec(paths=tuple(paths), sentences="split")))


def write_corpus(path: pathlib.Path, target_bytes: int, seed: int = 0) -> int:
    """Write copies of the shared documents until `target_bytes`; returns bytes written."""
    docs = source_documents()
    rng = random.Random(seed)
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target_bytes:
            for doc in docs:
                # A document per paragraph group of ~20 sentences, so documents are of
                # typical length and there are many of them.
                order = doc[:]
                rng.shuffle(order)
                for start in range(0, len(order), 20):
                    text = "\n".join(order[start : start + 20]) + "\n\n"
                    f.write(text)
                    written += len(text.encode("utf-8"))
                if written >= target_bytes:
                    break
    return written


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1])
    size = int(float(sys.argv[2]) * 1e6) if len(sys.argv) > 2 else 20_000_000
    print(f"{write_corpus(out, size):,} bytes -> {out}")
