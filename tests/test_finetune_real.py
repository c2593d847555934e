"""Real weights, real data: all-MiniLM-L6-v2 fine-tuned on MRPC for a few dozen steps
learns from the input. Skips when ../shared/data or the model can't be had."""
import json
import math
import subprocess
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from shared_data import SHARED_DATA

MRPC = SHARED_DATA / "glue" / "MRPC"
FETCH = SHARED_DATA.parent / "tools" / "fetch_minilm.sh"


@pytest.fixture(scope="module")
def minilm():
    if not FETCH.is_file():
        pytest.skip(f"{FETCH} not found")
    target = Path(tempfile.gettempdir()) / "bertmodel-test-minilm"  # kept between runs; the script checks it
    done = subprocess.run(["bash", str(FETCH), str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"all-MiniLM-L6-v2 could not be fetched: {done.stderr.strip()[-300:]}")
    return target


@pytest.mark.slow
@pytest.mark.timeout(600)  # under 2 minutes of CPU alone; longer on a busy machine
@pytest.mark.skipif(not MRPC.is_dir(), reason=f"GLUE MRPC not found under {SHARED_DATA}")
def test_minilm_on_mrpc_beats_the_input_blind_baseline(minilm, tmp_path):
    """The honest bar for a short run: the validation cross-entropy falls below that of
    the best predictor that ignores the input (the training label frequencies, as
    probabilities), so the model uses the sentences; accuracy stays at least the
    majority class's. (24 steps of 16 are too few to beat the majority reliably.)"""
    out = tmp_path / "run"
    result = CliRunner().invoke(main, [
        "finetune", "classify", "--model", str(minilm), "--train", str(MRPC / "train.tsv"),
        "--validation", str(MRPC / "dev.tsv"), "--text-column", "#1 String", "--text-pair-column", "#2 String",
        "--label-column", "Quality", "--out", str(out), "--max-steps", "24", "--batch-size", "16",
        "--lr", "1e-4", "--max-seq-length", "64", "--device", "cpu", "--no-progress",
        "--seed", "1"])
    assert result.exit_code == 0, result.output
    evals = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "eval_loss" in r]
    train_labels = [line.split("\t")[0] for line in (MRPC / "train.tsv").read_text().splitlines()[1:]]
    dev_labels = [line.split("\t")[0] for line in (MRPC / "dev.tsv").read_text().splitlines()[1:]]
    prior = {label: train_labels.count(label) / len(train_labels) for label in set(train_labels)}
    blind_loss = -sum(math.log(prior[label]) for label in dev_labels) / len(dev_labels)  # ~0.63
    majority = max(dev_labels.count(label) for label in prior) / len(dev_labels)  # 0.684
    assert evals[-1]["eval_loss"] < blind_loss - 0.005, (evals, blind_loss)
    assert evals[-1]["eval_accuracy"] >= majority - 0.01
