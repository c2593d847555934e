"""The demo's fine-tuning data, which needs no download: sentences of the standard
library's docstrings labelled with the package they document (asyncio, email, ...).

A real classification task on real English: the package shows in the vocabulary
("coroutine", "header", "element"). The demo fine-tunes it twice, from the pre-trained
run and from random weights of the same shape; what pre-training bought is the gap
between the two, not the gap to always guessing the largest class. Deterministic for a
given Python.
"""
from __future__ import annotations

import collections
import pathlib

from bertprep.corpus import iter_stdlib_documents, stdlib_dir

PACKAGES = 4  # the packages with the most sentences become the labels
PER_PACKAGE = 600  # sentences kept per package, so the classes are balanced
DEV_EVERY = 5  # every 5th sentence of a package goes to the validation file


def package_of(path: pathlib.Path, root: pathlib.Path) -> str | None:
    parts = path.relative_to(root).parts
    return parts[0] if len(parts) > 1 and parts[0] not in ("test", "idlelib", "lib2to3", "pydoc_data") else None


def write_topic_task(out_dir) -> tuple[pathlib.Path, pathlib.Path, list[str]]:
    """train.tsv and dev.tsv (columns sentence, label) in out_dir; returns the labels."""
    out_dir = pathlib.Path(out_dir)
    root = stdlib_dir()
    sentences: dict[str, list[str]] = collections.defaultdict(list)
    for path, document in iter_stdlib_documents(root):
        package = package_of(path, root)
        if package:
            sentences[package].extend(s for s in document if "\t" not in s and len(s.split()) >= 5)
    labels = sorted(p for p, _ in sorted(sentences.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:PACKAGES])
    out_dir.mkdir(parents=True, exist_ok=True)
    train, dev = out_dir / "train.tsv", out_dir / "dev.tsv"
    rows = []
    for label in labels:
        for i, sentence in enumerate(sentences[label][:PER_PACKAGE]):
            rows.append((i % DEV_EVERY == 0, " ".join(sentence.split()), label))
    header = "sentence\tlabel\n"
    for path, dev_rows in ((train, False), (dev, True)):
        body = "".join(f"{sentence}\t{label}\n" for is_dev, sentence, label in sorted(rows, key=lambda r: (r[1], r[2]))
                       if is_dev == dev_rows)  # sorted by text: the classes mixed, deterministically
        path.write_text(header + body, encoding="utf-8")
    return train, dev, labels


def majority_baseline(dev: pathlib.Path) -> float:
    labels = [line.rsplit("\t", 1)[-1] for line in dev.read_text(encoding="utf-8").splitlines()[1:]]
    return max(collections.Counter(labels).values()) / len(labels)
