"""The `eval-suite` run from end to end: read the suite, check its data, run (or skip)
every run, then the table, OUT/results.json and OUT/results.png.

OUT belongs to one model: OUT/suite.json names it before the first run, and a suite run
of another model into it is refused before anything runs (its runs would resume the
first model's). results.json covers every task of the suite with a finished run in OUT:
a --tasks subset updates its own rows and keeps the others' finished runs.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bertmodel.errors import BertmodelError
from bertmodel.suite.report import plot_results, summarize, write_results
from bertmodel.suite.runner import Run, data_path, finished, plan_runs, run_all, write_json
from bertmodel.suite.spec import OptionCheck, Suite, load_suite


@dataclass
class SuiteConfig:
    model: str
    """The checkpoint to score: one of our runs/checkpoints, a transformers dir, or random:PRESET."""
    suite: str
    """A suite TOML file or the name of a shipped suite (shared-data, shared-data-cpu)."""
    out: str
    """Where every run, its log and the results go; rerunning skips finished runs."""
    seeds: list[int] | None = None
    """Default: the suite's seeds."""
    data_dir: str | None = None
    """What the suite's relative data paths are relative to. Default: the suite's data_dir, else
    the current directory."""
    tasks: list[str] | None = None
    """Run only these tasks (default: all)."""
    progress: bool = True
    """A line per finished run (its score, time and the suite's ETA); a failed run is named either way."""


OWNER_FILE = "suite.json"  # OUT/suite.json: {"model": the model whose runs OUT holds}
RESULTS_FILE = "results.json"


@dataclass
class Plan:
    suite: Suite
    """The suite cut to the config's tasks and seeds."""
    model: str
    data_dir: Path
    out: Path
    runs: list[Run]
    whole: Suite
    """The suite at the config's seeds with every task (--tasks or not)."""
    others: list[Run] = field(default_factory=list)
    """The runs of the tasks --tasks left out that have a folder in OUT: results.json keeps their finished ones."""


def out_model(out: Path) -> str | None:
    """The model whose runs OUT holds: OUT/suite.json's, else (an OUT from before it was
    written) results.json's or a finished run's --model; None for a new OUT."""
    for path in (out / OWNER_FILE, out / RESULTS_FILE):
        try:
            model = json.loads(path.read_text(encoding="utf-8")).get("model")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(model, str):
            return model
    for record in sorted(out.glob("*/*/seed-*.json")):
        try:
            argv = json.loads(record.read_text(encoding="utf-8")).get("argv")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(argv, list) and "--model" in argv[:-1]:
            return str(argv[argv.index("--model") + 1])
    return None


def check_out_model(out: Path, model: str) -> None:
    """One line before any run when OUT holds another model's runs: each of them would
    resume (and be refused by) the other model's fine-tuning run."""
    other = out_model(out)
    if other is not None and other != model:
        raise BertmodelError(f"{out}: holds the eval-suite runs of another model ({other}); use a new --out for "
                             f"{model}")


def write_out_model(out: Path, model: str) -> None:
    if out_model(out) is None:
        write_json(out / OWNER_FILE, {"model": model})


def prepare(cfg: SuiteConfig, check_option: OptionCheck | None = None) -> Plan:
    """The suite and its runs, every data file checked to exist and OUT to hold no other
    model's runs before anything runs."""
    whole = load_suite(cfg.suite, check_option).select(seeds=cfg.seeds)
    suite = whole.select(cfg.tasks)
    if cfg.data_dir is not None:
        data_dir = Path(cfg.data_dir).expanduser()
    else:
        data_dir = suite.data_dir or Path.cwd()
    data_dir = data_dir.resolve()
    if not data_dir.is_dir():
        raise BertmodelError(f"{data_dir}: no such data directory (--data-dir)")
    for task in suite.tasks:
        for which in ("train", "validation"):
            path = data_path(data_dir, getattr(task, which))
            if not path.exists():
                raise BertmodelError(f"{path}: not found ({suite.path.name}: task {task.name!r} {which}, under "
                                     f"data dir {data_dir}; --data-dir points the suite at your copies)")
    model = cfg.model if cfg.model.startswith("random:") else str(Path(cfg.model).expanduser().resolve())
    out = Path(cfg.out).expanduser().resolve()
    check_out_model(out, model)
    chosen = {t.name for t in suite.tasks}
    left_out = dataclasses.replace(whole, tasks=[t for t in whole.tasks
                                                 if t.name not in chosen and (out / t.name).is_dir()])
    return Plan(suite, model, data_dir, out, plan_runs(suite, model, out, data_dir), whole,
                plan_runs(left_out, model, out, data_dir) if left_out.tasks else [])


def _counts(suite: Suite, runs: list[Run]) -> str:
    """"18 runs (6 tasks, 1 grid point each, 3 seeds)", or per task where grids differ:
    "6 runs (2 tasks; grid points: rte 2, mrpc 1; 2 seeds)"."""
    points = [len(t.points()) for t in suite.tasks]
    head = f"{_count(len(runs), 'run')} ({_count(len(suite.tasks), 'task')}"
    seeds = _count(len(suite.seeds), "seed")
    if len(set(points)) > 1:
        listed = ", ".join(f"{t.name} {n:,}" for t, n in zip(suite.tasks, points))
        return f"{head}; grid points: {listed}; {seeds})"
    each = " each" if len(points) > 1 else ""
    return f"{head}, {_count(points[0] if points else 0, 'grid point')}{each}, {seeds})"


def _count(n: int, thing: str) -> str:
    return f"{n:,} {thing}{'' if n == 1 else 's'}"


def plan_lines(cfg: SuiteConfig, check_option: OptionCheck | None = None) -> list[str]:
    """--dry-run: the suite, then each run's command, finished ones marked."""
    plan = prepare(cfg, check_option)
    done = [finished(run) is not None for run in plan.runs]
    lines = [f"{plan.suite.name} ({plan.suite.path}): {_counts(plan.suite, plan.runs)}; data dir {plan.data_dir}"
             + (f"; {sum(done)} finished before" if any(done) else "")]
    lines += [f"# {task.name}: {task.note}" for task in plan.suite.tasks if task.note]
    for number, (run, skip) in enumerate(zip(plan.runs, done), 1):
        mark = " (finished: skipped)" if skip else ""
        lines.append(f"[{number}/{len(plan.runs)}] {run.label}{mark}: bertmodel {shlex.join(run.argv)} > {run.log}")
    return lines


def eval_suite(cfg: SuiteConfig, log: Callable[[str], None], check_option: OptionCheck | None = None) -> dict:
    """Run the suite and write OUT/results.json and OUT/results.png; returns the summary
    (report.summarize). Failed runs are in it (summary["failed"]), not raised."""
    started = time.monotonic()
    plan = prepare(cfg, check_option)
    # The left-out tasks' finished runs, read before anything runs (a run of another
    # model at the same path is refused here too).
    kept = [record for record in map(finished, plan.others) if record is not None]
    plan.out.mkdir(parents=True, exist_ok=True)
    write_out_model(plan.out, plan.model)
    log(f"{plan.suite.name}: {_counts(plan.suite, plan.runs)} in {plan.out}")
    results = run_all(plan.runs, log, progress=cfg.progress)
    shown = {t.name for t in plan.suite.tasks} | {record["task"] for record in kept}
    suite = dataclasses.replace(plan.whole, tasks=[t for t in plan.whole.tasks if t.name in shown])
    summary = summarize(suite, results + kept, model=plan.model, data_dir=plan.data_dir,
                        wall_seconds=time.monotonic() - started)
    summary["results"] = str(write_results(summary, plan.out / RESULTS_FILE))
    try:
        summary["chart"] = str(plot_results(summary, plan.out / "results.png"))
    except BertmodelError as exc:
        summary["chart"] = None
        log(f"no chart: {exc}")
    return summary


__all__ = ["Plan", "SuiteConfig", "check_out_model", "eval_suite", "out_model", "plan_lines", "prepare"]
