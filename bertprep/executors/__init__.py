"""Where a build's tasks run: a local process pool (local.py) or a Ray cluster
(ray.py), behind one `map(fn, descriptors)`; what both share is in base.py. An
executor runs the tasks it is given and knows nothing of BERT."""
from __future__ import annotations

from bertprep.errors import BertprepError
from bertprep.executors.base import ExecutorReport, TaskCost, next_batch
from bertprep.executors.local import EXECUTORS, LocalExecutor, default_workers, start_method
from bertprep.executors.ray import RayExecutor, retry_reason


def make_executor(name: str, workers: int, address: str | None = None):
    """The executor a build runs on: "local" (a process pool of `workers`) or "ray"
    (joins the cluster at `address`, "auto" for the one this node belongs to, or starts
    a local Ray of `workers` CPUs when there is no address)."""
    if name == "local":
        return LocalExecutor(workers)
    if name == "ray":
        return RayExecutor(address=address, workers=workers)
    raise BertprepError(f"--executor: unknown executor {name!r} (local or ray)")


__all__ = ["EXECUTORS", "ExecutorReport", "LocalExecutor", "RayExecutor", "TaskCost", "default_workers",
           "make_executor", "next_batch", "retry_reason", "start_method"]
