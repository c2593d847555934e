"""The pretrain loop on CPU: outputs, exact resume, SIGTERM, half-written checkpoints,
non-finite steps, --init-from checks, and the CLI's help and errors."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from click.testing import CliRunner

from bertmodel.training import checkpoint as ckpt
from bertmodel.cli import main
from bertmodel.model.config import BertConfig
from bertmodel.errors import BertmodelError
from bertmodel.hf import export_hf
from bertmodel.model import BertForPreTraining
from bertmodel.data.shards import tokenizer_info
from bertmodel.data.synthetic import small_shard_dir, write_small_vocab
from bertmodel.train import TrainConfig, train

METRIC_KEYS = {"step", "loss", "mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc", "lr", "grad_norm", "samples_per_s",
               "tokens_per_s", "skipped_steps"}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("train") / "small", rows=96)


def config(shards, out, **kw) -> TrainConfig:
    base = dict(data=[str(shards)], out=str(out), preset="tiny", batch_size=4, max_steps=6, lr=1e-3,
                warmup_steps=2, log_every=1, save_every=100, progress=False, seed=5)
    base.update(kw)
    return TrainConfig(**base)


def run_cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_pretrain_writes_checkpoints_hf_and_metrics(shards, tmp_path):
    result = run_cli("pretrain", "--data", shards, "--out", tmp_path / "run", "--preset", "tiny", "--batch-size", 4,
                     "--max-steps", 4, "--save-every", 2, "--keep-last", 1, "--log-every", 2, "--lr", "1e-3",
                     "--eval-data", shards, "--eval-batches", 2, "--no-progress")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].startswith(f"{tmp_path / 'run'}: step 4, loss ")
    steps = [s for s, _ in ckpt.list_checkpoints(tmp_path / "run")]
    assert steps == [4]  # step-2 pruned by --keep-last 1
    hf = tmp_path / "run" / "hf"
    assert {p.name for p in hf.iterdir()} == {"config.json", "model.safetensors", "vocab.txt", "tokenizer.json",
                                              "tokenizer_config.json", "special_tokens_map.json",
                                              "bertmodel_task.json"}  # our task's settings, which transformers ignores
    assert json.loads((hf / "bertmodel_task.json").read_text())["architecture"] == "BertForPreTraining"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if "loss" in r]
    assert [r["step"] for r in train_records] == [2, 4]
    assert all(METRIC_KEYS <= set(r) for r in train_records)
    assert all(0 <= r["mlm_acc"] <= 1 and r["samples_per_s"] > 0 and r["tokens_per_s"] > 0 for r in train_records)
    assert "mfu" not in train_records[0]  # CPU: no peak to compare with
    evals = [r for r in records if "eval_mlm_acc" in r]
    assert [r["step"] for r in evals] == [4] and 0 <= evals[0]["eval_nsp_acc"] <= 1
    state = ckpt.load_checkpoint(tmp_path / "run" / "checkpoints" / "step-4")
    assert set(state) >= {"model", "optimizer", "scheduler", "rng", "data", "config", "step"}
    assert state["data"]["cursor"] == 16 and state["step"] == 4
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in state["model"])
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(hf)
    assert tok("w3 w4")["input_ids"] == [2, 8, 9, 3]
    _, info = transformers.BertForPreTraining.from_pretrained(hf, output_loading_info=True)
    assert not any(info.values())


def final_state(run):
    return ckpt.load_checkpoint(ckpt.latest_checkpoint(run))


@pytest.mark.parametrize("max_steps, stop_at", [(6, 3), (16, 13)], ids=["mid-epoch", "across-an-epoch"])
def test_resume_reproduces_the_uninterrupted_run_exactly(shards, tmp_path, max_steps, stop_at):
    # 8 samples a step over 96 rows: (16, 13) stops after the first epoch's end and
    # resumes inside the second, whose order is a new permutation.
    kw = dict(max_steps=max_steps, grad_accum=2)
    train(config(shards, tmp_path / "straight", **kw), log=lambda *a: None)
    train(config(shards, tmp_path / "resumed", stop_at=stop_at, **kw), log=lambda *a: None)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path / "resumed")] == [stop_at]
    train(config(shards, tmp_path / "resumed", **kw), log=lambda *a: None)
    a, b = final_state(tmp_path / "straight"), final_state(tmp_path / "resumed")
    assert a["step"] == b["step"] == max_steps and a["data"] == b["data"]
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k  # bitwise, dropout included
    for pa_, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert all(torch.equal(pa_[k], pb[k]) for k in pa_)
    assert torch.equal(a["rng"][0]["torch"], b["rng"][0]["torch"])
    # and the metrics file reads as one run
    steps = [json.loads(x)["step"] for x in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, max_steps + 1))


def test_half_written_checkpoints_are_never_loaded(shards, tmp_path):
    run = tmp_path / "run"
    train(config(shards, run, max_steps=2, save_every=2), log=lambda *a: None)
    good = run / "checkpoints" / "step-2"
    cut = run / "checkpoints" / "step-4"  # as if killed while writing state.pt
    cut.mkdir()
    (cut / "state.pt").write_bytes((good / "state.pt").read_bytes()[:1000])
    (cut / "meta.json").write_text(json.dumps({"step": 4, "state_bytes": (good / "state.pt").stat().st_size}))
    no_meta = run / "checkpoints" / "step-5"  # as if killed before meta.json
    no_meta.mkdir()
    (no_meta / "state.pt").write_bytes((good / "state.pt").read_bytes())
    tmp = run / "checkpoints" / ".tmp-step-6-1"
    tmp.mkdir()
    with pytest.warns(UserWarning, match="incomplete"):
        assert ckpt.latest_checkpoint(run) == good
    with pytest.raises(BertmodelError, match="not a complete checkpoint"):
        ckpt.load_checkpoint(cut)
    logs = []
    with pytest.warns(UserWarning):
        train(config(shards, run, max_steps=3, save_every=100, allow_changed_options=True), log=logs.append)
    assert any(line.startswith(f"resuming from {good} (step 2, sample 8)") for line in logs)
    assert "warning: resuming with changed options, as asked: --max-steps 2 -> 3" in logs
    with pytest.warns(UserWarning):
        assert final_state(run)["step"] == 3


def test_sigterm_saves_and_exits_cleanly(shards, tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-c", "from bertmodel.cli import main; main()", "pretrain", "--data", str(shards),
           "--out", str(run), "--preset", "tiny", "--batch-size", "4", "--max-steps", "100000", "--log-every", "1",
           "--save-every", "100000", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, output  # not success: the run did not finish
    (step, path), = ckpt.list_checkpoints(run)
    assert f"on SIGTERM; saved {path}; rerun the same command to resume" in output
    assert step >= 2 and (run / "hf" / "model.safetensors").exists()
    assert ckpt.load_checkpoint(path)["data"]["cursor"] == 4 * step


def test_non_finite_steps_are_skipped_then_stop(shards, tmp_path):
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=255))
    with torch.no_grad():
        model.bert.encoder.layer[0].output.dense.weight[0, 0] = float("nan")
    export_hf(model, tmp_path / "nan", tokenizer=tokenizer_info(shards))
    logs = []
    with pytest.raises(BertmodelError, match=r"^3 steps in a row with a non-finite loss or gradient \(up to step 3\)"):
        train(config(shards, tmp_path / "run", init_from=str(tmp_path / "nan"), max_bad_steps=3), log=logs.append)
    assert sum("step skipped" in line for line in logs) == 3


def test_init_from_refuses_another_tokenizer(shards, tmp_path):
    export_hf(BertForPreTraining(BertConfig.preset("tiny", vocab_size=300)), tmp_path / "v300")
    with pytest.raises(BertmodelError, match=r"vocab size 300 but the shards' tokenizer has 255"):
        train(config(shards, tmp_path / "a", init_from=str(tmp_path / "v300")))
    other = write_small_vocab(tmp_path / "other-vocab.txt", 250)
    other.write_text(other.read_text().replace("w10\n", "zebra\n"))
    export_hf(BertForPreTraining(BertConfig.preset("tiny", vocab_size=255)), tmp_path / "other",
              tokenizer=tokenizer_info(other))
    with pytest.raises(BertmodelError, match=r"its tokenizer is not the one .* was built with \(vocab.txt contents "
                                             r"differ\)"):
        train(config(shards, tmp_path / "b", init_from=str(tmp_path / "other")))


def test_init_from_continues_from_the_weights(shards, tmp_path):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=255, hidden_dropout_prob=0.0))
    export_hf(model, tmp_path / "start", tokenizer=tokenizer_info(shards))
    train(config(shards, tmp_path / "run", init_from=str(tmp_path / "start"), max_steps=1, lr=1e-9,
                 warmup_steps=0),
          log=lambda *a: None)
    state = final_state(tmp_path / "run")
    assert state["config"]["hidden_dropout_prob"] == 0.0
    w = state["model"]["bert.encoder.layer.0.attention.self.query.weight"]
    torch.testing.assert_close(w, model.bert.encoder.layer[0].attention.self.query.weight, rtol=0, atol=1e-6)


def test_sequences_longer_than_positions_are_rejected(shards, tmp_path):
    short = BertForPreTraining(BertConfig.preset("tiny", vocab_size=255, max_position_embeddings=32))
    export_hf(short, tmp_path / "short", tokenizer=tokenizer_info(shards))
    result = run_cli("pretrain", "--data", shards, "--out", tmp_path / "run", "--init-from", tmp_path / "short",
                     "--no-progress")
    assert result.exit_code == 1
    assert result.output == "Error: shards hold sequences of 64 tokens but the model has 32 positions\n"


def test_resume_refuses_another_model_size(shards, tmp_path):
    train(config(shards, tmp_path / "run", max_steps=1, warmup_steps=0), log=lambda *a: None)
    result = run_cli("pretrain", "--data", shards, "--out", tmp_path / "run", "--preset", "mini", "--no-progress")
    assert result.exit_code == 1
    assert result.output == (f"Error: {tmp_path / 'run'}: holds a bert model (2 layers, hidden 128), not one of 4 "
                             "layers, hidden 256; use another --out or the run's size options\n")
    result = run_cli("pretrain", "--data", shards, "--out", tmp_path / "run", "--preset", "tiny", "--intermediate",
                     256, "--no-progress")
    assert result.output == (f"Error: {tmp_path / 'run'}: holds a bert model (2 layers, hidden 128), not one with "
                             "intermediate_size 256 (the run's: 512); use another --out or the run's size options\n")


def test_resume_names_the_architecture_and_the_init_from_it_lacks(shards, tmp_path):
    """A ModernBERT run resumed as BERT of the same size, and a context extension (a run
    started with --init-from) resumed without it: each says what the run is."""
    mb = tmp_path / "mb"
    fast = ("--data", shards, "--batch-size", 4, "--no-progress", "--seed", 5)
    assert run_cli("pretrain", *fast, "--out", mb, "--architecture", "modernbert", "--preset", "tiny", "--layers", 4,
                   "--max-steps", 1).exit_code == 0
    for architecture in (("--architecture", "bert"), ()):  # bert given, or by default
        result = run_cli("pretrain", *fast, "--out", mb, *architecture, "--preset", "tiny", "--layers", 4,
                         "--max-steps", 2)
        assert result.exit_code == 1
        assert result.output == (f"Error: {mb}: holds a modernbert model (4 layers, hidden 128), not bert; use "
                                 "another --out, or resume with --architecture modernbert\n")
    extended = tmp_path / "extended"
    assert run_cli("pretrain", *fast, "--out", extended, "--init-from", mb, "--max-steps", 2, "--stop-at",
                   1).exit_code == 0
    for architecture in (("--architecture", "modernbert"), ()):
        result = run_cli("pretrain", *fast, "--out", extended, *architecture, "--max-steps", 2)
        assert result.exit_code == 1
        assert result.output == (f"Error: {extended}: a run started with --init-from {mb} (it holds a modernbert "
                                 "model, 4 layers, hidden 128); resume it with the same --init-from\n")
    resumed = run_cli("pretrain", *fast, "--out", extended, "--init-from", mb, "--max-steps", 2)
    assert resumed.exit_code == 0 and "resuming from" in resumed.output


def test_resume_refuses_another_seed(shards, tmp_path):
    train(config(shards, tmp_path / "run", max_steps=2, stop_at=1, warmup_steps=0), log=lambda *a: None)
    result = run_cli("pretrain", "--data", shards, "--out", tmp_path / "run", "--preset", "tiny", "--seed", "7",
                     "--max-steps", "2", "--no-progress")
    assert result.exit_code == 1
    assert "this run was started with --seed" in result.output and "not 7" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_lamb_and_poly_schedule_train(shards, tmp_path):
    last = train(config(shards, tmp_path / "run", optimizer="lamb", schedule="poly", max_steps=4, weight_decay=0.01),
                 log=lambda *a: None)
    assert last["step"] == 4 and last["loss"] == last["loss"] and last["lr"] == pytest.approx(1e-3 * 0.5 ** 0.5)


def test_fill_mask(shards, tmp_path):
    train(config(shards, tmp_path / "run", max_steps=2, save_every=2), log=lambda *a: None)
    for model_dir in (tmp_path / "run", tmp_path / "run" / "hf", tmp_path / "run" / "checkpoints" / "step-2"):
        result = run_cli("fill-mask", model_dir, "w1 w2 [MASK] w4 [MASK]", "--top-k", 3)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert [lines[0], lines[4]] == ["[MASK] 1:", "[MASK] 2:"] and len(lines) == 8
        probs = [float(line.split()[-1]) for line in lines[1:4]]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1
    result = run_cli("fill-mask", tmp_path / "run", "no mask here")
    assert result.exit_code == 1 and result.output == "Error: the text has no [MASK] to fill\n"
    # Several texts, the model loaded once: each text's guesses are those it gets alone.
    texts = ["w1 w2 [MASK] w4 [MASK]", "[MASK] w3"]
    alone = [run_cli("fill-mask", tmp_path / "run", t, "--top-k", 3).output for t in texts]
    together = run_cli("fill-mask", tmp_path / "run", *texts, "--top-k", 3)
    assert together.exit_code == 0 and together.output == "".join(f"{t}\n{o}" for t, o in zip(texts, alone))
    result = run_cli("fill-mask", tmp_path / "run", texts[0], "no mask here")
    assert result.exit_code == 1 and result.output == "Error: the text has no [MASK] to fill: 'no mask here'\n"


def test_every_command_has_help():
    runner = CliRunner()
    for name, command in main.commands.items():
        result = runner.invoke(main, [name, "-h"])
        assert result.exit_code == 0 and "Example:" in result.output, name
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                assert param.help, f"{name} --{param.name} has no help"
    assert runner.invoke(main, ["--help"]).exit_code == 0
    result = runner.invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("bertmodel, version ")


def test_user_errors_are_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("pretrain", "--data", empty, "--out", tmp_path / "run", "--no-progress")
    assert result.exit_code == 1
    assert result.output == (f"Error: {empty}/manifest.json is missing: {empty} is not a finished build-shards "
                             "output (manifest.json is written last)\n")


@pytest.mark.skipif(os.cpu_count() is None, reason="needs a CPU count")
def test_device_cuda_without_cuda_is_a_clear_error(shards, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = run_cli("pretrain", "--data", shards, "--out", tmp_path / "run", "--device", "cuda")
    assert result.exit_code == 1 and "no CUDA device is available" in result.output


def test_the_first_line_logged_after_a_resume_covers_the_whole_interval(shards, tmp_path):
    kw = dict(max_steps=8, log_every=4)
    train(config(shards, tmp_path / "straight", **kw), log=lambda *a: None)
    train(config(shards, tmp_path / "resumed", stop_at=3, **kw), log=lambda *a: None)  # inside the first interval
    train(config(shards, tmp_path / "resumed", **kw), log=lambda *a: None)

    def logged(run):
        return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    straight, resumed = logged(tmp_path / "straight"), logged(tmp_path / "resumed")
    assert [r["step"] for r in resumed] == [r["step"] for r in straight] == [4, 8]
    for a, b in zip(straight, resumed):
        for key in ("loss", "mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc"):
            assert b[key] == pytest.approx(a[key], rel=1e-12), key


def test_a_signal_during_held_out_evaluation_abandons_it_and_the_resume_does_it_first(shards, tmp_path, monkeypatch):
    import bertmodel.tasks.pretraining as pretraining

    original = pretraining.eval_batches

    def signalled(*args, **kwargs):  # SIGTERM arrives while the first batch is evaluated
        for n, batch in enumerate(original(*args, **kwargs)):
            if n == 0:
                os.kill(os.getpid(), signal.SIGTERM)
            yield batch
    run, kw = tmp_path / "run", dict(max_steps=4, eval_data=[str(shards)], eval_batches=3, eval_every=2)
    train(config(shards, tmp_path / "straight", **kw), log=lambda *a: None)
    logs = []
    with monkeypatch.context() as mp:
        mp.setattr(pretraining, "eval_batches", signalled)
        last = train(config(shards, run, **kw), log=logs.append)
    assert last["stopped_by"] == signal.SIGTERM and last["step"] == 2
    assert "evaluation of step 2 abandoned after 1 of 3 batches on SIGTERM" in logs
    step2 = run / "checkpoints" / "step-2"
    assert (f"stopped at step 2 on SIGTERM; saved {step2}; rerun the same command to resume "
            "(it evaluates step 2 first)") in logs
    assert ckpt.load_checkpoint(step2)["eval_pending"] is True
    logs.clear()
    train(config(shards, run, **kw), log=logs.append)
    assert "evaluating step 2 first: the run stopped during that evaluation" in logs

    def evals(r):
        return [json.loads(x) for x in (r / "metrics.jsonl").read_text().splitlines() if "eval_mlm_acc" in x]
    assert evals(run) == evals(tmp_path / "straight") and [r["step"] for r in evals(run)] == [2, 4]
    a, b = final_state(run)["model"], final_state(tmp_path / "straight")["model"]
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_a_signal_during_the_last_step_finds_the_run_finished(shards, tmp_path, monkeypatch):
    """Nothing is left for a rerun to do: no "stopped ... rerun to resume", no 128 + signal."""
    import bertmodel.training.loop as loop

    original, calls = loop.clip_and_step, []

    def signalled(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)
    monkeypatch.setattr(loop, "clip_and_step", signalled)
    logs = []
    last = train(config(shards, tmp_path / "run", max_steps=3), log=logs.append)
    assert last["step"] == 3 and not last.get("stopped_by")
    assert not [line for line in logs if line.startswith("stopped")]
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path / "run")] == [3]
