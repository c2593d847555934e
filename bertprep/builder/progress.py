"""build-shards' one progress display: every task of every stage counted on one bar.

`TrackedExecutor(executor, progress, ...)` wraps the build's executor so that
each result its `map` yields counts as one finished task of that task function's stage,
whatever executor ran it (local pool or Ray: the count is taken on the driver, from the
results). The total is every stage's tasks: the partitions (known once the pair stage
has listed them; estimated before from the input's size), as many scatter tasks, and
the shards (estimated from the rows per byte of text seen so far, exact once the
gather stage lists them).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator

from bertprep.executors import ExecutorReport, TaskCost
from bertprep.progress import BuildProgress

STAGES = {"pair_partition": "tokenize+pair", "scatter_partition": "mask+scatter", "gather_shard": "shuffle+write"}


class TrackedExecutor:
    """An executor whose `map` counts every finished task on the build's progress."""

    def __init__(self, executor, progress: BuildProgress, num_shards: int | None, shard_rows: int,
                 partition_bytes: int, expected_text_bytes: int | None):
        self.executor = executor
        self.progress = progress
        self.num_shards, self.shard_rows = num_shards, shard_rows
        self.expected_text_bytes = expected_text_bytes
        partitions = math.ceil(expected_text_bytes / partition_bytes) if expected_text_bytes else None
        self._rows = self._pair_bytes = self._parts = 0
        progress.expect(STAGES["pair_partition"], partitions)
        progress.expect(STAGES["scatter_partition"], partitions)
        progress.expect(STAGES["gather_shard"], num_shards)

    @property
    def name(self) -> str:
        return self.executor.name

    def report(self) -> ExecutorReport:
        return self.executor.report()

    def map(self, fn: Callable, descriptors: Iterable, cost: TaskCost = TaskCost(),
            max_in_flight: int | None = None) -> Iterator[Any]:
        name = getattr(fn, "__name__", type(fn).__name__)
        stage = STAGES.get(name, name)
        if hasattr(descriptors, "__len__"):
            self.progress.expect(stage, len(descriptors))
        self.progress.start(stage)
        finished = 0
        for result in self.executor.map(fn, descriptors, cost, max_in_flight=max_in_flight):
            finished += 1
            self.progress.task_done(self._read(stage, result))
            yield result
        self.progress.expect(stage, finished)  # a lazy list's real length
        if stage == STAGES["pair_partition"]:  # a partition cut while read scatters each part
            self.progress.expect(STAGES["scatter_partition"], self._parts)

    def _read(self, stage: str, result: dict) -> int:
        """The input text a finished task read (the pair tasks read it all, once), and
        the refined shard estimate that its rows give."""
        if stage != STAGES["pair_partition"]:
            return 0
        self._pair_bytes += result["text_bytes"]
        self._rows += sum(result["rows_per_pass"])
        self._parts += len(result["parts"])
        if self.num_shards is None and self.expected_text_bytes and self._pair_bytes:
            rows = self._rows / self._pair_bytes * max(self.expected_text_bytes, self._pair_bytes)
            self.progress.expect(STAGES["gather_shard"], max(1, math.ceil(rows / self.shard_rows)))
        return result["text_bytes"]


__all__ = ["STAGES", "TrackedExecutor"]
