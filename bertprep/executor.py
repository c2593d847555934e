"""Run pure task functions locally: in-process for one worker, a process pool otherwise.

Tasks are module-level functions of picklable arguments whose outputs depend only on
those arguments, so results do not depend on the worker count or on which process ran
what, and the same tasks could be handed to a distributed engine (e.g. Ray's
`remote(fn).remote(*args)`) unchanged.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterable, Iterator


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class LocalExecutor:
    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        if workers > 1:
            # fork starts workers in milliseconds and shares the parent's imports;
            # elsewhere (macOS, Windows) only spawn is safe.
            method = "fork" if sys.platform.startswith("linux") else "spawn"
            self._pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method))

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            # On an error, do not wait for queued work.
            self._pool.shutdown(wait=exc[0] is None, cancel_futures=True)

    def imap_unordered(self, fn: Callable, calls: Iterable[tuple], max_in_flight: int | None = None) -> Iterator[Any]:
        """Results of fn(*args) for each args, as they finish. At most `max_in_flight`
        calls are submitted ahead, so a lazy `calls` (e.g. corpus partitions being read)
        is consumed no faster than workers take it: memory stays bounded."""
        if self._pool is None:
            for args in calls:
                yield fn(*args)
            return
        limit = max_in_flight or 2 * self.workers
        pending: set[Future] = set()
        queue = iter(calls)
        exhausted = False
        while True:
            while not exhausted and len(pending) < limit:
                try:
                    args = next(queue)
                except StopIteration:
                    exhausted = True
                    break
                pending.add(self._pool.submit(fn, *args))
            if not pending:
                return
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()


__all__ = ["LocalExecutor", "default_workers"]
