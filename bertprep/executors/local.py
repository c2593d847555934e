"""Executors: run pure task functions over small descriptors, and hand back summaries.

    with make_executor("local", workers=2) as executor:
        for summary in executor.map(task_fn, descriptors, TaskCost(cpus=1, memory_bytes=...)):
            ...

`map(fn, descriptors, cost)` calls `fn(descriptor)` once per descriptor and yields the
results as they finish (any order: callers that need one sort by what the summary
says). A descriptor says what to read and where to write; it is small and picklable,
and `fn` is a module-level function whose outputs depend only on its descriptor, so
results do not depend on the executor, the worker count or which process ran what.
Executors know nothing of what the tasks do.

- `LocalExecutor` (here): in-process for one worker, a process pool otherwise.
- `RayExecutor` (ray.py): each call a Ray task with the cost's CPU and memory
  requests, retried by Ray when its worker or node is lost. Ray is an optional extra,
  imported only when that executor is asked for.

Local workers never come from a plain fork of the calling process: by the time a build
starts, that process may hold threads (tokenizers' encode pool once anything was encoded
with TOKENIZERS_PARALLELISM=true, a notebook's own threads), and a child forked from a
threaded parent can inherit a lock some other thread held and deadlock. On Linux they
fork from a forkserver instead, a fresh single-threaded interpreter that imports the
first task's module once, so each worker starts in milliseconds; elsewhere they are
spawned. Either way a script that builds with workers must guard its entry point with
`if __name__ == "__main__":` (Python re-imports the main script in each worker). Workers
ignore SIGINT: Ctrl-C reaches the whole process group, and only the parent should
answer it (one line, no worker tracebacks); the parent then stops them.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterable, Iterator

from bertprep.executors.base import ExecutorReport, TaskCost, next_batch

EXECUTORS = ("local", "ray")


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def start_method() -> str:
    return "forkserver" if sys.platform.startswith("linux") else "spawn"


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalExecutor:
    name = "local"

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def _start_pool(self, fn: Callable) -> ProcessPoolExecutor:
        """The pool, started with the first task: the forkserver (started once per
        process) preloads that task's module, so workers fork with it imported."""
        if self._pool is None:
            context = multiprocessing.get_context(start_method())
            if context.get_start_method() == "forkserver":
                # Takes effect when this process starts its forkserver; one already
                # running only means each worker imports the module itself.
                context.set_forkserver_preload([fn.__module__])
            self._pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=_ignore_sigint)
        return self._pool

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is None:
            return
        if exc[0] is None:
            self._pool.shutdown(wait=True)
            return
        # On an error or Ctrl-C, do not wait for queued or running work: stop the workers
        # (they ignore SIGINT) so the process ends now, not when their tasks finish.
        processes = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=5)

    def wait_closed(self) -> None:
        """Nothing left to wait for: the pool is shut down when the with-block ends."""

    def report(self) -> ExecutorReport:
        return ExecutorReport("local", 1, self.workers)

    def map(self, fn: Callable, descriptors: Iterable, cost: TaskCost = TaskCost(),
            max_in_flight: int | None = None) -> Iterator[Any]:
        """fn(d) for each descriptor d, as they finish. At most `max_in_flight` calls
        are submitted ahead, so a lazy `descriptors` is consumed no faster than workers
        take it: memory stays bounded. (The cost only matters to a cluster.)"""
        if self.workers == 1:
            for descriptor in descriptors:
                yield fn(descriptor)
            return
        pool = self._start_pool(fn)
        limit = max_in_flight or 2 * self.workers
        pending: set[Future] = set()
        queue = iter(descriptors)
        while True:
            for descriptor in next_batch(queue, limit - len(pending)):
                pending.add(pool.submit(fn, descriptor))
            if not pending:
                return
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()


__all__ = ["EXECUTORS", "LocalExecutor", "default_workers", "start_method"]
