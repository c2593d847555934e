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
    return tqdm(file=_Lines(stream), mininterval=every, maxinterval=max(every, 10.0), miniters=1,
                bar_format=PLAIN_FORMAT, ascii=True, **kwargs)
