"""`bertmodel plot` and `bertprep inspect --plot`: PNGs of the expected size, drawn from the
data (other data, another image; the same data, the same bytes), on a real tiny
pre-training run and real shards; and the one-line errors."""
from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from bertmodel.cli import main as bertmodel_main
from bertmodel.errors import BertmodelError
from bertmodel.training.plot import plot_runs, read_metrics
from bertmodel.data.synthetic import small_shard_dir
from bertprep.cli import main as bertprep_main
from bertprep.errors import BertprepError
from shard_fixtures import read_rows, write_corpus, write_vocab

matplotlib = pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
from matplotlib.image import imread  # noqa: E402


def invoke(main, *args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def pixels(path) -> np.ndarray:
    return imread(str(path))  # (height, width, RGBA) floats; fails on anything but a PNG


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A real 12-step tiny pre-training run, evaluated every 6 steps."""
    base = tmp_path_factory.mktemp("plot")
    shards = small_shard_dir(base / "shards", rows=48)
    result = invoke(bertmodel_main, "pretrain", "--data", shards, "--eval-data", shards, "--out", base / "run",
                    "--preset", "tiny", "--batch-size", 4, "--max-steps", 12, "--lr", "1e-3", "--warmup-steps", 2,
                    "--log-every", 1, "--eval-every", 6, "--eval-batches", 2, "--save-every", 100,
                    "--device", "cpu", "--no-progress")
    assert result.exit_code == 0, result.output
    return base / "run"


def copy_run(run, parent, change):
    """A copy of `run`, named as it is (the title names the run), whose records went
    through `change` (a record -> record or None)."""
    out = parent / run.name
    out.mkdir(parents=True)
    records = [change(dict(r)) for r in read_metrics(run)]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r is not None))
    return out


def test_plot_command_writes_a_png_of_the_run(run, tmp_path):
    result = invoke(bertmodel_main, "plot", run)
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote {run / 'curves.png'} (1 run)\n"
    image = pixels(run / "curves.png")
    assert image.shape == (800, 1200, 4)
    assert image[..., :3].std() > 0.05  # drawn on, not a blank canvas
    again = invoke(bertmodel_main, "plot", run)
    assert again.exit_code == 1 and again.output == f"Error: {run / 'curves.png'}: exists; pass --overwrite to replace it\n"
    assert invoke(bertmodel_main, "plot", run, "--overwrite").exit_code == 0


def test_the_image_follows_the_loss_curve(run, tmp_path):
    same = plot_runs([run], tmp_path / "a.png")
    plot_runs([run], tmp_path / "b.png")
    assert same.read_bytes() == (tmp_path / "b.png").read_bytes()  # same data, same bytes

    def steeper(r):
        if "loss" in r:
            r["loss"] = r["loss"] * (1 - r["step"] / 24)
        return r

    other = copy_run(run, tmp_path / "steeper", steeper)
    plot_runs([other], tmp_path / "c.png")
    a, c = pixels(tmp_path / "a.png"), pixels(tmp_path / "c.png")
    assert a.shape == c.shape
    differs = np.abs(a - c).sum(axis=2) > 0
    # Only the loss changed: the training-loss panel (top left) and the title's final loss
    # differ; the learning-rate and evaluation panels are the same pixels.
    assert differs[40:400, :600].any()
    assert not differs[60:400, 620:].any() and not differs[420:, :].any()


def test_several_runs_and_fine_tuning_metrics_on_one_figure(run, tmp_path):
    def finetune(r):  # records shaped like a fine-tuning run's
        if "eval_mlm_acc" in r:
            return {"step": r["step"], "eval_loss": r["eval_loss"], "eval_accuracy": r["eval_mlm_acc"],
                    "eval_f1": r["eval_nsp_acc"], "eval_exact_match": r["eval_mlm_acc"] / 2}
        return {"step": r["step"], "loss": r["loss"], "lr": r["lr"]}

    tuned = copy_run(run, tmp_path / "tuned", finetune)
    no_f1 = copy_run(tuned, tmp_path / "no-f1", lambda r: {k: v for k, v in r.items() if k != "eval_f1"})
    result = invoke(bertmodel_main, "plot", run, tuned, "--out", tmp_path / "both.png")
    assert result.exit_code == 0 and result.output == f"wrote {tmp_path / 'both.png'} (2 runs)\n"
    assert pixels(tmp_path / "both.png").shape == (800, 1200, 4)
    plot_runs([tuned], tmp_path / "tuned.png")
    plot_runs([no_f1], tmp_path / "no-f1.png")
    with_f1, without = pixels(tmp_path / "tuned.png"), pixels(tmp_path / "no-f1.png")
    differs = np.abs(with_f1 - without).sum(axis=2) > 0
    assert differs[420:, 600:].any() and not differs[:400, :].any()  # only the evaluation-metrics panel


def test_plot_errors_are_one_line(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke(bertmodel_main, "plot", empty)
    assert result.exit_code == 1 and result.output == f"Error: {empty}: no metrics.jsonl (not a bertmodel run directory)\n"
    (empty / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\nnot json\n{"step": 2, "loss": 1.0}\n')
    with pytest.raises(BertmodelError, match=r"metrics.jsonl: line 2 is not JSON"):
        read_metrics(empty)
    (empty / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "lo')  # torn by a kill
    assert read_metrics(empty) == [{"step": 1, "loss": 2.0}]
    for module in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(BertmodelError, match=r'^plotting needs matplotlib: pip install "bertprep\[plot\]"$'):
        plot_runs([empty], tmp_path / "x.png")


# --- bertprep inspect --plot ---------------------------------------------------------------

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    base = tmp_path_factory.mktemp("shard-plot")
    return write_corpus(base / "corpus.txt", documents=60), write_vocab(base / "vocab.txt")


def build(corpus, out, *options):
    text, vocab = corpus
    result = invoke(bertprep_main, "build-shards", text, "--tokenizer", vocab, "--out", out, "--workers", 1,
                    "--quiet", "--cache-dir", out.parent / "cache", *options)
    assert result.exit_code == 0, result.output
    return out


def test_inspect_plot_draws_the_shard_statistics(corpus, tmp_path):
    from bertprep.shards import masked_per_row_histogram

    shards = build(corpus, tmp_path / "shards", "--dupe-factor", 2)
    result = invoke(bertprep_main, "inspect", shards, "--plot", tmp_path / "shards.png")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"wrote {tmp_path / 'shards.png'}\n")
    assert "length histogram:" in result.output  # the usual report follows
    assert pixels(tmp_path / "shards.png").shape == (450, 1500, 4)
    rows = read_rows(shards)
    counts = np.bincount([len(r["masked_lm_positions"]) for r in rows], minlength=21)
    assert masked_per_row_histogram(shards).tolist() == counts.tolist()

    # With --json the report stays valid JSON on stdout; the note goes to stderr.
    as_json = CliRunner().invoke(bertprep_main, ["inspect", str(shards), "--json", "--plot", str(tmp_path / "j.png")])
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["rows"] == len(rows)
    assert (tmp_path / "j.png").read_bytes() == (tmp_path / "shards.png").read_bytes()

    refused = invoke(bertprep_main, "inspect", shards, "--plot", tmp_path / "shards.png")
    assert refused.exit_code == 1
    assert refused.output == f"Error: {tmp_path / 'shards.png'}: exists; pass --overwrite to replace it\n"

    other = build(corpus, tmp_path / "other", "--dupe-factor", 2, "--masked-lm-prob", "0.3",
                  "--max-predictions-per-seq", 40)
    assert invoke(bertprep_main, "inspect", other, "--plot", tmp_path / "other.png").exit_code == 0
    assert not np.array_equal(pixels(tmp_path / "other.png"), pixels(tmp_path / "shards.png"))


def test_inspect_plot_without_matplotlib_is_one_line(corpus, tmp_path, monkeypatch):
    from bertprep.shards import measure
    from bertprep.shards import plot_shards

    shards = build(corpus, tmp_path / "shards")
    for module in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(BertprepError, match=r'^plotting needs matplotlib: pip install "bertprep\[plot\]"$'):
        plot_shards(shards, measure(shards), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
    shutil.rmtree(shards)


def test_a_distillation_runs_loss_parts_are_drawn_with_the_losses(run, tmp_path):
    """kd_loss / task_loss (task distillation) and qq_kl ... (MiniLM) beside the training
    loss, eval_qq_kl with the evaluation losses: only those two panels change."""
    def parts(r):
        if "loss" in r:
            return {**r, "kd_loss": r["loss"] / 3, "task_loss": r["loss"] / 2}
        if "eval_loss" in r:
            return {**r, "eval_qq_kl": r["eval_loss"] / 4}
        return r

    with_parts = copy_run(run, tmp_path / "parts", parts)
    plain = copy_run(run, tmp_path / "plain", lambda r: r)
    plot_runs([with_parts], tmp_path / "parts.png")
    plot_runs([plain], tmp_path / "plain.png")
    differs = np.abs(pixels(tmp_path / "parts.png") - pixels(tmp_path / "plain.png")).sum(axis=2) > 0
    assert differs[60:400, :600].any() and differs[420:, :600].any()  # the training and evaluation losses
    assert not differs[60:400, 620:].any() and not differs[420:, 620:].any()  # lr and scores unchanged
