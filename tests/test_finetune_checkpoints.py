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


# -- the best model, and what export-hf writes ------------------------------------------

SCRIPTED = {2: (0.5, 0.70), 4: (0.5, 0.60), 6: (0.5, 0.65)}  # step: (accuracy, loss)


@pytest.fixture(scope="module")
def tied_run(tiny_bert, pair_files, tmp_path_factory):
    """A run whose three evaluations tie on accuracy; step 4's has the lowest loss."""
    from bertmodel.tasks.classification import ClassificationTask

    steps = iter(sorted(SCRIPTED))

    def scripted(self, *args, **kwargs):
        accuracy, loss = SCRIPTED[next(steps)]
        return {"eval_accuracy": accuracy, "eval_macro_f1": 0.4, "eval_mcc": 0.0, "eval_loss": loss}

    out = tmp_path_factory.mktemp("tied") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ClassificationTask, "evaluate", scripted)
        result = invoke(*classify_args(tiny_bert, pair_files, out))
    assert result.exit_code == 0, result.output
    return out


def test_a_tie_of_the_best_metric_goes_to_the_lower_eval_loss(tied_run):
    assert json.loads((tied_run / "best.json").read_text()) == {"step": 4, "metric": "accuracy", "value": 0.5,
                                                                "eval_loss": 0.6}
    assert steps_kept(tied_run) == [4, 6]


def safetensors_of(directory):
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_export_hf_of_a_finetuning_run_writes_the_best_model_and_says_so(tied_run, tmp_path):
    result = invoke("export-hf", tied_run, tmp_path / "best")
    assert result.exit_code == 0, result.output
    assert result.output == (f"wrote {tmp_path / 'best'} (BertForSequenceClassification, 2 layers, hidden 128, "
                             "step 4: the best by accuracy 0.5000; --latest exports step 6)\n")
    assert same_weights(safetensors_of(tmp_path / "best"), safetensors_of(tied_run / "hf"))  # what evaluate uses
    again = invoke("export-hf", tied_run, tmp_path / "again", "--best")
    assert again.output == result.output.replace(str(tmp_path / "best"), str(tmp_path / "again"))

    latest = invoke("export-hf", tied_run, tmp_path / "latest", "--latest")
    assert latest.output == (f"wrote {tmp_path / 'latest'} (BertForSequenceClassification, 2 layers, hidden 128, "
                             "step 6: the latest checkpoint; the best by accuracy is step 4 (--best))\n")
    step6 = ckpt.load_checkpoint(tied_run / "checkpoints" / "step-6")["model"]
    exported = safetensors_of(tmp_path / "latest")
    assert all(torch.equal(exported[k], step6[k]) for k in exported)
    assert not same_weights(exported, safetensors_of(tmp_path / "best"))

    chosen = invoke("export-hf", tied_run, tmp_path / "step4", "--step", "4")
    assert chosen.output == (f"wrote {tmp_path / 'step4'} (BertForSequenceClassification, 2 layers, hidden 128, "
                             "step 4: as asked)\n")
    assert same_weights(safetensors_of(tmp_path / "step4"), safetensors_of(tmp_path / "best"))


def test_export_hf_choices_that_cannot_be_met_are_one_line(tied_run, tmp_path):
    pruned = invoke("export-hf", tied_run, tmp_path / "x", "--step", "2")
    assert pruned.exit_code == 1 and pruned.stderr == (f"Error: {tied_run}: no checkpoint of step 2 (kept: 4, 6); "
                                                       "--best exports the best model (step 4)\n")
    both = invoke("export-hf", tied_run, tmp_path / "x", "--latest", "--step", "6")
    assert both.exit_code == 2 and "--latest and --step both choose the checkpoint; give one" in both.stderr
    checkpoint = invoke("export-hf", tied_run / "checkpoints" / "step-6", tmp_path / "x", "--best")
    assert checkpoint.exit_code == 1 and "this is a checkpoint or model directory, exported as it is" in \
        checkpoint.stderr
    assert not (tmp_path / "x").exists()


def test_export_hf_of_a_run_without_a_best_model_writes_the_latest(tiny_bert, pair_files, tmp_path):
    out = tmp_path / "run"  # no validation data: no best model, as in pre-training
    result = invoke("finetune", "classify", "--model", tiny_bert, "--out", out, *FAST, "--train", pair_files[0],
                    "--text-column", "sentence1", "--text-pair-column", "sentence2", "--max-steps", 2)
    assert result.exit_code == 0, result.output
    exported = invoke("export-hf", out, tmp_path / "model")
    assert exported.output == (f"wrote {tmp_path / 'model'} (BertForSequenceClassification, 2 layers, hidden 128, "
                               "step 2: the latest checkpoint)\n")
    refused = invoke("export-hf", out, tmp_path / "other", "--best")
    assert refused.exit_code == 1 and refused.stderr == (
        f"Error: {out}: no best model (no {out / 'best.json'}: a pre-training run, or one not evaluated yet); "
        "use --latest or --step N\n")
