"""Real faults for the Ray executor tests: a task that SIGKILLs its own Ray worker
process once, part-way through, guarded by a flag file so the retry runs normally.

`KillOnce(task_fn, flag, at, index)` wraps a build task. In the worker, the first call
whose descriptor has the given partition or shard index creates the flag and arms a
kill at `at` ("module:function"), a function the task calls in its middle
(`build_tasks:write_json_atomic`: its outputs are written, its completion marker not
yet; `arrow_writer:sha256_file`: the shard is written under its temporary name, not yet
renamed); the kill takes the whole worker process down,
as a lost machine or the kernel's OOM killer would. The module is pickled by value
(ray_faults_by_value), so workers need no access to tests/.
"""
from __future__ import annotations

import os
import pathlib
import signal


class KillOnce:
    def __init__(self, task_fn, flag: pathlib.Path, at: str, index: int):
        self.task_fn, self.flag, self.at, self.index = task_fn, str(flag), at, index

    def __call__(self, descriptor):
        import importlib

        module, _, name = self.at.rpartition(":")
        owner = importlib.import_module(module or "bertprep.build_tasks")
        index = descriptor.partition.index if hasattr(descriptor, "partition") else getattr(
            descriptor, "index", getattr(descriptor, "shard", None))
        if index == self.index and not os.path.exists(self.flag):
            pathlib.Path(self.flag).write_text(str(os.getpid()))
            original = getattr(owner, name)

            def die(*args, **kwargs):
                setattr(owner, name, original)
                os.kill(os.getpid(), signal.SIGKILL)

            setattr(owner, name, die)
        return self.task_fn(descriptor)


def ray_faults_by_value() -> None:
    import sys

    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
