"""What every executor shares: the cost of a call (what a distributed executor
schedules by), the report of where the work ran, and how many calls to submit next."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterator


@dataclass(frozen=True)
class TaskCost:
    """What one call needs: a distributed executor schedules by it (and a node's memory
    is never oversubscribed); the local one runs `workers` calls at a time."""

    cpus: float = 1.0
    memory_bytes: int = 0


@dataclass
class ExecutorReport:
    """For the build's summary: where the work ran and what had to be redone."""

    executor: str
    nodes: int
    cpus: int
    retries: int = 0  # calls started again after their worker or node was lost
    retry_reasons: list[str] = field(default_factory=list)  # one per retry: the task, what was lost

    SHOWN_REASONS = 5  # a summary lists this many retries, then counts the rest

    def summary(self) -> str:
        """One line, then a line per retry (the first few): what a log reader needs to
        tell a flaky node from a task that is too big for its memory."""
        text = f"executor {self.executor}: {self.nodes} node{'s' if self.nodes != 1 else ''}, {self.cpus} CPU{'s' if self.cpus != 1 else ''}"
        text += f", {self.retries} task{'s' if self.retries != 1 else ''} retried" if self.retries else ", no retries"
        lines = [text] + [f"  retried {reason}" for reason in self.retry_reasons[:self.SHOWN_REASONS]]
        if len(self.retry_reasons) > self.SHOWN_REASONS:
            lines.append(f"  and {len(self.retry_reasons) - self.SHOWN_REASONS} more retries")
        return "\n".join(lines)


def next_batch(queue: Iterator, room: int) -> list:
    """Up to `room` more descriptors from `queue` (fewer, or none, once it runs out):
    what an executor submits next so that at most a bounded number are in flight."""
    return list(itertools.islice(queue, max(0, room)))
