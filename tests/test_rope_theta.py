"""pretrain --rope-theta G[,L] (ModernBERT): a fresh preset at theta 10,000 and a context
extension (--init-from it) at 160,000, each recorded in the run (checkpoint config and
options) and in the export's config.json rope_parameters, which transformers'
ModernBertForMaskedLM reads: equal logits at lengths where both the global and the
local layers' angles matter (and other logits at another theta); refused for BERT."""
from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data.synthetic import small_shard_dir
from bertmodel.hf import load_into, load_pretrained
from bertmodel.model import ModernBertForMaskedLM
from bertmodel.training import checkpoint as ckpt

transformers = pytest.importorskip("transformers")
FAST = ("--preset", "tiny", "--batch-size", 4, "--max-steps", 2, "--lr", 1e-3, "--warmup-steps", 1, "--log-every", 1,
        "--no-progress", "--seed", 3)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("rope") / "small", rows=48)


@pytest.fixture(scope="module")
def runs(shards, tmp_path_factory):
    root = tmp_path_factory.mktemp("rope-runs")
    ok("pretrain", "--architecture", "modernbert", "--rope-theta", "10000", "--data", shards, "--out", root / "short",
       *FAST)
    ok("pretrain", "--init-from", root / "short", "--rope-theta", "160000", "--data", shards, "--out", root / "long",
       *FAST[2:])
    return root


@torch.no_grad()
def sharpen(model, hidden: int) -> None:
    for name, p in model.named_parameters():
        if name.endswith("attn.Wqkv.weight"):
            p[:2 * hidden] *= 8  # the query and key rows


def logits_match(run_dir, theta_global, theta_local):
    config = json.loads((run_dir / "hf" / "config.json").read_text())
    assert config["rope_parameters"] == {"full_attention": {"rope_type": "default", "rope_theta": theta_global},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": theta_local}}
    theirs, info = transformers.ModernBertForMaskedLM.from_pretrained(run_dir / "hf", output_loading_info=True)
    assert not any(info.values()), info
    assert theirs.config.rope_parameters["full_attention"]["rope_theta"] == theta_global
    pre = load_pretrained(run_dir / "hf")
    assert (pre.config.global_rope_theta, pre.config.local_rope_theta) == (theta_global, theta_local)
    ours = ModernBertForMaskedLM(pre.config).eval()
    assert load_into(ours, pre) == []
    theirs.eval()
    # A model two steps from its init attends almost uniformly, so positions barely show:
    # sharpen every layer's queries and keys alike in both (attention logits x 64), so the
    # angles, and so theta, move the logits.
    for model in (ours, theirs):
        sharpen(model, pre.config.hidden_size)
    # 300 tokens: past the 128-token local window, so the local layers' far positions and
    # the global layers' whole range both turn by their own theta
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, pre.config.vocab_size, (2, 300), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 250:] = 0
    with torch.no_grad():
        a, b = ours(ids, None, mask).mlm_logits, theirs(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=1e-5, rtol=1e-5)
    return theirs, ids, mask, b


def test_a_fresh_preset_at_another_theta_exports_it(runs):
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(runs / "short"))
    assert (state["config"]["global_rope_theta"], state["config"]["local_rope_theta"]) == (10_000.0, 10_000.0)
    assert state["train"]["rope_theta"] == "10000"
    theirs, ids, mask, logits = logits_match(runs / "short", 10_000.0, 10_000.0)
    # the theta is what transformers uses: at the preset's 160,000 the same weights give other logits
    config = theirs.config
    config.rope_parameters["full_attention"]["rope_theta"] = 160_000.0
    other = transformers.ModernBertForMaskedLM(config).eval()
    other.load_state_dict(theirs.state_dict())  # the sharpened weights
    with torch.no_grad():
        moved = other(input_ids=ids, attention_mask=mask).logits
    assert (moved[mask.bool()] - logits[mask.bool()]).abs().max() > 100 * 1e-5  # far outside the tolerance


def test_context_extension_takes_the_weights_and_the_new_theta(runs):
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(runs / "long"))
    assert (state["config"]["global_rope_theta"], state["config"]["local_rope_theta"]) == (160_000.0, 10_000.0)
    assert state["train"]["rope_theta"] == "160000" and state["train"]["init_from"] == str(runs / "short")
    logits_match(runs / "long", 160_000.0, 10_000.0)


def test_a_resume_keeps_the_theta_it_started_with(runs, shards):
    result = invoke("pretrain", "--init-from", runs / "short", "--rope-theta", "320000", "--data", shards, "--out",
                    runs / "long", *FAST[2:6], "--max-steps", 3, "--no-progress", "--seed", 3)
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert "--rope-theta 160000 -> 320000" in result.output


@pytest.mark.parametrize("value", ["0", "abc", "1,2,3", "160000,-5"])
def test_bad_values_are_one_line(shards, tmp_path, value):
    result = invoke("pretrain", "--architecture", "modernbert", "--rope-theta", value, "--data", shards, "--out",
                    tmp_path / "run", *FAST)
    assert result.exit_code == 1
    assert result.output == (f"Error: --rope-theta {value!r}: expected G or G,L, positive numbers (e.g. 160000 or "
                             "160000,10000)\n")


def test_bert_refuses_it_in_one_line(shards, tmp_path):
    result = invoke("pretrain", "--rope-theta", "10000", "--data", shards, "--out", tmp_path / "run", *FAST)
    assert result.output == ("Error: --rope-theta sets ModernBERT's rotary bases; BERT has learned absolute "
                             "positions (use --architecture modernbert)\n")
    ok("pretrain", "--data", shards, "--out", tmp_path / "bert", *FAST)
    result = invoke("pretrain", "--init-from", tmp_path / "bert", "--rope-theta", "10000", "--data", shards, "--out",
                    tmp_path / "more", *FAST[2:])
    assert result.exit_code == 1
    assert result.output == (f"Error: --rope-theta sets ModernBERT's rotary bases; {tmp_path / 'bert'} is a bert "
                             "model with learned absolute positions\n")
    assert not (tmp_path / "run").exists() and not (tmp_path / "more").exists()
