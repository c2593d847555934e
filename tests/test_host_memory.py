"""The CPU trainer's heap setting: a large block freed and allocated again (as a step's
gradients are) is reused, not page-faulted in afresh; without the setting it is."""
import platform
import subprocess
import sys

import pytest

PROBE = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from bertmodel.training.host_memory import keep_freed_memory
    if not keep_freed_memory():
        print("unsupported")
        sys.exit()
def touch():
    a = np.ones(64 << 18, dtype=np.float32)  # 64 MiB: above glibc's largest dynamic mmap threshold
    del a
touch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    touch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    if done.stdout.strip() == "unsupported":
        pytest.skip("this glibc keeps freed blocks only up to 32 MiB; the probe's block is 64 MiB")
    return int(done.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's; other C libraries keep theirs")
def test_freed_blocks_are_reused_with_the_setting_and_not_without():
    huge_pages = (64 << 20) // (2 << 20)  # with transparent huge pages a fault may bring in 2 MiB
    default, kept = faults("default"), faults("keep")
    assert default >= 5 * huge_pages, f"glibc's defaults should fault every 64 MiB block in again: {default}"
    assert kept * 20 < default, f"with the setting the freed block should be reused: {kept} page faults " \
                                f"against {default} without"
