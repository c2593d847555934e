"""What a fine-tuning run keeps and hands on: its checkpoints (the latest and the best),
the model `export-hf` writes from a run (best, latest or a given step), the best model's
tie-break, and a stop (SIGINT/SIGTERM) that arrives during an evaluation."""
import json
import random

import pytest
import torch
from click.testing import CliRunner

from bertmodel.training import checkpoint as ckpt
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


# -- a stop during an evaluation ---------------------------------------------------------

def eval_records(run):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if any(k.startswith("eval_") for k in r)]


def train_records(run):
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


@pytest.fixture(scope="module")
def straight(tiny_bert, pair_files, tmp_path_factory):
    """The uninterrupted run the stopped ones are compared with (3 evaluations of 3 batches)."""
    out = tmp_path_factory.mktemp("straight") / "run"
    result = invoke(*classify_args(tiny_bert, pair_files, out, "--eval-batch-size", "4"))
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("evaluation", [1, 3], ids=["mid-run", "at-the-last-step"])
def test_sigint_during_an_evaluation_stops_it_saves_and_the_rerun_evaluates_that_step(
        tiny_bert, pair_files, straight, tmp_path, evaluation):
    import signal

    from reliability_checks import default_sigint, start_paused

    out, resume_flag = tmp_path / "run", tmp_path / "resume"
    step = 2 * evaluation
    args = classify_args(tiny_bert, pair_files, out, "--eval-batch-size", "4")[:]
    # Paused while collating the 2nd of the 3 validation batches of that evaluation.
    proc = start_paused("bertmodel.tasks.classification:_no_labels", "model", list(args), tmp_path / "paused",
                        after=3 * (evaluation - 1) + 1, resume=resume_flag, preexec_fn=default_sigint)
    try:
        proc.send_signal(signal.SIGINT)
        resume_flag.touch()
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGINT, output
    saved = out / "checkpoints" / f"step-{step}"
    assert f"evaluation of step {step} abandoned after 2 of 3 batches on SIGINT" in output
    assert (f"stopped at step {step} on SIGINT; saved {saved}; rerun the same command to resume "
            f"(it evaluates step {step} first)") in output
    assert f"{out}: step {step}" in output.splitlines()[-1]  # the step reached
    assert ckpt.load_checkpoint(saved)["eval_pending"] is True
    assert [r["step"] for r in eval_records(out)] == [2, 4][:evaluation - 1]  # nothing of the abandoned one

    rerun = invoke(*classify_args(tiny_bert, pair_files, out, "--eval-batch-size", "4"))
    assert rerun.exit_code == 0, rerun.output
    assert f"evaluating step {step} first: the run stopped during that evaluation" in rerun.output
    assert eval_records(out) == eval_records(straight)
    assert ckpt.read_best(out) == ckpt.read_best(straight)
    final = ckpt.load_checkpoint(out / "checkpoints" / "step-6")
    assert final["eval_pending"] is False
    expected = ckpt.load_checkpoint(straight / "checkpoints" / "step-6")["model"]
    assert all(torch.equal(final["model"][k], v) for k, v in expected.items())
    assert steps_kept(out) == steps_kept(straight)


def test_evaluation_shows_progress_and_its_time_stays_out_of_the_training_rate(tiny_bert, pair_files, tmp_path):
    import time

    from bertmodel.tasks.classification import ClassificationTask

    original, pause = ClassificationTask.evaluate, 2.0

    def slow(self, *args, **kwargs):
        time.sleep(pause)
        return original(self, *args, **kwargs)

    out = tmp_path / "run"
    args = [a for a in classify_args(tiny_bert, pair_files, out, "--eval-batch-size", "4", "--eval-every", "1",
                                     steps=3) if a != "--no-progress"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ClassificationTask, "evaluate", slow)
        result = invoke(*args)
    assert result.exit_code == 0, result.output
    # Not a terminal: the evaluation's bar is plain lines, its last one kept.
    lines = result.stderr.splitlines()
    assert sum(line.startswith("eval: 0/3 [") for line in lines) == 3, result.stderr
    assert sum(line.startswith("eval: 3/3 [") for line in lines) == 3, result.stderr
    # Each line logged covers one step (4 samples); had an evaluation been counted, the
    # intervals after the first would each have lasted more than its 2 s.
    seconds = [4 / r["samples_per_s"] for r in train_records(out)]
    assert len(seconds) == 3 and max(seconds) < pause, seconds


def test_the_progress_bar_clock_pauses_for_an_evaluation():
    from types import SimpleNamespace

    from bertmodel.training.loop import Interval, Trainer
    from bertprep.progress import progress_bar

    bar = progress_bar(total=10, unit="step")
    bar.update(2)
    before = dict(bar.format_dict)
    holder = SimpleNamespace(interval=Interval(), bar=bar)
    start = holder.interval.start
    Trainer._pause_clocks(holder, 100.0)
    assert holder.interval.start == start + 100.0
    assert bar.format_dict["elapsed"] < before["elapsed"] - 99  # the 100 s are not training time
    bar.close()


# -- the summary line and the first line logged after a resume ---------------------------

def test_the_summary_names_the_step_reached_not_the_last_logged(tiny_bert, pair_files, tmp_path):
    out = tmp_path / "run"
    first = invoke(*classify_args(tiny_bert, pair_files, out, "--stop-at", "3", "--log-every", "2", steps=8))
    assert first.exit_code == 0, first.output
    last = first.output.splitlines()[-1]
    assert last.startswith(f"{out}: step 3, loss ") and "(figures of step 2)" in last, last
    assert last.endswith(f"; checkpoint {out / 'checkpoints' / 'step-3'}")
    # Resumed and stopped again before anything was logged.
    second = invoke(*classify_args(tiny_bert, pair_files, out, "--stop-at", "5", "--log-every", "10",
                                   "--eval-every", "10", steps=8))
    assert second.exit_code == 0, second.output
    assert second.output.splitlines()[-1] == f"{out}: step 5; checkpoint {out / 'checkpoints' / 'step-5'}"


def test_the_first_line_logged_after_a_resume_covers_the_whole_interval(tiny_bert, pair_files, tmp_path):
    lines = {}
    for name, stops in (("straight", ()), ("resumed", ("3", "7"))):
        out = tmp_path / name
        for stop in (*stops, None):
            extra = ("--stop-at", stop) if stop else ()
            result = invoke(*classify_args(tiny_bert, pair_files, out, "--log-every", "4", *extra, steps=8))
            assert result.exit_code == 0, result.output
        lines[name] = train_records(out)
    assert [r["step"] for r in lines["resumed"]] == [r["step"] for r in lines["straight"]] == [4, 8]
    for a, b in zip(lines["straight"], lines["resumed"]):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-12) and b["accuracy"] == a["accuracy"]
