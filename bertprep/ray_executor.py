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


def _run(fn: Callable, descriptor, attempts, call: int) -> Any:
    """One call, in a Ray worker. Every start is recorded first, with where it ran, so a
    call started more than once was retried, and the node and process of each earlier
    start say what was lost: that node, or (the node still alive) that worker process."""
    import os

    import ray

    ray.get(attempts.start.remote(call, getattr(fn, "__name__", "task"), ray.get_runtime_context().get_node_id(),
                                  os.getpid()))
    return fn(descriptor)


class _Attempts:
    """Where each call was started, cluster-wide (an actor: one record for all nodes)."""

    def __init__(self):
        self.starts: dict[int, list[tuple[str, str, int]]] = {}

    def start(self, call: int, task: str, node: str, pid: int) -> None:
        self.starts.setdefault(call, []).append((task, node, pid))

    def lost(self) -> list[tuple[str, str, int]]:
        """(task, node, pid) of every start that was followed by another of its call."""
        return [start for starts in self.starts.values() for start in starts[:-1]]


def retry_reason(task: str, node: str, pid: int, alive_nodes: set[str]) -> str:
    """Why a start of `task` did not answer. A task that raises is never retried, so a
    retried start was lost with its process: with its node when that node is gone."""
    if node not in alive_nodes:
        return f"{task}: node {node[:8]} lost (NodeDiedError)"
    return f"{task}: worker process {pid} on node {node[:8]} died (WorkerCrashedError: killed or crashed)"


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
        # On the driver's node: the record outlives any other node the build loses.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(node_id=self.ray.get_runtime_context().get_node_id(), soft=False)
        self._attempts = self.ray.remote(num_cpus=0, scheduling_strategy=here)(_Attempts).remote()

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
        """The cluster as the build ends (alive nodes only, and their CPUs) and every
        retry, with the reason its earlier start was lost."""
        alive = [node for node in self.ray.nodes() if node.get("Alive")]
        cpus = int(sum(node.get("Resources", {}).get("CPU", 0) for node in alive))
        ids = {node["NodeID"] for node in alive}
        reasons = [retry_reason(task, node, pid, ids) for task, node, pid in self.ray.get(self._attempts.lost.remote())]
        return ExecutorReport("ray", len(alive), cpus, len(reasons), reasons)

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
                pending.append(remote.remote(fn, descriptor, self._attempts, self._calls))
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
