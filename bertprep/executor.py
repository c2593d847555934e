"""Run pure task functions locally: in-process for one worker, a process pool otherwise.

Tasks are module-level functions of picklable arguments whose outputs depend only on
those arguments, so results do not depend on the worker count or on which process ran
what, and the same tasks could be handed to a distributed engine (e.g. Ray's
`remote(fn).remote(*args)`) unchanged.

Workers never come from a plain fork of the calling process: by the time a build starts,
that process may hold threads (tokenizers' encode pool once anything was encoded with
TOKENIZERS_PARALLELISM=true, a notebook's own threads), and a child forked from a
threaded parent can inherit a lock some other thread held and deadlock. On Linux they
fork from a forkserver instead, a fresh single-threaded interpreter that imports the
first task's module once, so each worker starts in milliseconds; elsewhere they are
spawned. Either way a script that builds with workers must guard its entry point with
`if __name__ == "__main__":` (Python re-imports the main script in each worker). Workers ignore SIGINT: Ctrl-C reaches the whole process group, and only the
parent should answer it (one line, no worker tracebacks); the parent then stops them.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterable, Iterator


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

    def imap_unordered(self, fn: Callable, calls: Iterable[tuple], max_in_flight: int | None = None) -> Iterator[Any]:
        """Results of fn(*args) for each args, as they finish. At most `max_in_flight`
        calls are submitted ahead, so a lazy `calls` (e.g. corpus partitions being read)
        is consumed no faster than workers take it: memory stays bounded."""
        if self.workers == 1:
            for args in calls:
                yield fn(*args)
            return
        pool = self._start_pool(fn)
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
                pending.add(pool.submit(fn, *args))
            if not pending:
                return
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()


__all__ = ["LocalExecutor", "default_workers", "start_method"]
