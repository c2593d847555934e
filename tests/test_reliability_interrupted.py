"""Reliability: interrupted and repeated runs, and full disks.

A killed build-shards, rerun with the same command, ends with the same bytes and no
temporary files; a second build into the same OUT at once is refused; a full disk gives
one line, no manifest and leaves the previous result as it was; a killed or stopped
pretrain resumes from its last complete checkpoint and never loads a half-written one.

Kill points are exact: the process runs with one function wrapped in a pause
(reliability_checks.PAUSE_AT) and gets SIGKILL there. tests/test_build_shards.py::
test_killed_run_resumes_to_the_same_bytes already kills after the first pairs-, scatter-
and shard- markers; here are the points it misses. tests/test_train.py covers SIGTERM's
save-and-exit and hand-made half-written checkpoints; here are real kills and resumes.
"""
from __future__ import annotations

import errno
import json
import shutil

import pytest
import torch

from bertmodel.training import checkpoint as ckpt
from bertmodel.cli import main as model_main
from bertmodel.training.run_dir import write_run_record
from bertmodel.data.synthetic import small_shard_dir
from bertprep.builder import staging_path
from bertprep.cli import main as prep_main
from reliability_checks import (PREP, finished_markers, invoke, kill_at, markers_written, one_line_error, start_paused,
                                temporaries, tiny_disk)
from shard_fixtures import check_shard_dir, shard_bytes, write_corpus, write_vocab

# ---------------------------------------------------------------- build-shards


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """The inputs, the command's options and an uninterrupted build to compare with."""
    base = tmp_path_factory.mktemp("build")
    corpus = write_corpus(base / "corpus.txt", documents=300, seed=4)
    vocab = write_vocab(base / "vocab.txt")
    options = [corpus, "--tokenizer", vocab, "--partition-size", "8KB", "--num-shards", 3, "--dupe-factor", 2,
               "--workers", 1, "--quiet"]
    straight = base / "straight"
    result = invoke(prep_main, "build-shards", *options, "--out", straight, "--cache-dir", base / "cache")
    assert result.exit_code == 0, result.output
    return {"options": options, "straight": shard_bytes(straight), "base": base}


KILL_POINTS = {
    # partition 0 tokenized, its cache file not written, no marker yet
    "tokenizing": ("bertprep.builder.partitions:TokenCache.save", 0),
    # the second shard written to its temporary name, not yet renamed
    "shard-temporary": ("bertprep.shards.writer:sha256_file", 1),
    # manifest.json written in OUT.partial, not yet renamed to OUT
    "manifest-before-publish": ("bertprep.builder.run:_publish", 0),
}


# Tasks finished at each point: (pairs, scatter, shards) of 24 partitions (8 KB of the
# file each) and 3 shards.
# The work directory goes once the manifest is written: then nothing is left to redo.
FINISHED_AT = {"tokenizing": (0, 0, 0), "shard-temporary": (24, 24, 1), "manifest-before-publish": (0, 0, 0)}
TASKS = 24 + 24 + 3  # pairs and scatter per partition, one per shard


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_build_killed_at_a_point_resumes_to_the_same_bytes(build, tmp_path, point, monkeypatch):
    target, after = KILL_POINTS[point]
    out = tmp_path / "out"
    args = ["build-shards", *build["options"], "--out", out, "--cache-dir", tmp_path / "cache"]
    kill_at(target, "prep", args, tmp_path / "paused", after)
    assert not out.exists() and staging_path(out).is_dir()
    finished = finished_markers(out)
    kinds = ("pairs-", "scatter-", "shard-")
    assert tuple(sum(m.startswith(k) for m in finished) for k in kinds) == FINISHED_AT[point]
    with markers_written(monkeypatch) as rerun:
        result = invoke(prep_main, *args)
    assert result.exit_code == 0, result.output
    # The rerun did only the unfinished tasks: finished ones were reused, not redone.
    redo = 0 if point == "manifest-before-publish" else TASKS - len(finished)
    assert not set(rerun) & finished and len(rerun) == len(set(rerun)) == redo
    assert shard_bytes(out) == build["straight"]
    assert temporaries(tmp_path) == []


def test_overwrite_killed_before_publish_keeps_the_previous_result(build, tmp_path):
    out = tmp_path / "out"
    args = ["build-shards", *build["options"], "--cache-dir", tmp_path / "cache", "--out", out]
    assert invoke(prep_main, *args, "--seed", 1).exit_code == 0
    previous = shard_bytes(out)
    kill_at("bertprep.builder.run:_publish", "prep", [*args, "--overwrite"], tmp_path / "paused")
    assert shard_bytes(out) == previous  # whole, and still the old one
    assert (staging_path(out) / "manifest.json").exists()  # the new one, complete but unpublished
    result = invoke(prep_main, *args, "--overwrite")
    assert result.exit_code == 0, result.output
    assert shard_bytes(out) == build["straight"]
    assert temporaries(tmp_path) == []


def test_a_second_concurrent_build_is_refused(build, tmp_path):
    """Two real processes: the first holds OUT.partial's lock, paused in the middle of
    its shards; the second refuses in one line and touches nothing; the first then
    finishes with the uninterrupted bytes."""
    out = tmp_path / "out"
    args = ["build-shards", *build["options"], "--out", out, "--cache-dir", tmp_path / "cache"]
    resume = tmp_path / "resume"
    first = start_paused("bertprep.shards.writer:sha256_file", "prep", args, tmp_path / "paused", resume=resume)
    try:
        import subprocess

        second = subprocess.run([*PREP, *map(str, args)], capture_output=True, text=True, timeout=120)
        assert second.returncode == 1 and second.stdout == ""
        assert second.stderr == (f"Error: {staging_path(out)}: another build-shards run (pid {first.pid}) is "
                                 "writing here; wait for it to finish\n")
        resume.touch()
        output, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, output
    assert shard_bytes(out) == build["straight"]
    assert temporaries(tmp_path) == []


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_build_disk_full_on_a_tiny_disk(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents=80)
    vocab = write_vocab(tmp_path / "vocab.txt")
    with tiny_disk(tmp_path / "disk", "1m") as disk:
        out = disk / "out"
        args = ["build-shards", corpus, "--tokenizer", vocab, "--out", out, "--workers", 1, "--quiet",
                "--cache-dir", tmp_path / "cache"]
        result = invoke(prep_main, *args, "--dupe-factor", 1)
        assert result.exit_code == 0, result.output
        previous = shard_bytes(out)
        result = invoke(prep_main, *args, "--dupe-factor", 20, "--overwrite")
        assert one_line_error(result, exit_code=1) == (
            f"{staging_path(out)}: disk full while writing (No space left on device); free space and run the "
            "same command again to resume")
        assert shard_bytes(out) == previous
        assert not (staging_path(out) / "manifest.json").exists()
        check_shard_dir(out)


def test_build_disk_full_patched(tmp_path, monkeypatch):
    """Where no tmpfs can be mounted; tests/test_build_shards.py::
    test_existing_output_needs_overwrite_and_survives_a_failed_rebuild has the library
    side, this the CLI's line."""
    corpus = write_corpus(tmp_path / "corpus.txt", documents=40)
    vocab = write_vocab(tmp_path / "vocab.txt")
    monkeypatch.setattr("bertprep.shards.writer.atomic_output", _disk_full)
    out = tmp_path / "out"
    result = invoke(prep_main, "build-shards", corpus, "--tokenizer", vocab, "--out", out, "--workers", 1,
                    "--quiet", "--cache-dir", tmp_path / "cache")
    assert one_line_error(result, exit_code=1) == (
        f"{staging_path(out)}: disk full while writing (No space left on device); free space and run the same "
        "command again to resume")
    assert not out.exists() and not (staging_path(out) / "manifest.json").exists()


# ---------------------------------------------------------------- train-tokenizer


def _tokenizer_disk_full_message(out):
    return (f"{out.parent}: disk full while training the tokenizer (No space left on device); "
            f"{out} is unchanged")


def test_train_tokenizer_disk_full_on_a_tiny_disk(tmp_path):
    small = write_corpus(tmp_path / "small.txt", documents=40)
    large = write_corpus(tmp_path / "large.txt", documents=3000, seed=1)  # about 2 MB
    with tiny_disk(tmp_path / "disk", "600k") as disk:
        tok = disk / "tok"
        result = invoke(prep_main, "train-tokenizer", small, "--out", tok, "--vocab-size", 80, "--quiet")
        assert result.exit_code == 0, result.output
        previous = {p.name: p.read_bytes() for p in tok.iterdir()}
        result = invoke(prep_main, "train-tokenizer", large, "--out", tok, "--vocab-size", 80, "--quiet",
                        "--overwrite")
        assert one_line_error(result, exit_code=1) == _tokenizer_disk_full_message(tok)
        assert {p.name: p.read_bytes() for p in tok.iterdir()} == previous
        assert sorted(p.name for p in disk.iterdir()) == ["tok"]  # no work directory left


def test_train_tokenizer_disk_full_patched(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.txt", documents=40)
    tok = tmp_path / "tok"
    assert invoke(prep_main, "train-tokenizer", corpus, "--out", tok, "--vocab-size", 80, "--quiet").exit_code == 0
    previous = {p.name: p.read_bytes() for p in tok.iterdir()}
    monkeypatch.setattr("bertprep.tokenizer.files.write_bytes_atomic", _disk_full)  # saving the new TOKDIR
    result = invoke(prep_main, "train-tokenizer", corpus, "--out", tok, "--vocab-size", 90, "--quiet", "--overwrite")
    assert one_line_error(result, exit_code=1) == _tokenizer_disk_full_message(tok)
    assert {p.name: p.read_bytes() for p in tok.iterdir()} == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "tok"]


# ---------------------------------------------------------------- pretrain


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("pretrain") / "shards", rows=64, num_shards=1)


def pretrain_args(shards, run, max_steps=4):
    return ["pretrain", "--data", shards, "--out", run, "--preset", "tiny", "--batch-size", 2, "--lr", "1e-3",
            "--warmup-steps", 1, "--max-steps", max_steps, "--save-every", 2, "--log-every", 1, "--seed", 3,
            "--no-progress"]


@pytest.fixture(scope="module")
def straight(shards, tmp_path_factory):
    run = tmp_path_factory.mktemp("straight") / "run"
    result = invoke(model_main, *pretrain_args(shards, run))
    assert result.exit_code == 0, result.output
    return ckpt.load_checkpoint(ckpt.latest_checkpoint(run))


def assert_same_as_straight(run, straight):
    final = ckpt.load_checkpoint(ckpt.latest_checkpoint(run))
    assert final["step"] == straight["step"] == 4 and final["data"] == straight["data"]
    for key, tensor in straight["model"].items():
        assert torch.equal(final["model"][key], tensor), key
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]  # reads as one run
    assert not list((run / "checkpoints").glob(".tmp-*")) and not temporaries(run)


def resume(shards, run):
    result = invoke(model_main, *pretrain_args(shards, run))
    assert result.exit_code == 0, result.output
    return result


def test_pretrain_killed_mid_step_resumes_from_the_last_checkpoint(shards, straight, tmp_path):
    run = tmp_path / "run"
    # The 3rd gradient clip: step 3's backward is done, its optimizer step is not.
    kill_at("bertmodel.training.loop:clip_and_step", "model", pretrain_args(shards, run), tmp_path / "paused", after=2)
    assert [s for s, _ in ckpt.list_checkpoints(run)] == [2]
    result = resume(shards, run)
    assert f"resuming from {run / 'checkpoints' / 'step-2'} (step 2, sample 4)" in result.output
    assert_same_as_straight(run, straight)


def test_pretrain_killed_while_writing_a_checkpoint(shards, straight, tmp_path):
    run = tmp_path / "run"
    # The 2nd checkpoint (step 4, the last): state.pt written in .tmp-step-4-PID, meta.json not yet.
    kill_at("bertmodel.training.checkpoint:_fsync", "model", pretrain_args(shards, run), tmp_path / "paused", after=1)
    assert len(list((run / "checkpoints").glob(".tmp-step-4-*/state.pt"))) == 1
    assert [s for s, _ in ckpt.list_checkpoints(run)] == [2]  # the half-written one is not a checkpoint
    result = resume(shards, run)
    assert f"resuming from {run / 'checkpoints' / 'step-2'} (step 2, sample 4)" in result.output
    assert_same_as_straight(run, straight)


def test_pretrain_sigterm_saves_then_resumes(shards, straight, tmp_path):
    """SIGTERM arrives in the middle of step 3: the step finishes, step-3 is saved, the
    process exits 0, and the rerun continues from step 3 to the same weights."""
    import signal

    run = tmp_path / "run"
    resume_flag = tmp_path / "resume"
    proc = start_paused("bertmodel.training.loop:clip_and_step", "model", pretrain_args(shards, run), tmp_path / "paused",
                        after=2, resume=resume_flag)
    try:
        proc.send_signal(signal.SIGTERM)
        resume_flag.touch()
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # 128 + SIGTERM: schedulers must not read a stopped run as finished; the line names
    # the checkpoint actually written.
    assert proc.returncode == 128 + signal.SIGTERM, output
    step3 = run / "checkpoints" / "step-3"
    assert f"stopped at step 3 on SIGTERM; saved {step3}; rerun the same command to resume" in output
    assert [s for s, _ in ckpt.list_checkpoints(run)] == [2, 3]
    result = resume(shards, run)
    assert f"resuming from {run / 'checkpoints' / 'step-3'} (step 3, sample 6)" in result.output
    assert_same_as_straight(run, straight)


def _checkpoint_disk_full_message(run):
    return (f"{run / 'checkpoints'}: disk full while saving step-4; {run / 'checkpoints' / 'step-2'} is the latest "
            "complete checkpoint; free space and rerun the same command to resume")


def test_pretrain_disk_full_on_a_tiny_disk(shards, straight, tmp_path):
    """A step-2 checkpoint and RUN/hf fit (about 8 MB), step-4's state does not: one
    line, step-2 and hf/ intact, no half checkpoint; with space again the rerun resumes."""
    with tiny_disk(tmp_path / "disk", "11m") as disk:
        run = disk / "run"
        result = invoke(model_main, *pretrain_args(shards, run))
        assert one_line_error(result, exit_code=1) == _checkpoint_disk_full_message(run)
        assert [s for s, _ in ckpt.list_checkpoints(run)] == [2]
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"]
        assert ckpt.load_checkpoint(run / "checkpoints" / "step-2")["step"] == 2
        assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "hf", "metrics.jsonl", "run.json"]
        assert json.loads((run / "hf" / "config.json").read_text())["vocab_size"] == 255
        import subprocess

        subprocess.run(["mount", "-o", "remount,size=40m", str(disk)], check=True)
        resume(shards, run)
        assert_same_as_straight(run, straight)


def test_pretrain_disk_full_patched(shards, tmp_path, monkeypatch):
    saves = []
    real_save = torch.save

    def save(obj, path, *args, **kwargs):
        saves.append(path)
        if len(saves) == 2:  # step 4: half a file, then the error torch gives on a full disk
            with open(path, "wb") as f:
                f.write(b"\0" * 1000)
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1000 vs 998")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(ckpt.torch, "save", save)
    monkeypatch.setattr(ckpt.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 0))
    run = tmp_path / "run"
    result = invoke(model_main, *pretrain_args(shards, run))
    assert one_line_error(result, exit_code=1) == _checkpoint_disk_full_message(run)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"]


def test_metrics_of_a_killed_run_are_cleaned_on_restart(shards, tmp_path):
    """A run killed before its first checkpoint leaves metrics.jsonl behind, perhaps with
    half a JSON line at the end (killed mid-write, or a full disk). The rerun starts at
    step 0: those records go, and the torn line does not stop it."""
    run = tmp_path / "run"
    run.mkdir()
    write_run_record(run, "pretraining", "BertForPreTraining")  # what a run writes before its first step
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 9.9}\n{"step": 2, "lo')
    result = invoke(model_main, *pretrain_args(shards, run, max_steps=2))
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and records[0]["loss"] != 9.9
