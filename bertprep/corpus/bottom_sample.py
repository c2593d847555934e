"""A deterministic sample of documents by size: train-tokenizer's `--sample-bytes`.

The "bottom-k by bytes" sample keeps the documents with the smallest priorities (their
64-bit content hashes) whose sizes add up to the budget, so it depends on the corpus and
not on its order; it lives in a file, compacted as it grows, so memory stays small.
"""
from __future__ import annotations

import os
import pathlib

PRIORITY_SPACE = 1 << 64  # priorities are 64-bit hashes


class BottomSample:
    """The documents with the smallest priorities (content hashes) that fit a byte budget.

    Candidates go to a file; when it holds twice the budget it is compacted to the
    budget and the priority threshold drops, so later documents above it are skipped.
    Thresholds only fall, so nothing skipped could be in the final sample: the result is
    the same set whatever the order and the compaction points.
    """

    def __init__(self, path: pathlib.Path, budget: int):
        self.path, self.budget = path, budget
        self.threshold = PRIORITY_SPACE
        self.entries: list[tuple[int, int]] = []  # (priority, size) in file order
        self.bytes = 0
        self.file = open(path, "wb")

    def add(self, data: bytes, priority: int) -> None:
        if priority >= self.threshold:
            return
        self.file.write(data)
        self.entries.append((priority, len(data)))
        self.bytes += len(data)
        if self.bytes > 2 * self.budget:
            self._compact()

    def finish(self) -> tuple[pathlib.Path, int, int]:
        self._compact()
        self.file.close()
        return self.path, self.bytes, len(self.entries)

    def _cutoff(self) -> int:
        total = 0
        for i, (priority, size) in enumerate(sorted(self.entries)):
            if total + size > self.budget and i > 0:  # the first document always fits
                return priority
            total += size
        return self.threshold

    def _compact(self) -> None:
        self.threshold = min(self.threshold, self._cutoff())
        self.file.close()
        kept_path = self.path.with_suffix(".kept")
        kept, kept_bytes = [], 0
        with open(self.path, "rb") as source, open(kept_path, "wb") as target:
            for priority, size in self.entries:
                data = source.read(size)
                if priority < self.threshold:
                    target.write(data)
                    kept.append((priority, size))
                    kept_bytes += size
        os.replace(kept_path, self.path)
        self.entries, self.bytes = kept, kept_bytes
        self.file = open(self.path, "ab")
