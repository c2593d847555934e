"""Reading build-shards' progress display as a log gets it (stderr not a terminal)."""
from __future__ import annotations

import io
import re

LINE = re.compile(r"^build: (\d+)/(\d+|\?) tasks \[[^\]]*?(?:, (tokenize\+pair|mask\+scatter|shuffle\+write|"
                  r"starting the (?:local|ray) executor)(?:, ([\d.]+) MB/s of text)?)?\]$")


class Log(io.StringIO):
    def isatty(self) -> bool:
        return False


def progress_lines(log: Log) -> list[tuple[int, int | None, str | None, float | None]]:
    """(done, total, stage, MB/s) of every plain line, each of which must be one."""
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = []
    for line in text.splitlines():
        match = LINE.match(line)
        assert match, line
        done, total, stage, rate = match.groups()
        lines.append((int(done), None if total == "?" else int(total), stage, float(rate) if rate else None))
    return lines


def check_display(log: Log, manifest: dict, seconds: float) -> list[tuple]:
    """The lines count every task of the three stages, in stage order, and end on the
    real total: a task per partition twice (pair, scatter), one per shard. (For a build
    without a partition cut while read: there scatter runs once per part.)"""
    lines = progress_lines(log)
    tasks = 2 * manifest["totals"]["partitions"] + len(manifest["shards"])
    assert tasks > 20
    done = [line[0] for line in lines]
    assert done == sorted(done) and done[-1] == tasks
    assert lines[-1][1] == tasks
    assert lines[0][2] and lines[0][2].startswith("starting the ")  # said before the executor is up
    stages = [line[2] for line in lines[1:] if line[2]]
    assert stages == sorted(stages, key=["tokenize+pair", "mask+scatter", "shuffle+write"].index)
    assert set(stages) == {"tokenize+pair", "mask+scatter", "shuffle+write"}
    # All the input text over the display's time, which is within the build's: at least
    # the summary's rate (to the line's one decimal). Not that the rate exceeds some
    # floor: that would assert the machine's speed (a 0.2 MB corpus built in 4.1 s on a
    # loaded machine is 0.048 MB/s, which the display rightly shows as 0.0).
    assert lines[-1][3] is not None
    assert lines[-1][3] >= manifest["totals"]["text_bytes"] / 1e6 / seconds - 0.05
    return lines
