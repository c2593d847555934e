"""The Ray executor: the same task functions and descriptors as the local one, each call
a Ray task with explicit CPU and memory requests.

Ray schedules the tasks over the cluster, moves descriptors and summaries, and retries a
task whose worker process or node was lost (`max_retries`); a task that raises is not
retried (our errors are about the input and would only happen again). A retried or
duplicated task is harmless because every task writes under a temporary name and
publishes with a rename or a marker written last. A lost driver is the build's concern:
the same command run again skips every task whose marker exists.

With an address the build joins that cluster ("auto": the cluster this node belongs to,
as `ray start` made it; or HOST:PORT). Without one, a local Ray is started for the run
and stopped after it. A Ray already initialized in this process (a notebook, a test) is
used as it is and left running.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Iterator

from bertprep.errors import BertprepError
from bertprep.executor import ExecutorReport, TaskCost, next_batch

DEFAULT_MAX_RETRIES = 3  # Ray's own default for tasks whose worker dies


def import_ray():
    try:
        import ray
    except ImportError:
        raise BertprepError("--executor ray needs Ray, which is not installed: pip install 'bertprep[ray]'") from None
    return ray


def _run(fn: Callable, descriptor, attempts) -> Any:
    """One call, in a Ray worker. Every start is counted first, so starts beyond one per
    call are the retries of calls whose worker was lost before it could answer."""
    import ray

    ray.get(attempts.start.remote())
    return fn(descriptor)


class _Attempts:
    """How many calls were started, cluster-wide (an actor: one counter for all nodes)."""

    def __init__(self):
        self.count = 0

    def start(self) -> None:
        self.count += 1

    def total(self) -> int:
        return self.count


class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None,
                 max_retries: int = DEFAULT_MAX_RETRIES):
        self.ray = import_ray()
        self.max_retries = max_retries
        self._owned = False
        self._calls = 0
        self._pending: list = []
        if not self.ray.is_initialized():
            kwargs = {"logging_level": logging.ERROR, "log_to_driver": False}
            try:
                if address:
                    self.ray.init(address=address, **kwargs)
                else:
                    self.ray.init(address="local", num_cpus=workers, include_dashboard=False, **kwargs)
            except ConnectionError as exc:
                raise BertprepError(f"--ray-address {address}: cannot join a Ray cluster there ({exc})") from None
            self._owned = True
        self._remote_run = self.ray.remote(_run)
        self._attempts = self.ray.remote(num_cpus=0)(_Attempts).remote()

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:
            # An error or Ctrl-C here: running tasks would only write work nobody
            # collects (harmless, but it holds the cluster), so stop them.
            for ref in self._pending:
                try:
                    self.ray.cancel(ref, force=True)
                except Exception:  # already finished or gone
                    pass
        if self._owned:
            self.ray.shutdown()

    def _cluster_cpus(self) -> int:
        return int(self.ray.cluster_resources().get("CPU", 1))

    def report(self) -> ExecutorReport:
        started = self.ray.get(self._attempts.total.remote())
        nodes = sum(1 for node in self.ray.nodes() if node.get("Alive"))
        retries = max(0, started - self._calls)
        return ExecutorReport("ray", nodes, self._cluster_cpus(), retries,
                              ["a worker or node was lost"] if retries else [])

    def map(self, fn: Callable, descriptors: Iterable, cost: TaskCost = TaskCost(),
            max_in_flight: int | None = None) -> Iterator[Any]:
        """fn(d) for each descriptor as a Ray task; results as they finish. At most
        `max_in_flight` tasks (default: twice the cluster's CPUs) are submitted ahead,
        so a lazy `descriptors` is drawn no faster than the cluster works."""
        ray = self.ray
        remote = self._remote_run.options(
            num_cpus=cost.cpus, memory=cost.memory_bytes or None,
            max_retries=self.max_retries, retry_exceptions=False,
        )
        limit = max_in_flight or 2 * self._cluster_cpus()
        queue = iter(descriptors)
        self._pending = pending = []
        while True:
            for descriptor in next_batch(queue, limit - len(pending)):
                pending.append(remote.remote(fn, descriptor, self._attempts))
                self._calls += 1
            if not pending:
                return
            done, rest = ray.wait(pending, num_returns=1)
            pending[:] = rest
            yield self._result(done[0])

    def _result(self, ref) -> Any:
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None  # the task's own error (a BertprepError names the file)
            raise
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                ray.exceptions.OutOfMemoryError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            attempts = self.max_retries + 1
            raise BertprepError(f"a Ray task was lost on {'all ' if attempts > 1 else ''}{attempts} "
                                f"attempt{'s' if attempts > 1 else ''} ({type(exc).__name__}: {first}); "
                                "run the same command again to resume") from None


__all__ = ["RayExecutor", "import_ray"]
