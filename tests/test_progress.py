"""Progress output: in a log (stderr not a terminal), plain lines, not bar redraws."""
from __future__ import annotations

import io
import time

from bertprep import progress


class Log(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_a_log_gets_plain_lines_at_most_every_interval(monkeypatch):
    log = Log()
    monkeypatch.setattr(progress.sys, "stderr", log)
    with progress.progress_bar(True, total=5000, desc="tokenize+pair", unit="part", interval=60) as bar:
        for _ in range(5000):
            bar.update(1)
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    # The first line when the bar starts and the final one; 5,000 updates in well under
    # the interval add none.
    assert len(lines) == 2, lines
    assert lines[0].startswith("tokenize+pair: 0/5000 [") and lines[-1].startswith("tokenize+pair: 5000/5000 [")


def test_a_log_gets_a_line_per_interval(monkeypatch):
    log = Log()
    monkeypatch.setattr(progress.sys, "stderr", log)
    started = time.monotonic()
    with progress.progress_bar(True, total=40, desc="shuffle+write", unit="shard", interval=0.1) as bar:
        for _ in range(40):
            time.sleep(0.01)
            bar.update(1)
    lines = log.getvalue().splitlines()
    elapsed = time.monotonic() - started
    assert 2 < len(lines) <= elapsed / 0.1 + 2, (len(lines), elapsed)
    assert all(line.startswith("shuffle+write: ") for line in lines)


def test_quiet_writes_nothing(monkeypatch):
    log = Log()
    monkeypatch.setattr(progress.sys, "stderr", log)
    with progress.progress_bar(False, total=10) as bar:
        bar.update(10)
    assert log.getvalue() == ""
