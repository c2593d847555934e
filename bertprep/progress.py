"""Progress bars on stderr, silent when asked (tests, --quiet).

On a terminal (or in a notebook) a tqdm bar redraws in place. When stderr is a file or
a pipe (a log, a CI job, `nohup`), redraws would fill the log with carriage returns, so
the same figures are written as a plain line at most every `LOG_INTERVAL` seconds,
plus the final one.
"""
from __future__ import annotations

import sys

from tqdm.auto import tqdm

LOG_INTERVAL = 30.0  # seconds between plain progress lines when stderr is not a terminal
PLAIN_FORMAT = "{desc}: {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


class _Lines:
    """A file for tqdm that turns each in-place redraw into one plain line."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").replace("\x1b[A", "").strip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


def _on_terminal(stream) -> bool:
    if "notebook" in tqdm.__module__:  # tqdm.auto chose the notebook widget
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_bar(enabled: bool = True, interval: float | None = None, **kwargs) -> tqdm:
    stream = sys.stderr
    if not enabled or _on_terminal(stream):
        return tqdm(disable=not enabled, file=stream, dynamic_ncols=True, mininterval=0.5, **kwargs)
    every = LOG_INTERVAL if interval is None else interval
    kwargs.setdefault("bar_format", PLAIN_FORMAT)
    kwargs["leave"] = True  # a printed line cannot be cleared: leave=False would only drop the final one
    return tqdm(file=_Lines(stream), mininterval=every, maxinterval=max(every, 10.0), miniters=1, ascii=True, **kwargs)


class BuildProgress:
    """One display for a whole multi-stage build: tasks done of all stages' tasks, the
    input text's MB/s so far, and an ETA, on one bar (or plain lines in a log).

    A stage's task count may be an estimate until its tasks are listed (`expect` again
    with the real count); while any stage's count is unknown the total shows as "?" and
    there is no ETA. The ETA is tqdm's: the remaining tasks at the recent task rate.
    The MB/s is the input text the finished tasks have read over the time since the
    first stage started.
    """

    def __init__(self, enabled: bool = True, interval: float | None = None, desc: str = "build", waiting: str = ""):
        """`waiting`: what happens before the first stage (an executor starting), shown
        at once; the clock and the rate start with the first stage."""
        self._terminal = enabled and _on_terminal(sys.stderr)
        self._bar = progress_bar(enabled, interval=interval, total=None, desc=desc, unit="task",
                                 bar_format=self._format(None), postfix=waiting or None)
        self._waiting = bool(waiting)
        self.expected: dict[str, int | None] = {}
        self.text_bytes = 0
        self.stage = ""

    def _format(self, total: int | None) -> str:
        if total is None:
            return "{desc}: {n_fmt}/? tasks [{elapsed}{postfix}]"
        if self._terminal:
            return "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} tasks [{elapsed}<{remaining}{postfix}]"
        return "{desc}: {n_fmt}/{total_fmt} tasks [{elapsed}<{remaining}{postfix}]"

    @property
    def total(self) -> int | None:
        counts = list(self.expected.values())
        return None if any(c is None for c in counts) else sum(counts)

    @property
    def done(self) -> int:
        return self._bar.n

    def expect(self, stage: str, tasks: int | None) -> None:
        """The number of tasks `stage` has (or is expected to have; None: not known)."""
        self.expected[stage] = tasks
        total = self.total
        self._bar.total = None if total is None else max(total, self._bar.n)
        self._bar.bar_format = self._format(self._bar.total)

    def start(self, stage: str) -> None:
        self.stage = stage
        self._postfix()
        if self._waiting:  # the executor is up: time the work from here
            self._waiting = False
            self._bar.reset(total=self._bar.total)

    def task_done(self, text_bytes: int = 0) -> None:
        self.text_bytes += text_bytes
        self._postfix()
        self._bar.update(1)

    def _postfix(self) -> None:
        elapsed = max(self._bar.format_dict["elapsed"], 1e-9)
        self._bar.set_postfix_str(f"{self.stage}, {self.text_bytes / 1e6 / elapsed:.1f} MB/s of text", refresh=False)

    def close(self) -> None:
        self._postfix()
        self._bar.close()

    def __enter__(self) -> "BuildProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
