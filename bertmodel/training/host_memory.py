"""Keep freed host memory in the process's heap while training on the CPU.

glibc's malloc serves every block above its mmap threshold with a fresh mmap and hands
it back with munmap when it is freed; its dynamic threshold stops growing at 32 MiB. A
training step frees and reallocates the same large blocks every step (the dense
word-embedding gradient alone is vocab x hidden x 4 bytes: 47 MB for MiniLM, 94 MB for
bert-base), so every step page-faults them in again and the kernel zeroes each page
first. On this project's 2-core CPU that was 19% of an unpadded MiniLM fine-tuning step
(one CoLA batch, one thread, profiled alone: 252 -> 203 ms). Raising the mmap and trim thresholds
keeps such blocks in the heap for the next step, which is what the caching allocators
recommended for CPU training (jemalloc, tcmalloc) do. The cost: the process's resident
size stays near its peak instead of shrinking between steps, as a GPU caching allocator
also keeps its pool. Only glibc has these knobs; elsewhere this does nothing.
"""
from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc malloc.h: give memory back at the heap's top only above this
M_MMAP_THRESHOLD = -3  # glibc malloc.h: blocks at least this big get their own mmap
LIMIT = 2 ** 31 - 1  # mallopt takes an int: 2 GiB, above any one block a training step frees
OLD_GLIBC_LIMIT = 32 << 20  # older glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2


def keep_freed_memory() -> bool:
    """Set glibc's thresholds so large freed blocks are reused, not unmapped. True when
    blocks of any size are kept; False on a C library without mallopt, or a glibc that
    only takes blocks up to 32 MiB (set then, as the best it allows)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):  # not glibc (musl, macOS): no mallopt to call
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(M_TRIM_THRESHOLD, LIMIT)
    if mallopt(M_MMAP_THRESHOLD, LIMIT):
        return True
    mallopt(M_MMAP_THRESHOLD, OLD_GLIBC_LIMIT)
    return False
