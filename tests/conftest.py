"""Test helpers live beside the tests (tests/shard_fixtures.py); make them importable.

The suite runs on two pytest-xdist workers (`make test`). Each worker then gets one
torch/OpenMP thread, so the two workers fill the two cores instead of four threads
fighting over them, and the slow tests are handed out first, so neither worker is left
finishing a long test alone at the end. Tests that start a Ray share one worker
(xdist_group "ray"): two local Rays at once would each claim every CPU.

Run under ATEN_CPU_CAPABILITY=avx2 or default (torch's kernels as an AVX2 or a plain
x86-64 CPU runs them), the suite compiles into an inductor cache of that capability's
own: inductor's cache key does not hold the vector width it generated for, so AVX-512
kernels from an earlier run were reused, computing garbage under AVX2 (dropout drew 55%,
then a crash) and failing to compile under default.
"""
import getpass
import os
import pathlib
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

_capability = os.environ.get("ATEN_CPU_CAPABILITY")
if _capability and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:  # inherited by the CLIs the tests start
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tempfile.gettempdir(),
                                                         f"torchinductor_{getpass.getuser()}_{_capability}")

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the CLIs the tests start
    try:
        import torch
    except ImportError:  # a prep-only install
        pass
    else:
        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: slow ones first, else as written
