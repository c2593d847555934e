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
and stopped after it (beside the build's last steps, see `wait_closed`). A Ray already
initialized in this process (a notebook, a test) is used as it is and left running.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Iterator

from bertprep.errors import BertprepError
from bertprep.executors.base import ExecutorReport, TaskCost, next_batch

DEFAULT_MAX_RETRIES = 3  # Ray's own default for tasks whose worker dies
VERDICT_WAIT_S = 3.0  # how long a report waits for the cluster to say a lost start's node died


def import_ray():
    try:
        import ray
    except ImportError:
        raise BertprepError("--executor ray needs Ray, which is not installed: pip install 'bertprep[ray]'") from None
    return ray


# Where each start of a call ran, in the cluster's own key-value store (Ray's GCS, the
# one every node already talks to): a record costs one small write, not an actor, whose
# process would have to start before the first task could. Private to Ray but what its
# own libraries use; the keys are this build's (a run id) and removed at its end.
KV_NAMESPACE = "bertprep"


def _run(fn: Callable, descriptor, run: str, call: int) -> tuple[Any, bytes]:
    """One call, in a Ray worker. Every start is recorded first, with where it ran, and
    the call answers with its record's key; so any other start of the call was lost
    before it could answer, and its node and process say what was lost: that node, or
    (the node still alive) that worker process."""
    import os

    import ray
    from ray.experimental import internal_kv

    node, pid = ray.get_runtime_context().get_node_id(), os.getpid()
    key = f"{run}/{call}/{node}/{pid}".encode()
    internal_kv._internal_kv_put(key, getattr(fn, "__name__", "task").encode(), namespace=KV_NAMESPACE)
    return fn(descriptor), key


def lost_starts(run: str, answered: set[bytes]) -> list[tuple[str, str, int]]:
    """(task, node, pid) of every recorded start of this run that did not answer."""
    from ray.experimental import internal_kv

    lost = []
    for key in sorted(internal_kv._internal_kv_list(f"{run}/".encode(), namespace=KV_NAMESPACE)):
        if key not in answered:
            _, _, node, pid = key.decode().split("/")
            task = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE) or b"task"
            lost.append((task.decode(), node, int(pid)))
    return lost


def retry_reason(task: str, node: str, pid: int, alive_nodes: set[str]) -> str:
    """Why a start of `task` did not answer. A task that raises is never retried, so a
    retried start was lost with its process: with its node when that node is gone."""
    if node not in alive_nodes:
        return f"{task}: node {node[:8]} lost (NodeDiedError)"
    return f"{task}: worker process {pid} on node {node[:8]} died (WorkerCrashedError: killed or crashed)"


def shutdown_local_ray(ray) -> None:
    """ray.shutdown() of a Ray this process started, less a second of waiting.

    ray.shutdown stops the cluster's processes one after the other, each given a second
    to exit on SIGTERM; the autoscaler monitor comes after the GCS, and its SIGTERM
    handler tries to report to the GCS just stopped, so it always uses its whole second
    (1.0 of the 1.2-1.4 s a shutdown takes here). A local cluster's monitor has nothing
    to save: it is killed first, through Ray's own method (private, hence the guard:
    without it the shutdown is only slower). A driver that joined a cluster holds a
    connect-only node that owns no processes: there the kill does nothing and
    ray.shutdown only disconnects, leaving the cluster's monitor running."""
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    try:
        node.kill_monitor(check_alive=False)
    except Exception:  # another Ray version, or the monitor already gone
        pass
    ray.shutdown()


class _Stopping:
    """The one local Ray stopping in the background (a process has one Ray), so the next
    executor in this process waits for it before it starts or joins another."""

    thread: threading.Thread | None = None
    error: BaseException | None = None

    @classmethod
    def start(cls, ray) -> None:
        def stop():
            try:
                shutdown_local_ray(ray)
            except BaseException as exc:  # reported by wait(), not as a thread's traceback
                cls.error = exc

        cls.thread = threading.Thread(target=stop, name="ray-shutdown")
        cls.thread.start()

    @classmethod
    def wait(cls) -> None:
        if cls.thread is not None:
            cls.thread.join()
            cls.thread = None
        if cls.error is not None:
            error, cls.error = cls.error, None
            # The build's result is complete and published by now; only the cleanup failed.
            print(f"warning: stopping the local Ray failed: {type(error).__name__}: {error}", file=sys.stderr)


class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None,
                 max_retries: int = DEFAULT_MAX_RETRIES):
        self.ray = import_ray()
        self.max_retries = max_retries
        self._owned = False
        self._calls = 0
        self._pending: list = []
        _Stopping.wait()  # a Ray still stopping from an earlier build is neither joined nor reused
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
        self._run_id = uuid.uuid4().hex
        self._answered: set[bytes] = set()  # the record keys of the starts that answered

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
        try:
            from ray.experimental import internal_kv

            internal_kv._internal_kv_del(f"{self._run_id}/".encode(), del_by_prefix=True, namespace=KV_NAMESPACE)
        except Exception:  # the cluster is gone already: so are the records
            pass
        if self._owned and exc[0] is None:
            # Stopping a local Ray takes 0.1-0.7 s (see shutdown_local_ray), which
            # the build's last steps (manifest, the check before
            # publishing, the rename) can use: stop it beside them; wait_closed() joins.
            _Stopping.start(self.ray)
        elif self._owned:
            shutdown_local_ray(self.ray)

    def wait_closed(self) -> None:
        """Return once the local Ray this executor started has stopped."""
        _Stopping.wait()

    def _cluster_cpus(self) -> int:
        return int(self.ray.cluster_resources().get("CPU", 1))

    def report(self) -> ExecutorReport:
        """The cluster as the build ends (alive nodes only, and their CPUs) and every
        retry, with the reason its earlier start was lost."""
        lost = lost_starts(self._run_id, self._answered)
        alive = self._alive_nodes()
        # A task is retried as soon as its owner loses the worker, which can be before
        # the cluster has declared that worker's node dead (its health check takes a
        # few periods): when a lost start's node still reads alive, give the verdict a
        # moment, so a lost node is not reported as a lost process.
        deadline = time.monotonic() + VERDICT_WAIT_S
        while any(node in alive for _, node, _ in lost) and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = self._alive_nodes()
        cpus = int(sum(node.get("Resources", {}).get("CPU", 0) for node in alive.values()))
        reasons = [retry_reason(task, node, pid, set(alive)) for task, node, pid in lost]
        return ExecutorReport("ray", len(alive), cpus, len(reasons), reasons)

    def _alive_nodes(self) -> dict[str, dict]:
        """The cluster's live nodes by node id."""
        return {node["NodeID"]: node for node in self.ray.nodes() if node.get("Alive")}

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
                pending.append(remote.remote(fn, descriptor, self._run_id, self._calls))
                self._calls += 1
            if not pending:
                return
            done, rest = ray.wait(pending, num_returns=1)
            pending[:] = rest
            yield self._result(done[0])

    def _result(self, ref) -> Any:
        ray = self.ray
        try:
            result, key = ray.get(ref)
            self._answered.add(key)
            return result
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
