"""Two-process DDP on CPU (gloo) through torchrun: one writer, per-rank RNG states,
the global cursor, and a resume that reproduces the uninterrupted DDP run exactly."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from bertmodel.training import checkpoint as ckpt
from bertmodel.data.synthetic import small_shard_dir


def torchrun(*args):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "bertmodel.cli", "pretrain", *map(str, args)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


MODERN = ["--masking", "dynamic", "--mask-rate-schedule", "0.3:0.15@50%", "--batch-size-warmup", "4:3steps",
          "--optimizer", "stable-adamw", "--adam-betas", "0.9", "0.98", "--weight-decay", "1e-5"]


@pytest.mark.slow
@pytest.mark.parametrize("recipe, cursor", [([], 4 * 8), (MODERN, 4 + 4 + 8 + 8),
                                            (["--objective", "rtd", "--masking", "dynamic", "--mask-rate", "0.3"],
                                             4 * 8)],
                         ids=["static", "modern", "rtd-dynamic"])
def test_ddp_two_ranks_train_and_resume_exactly(tmp_path, recipe, cursor):
    # Dynamic masks are drawn per rank from (seed, epoch, batch position, rank): a
    # resumed DDP run must draw the very same ones. "modern": ModernBERT's recipe, a
    # resume mid batch-size warmup (the global batch 4, 4, 8, then 8 = 2 x 2 x 2 ranks;
    # 4 is one sample a micro-batch a rank) and before the mask-rate change, with
    # StableAdamW stepping every rank's all-reduced gradients alike. "rtd-dynamic": ELECTRA's
    # generator and discriminator (one DDP module, the shared tables once), each rank's Gumbel
    # draws from its own stream, on dynamic masks at a fixed rate (0.3, not the shards' 0.15):
    # one run for what two recipes (RTD on the shards' masks, MLM on dynamic ones) checked,
    # three torchrun starts fewer.
    shards = small_shard_dir(tmp_path / "small", rows=96)
    common = ["--data", shards, "--preset", "tiny", "--batch-size", 2, "--grad-accum", 2, "--max-steps", 4,
              "--log-every", 1, "--lr", "1e-3", "--warmup-steps", 1, "--save-every", 100, "--no-progress", *recipe]
    done = torchrun(*common, "--out", tmp_path / "straight")
    assert done.stdout.count("model: ") == 1  # only rank 0 logs
    assert done.stdout.count(f"{tmp_path / 'straight'}: step 4") == 1  # and prints the summary, once
    torchrun(*common, "--out", tmp_path / "resumed", "--stop-at", 2)
    torchrun(*common, "--out", tmp_path / "resumed")
    a = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "straight"))
    b = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "resumed"))
    assert a["step"] == b["step"] == 4
    assert a["data"]["cursor"] == cursor  # steps x batch x accumulation x ranks, or the warmup's batches
    assert len(a["rng"]) == 2 and not torch.equal(a["rng"][0]["torch"], a["rng"][1]["torch"])
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    steps = [json.loads(x)["step"] for x in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


@pytest.mark.slow
def test_a_damaged_shard_found_by_one_rank_stops_every_rank(tmp_path):
    # Each rank hashes its share of the files: rank 1 checks the second shard. The
    # ranks agree on the outcome before DDP starts, so none is left waiting.
    shards = small_shard_dir(tmp_path / "small", rows=96, num_shards=2)
    second = sorted(shards.glob("*.arrow"))[1]
    data = bytearray(second.read_bytes())
    data[len(data) // 2] ^= 0xFF
    second.write_bytes(bytes(data))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "bertmodel.cli", "pretrain", "--data", str(shards), "--out", str(tmp_path / "run"),
           "--preset", "tiny", "--max-steps", "2", "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert f"{second.name}: sha256 differs from manifest.json" in output
    assert "another rank found a problem with the training data (shards or files)" in output
    assert not (tmp_path / "run" / "checkpoints").exists()
