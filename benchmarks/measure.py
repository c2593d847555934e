"""Run a command and measure wall time and the peak RSS of its whole process tree.

ru_maxrss only gives the largest single process; a pool of workers needs the sum of
every live process in the tree, sampled here from /proc every 20 ms (Linux).
"""
from __future__ import annotations

import os
import subprocess
import time


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def tree_rss(pid: int) -> int:
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += _rss_bytes(p)
        stack.extend(_children(p))
    return total


def run_measured(cmd: list[str], env: dict | None = None, interval: float = 0.02) -> tuple[float, int, str]:
    """(seconds, peak tree RSS in bytes, combined output); raises if the command fails."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(interval)
    seconds = time.perf_counter() - start
    output = proc.stdout.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{output[-2000:]}")
    return seconds, peak, output
