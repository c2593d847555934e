"""`bertmodel plot`: a run's curves from metrics.jsonl as one PNG, several runs compared.

Four panels, always in the same place so figures compare at a glance: training loss
(raw, and smoothed with a debiased exponential moving average as TensorBoard draws it;
where the loss is a sum of parts, as distillation's kd_loss + task_loss or MiniLM's
qq_kl + kk_kl + vv_kl, each part thin and dashed beside it),
learning rate, evaluation losses (their parts too) and the other evaluation metrics (every eval_* key:
pre-training's eval_mlm_acc / eval_nsp_acc (eval_sop_acc), fine-tuning's eval_accuracy, eval_f1,
eval_exact_match, ...) at the steps they were measured. With several runs, colour is the
run (legend by run name) and line style / marker the metric.

matplotlib (the `plot` extra) draws through its Agg canvas directly, without pyplot, so
nothing global (backend, open figures) changes in the caller's process.
"""
from __future__ import annotations

import json
from pathlib import Path

from bertmodel.errors import BertmodelError

FIGSIZE = (12, 8)  # inches; at DPI, a 1200 x 800 PNG
DPI = 100
STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise BertmodelError('plotting needs matplotlib: pip install "bertprep[plot]"') from None
    return Figure


def read_metrics(run) -> list[dict]:
    """The records of RUN/metrics.jsonl (RUN may also be the file). A last line torn by a
    kill is skipped; a bad line elsewhere is an error naming the file and line."""
    run = Path(run)
    path = run / "metrics.jsonl" if run.is_dir() else run
    if not path.is_file():
        raise BertmodelError(f"{run}: no metrics.jsonl (not a bertmodel run directory)")
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if number == len(lines):
                break
            raise BertmodelError(f"{path}: line {number} is not JSON") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise BertmodelError(f"{path}: line {number} has no integer \"step\"")
        records.append(record)
    return records


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` over the records that have it as a number, in step order."""
    points = sorted((r["step"], float(r[key])) for r in records if _number(r.get(key)))
    return [s for s, _ in points], [v for _, v in points]


def smooth(values: list[float], weight: float) -> list[float]:
    """Debiased exponential moving average (TensorBoard's smoothing): the early points are
    not pulled towards 0."""
    out, average = [], 0.0
    for n, v in enumerate(values, 1):
        average = weight * average + (1 - weight) * v
        out.append(average / (1 - weight ** n))
    return out


def smoothing_weight(points: int) -> float:
    """About a tenth of the curve's points in the average, at most 0.95."""
    return min(0.95, max(0.0, 1 - 10 / max(points, 1)))


# The names of a loss's parts in metrics.jsonl (distillation's kd_loss and task_loss,
# MiniLM's relation KLs and hidden-state MSE): drawn with the losses, not the scores.
LOSS_PARTS = ("_loss", "_kl", "hidden_mse")


def is_loss(key: str) -> bool:
    return key.endswith("loss") or key.endswith(LOSS_PARTS)


def loss_parts(records: list[dict]) -> list[str]:
    """The training loss's parts a run logs, in name order."""
    return sorted({k for r in records for k, v in r.items()
                   if k != "loss" and not k.startswith("eval_") and k.endswith(LOSS_PARTS) and _number(v)})


def eval_keys(records: list[dict]) -> list[str]:
    keys = {k for r in records for k, v in r.items() if k.startswith("eval_") and _number(v)}
    return sorted(keys)


def run_names(runs: list[Path]) -> list[str]:
    """Each run's folder name; the whole path where two names clash."""
    names = [Path(r).resolve().name if Path(r).is_dir() else Path(r).resolve().parent.name for r in runs]
    return [n if names.count(n) == 1 else str(r) for n, r in zip(names, runs)]


def _few(steps: list) -> str | None:
    """A marker on every point of a short series: a line of one point is not drawn."""
    return "o" if len(steps) <= 30 else None


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.5")


def plot_runs(runs: list, out, overwrite: bool = False) -> Path:
    """Draw the runs' curves into the PNG `out` (written whole, then renamed)."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise BertmodelError(f"{out}: exists; pass --overwrite to replace it")
    if not out.parent.is_dir():
        raise BertmodelError(f"{out.parent}: no such directory for the plot")
    data = [read_metrics(r) for r in runs]
    for run, records in zip(runs, data):
        if not records:
            raise BertmodelError(f"{run}: metrics.jsonl holds no records yet")
    names = run_names([Path(r) for r in runs])
    Figure = _figure_class()
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    # Fixed margins, not a layout engine: every plot puts each panel at the same pixels,
    # so two PNGs compare side by side (and one panel's data never moves another).
    (loss_ax, lr_ax), (eval_loss_ax, eval_ax) = fig.subplots(2, 2)
    fig.subplots_adjust(left=0.07, right=0.985, bottom=0.07, top=0.91, wspace=0.2, hspace=0.32)
    several = len(runs) > 1
    all_eval = sorted({k for records in data for k in eval_keys(records)})
    eval_losses = [k for k in all_eval if is_loss(k)]
    eval_scores = [k for k in all_eval if not is_loss(k)]
    palette = [f"C{i % 10}" for i in range(max(len(runs), len(all_eval), 1))]
    for i, (name, records) in enumerate(zip(names, data)):
        colour = palette[i]
        steps, loss = series(records, "loss")
        if steps:
            weight = smoothing_weight(len(loss))
            loss_ax.plot(steps, loss, color=colour, alpha=0.35 if weight else 1.0, linewidth=0.8,
                         marker=_few(steps), markersize=3, label=f"{name}: raw" if several else "raw")
            if weight:  # fewer than ~10 points: nothing to smooth
                loss_ax.plot(steps, smooth(loss, weight), color=colour, linewidth=2,
                             label=f"{name}: smoothed (EMA {weight:.2f})" if several else f"smoothed (EMA {weight:.2f})")
        for j, key in enumerate(loss_parts(records)):
            steps, part = series(records, key)
            loss_ax.plot(steps, part, color=colour if several else f"C{(j + 1) % 10}", linewidth=1,
                         linestyle=STYLES[1 + j % (len(STYLES) - 1)], marker=_few(steps), markersize=2,
                         label=f"{name}: {key}" if several else key)
        steps, lr = series(records, "lr")
        if steps:
            lr_ax.plot(steps, lr, color=colour, marker=_few(steps), markersize=3, label=name)
        for ax, keys in ((eval_loss_ax, eval_losses), (eval_ax, eval_scores)):
            for j, key in enumerate(keys):
                steps, values = series(records, key)
                if steps:
                    metric = key[len("eval_"):]
                    ax.plot(steps, values, color=colour if several else palette[j % len(palette)],
                            linestyle=STYLES[j % len(STYLES)], marker=MARKERS[j % len(MARKERS)],
                            label=f"{name}: {metric}" if several else metric)
    loss_ax.set(title="Training loss", xlabel="optimizer step", ylabel="loss (cross-entropy, nats)")
    lr_ax.set(title="Learning rate", xlabel="optimizer step", ylabel="learning rate (per step)")
    lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    eval_loss_ax.set(title="Evaluation loss", xlabel="optimizer step", ylabel="loss (cross-entropy, nats)")
    eval_ax.set(title="Evaluation metrics", xlabel="optimizer step", ylabel="score (accuracy, F1, ...: 0-1; SQuAD: 0-100)")
    for ax, what in ((loss_ax, "no training loss logged"), (lr_ax, "no learning rate logged"),
                     (eval_loss_ax, "no evaluation loss logged"), (eval_ax, "no evaluation metrics logged")):
        ax.grid(True, alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        if ax.lines:
            ax.legend(fontsize="small")
        else:
            _empty(ax, what)
    fig.suptitle(_title(names, data), fontsize="large")
    tmp = out.with_name(out.name + ".tmp")
    fig.savefig(tmp, format="png", metadata={"Software": None})
    tmp.replace(out)
    return out


def _title(names: list[str], data: list[list[dict]]) -> str:
    parts = []
    for name, records in zip(names, data):
        last = max(r["step"] for r in records)
        _, loss = series(records, "loss")
        parts.append(f"{name} (step {last:,}" + (f", loss {loss[-1]:.3f})" if loss else ")"))
    return "; ".join(parts)
