"""Helpers of the reliability tests (tests/test_reliability_*.py).

Every user-facing error is one line on stderr, "Error: " first, naming the file and the
problem, with a non-zero exit and no traceback, and it leaves nothing that looks like a
finished result behind. `one_line_error` checks exactly that shape.
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner, Result

PREP = [sys.executable, "-c", "from bertprep.cli import main; main()"]
MODEL = [sys.executable, "-c", "from bertmodel.cli import main; main()"]

# Run a CLI with one function wrapped in a pause, so a test can signal the process at
# exactly that point. argv: FLAG MODULE:NAME (prep|model) ARGS... The first PAUSE_AFTER
# calls (default 0) run normally; the next one creates FLAG and then sleeps, or, when
# RESUME_FLAG is set, waits for that file and goes on with the call. Either wait ends
# after PAUSE_DEADLINE seconds (default 300) with exit code 124, so a test that never
# signals or resumes the process cannot leave it spinning.
PAUSE_DEADLINE_EXIT = 124
PAUSE_AT = r"""
import importlib, os, pathlib, sys, time
flag, target, which, *args = sys.argv[1:]
module_name, _, attribute = target.partition(":")
owner = importlib.import_module(module_name)
*path, name = attribute.split(".")
for part in path:
    owner = getattr(owner, part)
original = getattr(owner, name)
after, resume, calls = int(os.environ.get("PAUSE_AFTER", "0")), os.environ.get("RESUME_FLAG"), [0]
def pause(*a, **k):
    calls[0] += 1
    if calls[0] == after + 1:
        pathlib.Path(flag).touch()
        deadline = time.monotonic() + float(os.environ.get("PAUSE_DEADLINE", "300"))
        while not (resume and os.path.exists(resume)):
            if time.monotonic() > deadline:
                sys.stderr.write("paused past PAUSE_DEADLINE; giving up\n")
                os._exit(124)
            time.sleep(0.02)
    return original(*a, **k)
setattr(owner, name, pause)
from bertprep.cli import main as prep
from bertmodel.cli import main as model
sys.argv = [which, *args]
(prep if which == "prep" else model)()
"""


def invoke(main, *args) -> Result:
    """Run a click command in-process; stderr is kept apart from stdout."""
    return CliRunner().invoke(main, [str(a) for a in args])


def finished_markers(out: pathlib.Path) -> set[str]:
    """The completion markers of finished tasks in OUT.partial/work (build/tasks.py)."""
    return {p.name for p in (out.with_name(out.name + ".partial") / "work").glob("*.json")}


@contextlib.contextmanager
def markers_written(monkeypatch):
    """Record the completion markers the tasks run in this process write: a task that
    reuses finished work writes none."""
    import bertprep.builder.tasks as tasks

    written: list[str] = []
    original = tasks.write_json_atomic

    def recording(path, *args, **kwargs):
        written.append(str(path).rsplit("/", 1)[-1])  # a local path or an object-store URL
        return original(path, *args, **kwargs)

    monkeypatch.setattr(tasks, "write_json_atomic", recording)
    yield written
    monkeypatch.setattr(tasks, "write_json_atomic", original)


def one_line_error(result: Result, *names, exit_code: int | None = None) -> str:
    """Assert the error shape and that every name appears in it; return the message
    without "Error: "."""
    assert result.exit_code != 0, f"succeeded: {result.output}"
    if exit_code is not None:
        assert result.exit_code == exit_code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    return lines[0][len("Error: "):]


def nothing_left(directory: pathlib.Path, *expected: str) -> None:
    """Only `expected` entries (the test's inputs) remain: no OUT, OUT.partial, TOKDIR,
    temporary or work directories."""
    assert sorted(p.name for p in directory.iterdir()) == sorted(expected)


def temporaries(directory: pathlib.Path) -> list[pathlib.Path]:
    """Leftovers of killed writers anywhere below `directory`."""
    return [p for p in directory.rglob("*") if ".tmp" in p.name or p.name.endswith(".partial")
            or ".work-" in p.name or ".new-" in p.name or ".old" in p.name]


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"process ended ({proc.returncode}) before the point was reached: {output}")
        if time.time() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting for the process")
        time.sleep(0.01)


def default_sigint() -> None:
    """preexec_fn for a child that must answer Ctrl-C: a shell that starts the suite in
    the background leaves SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_paused(target: str, which: str, args: list, flag: pathlib.Path, after: int = 0,
                 resume: pathlib.Path | None = None, deadline: float = 300.0, **popen) -> subprocess.Popen:
    """Start the CLI paused at `target` (module:function) and wait until it is there.
    The pause lasts at most `deadline` seconds (then the process exits 124)."""
    env = {**os.environ, "PAUSE_AFTER": str(after), "PAUSE_DEADLINE": str(deadline)}
    if resume is not None:
        env["RESUME_FLAG"] = str(resume)
    proc = subprocess.Popen([sys.executable, "-c", PAUSE_AT, str(flag), target, which, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, **popen)
    wait_for(flag.exists, proc)
    return proc


def kill_at(target: str, which: str, args: list, flag: pathlib.Path, after: int = 0) -> None:
    """SIGKILL the CLI at `target` (after `after` normal calls)."""
    proc = start_paused(target, which, args, flag, after)
    proc.kill()
    proc.communicate(timeout=60)


@contextlib.contextmanager
def tiny_disk(path: pathlib.Path, size: str):
    """A tmpfs of `size` mounted at `path` (needs root and a kernel that allows it);
    skips the test otherwise, so each disk-full case also has a patched variant."""
    path.mkdir(parents=True, exist_ok=True)
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tiny tmpfs needs root; the patched variant of this test covers it")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the patched variant covers it")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
