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
    assert "the training shards' most frequent masked token, would score 0." in result.output
    assert "Read these guesses against the held-out MLM accuracy, 0." in result.output
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


def test_the_frequent_guess_is_scored_on_the_positions_pretrain_evaluates(tmp_path):
    """Always guessing the training shards' most frequent masked token, on the held-out
    positions `pretrain --eval-batches 3 --batch-size 8` scores (its first 24 rows in file
    order), computed again here from the Arrow rows; the line beside fill-mask quotes
    both figures and the run's last evaluation."""
    import collections

    import numpy as np
    import pyarrow as pa

    from bertmodel.data.synthetic import SHARED, build_corpus_shards
    from bertmodel.demo.mlm_baseline import frequent_guess, last_evaluation, reading_guide

    corpus, vocab = SHARED / "data" / "google_sample_text.txt", SHARED / "data" / "bert-base-uncased-vocab.txt"
    if not corpus.is_file():
        pytest.skip(f"shared data not found at {corpus}")
    # Rows of 32 tokens, so the held-out set fills the three batches (and has rows to spare)
    train = build_corpus_shards(corpus, vocab, tmp_path / "train", dupe_factor=2, max_seq_length=32,
                                max_predictions=5)
    held_out = build_corpus_shards(corpus, vocab, tmp_path / "held-out", dupe_factor=2, seed=7, max_seq_length=32,
                                   max_predictions=5)

    def masked_ids(directory) -> list[list[int]]:
        manifest = json.loads((directory / "manifest.json").read_text())
        return [row for shard in manifest["shards"] for row in
                pa.ipc.open_stream(pa.memory_map(str(directory / shard["name"]))).read_all()
                .column("masked_lm_ids").to_pylist()]

    counts = collections.Counter(i for row in masked_ids(train) for i in row)
    top = min(counts, key=lambda i: (-counts[i], i))
    rows = masked_ids(held_out)
    assert len(rows) > 3 * 8
    scored = [i for row in rows[:3 * 8] for i in row]
    words = vocab.read_text(encoding="utf-8").splitlines()
    guess = frequent_guess(train, held_out, batch_size=8, eval_batches=3)
    assert guess.token == words[top]
    assert guess.positions == len(scored)
    assert guess.accuracy == pytest.approx(np.mean([i == top for i in scored]), abs=1e-12)

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"step": 10, "loss": 7.1, "mlm_acc": 0.02}, {"step": 500, "eval_mlm_acc": 0.081, "eval_nsp_acc": 0.6},
        {"step": 1000, "eval_mlm_acc": 0.125, "eval_nsp_acc": 0.7}, {"step": 1000, "loss": 5.0, "mlm_acc": 0.1})))
    line = reading_guide(last_evaluation(run), guess)
    assert line.startswith(f"Read these guesses against the held-out MLM accuracy, 0.125 at step 1,000, where "
                           f"always guessing {guess.token!r} scores {guess.accuracy:.3f} on the same {len(scored):,} positions")
