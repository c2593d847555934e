"""What a fine-tuning run keeps and hands on: its checkpoints (the latest and the best),
the model `export-hf` writes from a run (best, latest or a given step), the best model's
tie-break, and a stop (SIGINT/SIGTERM) that arrives during an evaluation."""
import json
import random

import pytest
import torch
from click.testing import CliRunner

from bertmodel import checkpoint as ckpt
from bertmodel.cli import main
from finetune_fixtures import sentence, write_tsv
from finetune_fixtures import tiny_bert as make_tiny_bert

FAST = ["--batch-size", "4", "--eval-batch-size", "8", "--device", "cpu", "--no-progress", "--log-every", "1"]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="module")
def pair_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    rng = random.Random(1)

    def rows(n):
        out = []
        for i in range(n):
            a, b = sentence(rng), sentence(rng)
            out.append((i, a, b, "entailment" if set(a.split()) & set(b.split()) else "not_entailment"))
        return out
    header = ("index", "sentence1", "sentence2", "label")
    return write_tsv(root / "train.tsv", header, rows(32)), write_tsv(root / "dev.tsv", header, rows(12))


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def classify_args(model, pair_files, out, *extra, steps=6):
    return ("finetune", "classify", "--model", model, "--out", out, *FAST, "--train", pair_files[0],
            "--validation", pair_files[1], "--text-column", "sentence1", "--text-pair-column", "sentence2",
            "--max-steps", steps, "--eval-every", "2", "--save-every", "2", "--lr", "1e-3", *extra)


def steps_kept(run):
    return [step for step, _ in ckpt.list_checkpoints(run)]


# -- checkpoints kept --------------------------------------------------------------------

def test_finetune_keeps_the_latest_and_the_best_checkpoint(tiny_bert, pair_files, tmp_path):
    out = tmp_path / "run"
    result = invoke(*classify_args(tiny_bert, pair_files, out))
    assert result.exit_code == 0, result.output
    best = ckpt.read_best(out)["step"]
    assert steps_kept(out) == sorted({best, 6})  # not every epoch's (or every save's)
    more = tmp_path / "more"
    assert invoke(*classify_args(tiny_bert, pair_files, more, "--keep-last", "2")).exit_code == 0
    assert steps_kept(more) == sorted({ckpt.read_best(more)["step"], 4, 6})


def _tiny_state(step, best_step=None):
    best = {"step": best_step, "metric": "accuracy", "value": 0.5} if best_step is not None else None
    return {"model": {"w": torch.zeros(1)}, "step": step, "data": {"cursor": step}, "best": best}


def test_pruning_never_removes_the_best_checkpoint_while_it_is_the_best(tmp_path):
    for step, best in ((1, 1), (2, 1), (3, 1)):
        ckpt.save_checkpoint(tmp_path, _tiny_state(step, best), keep_last=1)
    assert steps_kept(tmp_path) == [1, 3]
    ckpt.save_checkpoint(tmp_path, _tiny_state(4, 4), keep_last=1)  # a new best: step 1 is no longer kept
    assert steps_kept(tmp_path) == [4]
    ckpt.save_checkpoint(tmp_path, _tiny_state(5, 4), keep_last=2)
    ckpt.save_checkpoint(tmp_path, _tiny_state(6, 4), keep_last=2)
    assert steps_kept(tmp_path) == [4, 5, 6]
    ckpt.save_checkpoint(tmp_path, _tiny_state(7), keep_last=2)  # no best model (pre-training): the last K
    assert steps_kept(tmp_path) == [6, 7]
