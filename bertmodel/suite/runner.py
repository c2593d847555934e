"""Every task x grid point x seed of a suite as an ordinary fine-tuning run: a
`bertmodel finetune COMMAND` subprocess writing to OUT/TASK/POINT/seed-S/, its output in
seed-S.log beside it, so each run can be read, rerun or resumed by hand.

A run is finished when its subprocess exited 0 and the suite recorded its metric (read
from RUN/best.json) in seed-S.json together with the exact command; a rerun of the suite
skips those. Anything else is run again with the same command, which resumes from the
run's last checkpoint (or, if the suite's options changed, is refused by finetune, and
the log says why). One failed run is reported with its log and the others go on.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bertmodel.errors import BertmodelError
from bertmodel.suite.spec import GridPoint, Suite, TaskSpec, format_value
from bertmodel.training.checkpoint import read_best
from bertmodel.training.run_dir import sha256_of

INTERRUPT_GRACE_S = 120  # a run stopped by Ctrl-C finishes its step and saves a checkpoint first


@dataclass(frozen=True)
class Run:
    task: TaskSpec
    point: GridPoint
    seed: int
    out: Path
    """OUT/TASK/POINT/seed-S: the fine-tuning run's own directory."""
    argv: tuple[str, ...]
    """The `bertmodel finetune ...` arguments (the interpreter and `-m bertmodel.cli` go before)."""
    inputs: str = ""
    """What the model and data files at those paths hold now (JSON of input_identity):
    a finished run counts only for the same, not for a model re-exported to the same path."""

    @property
    def log(self) -> Path:
        return self.out.with_name(f"{self.out.name}.log")

    @property
    def record(self) -> Path:
        return self.out.with_name(f"{self.out.name}.json")

    @property
    def label(self) -> str:
        return f"{self.task.name} seed {self.seed} {self.point.name}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "bertmodel.cli", *self.argv]


def option_args(options: dict) -> list[str]:
    """{"text_column": "s1", "no_header": True, "report_to": ["tensorboard"]} ->
    --text-column s1 --no-header --report-to tensorboard (false flags left out)."""
    args = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, bool):
                args += [flag] if item else []
            else:
                args += [flag, format_value(item)]
    return args


def data_path(data_dir: Path, name: str) -> Path:
    return (data_dir / Path(name).expanduser()).resolve()


def input_identity(path: str) -> dict:
    """What a path holds, cheaply: a file by its content's sha256; a directory (a model:
    a run, a checkpoint or a transformers dir) by the names, sizes and modification times
    of its files, so a re-export or more training at the same path is another model
    without reading gigabytes of checkpoints; anything else (random:PRESET) by its name."""
    p = Path(path)
    if p.is_file():
        return {"sha256": sha256_of(p)}
    if p.is_dir():
        listing = sorted((str(f.relative_to(p)), f.stat().st_size, f.stat().st_mtime_ns)
                         for f in p.rglob("*") if f.is_file())
        return {"files": len(listing), "listing_sha256": hashlib.sha256(json.dumps(listing).encode()).hexdigest()}
    return {"name": str(path)}


def plan_runs(suite: Suite, model: str, out: Path, data_dir: Path) -> list[Run]:
    """Task by task, grid point by grid point, seed by seed."""
    runs = []
    identity = functools.lru_cache(maxsize=None)(input_identity)
    for task in suite.tasks:
        train, validation = str(data_path(data_dir, task.train)), str(data_path(data_dir, task.validation))
        inputs = json.dumps({"model": identity(model), "train": identity(train), "validation": identity(validation)},
                            sort_keys=True)
        for point in task.points():
            for seed in suite.seeds:
                run_dir = out / task.name / point.name / f"seed-{seed}"
                argv = ("finetune", task.command, "--model", model, "--train", train, "--validation", validation,
                        "--out", str(run_dir), "--seed", str(seed), "--metric-for-best", task.metric,
                        "--no-progress", *option_args({**task.options, **point.options}))
                runs.append(Run(task, point, seed, run_dir, argv, inputs))
    return runs


def finished(run: Run) -> dict | None:
    """The run's record when it finished with exactly this command on the same inputs,
    else None. A run that finished with this command on other inputs (the model or data
    at those paths changed since) is an error: rerunning it would resume the old run."""
    try:
        record = json.loads(run.record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("argv") != list(run.argv) or "value" not in record:
        return None
    if run.inputs and record.get("inputs") != json.loads(run.inputs):
        changed = [k for k, v in json.loads(run.inputs).items() if (record.get("inputs") or {}).get(k) != v]
        raise BertmodelError(f"{run.out}: finished with another {' and '.join(changed) or 'input'} than "
                             f"{'is' if len(changed) < 2 else 'are'} at the same path now; use a new --out for "
                             "the new one")
    return record


def duration(seconds: float) -> str:
    """12s, 1m12s, 2h05m."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def eta(seconds: float) -> str:
    """ETA 40s, ETA 38m, ETA 2h05m: minutes are precise enough past a minute."""
    return duration(seconds) if seconds < 60 else duration(round(seconds / 60) * 60).removesuffix("00s")


def write_json(path: Path, data: dict) -> None:
    """`data` as JSON at `path`, written whole then renamed."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _last_line(log: Path) -> str:
    """The log's last non-empty line (usually finetune's one-line error), cut short."""
    try:
        lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    line = next((line for line in reversed(lines) if line), "")
    return line if len(line) <= 160 else line[:157] + "..."


def _torn(path: Path) -> bool:
    """Whether the file's last line has no newline."""
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:  # empty or absent
        return False


def execute(run: Run) -> tuple[int, float]:
    """Run the fine-tuning subprocess, its output appended to the run's log: (exit code,
    seconds). On Ctrl-C the run (which got the signal too) is given time to save a
    checkpoint, so the suite's rerun resumes it; a second Ctrl-C kills it."""
    run.out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(run.log, "a", encoding="utf-8") as log:
        newline = "\n" if _torn(run.log) else ""  # an earlier attempt's error may end without one
        log.write(f"{newline}# {time.strftime('%Y-%m-%d %H:%M:%S')}: {shlex.join(run.command())}\n")
        log.flush()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the log is readable while the run goes
        process = subprocess.Popen(run.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env)
        try:
            code = process.wait()
        except KeyboardInterrupt:
            try:
                process.send_signal(signal.SIGINT)
                process.wait(timeout=INTERRUPT_GRACE_S)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):
                process.kill()
                process.wait()
            raise
    return code, time.monotonic() - started


def outcome(run: Run, code: int, seconds: float) -> dict:
    """What the run gave: the metric's best validation value, or why there is none."""
    result = {"task": run.task.name, "point": run.point.name, "seed": run.seed, "metric": run.task.metric,
              "seconds": round(seconds, 1), "status": "failed", "exit": code}
    if code != 0:
        result["error"] = _last_line(run.log)
        return result
    try:
        best = read_best(run.out)
    except BertmodelError as exc:  # torn or edited by hand
        result["error"] = str(exc)
        return result
    if best is None:
        result["error"] = "the run kept no best model (no RUN/best.json: was there validation data?)"
    elif best["metric"] != run.task.metric:
        result["error"] = f"RUN/best.json holds {best['metric']}, not {run.task.metric}"
    else:
        result.update(status="ok", value=best["value"], step=best["step"])
        del result["exit"]
    return result


def run_all(runs: list[Run], log: Callable[[str], None], progress: bool = True) -> list[dict]:
    """Run every unfinished run (failures, and with `progress` each finished run, one line
    each through `log`) and return every run's result, finished ones read back from their
    records."""
    records = [finished(run) for run in runs]
    todo = [i for i, record in enumerate(records) if record is None]
    if len(todo) < len(runs):
        log(f"{len(runs) - len(todo)} of {len(runs)} runs finished before: skipped"
            + (" (nothing to run)" if not todo else ""))
    spent = 0.0
    for number, index in enumerate(todo, 1):
        run = runs[index]
        run.record.unlink(missing_ok=True)  # a record of other options must not outlive this attempt
        code, seconds = execute(run)
        spent += seconds
        result = outcome(run, code, seconds)
        left = len(todo) - number
        timing = duration(seconds) + (f"; ETA {eta(spent / number * left)}" if left else "")
        if result["status"] == "ok":
            result["argv"] = list(run.argv)
            result["inputs"] = json.loads(run.inputs) if run.inputs else None
            write_json(run.record, result)
            if progress:
                log(f"[{number}/{len(todo)}] {run.label}: {run.task.metric} {result['value']:.4f} ({timing})")
        else:
            why = f" ({result['error']})" if result.get("error") else ""
            log(f"[{number}/{len(todo)}] {run.label}: failed (exit {code}; {timing}): see {run.log}{why}")
        records[index] = result
    return records
