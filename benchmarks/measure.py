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


def _pss_bytes(pid: int) -> int:
    """Proportional set size: shared pages divided among the processes sharing them,
    so forked workers' copy-on-write pages are not counted once per worker."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        pids.append(p)
        stack.extend(_children(p))
    return pids


def tree_rss(pid: int) -> int:
    return sum(_rss_bytes(p) for p in _tree(pid))


def tree_pss(pid: int) -> int:
    return sum(_pss_bytes(p) for p in _tree(pid))


def run_measured(cmd: list[str], env: dict | None = None, interval: float = 0.02, pss: bool = False) -> tuple[float, int, str]:
    """(seconds, peak tree RSS in bytes, combined output); raises if the command fails.
    With pss=True the peak is of the summed proportional set size instead."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    peak = 0
    measure = tree_pss if pss else tree_rss
    while proc.poll() is None:
        peak = max(peak, measure(proc.pid))
        time.sleep(interval)
    seconds = time.perf_counter() - start
    output = proc.stdout.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{output[-2000:]}")
    return seconds, peak, output
