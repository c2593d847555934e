"""StableAdamW (optim.StableAdamW): step by step against Algorithm 2 of Wortsman et al.
2023 written out per tensor here, in float64, through steps where the update clipping
binds (a gradient far above its running second moment) and steps where it does not;
equal to torch.optim.AdamW wherever it does not bind (its weight decay scaled to the
fully decoupled form); its options on the trainer (global clipping off by default), and
a pretrain run that resumes from its checkpointed state bit for bit; the optimizer alone
resumed through a checkpoint (also with another peak lr), and which tensors it decays."""
from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data.synthetic import small_shard_dir
from bertmodel.errors import BertmodelError
from bertmodel.training import checkpoint as ckpt
from bertmodel.training.optim import StableAdamW, debiased_beta
from bertmodel.training.options import LoopConfig

BETAS, EPS, DECAY, PEAK = (0.9, 0.98), 1e-6, 0.1, 1e-2
SHAPES = [(30, 20), (20,), (7, 3)]


def start(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64) for s in SHAPES]


def gradient(step: int, scale: float) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(*s, generator=g, dtype=torch.float64) * scale for s in SHAPES]


def reference(params, grads_per_step, lrs, decays, peaks=None):
    """Algorithm 2 (StableAdamW) of arXiv 2304.13013, one tensor at a time: v (first
    moment) and u (second) with the debiased betas, RMS_t = sqrt(E[g^2 / max(u, eps^2)]),
    eta_t = alpha_t / max(1, RMS_t), then theta -= eta_t (lambda / alpha_max) theta +
    eta_t v / (sqrt(u) + eps); alpha_max the step's entry of `peaks` (PEAK throughout when
    None). Returns the parameters after every step and the RMS seen."""
    beta1, beta2 = BETAS
    theta = [p.clone() for p in params]
    v = [torch.zeros_like(p) for p in params]
    u = [torch.zeros_like(p) for p in params]
    history, rms_seen = [], []
    peaks = peaks or [PEAK] * len(lrs)
    for t, (grads, lr, peak) in enumerate(zip(grads_per_step, lrs, peaks), start=1):
        b1 = beta1 * (1 - beta1 ** (t - 1)) / (1 - beta1 ** t)
        b2 = beta2 * (1 - beta2 ** (t - 1)) / (1 - beta2 ** t)
        rms_step = []
        for i, g in enumerate(grads):
            v[i] = b1 * v[i] + (1 - b1) * g
            u[i] = b2 * u[i] + (1 - b2) * g * g
            rms = math.sqrt(float(torch.mean(g * g / torch.clamp(u[i], min=EPS ** 2))))
            eta = lr / max(1.0, rms)
            theta[i] = theta[i] - eta * (decays[i] / peak) * theta[i] - eta * v[i] / (torch.sqrt(u[i]) + EPS)
            rms_step.append(rms)
        history.append([p.clone() for p in theta])
        rms_seen.append(rms_step)
    return history, rms_seen


def stepped(optimizer, leaves, grads_per_step, lrs) -> None:
    """One optimizer step per entry: the lr set as the trainer sets it, the gradients given."""
    for grads, lr in zip(grads_per_step, lrs):
        for group in optimizer.param_groups:
            group["lr"] = lr
        for p, g in zip(leaves, grads):
            p.grad = g.clone()
        optimizer.step()


def ours(params, grads_per_step, lrs, decays, optimizer_class=StableAdamW, **kw):
    """Two groups as the model's (decayed matrices, undecayed vectors); params after each step."""
    leaves = [torch.nn.Parameter(p.clone()) for p in params]
    groups = [{"params": [p], "weight_decay": d} for p, d in zip(leaves, decays)]
    opt = optimizer_class(groups, lr=PEAK, betas=BETAS, eps=EPS, **kw)
    history = []
    for grads, lr in zip(grads_per_step, lrs):
        stepped(opt, leaves, [grads], [lr])
        history.append([p.detach().clone() for p in leaves])
    return history


# ten steps: small gradients, then 100x and 1000x spikes (clipped), a return to small
# ones, and one tensor's spike alone; the lr warms up and decays as a schedule would
SCALES = [1e-3, 1e-3, 1e-3, 1e-1, 1e-3, 1.0, 1e-3, 1e-3, 1e-3, 1e-3]
LRS = [PEAK * f for f in (0.25, 0.5, 1.0, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2, 0.1)]
DECAYS = [DECAY, 0.0, DECAY]


def test_debiased_betas_are_adams_bias_correction():
    # an average with the debiased beta equals Adam's bias-corrected one, step by step
    beta, values = 0.98, [3.0, -1.0, 4.0, 1.5, -9.0, 2.6]
    raw, debiased = 0.0, 0.0
    for t, x in enumerate(values, start=1):
        raw = beta * raw + (1 - beta) * x
        b = debiased_beta(beta, t)
        debiased = b * debiased + (1 - b) * x
        assert debiased == pytest.approx(raw / (1 - beta ** t), rel=1e-13)
    assert debiased_beta(beta, 1) == 0.0


def test_steps_equal_the_papers_algorithm_where_clipping_binds_and_where_not():
    params = start()
    grads = [gradient(t, s) for t, s in enumerate(SCALES)]
    grads[8][1] = grads[8][1] * 1e4  # one tensor's spike: only its step is clipped
    want, rms = reference(params, grads, LRS, DECAYS)
    got = ours(params, grads, LRS, DECAYS)
    bound = [[r > 1 for r in step] for step in rms]
    assert any(all(b) for b in bound) and any(not any(b) for b in bound)  # both kinds of step are in the test
    assert bound[8] == [False, True, False]
    for step, (a, b) in enumerate(zip(got, want)):
        for x, y in zip(a, b):
            # float64: a few roundings of 1e-16 per step, ten steps
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-15, msg=f"step {step + 1}")


def test_equal_to_torch_adamw_where_clipping_does_not_bind():
    # Gradients whose squares shrink every step, element by element (random signs, one
    # magnitude pattern scaled down): v, an average of earlier squares, stays at or above
    # g^2, so RMS <= 1 throughout and no step is clipped. AdamW decays by lr * wd; the
    # fully decoupled decay is (lr / peak) * wd: the same with AdamW's wd = wd / peak.
    params = start(1)
    magnitude = [t.abs() for t in gradient(99, 1.0)]
    grads = []
    for t in range(10):
        signs = [torch.sign(x) for x in gradient(t, 1.0)]
        grads.append([m * s * 0.7 ** t for m, s in zip(magnitude, signs)])
    _, rms = reference(params, grads, LRS, DECAYS)
    assert max(max(step) for step in rms) <= 1.0
    got = ours(params, grads, LRS, DECAYS)
    adamw = ours(params, grads, LRS, [d / PEAK for d in DECAYS], torch.optim.AdamW, foreach=False)
    for a, b in zip(got, adamw):
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-15)
    # and where it binds, it is not AdamW: the clipped step is smaller
    spiky = [list(g) for g in grads]
    spiky[5] = [g * 1e3 for g in spiky[5]]
    clipped = ours(params, spiky, LRS, DECAYS)
    plain = ours(params, spiky, LRS, [d / PEAK for d in DECAYS], torch.optim.AdamW, foreach=False)
    moved = [float((clipped[5][i] - clipped[4][i]).abs().max()) for i in range(3)]
    moved_adamw = [float((plain[5][i] - plain[4][i]).abs().max()) for i in range(3)]
    assert all(m < 0.9 * a for m, a in zip(moved, moved_adamw))


def test_a_resumed_optimizer_keeps_its_peak_lr_and_state():
    params = start(2)
    grads = [gradient(t, s) for t, s in enumerate(SCALES)]
    straight = ours(params, grads, LRS, DECAYS)[-1]
    leaves = [torch.nn.Parameter(p.clone()) for p in params]
    opt = StableAdamW([{"params": [p], "weight_decay": d} for p, d in zip(leaves, DECAYS)], lr=PEAK, betas=BETAS,
                      eps=EPS)
    for t in range(5):
        for group in opt.param_groups:
            group["lr"] = LRS[t]
        for p, g in zip(leaves, grads[t]):
            p.grad = g.clone()
        opt.step()
    saved = opt.state_dict()
    again = [torch.nn.Parameter(p.detach().clone()) for p in leaves]
    resumed = StableAdamW([{"params": [p], "weight_decay": d} for p, d in zip(again, DECAYS)], lr=PEAK,
                          betas=BETAS, eps=EPS)
    resumed.load_state_dict(saved)
    for t in range(5, 10):
        for group in resumed.param_groups:
            group["lr"] = LRS[t]
        for p, g in zip(again, grads[t]):
            p.grad = g.clone()
        resumed.step()
    for x, y in zip(again, straight):
        assert torch.equal(x.detach(), y)


def fresh(params, peak: float = PEAK):
    leaves = [torch.nn.Parameter(p.clone()) for p in params]
    groups = [{"params": [p], "weight_decay": d} for p, d in zip(leaves, DECAYS)]
    return leaves, StableAdamW(groups, lr=peak, betas=BETAS, eps=EPS)


@pytest.mark.parametrize("stop", [1, 4, 7])
def test_a_resume_through_a_checkpoint_continues_bit_for_bit(tmp_path, stop):
    """Ten steps straight, or `stop` steps, a checkpoint written and read back as the
    trainer does (checkpoint.save_checkpoint / load_checkpoint), a new optimizer over the
    saved weights loading its state, and the rest: the same weights and the same state,
    bit for bit (step counts, both moments), with the 1000x spike of step 6, which the
    per-tensor RMS clips, on either side of the stop."""
    params = start(3)
    grads = [gradient(t, s) for t, s in enumerate(SCALES)]
    leaves, straight = fresh(params)
    stepped(straight, leaves, grads, LRS)
    first, opt = fresh(params)
    stepped(opt, first, grads[:stop], LRS[:stop])
    ckpt.save_checkpoint(tmp_path, {"step": stop, "optimizer": opt.state_dict(),
                                    "model": {f"p{i}": p.detach() for i, p in enumerate(first)}})
    saved = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path))
    again, resumed = fresh([saved["model"][f"p{i}"] for i in range(len(params))])
    resumed.load_state_dict(saved["optimizer"])
    stepped(resumed, again, grads[stop:], LRS[stop:])
    for x, y in zip(again, leaves):
        assert torch.equal(x.detach(), y.detach())
    for x, y in zip(again, leaves):
        a, b = resumed.state[x], straight.state[y]
        assert a.keys() == b.keys() == {"step", "exp_avg", "exp_avg_sq"}
        assert float(a["step"]) == float(b["step"]) == len(SCALES)
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert [g["peak_lr"] for g in resumed.param_groups] == [PEAK] * len(DECAYS)


def test_a_resume_with_another_peak_lr_decays_relative_to_the_new_one():
    """--lr may change on resume: the schedule then scales the new peak, and the fully
    decoupled decay is relative to it (not to the checkpoint's peak), the moments and step
    counts carried on: Algorithm 2 with alpha_max switching at the resume."""
    params = start(4)
    grads = [gradient(t, s) for t, s in enumerate(SCALES)]
    stop, new_peak = 4, 3 * PEAK
    lrs = LRS[:stop] + [lr * new_peak / PEAK for lr in LRS[stop:]]
    peaks = [PEAK] * stop + [new_peak] * (len(lrs) - stop)
    want, rms = reference(params, grads, lrs, DECAYS, peaks)
    assert any(r > 1 for step in rms[stop:] for r in step)  # the clipping binds after the resume
    first, opt = fresh(params)
    stepped(opt, first, grads[:stop], lrs[:stop])
    again, resumed = fresh([p.detach() for p in first], peak=new_peak)
    resumed.load_state_dict(opt.state_dict())
    assert [g["peak_lr"] for g in resumed.param_groups] == [new_peak] * len(DECAYS)
    stepped(resumed, again, grads[stop:], lrs[stop:])
    for x, y in zip(again, want[-1]):
        torch.testing.assert_close(x.detach(), y, rtol=1e-12, atol=1e-15)  # float64: as the step test


def test_weight_decay_skips_biases_and_layernorm_of_a_model():
    """build_optimizer over a real model: with zero gradients the moments stay 0, the RMS
    is 0 (so lr_t = lr) and the step is the decay alone: at lr = the peak every matrix
    (embedding tables included, BERT's convention) is multiplied by 1 - weight_decay,
    every bias and LayerNorm weight is left exactly as it was."""
    from bertmodel.model import BertConfig, BertForPreTraining
    from bertmodel.training.optim import build_optimizer

    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=64, max_position_embeddings=32))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = build_optimizer(model, "stable-adamw", PEAK, 0.1, torch.device("cpu"), betas=BETAS, eps=EPS)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    kept = {n for n in before if "LayerNorm" in n or n.endswith("bias")}
    assert kept and len(kept) < len(before)
    for name, p in model.named_parameters():
        if name in kept:
            assert torch.equal(p.detach(), before[name]), name
        else:  # float32 weights: 1 - 0.1 and the product each rounded in float32 (6e-8 apiece)
            torch.testing.assert_close(p.detach().double(), before[name].double() * 0.9, rtol=3e-7, atol=0,
                                       msg=lambda m, name=name: f"{name}: {m}")


def test_the_trainers_options():
    assert LoopConfig(out="x", optimizer="stable-adamw").clip_grad == 0.0  # per-tensor clipping replaces it
    assert LoopConfig(out="x", optimizer="stable-adamw", clip_grad=1.0).clip_grad == 1.0  # unless asked for
    assert LoopConfig(out="x").clip_grad == 1.0
    assert LoopConfig(out="x", adam_betas=[0.9, 0.98]).adam_betas == (0.9, 0.98)
    # Fully decoupled decay multiplies the weights by 1 - wd each step at the peak: AdamW's 0.01
    # would shrink them by 1% a step, so stable-adamw's default is ModernBERT's 1e-5.
    assert LoopConfig(out="x", optimizer="stable-adamw").weight_decay == 1e-5
    assert LoopConfig(out="x", optimizer="stable-adamw", weight_decay=0.0).weight_decay == 0.0
    assert LoopConfig(out="x").weight_decay == LoopConfig(out="x", optimizer="lamb").weight_decay == 0.01
    with pytest.raises(BertmodelError, match="^optimizer must be adamw, lamb, stable-adamw, got 'adam'$"):
        LoopConfig(out="x", optimizer="adam")
    with pytest.raises(BertmodelError, match=r"^adam betas must be two numbers in \[0, 1\), got \(0.9, 1.0\)$"):
        LoopConfig(out="x", adam_betas=(0.9, 1.0))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("stable") / "small", rows=96)


def pretrain(shards, out, *extra):
    args = ["pretrain", "--data", str(shards), "--out", str(out), "--preset", "tiny", "--batch-size", "4",
            "--grad-accum", "2", "--max-steps", "6", "--warmup-steps", "2", "--lr", "3e-3", "--log-every", "1",
            "--save-every", "100", "--no-progress", "--seed", "5", "--optimizer", "stable-adamw",
            "--adam-betas", "0.9", "0.98", "--weight-decay", "1e-5", *map(str, extra)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result


def test_pretrain_with_stable_adamw_resumes_bit_exactly(shards, tmp_path):
    pretrain(shards, tmp_path / "straight")
    pretrain(shards, tmp_path / "resumed", "--stop-at", 3)
    pretrain(shards, tmp_path / "resumed")
    a = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "straight"))
    b = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "resumed"))
    assert a["step"] == b["step"] == 6
    assert a["train"]["clip_grad"] == 0.0 and a["train"]["adam_betas"] == (0.9, 0.98)
    groups = a["optimizer"]["param_groups"]
    assert {g["peak_lr"] for g in groups} == {3e-3} and {g["weight_decay"] for g in groups} == {1e-5, 0.0}
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert sa.keys() == {"step", "exp_avg", "exp_avg_sq"} and all(torch.equal(sa[k], sb[k]) for k in sa)
    records = [json.loads(x) for x in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 6 and all(math.isfinite(r["loss"]) and r["skipped_steps"] == 0 for r in records)


def test_finetune_takes_the_optimizer_options(tmp_path):
    """finetune offers the same optimizers as pretrain; stable-adamw's decay default follows it."""
    from bertmodel.finetune import FinetuneConfig

    cfg = FinetuneConfig(out=str(tmp_path / "r"), task="classify", model="random:tiny", optimizer="stable-adamw",
                         adam_betas=(0.9, 0.98))
    assert (cfg.weight_decay, cfg.clip_grad, cfg.adam_betas) == (1e-5, 0.0, (0.9, 0.98))
    help_text = CliRunner().invoke(main, ["finetune", "classify", "--help"]).output
    assert "--optimizer [adamw|lamb|stable-adamw]" in help_text and "--adam-betas B1 B2" in help_text
