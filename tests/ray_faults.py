"""Real faults for the Ray executor tests: a task that SIGKILLs its own Ray worker
process once, part-way through, guarded by a flag file so the retry runs normally.

`KillOnce(task_fn, flag, at, index)` wraps a build task. In the worker, the first call
whose descriptor has the given partition or shard index creates the flag and arms a
kill at `at` ("module:function"), a function the task calls in its middle
(`build.tasks:write_json_atomic`: its outputs are written, its completion marker not
yet; `shards.writer:sha256_file`: the shard is written under its temporary name, not yet
renamed); the kill takes the whole worker process down,
as a lost machine or the kernel's OOM killer would. With `node=True` it kills the
worker's raylet first (the worker's parent), so the whole node is lost, as when a
machine goes away; the flag then holds that node's id. The module is pickled by value
(ray_faults_by_value), so workers need no access to tests/.
"""
from __future__ import annotations

import os
import pathlib
import signal


class KillOnce:
    def __init__(self, task_fn, flag: pathlib.Path, at: str, index: int, node: bool = False):
        self.task_fn, self.flag, self.at, self.index = task_fn, str(flag), at, index
        self.node = node  # kill the worker's node instead: its raylet, the worker's parent
        self.__name__ = task_fn.__name__  # the build names a task's stage by its function

    def __call__(self, descriptor):
        import importlib

        module, _, name = self.at.rpartition(":")
        owner = importlib.import_module(module or "bertprep.builder.tasks")
        index = descriptor.partition.index if hasattr(descriptor, "partition") else getattr(
            descriptor, "index", getattr(descriptor, "shard", None))
        if index == self.index and not os.path.exists(self.flag):
            import ray

            here = ray.get_runtime_context().get_node_id() if self.node else str(os.getpid())
            pathlib.Path(self.flag).write_text(here)
            original = getattr(owner, name)

            def die(*args, **kwargs):
                setattr(owner, name, original)
                if self.node:  # the node's raylet first: its workers go with it
                    os.kill(os.getppid(), signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGKILL)

            setattr(owner, name, die)
        return self.task_fn(descriptor)


def ray_faults_by_value() -> None:
    import sys

    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def driven_cluster(head_node_args: dict, worker_cpus: list[int]):
    """A `ray.cluster_utils.Cluster` on this machine (a head with `head_node_args`, one
    worker node per entry of `worker_cpus`) with this process as its driver: a generator
    for a module fixture (`yield from`), shut down when the fixture ends."""
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    nodes = Cluster(initialize_head=True, head_node_args={"include_dashboard": False, **head_node_args})
    for cpus in worker_cpus:
        nodes.add_node(num_cpus=cpus)
    ray.init(address=nodes.address, logging_level="ERROR", log_to_driver=False)
    nodes.wait_for_nodes()
    ray_faults_by_value()
    yield nodes
    ray.shutdown()
    nodes.shutdown()
