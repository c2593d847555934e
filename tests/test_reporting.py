"""Reporters: TensorBoard event files read back with TensorBoard's own reader (also after a
kill and a resume), W&B offline runs read back from their .wandb file, scalar names, and
the one-line message when an extra is missing."""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bertmodel.errors import BertmodelError
from bertmodel.training.metrics import MetricsWriter
from bertmodel.training.reporting import event_files, open_reporters, scalar_name, scalars

ROOT = Path(__file__).resolve().parents[1]


def train_record(step: int, loss: float) -> dict:
    return {"step": step, "loss": loss, "mlm_acc": loss / 2000, "lr": 1e-3 * step, "grad_norm": 2.0,
            "samples_per_s": 100.0, "tokens_per_s": 6400.0, "skipped_steps": 0}


def read_scalars(directory: Path, purge: bool = True) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory), size_guidance={"scalars": 0}, purge_orphaned_data=purge)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_scalar_names_group_metrics():
    assert [scalar_name(k) for k in ("loss", "mlm_acc", "eval_mlm_acc", "eval_f1", "lr", "grad_norm",
                                     "samples_per_s", "tokens_per_s", "mfu", "eval_exact_match")] == [
        "train/loss", "train/mlm_acc", "eval/mlm_acc", "eval/f1", "optim/lr", "optim/grad_norm",
        "speed/samples_per_s", "speed/tokens_per_s", "speed/mfu", "eval/exact_match"]
    assert scalars({"step": 3, "loss": 1, "ok": True, "note": "x", "mfu": None}) == {"train/loss": 1.0}


def test_tensorboard_events_hold_the_logged_values_at_their_steps(tmp_path):
    pytest.importorskip("tensorboard")
    with open_reporters(["tensorboard"], tmp_path, {}, resume_step=0) as reporters:
        for step in range(1, 11):
            reporters.log(train_record(step, 10.0 / step))
        reporters.log({"step": 10, "eval_mlm_acc": 0.25, "eval_f1": 0.5})
    got = read_scalars(tmp_path / "tensorboard")
    assert set(got) == {"train/loss", "train/mlm_acc", "optim/lr", "optim/grad_norm", "speed/samples_per_s",
                        "speed/tokens_per_s", "optim/skipped_steps", "eval/mlm_acc", "eval/f1"}
    assert [s for s, _ in got["train/loss"]] == list(range(1, 11))
    assert [v for _, v in got["train/loss"]] == pytest.approx([10.0 / s for s in range(1, 11)])
    assert got["eval/f1"] == [(10, 0.5)] and got["eval/mlm_acc"] == [(10, 0.25)]


KILLED_RUN = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from bertmodel.training.metrics import MetricsWriter
    from bertmodel.training.reporting import open_reporters
    run = Path(sys.argv[1])
    writer = MetricsWriter(run / "metrics.jsonl", resume_step=0,
                           reporters=open_reporters(["tensorboard"], run, {}, resume_step=0))
    for step in range(1, 31):
        writer.write({"step": step, "loss": float(step), "lr": 0.5})
        if step % 10 == 0:
            writer.write({"step": step, "eval_mlm_acc": step / 100})
    os.kill(os.getpid(), signal.SIGKILL)  # no close(): as a killed trainer leaves it
""")


def test_tensorboard_resume_after_a_kill_keeps_each_step_once_with_the_last_value(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    run.mkdir()
    killed = subprocess.run([sys.executable, "-c", KILLED_RUN, str(run)], cwd=ROOT, capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    [first] = event_files(run / "tensorboard")
    with open(first, "ab") as f:  # a record torn by the kill: a length header and half a payload
        f.write(struct.pack("<Q", 200) + b"\0" * 4 + b"torn")
    # The trainer resumes from its checkpoint at step 20 and logs 21..40 with new values.
    writer = MetricsWriter(run / "metrics.jsonl", resume_step=20,
                           reporters=open_reporters(["tensorboard"], run, {}, resume_step=20))
    for step in range(21, 41):
        writer.write({"step": step, "loss": 1000.0 + step, "lr": 0.25})
        if step % 10 == 0:
            writer.write({"step": step, "eval_mlm_acc": 0.5 + step / 100})
    writer.close()

    expected_loss = [(s, float(s)) for s in range(1, 21)] + [(s, 1000.0 + s) for s in range(21, 41)]
    expected_eval = [(10, 0.1), (20, 0.2), (30, 0.8), (40, 0.9)]
    assert len(event_files(run / "tensorboard")) == 1
    # Read as TensorBoard does, and with its restart purging off: the file itself holds
    # each step once, in order, so no reader depends on purging.
    for purge in (True, False):
        got = read_scalars(run / "tensorboard", purge=purge)
        assert [(s, v) for s, v in got["train/loss"]] == expected_loss
        assert got["eval/mlm_acc"] == [(s, pytest.approx(v)) for s, v in expected_eval]
        assert [v for _, v in got["optim/lr"]] == [0.5] * 20 + [0.25] * 20
    # ...and it agrees with metrics.jsonl.
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in records if "loss" in r] == expected_loss


def test_fresh_start_after_a_kill_before_the_first_checkpoint_drops_everything(tmp_path):
    pytest.importorskip("tensorboard")
    with open_reporters(["tensorboard"], tmp_path, {}, resume_step=0) as reporters:
        for step in range(1, 6):
            reporters.log({"step": step, "loss": 5.0})
    with open_reporters(["tensorboard"], tmp_path, {}, resume_step=0) as reporters:
        reporters.log({"step": 1, "loss": 7.0})
    assert read_scalars(tmp_path / "tensorboard", purge=False)["train/loss"] == [(1, 7.0)]


# --- W&B ---------------------------------------------------------------------------------

def wandb_records(path: Path):
    """The protobuf records of an offline run's .wandb file (LevelDB log framing: 32 KiB
    blocks of records with a 7-byte header: crc32, length, type full/first/middle/last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending, block, header = 7, b"", 32 * 1024, 7
    while pos + header <= len(data):
        if block - pos % block < header:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + header])
        if pos + header + length > len(data):  # still being written
            break
        chunk, pos = data[pos + header:pos + header + length], pos + header + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def finished_records(run_file: Path, timeout: float = 30.0) -> list:
    """W&B's service process writes the file after run.finish() returns (it is flushed for
    sure when the process exits): wait for the closing "exit" record."""
    deadline = time.monotonic() + timeout
    while True:
        records = list(wandb_records(run_file))
        if (records and records[-1].WhichOneof("record_type") == "exit") or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def wandb_history(run_file: Path) -> tuple[dict, dict[str, list[tuple[int, float]]]]:
    config, history = {}, {}
    for record in finished_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            config.update({i.key: json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "history":
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)  # "train/loss" comes as a nested key
                if not key.startswith("_"):
                    history.setdefault(key, []).append((record.history.step.num, json.loads(item.value_json)))
    return config, history


def test_wandb_offline_run_holds_the_config_and_the_metrics(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = {"preset": "tiny", "lr": 0.001, "data": [str(tmp_path / "shards")], "out": tmp_path / "run"}
    run = tmp_path / "run"
    for session, steps in enumerate((range(1, 6), range(6, 9))):
        # W&B names an offline run's folder by the second it started: a second session
        # within the same second would share the first one's folder.
        time.sleep(1.05 - time.time() % 1 if session else 0)
        with open_reporters(["wandb"], run, config, resume_step=steps[0] - 1) as reporters:
            for step in steps:
                reporters.log({"step": step, "loss": 10.0 - step, "lr": 0.001})
            reporters.log({"step": steps[-1], "eval_accuracy": 0.5 + session / 10})
    run_id = (run / "wandb" / "run-id").read_text().strip()
    offline = sorted((run / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(offline) == 2  # one per session, both the same W&B run (synced together)
    saved, history = wandb_history(offline[0])
    assert {k: saved[k] for k in ("preset", "lr", "data", "out")} == {
        "preset": "tiny", "lr": 0.001, "data": [str(tmp_path / "shards")], "out": str(tmp_path / "run")}
    assert history["train/loss"] == [(s, 10.0 - s) for s in range(1, 6)]
    assert history["eval/accuracy"] == [(5, 0.5)]
    _, resumed = wandb_history(offline[1])
    assert resumed["train/loss"] == [(s, 10.0 - s) for s in range(6, 9)]
    assert resumed["eval/accuracy"] == [(8, 0.6)]


# --- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tensorboard", "wandb"])
def test_a_missing_extra_is_one_line_naming_it(tmp_path, monkeypatch, name):
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")] or [name]:
        monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(BertmodelError) as info:
        open_reporters([name], tmp_path, {}, resume_step=0)
    assert str(info.value) == f'--report-to {name} needs the {name} package: pip install "bertprep[{name}]"'


def test_unknown_or_contradictory_names_are_refused(tmp_path):
    with pytest.raises(BertmodelError, match="--report-to mlflow: unknown; choose from none, tensorboard, wandb"):
        open_reporters(["mlflow"], tmp_path, {}, resume_step=0)
    with pytest.raises(BertmodelError, match="cannot be combined"):
        open_reporters(["none", "tensorboard"], tmp_path, {}, resume_step=0)
    assert open_reporters(["none"], tmp_path, {}, resume_step=0).reporters == []
    assert not os.listdir(tmp_path)


# --- through the trainer -----------------------------------------------------------------

@pytest.mark.slow
def test_pretrain_report_to_tensorboard_matches_metrics_jsonl_across_a_resume(tmp_path):
    pytest.importorskip("tensorboard")
    from click.testing import CliRunner

    from bertmodel.cli import main
    from bertmodel.data.synthetic import small_shard_dir

    shards = small_shard_dir(tmp_path / "shards", rows=48)
    command = ["pretrain", "--data", shards, "--eval-data", shards, "--out", tmp_path / "run", "--preset", "tiny",
               "--batch-size", 4, "--max-steps", 8, "--lr", "1e-3", "--warmup-steps", 2, "--log-every", 1,
               "--save-every", 4, "--eval-every", 4, "--eval-batches", 1, "--device", "cpu", "--no-progress",
               "--report-to", "tensorboard"]
    for extra in (["--stop-at", 4], []):  # stop at the step-4 checkpoint, then resume to 8
        result = CliRunner().invoke(main, [str(a) for a in command + extra], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    got = read_scalars(tmp_path / "run" / "tensorboard", purge=False)
    for key, tag in (("loss", "train/loss"), ("lr", "optim/lr"), ("eval_mlm_acc", "eval/mlm_acc")):
        logged = [(r["step"], r[key]) for r in records if key in r]
        assert [s for s, _ in got[tag]] == [s for s, _ in logged], tag
        assert [v for _, v in got[tag]] == pytest.approx([v for _, v in logged], rel=1e-6), tag
    assert [s for s, _ in got["train/loss"]] == list(range(1, 9))
