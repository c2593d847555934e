"""--compile on CPU (inductor): the same losses as eager (with AdamW, and with StableAdamW,
which steps the plain module's parameters), one graph for every padded length,
checkpoints from the plain module."""
from __future__ import annotations

import json

import pytest
import torch

from bertmodel.training import checkpoint as ckpt
from bertmodel.data.synthetic import small_shard_dir
from bertmodel.train import TrainConfig, train


def losses(run) -> list[float]:
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


@pytest.mark.slow  # inductor compiles C++ on CPU: about a minute on two cores
@pytest.mark.parametrize("architecture, optimizer, objective", [
    ("bert", "adamw", None), ("modernbert", "adamw", None), ("modernbert", "stable-adamw", None),
    ("bert", "adamw", "rtd")])
def test_compiled_training_matches_eager(tmp_path, request, architecture, optimizer, objective):
    import torch._dynamo
    import torch._inductor.config

    # Inductor draws dropout masks from its own generator; its eager-RNG fallback makes
    # the two runs' dropout identical, so the losses can be compared at 1e-5. Set through
    # the config's own patch(): monkeypatch's undo deletes a torch config entry, which
    # breaks every later compile in this process.
    patched = torch._inductor.config.patch(fallback_random=True)
    patched.__enter__()
    request.addfinalizer(lambda: patched.__exit__(None, None, None))

    # Short rows (10% drawn from 8..64) give batches of several padded lengths.
    shards = small_shard_dir(tmp_path / "small", rows=64, max_seq_length=64)
    # ModernBERT: 2 layers, one global and one local (its window covers these rows: the masked path).
    base = dict(data=[str(shards)], preset="tiny", layers=1 if architecture == "bert" else 2, hidden=32, heads=2,
                intermediate=64, architecture=architecture, batch_size=4,
                max_steps=4, lr=1e-3, warmup_steps=1, log_every=1, save_every=100, progress=False, seed=2,
                optimizer=optimizer, objective=objective)
    train(TrainConfig(out=str(tmp_path / "eager"), **base), log=lambda *a: None)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    train(TrainConfig(out=str(tmp_path / "compiled"), compile=True, **base), log=lambda *a: None)
    eager, compiled = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert len(eager) == len(compiled) == 4
    # RTD (ELECTRA): the same Gumbel draws (the eager-RNG fallback) on a loss 50 x the BCE, ~35 at the start:
    # fp32's rounding of it is ~35 x 2^-24, so the two are compared relative to the loss.
    assert compiled == pytest.approx(eager, abs=1e-5, rel=1e-6 if objective == "rtd" else 0)
    # no `_orig_mod.` (compile) or `compiled.` (the dynamic-shape wrapper) prefixes
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "compiled"))
    assert all(k.startswith(("bert.", "cls.", "model.", "head.", "decoder.", "generator.", "discriminator."))
               for k in state["model"])
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert frames <= 2, frames  # one graph for the lengths seen (plus at most one specialisation)
