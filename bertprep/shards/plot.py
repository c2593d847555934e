"""`bertprep inspect OUT --plot FILE.png`: a shard directory's statistics as one PNG.

Three panels: the row length histogram (tokens per row, [CLS]/[SEP] included), the
histogram of masked positions per row, and how the masked positions were shown
([MASK] / random token / kept) against BERT's nominal 80/10/10, with 95% intervals.
Lengths and the split come from `inspect.measure` (re-measured from the rows);
masked positions per row are counted here from the masked_lm_positions offsets.

matplotlib (the `plot` extra) draws through its Agg canvas directly, without pyplot.
No torch here: bertprep never imports it.
"""
from __future__ import annotations

import pathlib

import numpy as np

from bertprep.shards import schema
from bertprep.errors import BertprepError
from bertprep.shards.inspect import open_shard, read_manifest

FIGSIZE = (15, 4.5)  # inches; at DPI, a 1500 x 450 PNG
DPI = 100
SPLIT = (("mask", "[MASK]"), ("random", "random token"), ("kept", "kept"))


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise BertprepError('plotting needs matplotlib: pip install "bertprep[plot]"') from None
    return Figure


def masked_per_row_histogram(out) -> np.ndarray:
    """counts[k] = rows with k masked positions, over every shard of OUT."""
    out = pathlib.Path(out)
    manifest = read_manifest(out)
    counts = np.zeros(manifest["options"]["max_predictions_per_seq"] + 1, dtype=np.int64)
    for shard in manifest["shards"]:
        column = open_shard(out / shard["name"]).column(schema.MASKED_LM_POSITIONS).combine_chunks()
        per_row = np.diff(column.offsets.to_numpy())
        found = np.bincount(per_row, minlength=len(counts))
        if len(found) > len(counts):  # more than the manifest's cap: show it rather than hide it
            counts = np.pad(counts, (0, len(found) - len(counts)))
        counts[: len(found)] += found
    return counts


def plot_shards(out, report: dict, path, overwrite: bool = False) -> pathlib.Path:
    """Draw `report` (inspect.measure(out)) and OUT's masked-per-row counts into the
    PNG `path` (written whole, then renamed)."""
    path = pathlib.Path(path)
    if path.exists() and not overwrite:
        raise BertprepError(f"{path}: exists; pass --overwrite to replace it")
    if not path.parent.is_dir():
        raise BertprepError(f"{path.parent}: no such directory for the plot")
    Figure = _figure_class()
    masked = masked_per_row_histogram(out)
    lengths = np.asarray(report["length_histogram"])
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    length_ax, masked_ax, split_ax = fig.subplots(1, 3)

    length_ax.bar(np.arange(len(lengths)), lengths, width=1.0, color="C0")
    mean = (np.arange(len(lengths)) * lengths).sum() / max(lengths.sum(), 1)
    length_ax.axvline(mean, color="C3", linestyle="--", label=f"mean {mean:.1f}")
    length_ax.set(title="Row length", xlabel="tokens per row ([CLS] and [SEP] included)", ylabel="rows")
    length_ax.legend(fontsize="small")

    masked_ax.bar(np.arange(len(masked)), masked, width=0.8, color="C1")
    cap = report["manifest"]["options"]["max_predictions_per_seq"]
    masked_ax.axvline(cap, color="C3", linestyle="--", label=f"cap {cap} (--max-predictions-per-seq)")
    masked_ax.set(title=f"Masked positions per row (mask rate {report['mask_rate']['observed']:.3f})",
                  xlabel="masked positions in a row", ylabel="rows")
    masked_ax.legend(fontsize="small")

    split = report["split"]
    x = np.arange(len(SPLIT))
    observed = np.array([split[k]["observed"] for k, _ in SPLIT]) * 100
    low = np.array([split[k]["ci95"][0] for k, _ in SPLIT]) * 100
    high = np.array([split[k]["ci95"][1] for k, _ in SPLIT]) * 100
    nominal = np.array([split[k]["expected"] for k, _ in SPLIT]) * 100
    split_ax.bar(x - 0.2, observed, width=0.4, color="C2", label="observed (95% interval)",
                 yerr=np.vstack([observed - low, high - observed]), capsize=4)
    split_ax.bar(x + 0.2, nominal, width=0.4, color="0.75", label="nominal 80/10/10")
    for xi, value in zip(x, observed):
        split_ax.annotate(f"{value:.1f}%", (xi - 0.2, value), textcoords="offset points", xytext=(0, 3),
                          ha="center", fontsize="small")
    split_ax.set_xticks(x, [label for _, label in SPLIT])
    split_ax.set(title=f"How the {report['masked_positions']:,} masked positions are shown",
                 ylabel="share of masked positions (%)", ylim=(0, 100))
    split_ax.legend(fontsize="small")

    fig.suptitle(f"{pathlib.Path(out).name}: {report['rows']:,} rows, {report['tokens']:,} tokens "
                 f"in {report['shards']} shard{'s' if report['shards'] != 1 else ''}")
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png", metadata={"Software": None})
    tmp.replace(path)
    return path
