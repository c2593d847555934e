"""A suite's results: per task the grid point with the best mean over seeds on the
validation set (the BERT paper's selection, Devlin et al. 2019 section 4), its mean and
sample standard deviation, and the average over tasks; as a table, results.json and a
bar chart with error bars.

Scores sit on one 0-100 scale so tasks can be averaged: metrics in 0..1 (accuracy, f1,
mcc, ... of classify, tokens and choice) are multiplied by 100, SQuAD's exact_match and
f1 (qa) already are percentages; losses are left as they are and out of the average.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from bertmodel.errors import BertmodelError
from bertmodel.suite.spec import Suite, TaskSpec
from bertmodel.tasks.finetuning import LOWER_IS_BETTER

PERCENT_COMMANDS = ("qa",)  # commands whose metrics are already 0-100 (the official SQuAD script)
FIGSIZE_PER_TASK = 1.3  # inches of chart width per task
DPI = 100


def scale(command: str, metric: str) -> int:
    """The factor that puts the metric on the table's 0-100 scale."""
    return 1 if command in PERCENT_COMMANDS or metric in LOWER_IS_BETTER else 100


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1); one value has a deviation of 0."""
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def point_summary(name: str, options: dict, runs: list[dict], factor: int) -> dict:
    values = [r["value"] * factor for r in runs if r.get("status") == "ok"]
    mean, std = mean_std(values)
    return {"name": name, "options": options, "mean": mean, "std": std, "seeds": len(values), "runs": runs}


def best_point(points: list[dict], greater: bool = True) -> dict | None:
    """The point with the best mean (the first of equals, in grid order) among those whose
    every seed has a result: a failed seed must not lift a point's mean (a diverged run
    is often the one that failed). Only where no point is complete does the best partial
    one count (the table shows its seeds as k/n). None when no point has a result."""
    scored = [p for p in points if p["mean"] is not None]
    complete = [p for p in scored if p["seeds"] == len(p["runs"])]
    if not scored:
        return None
    return (max if greater else min)(complete or scored, key=lambda p: p["mean"])


def task_summary(task: TaskSpec, results: list[dict]) -> dict:
    """`results`: the task's run results (runner.run_all), any order."""
    factor = scale(task.command, task.metric)
    greater = task.metric not in LOWER_IS_BETTER
    points = [point_summary(p.name, p.options, sorted((r for r in results if r["point"] == p.name),
                                                      key=lambda r: r["seed"]), factor)
              for p in task.points()]
    chosen = best_point(points, greater)
    return {"name": task.name, "command": task.command, "metric": task.metric, "scale": factor,
            "greater_is_better": greater, "note": task.note, "chosen": chosen["name"] if chosen else None,
            "mean": chosen["mean"] if chosen else None, "std": chosen["std"] if chosen else None,
            "seeds": chosen["seeds"] if chosen else 0,
            "failed": sum(r.get("status") != "ok" for r in results), "runs": len(results), "points": points}


def summarize(suite: Suite, results: list[dict], *, model: str, data_dir: Path, wall_seconds: float) -> dict:
    """Everything results.json holds: every run's value, each point's mean/std (on the
    table's scale: value x scale), the chosen point per task and the average."""
    tasks = [task_summary(t, [r for r in results if r["task"] == t.name]) for t in suite.tasks]
    # The average is of scores on the 0-100 scale; a loss (lower is better) is not one.
    scored = [t["mean"] for t in tasks if t["mean"] is not None and t["greater_is_better"]]
    return {"suite": suite.name, "suite_file": str(suite.path.resolve()), "description": suite.description,
            "model": model, "data_dir": str(data_dir), "seeds": suite.seeds,
            "average": statistics.fmean(scored) if scored else None, "average_of": len(scored),
            "runs": len(results), "failed": sum(r.get("status") != "ok" for r in results),
            "wall_seconds": round(wall_seconds, 1),
            "run_seconds": round(sum(r.get("seconds", 0.0) for r in results), 1), "tasks": tasks}


def format_table(summary: dict) -> str:
    """The plain-text table, aligned: a row per task, then the average."""
    n_seeds = len(summary["seeds"])
    tasks = summary["tasks"]
    means = [f"{t['mean']:.2f}" if t["mean"] is not None else "-" for t in tasks]
    average = f"{summary['average']:.2f}" if summary["average"] is not None else "-"
    stds = [f"{t['std']:.2f}" for t in tasks if t["std"] is not None]
    mean_width = max(map(len, means + [average]))
    std_width = max(map(len, stds), default=0)
    rows = [("task", "metric", "score", "seeds", "grid point")]
    for t, mean in zip(tasks, means):
        score = f"{mean:>{mean_width}} ± {t['std']:{std_width}.2f}" if t["mean"] is not None else "-".rjust(mean_width)
        seeds = str(t["seeds"]) if t["seeds"] == n_seeds else f"{t['seeds']}/{n_seeds}"
        point = t["chosen"] or f"no result ({t['failed']} of {t['runs']} runs failed)"
        rows.append((t["name"], t["metric"], score, seeds, point))
    over = f"{summary['average_of']} of {len(tasks)}" if summary["average_of"] != len(tasks) else f"{len(tasks)}"
    rows.append(("average", "", average.rjust(mean_width), "", f"({over} task{'' if len(tasks) == 1 else 's'})"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(len(lines) - 1, "  ".join("-" * w for w in widths))
    return "\n".join([f"{summary['suite']}: {summary['model']} (seeds {', '.join(map(str, summary['seeds']))})",
                      *lines,
                      "score: mean ± sd over seeds at the grid point with the best mean on validation; "
                      "0-1 metrics x100"])


def write_results(summary: dict, path: Path) -> Path:
    """results.json, written whole then renamed."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise BertmodelError('matplotlib is not installed (pip install "bertprep[plot]")') from None
    return Figure


def plot_results(summary: dict, path: Path) -> Path:
    """A bar per task (its score, the sd as an error bar) and the average as a line,
    drawn on matplotlib's Agg canvas without pyplot (nothing global changes)."""
    Figure = _figure_class()
    tasks = summary["tasks"]
    fig = Figure(figsize=(max(4.0, 1.5 + FIGSIZE_PER_TASK * len(tasks)), 4.5), dpi=DPI)
    ax = fig.subplots()
    positions = range(len(tasks))
    means = [t["mean"] or 0.0 for t in tasks]
    stds = [t["std"] or 0.0 for t in tasks]
    bars = ax.bar(positions, means, width=0.6, yerr=stds, capsize=4, color=[f"C{i % 10}" for i in positions])
    for bar, t in zip(bars, tasks):
        label = "failed" if t["mean"] is None else f"{t['mean']:.1f}"
        top = bar.get_height() + (t["std"] or 0.0) if bar.get_height() >= 0 else 0.0
        ax.annotate(label, (bar.get_x() + bar.get_width() / 2, top), xytext=(0, 3),
                    textcoords="offset points", ha="center", va="bottom", fontsize=8)
    # One scale for every chart (0-100, wider only when a score needs it), room for the labels.
    highest = max([100.0] + [m + s for m, s in zip(means, stds)])
    lowest = min([0.0] + [m - s for m, s in zip(means, stds)])
    ax.set_ylim(lowest * 1.1, highest * 1.1)
    ax.set_xlim(-0.6, len(tasks) - 0.4)
    average = ""
    if summary["average"] is not None:
        ax.axhline(summary["average"], color="0.3", linestyle="--", linewidth=1)
        average = f", average {summary['average']:.2f} (dashed)"
    ax.set_xticks(list(positions), [f"{t['name']}\n{t['metric']}" for t in tasks], fontsize=8)
    ax.set_ylabel("score (0-1 metrics x100)")
    seeds = len(summary["seeds"])
    ax.set_title(f"{summary['suite']}: {Path(summary['model']).name}{average}\n"
                 f"mean ± sd over {seeds} seed{'s' if seeds != 1 else ''} at each task's best grid point",
                 fontsize=9)
    fig.subplots_adjust(bottom=0.18)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    fig.savefig(tmp, format="png")
    tmp.replace(path)
    return path
