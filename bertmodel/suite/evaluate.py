"""The `eval-suite` run from end to end: read the suite, check its data, run (or skip)
every run, then the table, OUT/results.json and OUT/results.png."""
from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bertmodel.errors import BertmodelError
from bertmodel.suite.report import plot_results, summarize, write_results
from bertmodel.suite.runner import Run, data_path, finished, plan_runs, run_all
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


@dataclass
class Plan:
    suite: Suite
    """The suite cut to the config's tasks and seeds."""
    model: str
    data_dir: Path
    out: Path
    runs: list[Run]


def prepare(cfg: SuiteConfig, check_option: OptionCheck | None = None) -> Plan:
    """The suite and its runs, every data file checked to exist before anything runs."""
    suite = load_suite(cfg.suite, check_option).select(cfg.tasks, cfg.seeds)
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
    return Plan(suite, model, data_dir, out, plan_runs(suite, model, out, data_dir))


def _counts(suite: Suite, runs: list[Run]) -> str:
    """"18 runs (6 tasks, 6 grid points, 3 seeds)"."""
    points = sum(len(t.points()) for t in suite.tasks)
    return (f"{_count(len(runs), 'run')} ({_count(len(suite.tasks), 'task')}, {_count(points, 'grid point')}, "
            f"{_count(len(suite.seeds), 'seed')})")


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
    plan.out.mkdir(parents=True, exist_ok=True)
    log(f"{plan.suite.name}: {_counts(plan.suite, plan.runs)} in {plan.out}")
    results = run_all(plan.runs, log)
    summary = summarize(plan.suite, results, model=plan.model, data_dir=plan.data_dir,
                        wall_seconds=time.monotonic() - started)
    summary["results"] = str(write_results(summary, plan.out / "results.json"))
    try:
        summary["chart"] = str(plot_results(summary, plan.out / "results.png"))
    except BertmodelError as exc:
        summary["chart"] = None
        log(f"no chart: {exc}")
    return summary


__all__ = ["Plan", "SuiteConfig", "eval_suite", "plan_lines", "prepare"]
