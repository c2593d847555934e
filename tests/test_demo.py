"""The main job end to end, as `make demo` runs it, with a short training run."""
import importlib.util
import json

import pytest
from click.testing import CliRunner

from bertmodel.cli import main


@pytest.mark.slow
def test_demo_runs_the_whole_pipeline_and_leaves_every_artifact(tmp_path):
    out = tmp_path / "demo"
    result = CliRunner().invoke(main, ["demo", "--out", str(out), "--steps", "20", "--finetune-epochs", "0.25"])
    assert result.exit_code == 0, result.output
    for step in range(1, 9):
        assert f"== {step}/8 " in result.output
    for command in ("$ bertprep stdlib-corpus", "$ bertprep train-tokenizer", "$ bertprep build-shards",
                    "$ bertprep inspect", "$ bertmodel pretrain", "$ bertmodel export-hf", "$ bertmodel fill-mask",
                    "$ bertmodel finetune classify", "$ bertmodel evaluate", "$ bertmodel predict"):
        assert command in result.output
    for artifact in ("corpus/train.txt", "tokenizer/vocab.txt", "shards/manifest.json", "eval-shards/manifest.json",
                     "run/metrics.jsonl", "model/config.json", "model/model.safetensors",
                     "topic-task/train.tsv", "finetune-run/hf/config.json", "finetune-run/predictions.jsonl"):
        assert (out / artifact).is_file(), artifact
    steps = [json.loads(line)["step"] for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 20
    assert "always guessing the most frequent token would score" in result.output
    line = next(x for x in result.output.splitlines() if x.startswith("validation accuracy: fine-tuned from "))
    assert line.endswith("; largest class 0.250") and "; from random init 0." in line
    for run_dir in ("finetune-run", "finetune-random"):  # the control is a fine-tuning run of its own
        assert json.loads((out / run_dir / "run.json").read_text())["task"] == "classification"
        assert (out / run_dir / "hf" / "model.safetensors").is_file()
    assert json.loads((out / "finetune-run" / "hf" / "config.json").read_text())["architectures"] == [
        "BertForSequenceClassification"]
    if importlib.util.find_spec("matplotlib"):  # the plot extra: both plots, and where they are
        for plot in ("plots/shards.png", "plots/training-curves.png"):
            assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot
        assert f"Plots: {out / 'plots' / 'shards.png'} " in result.output

    # A second run reuses every finished step and still ends with the examples.
    again = CliRunner().invoke(main, ["demo", "--out", str(out), "--steps", "20", "--finetune-epochs", "0.25"])
    assert again.exit_code == 0, again.output
    assert "$ bertprep train-tokenizer" not in again.output and "$ bertmodel fill-mask" in again.output
