"""optim.clip_and_step: clipping folded into fused AdamW's kernel is clip_grad_norm_ then
step (to the last bit of a gradient), for every optimizer it serves, also with clipping
off; a non-finite norm leaves the weights and the optimizer state alone."""
from __future__ import annotations

import math

import pytest
import torch

from bertmodel.training.optim import Lamb, clip_and_step


def _params(seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(300, 40, generator=g)), torch.nn.Parameter(torch.randn(40, generator=g))]


def _grads(step: int, scale: float):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(300, 40, generator=g) * scale, torch.randn(40, generator=g) * scale]


def _make(kind: str, params):
    if kind == "adamw-fused":
        return torch.optim.AdamW(params, lr=1e-2, eps=1e-6, weight_decay=0.01, fused=True)
    if kind == "adamw-foreach":
        return torch.optim.AdamW(params, lr=1e-2, eps=1e-6, weight_decay=0.01, foreach=True)
    return Lamb(params, lr=1e-2)


def _fused_available() -> bool:
    try:
        _make("adamw-fused", _params(0)).step()
        return True
    except (RuntimeError, NotImplementedError, TypeError):
        return False


@pytest.mark.parametrize("kind", ["adamw-fused", "adamw-foreach", "lamb"])
@pytest.mark.parametrize("scale", [10.0, 1e-3])  # clipped every step / never clipped
def test_the_same_steps_as_clip_grad_norm_then_step(kind, scale, monkeypatch):
    if kind == "adamw-fused" and not _fused_available():
        pytest.skip("this torch build has no fused AdamW for the CPU")
    if kind == "adamw-fused" and hasattr(torch.nn.utils, "get_total_norm"):
        reference_clip = torch.nn.utils.clip_grad_norm_

        def refused(*a, **k):
            raise AssertionError("the fused path multiplied the gradients itself")

        monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", refused)  # what clip_and_step would call
    else:
        reference_clip = torch.nn.utils.clip_grad_norm_
    ours, reference = _params(0), _params(0)
    opt, ref_opt = _make(kind, ours), _make(kind, reference)
    for step in range(4):
        for p, g in zip(ours, _grads(step, scale)):
            p.grad = g.clone()
        for p, g in zip(reference, _grads(step, scale)):
            p.grad = g.clone()
        norm = clip_and_step(opt, ours, 1.0)
        ref_norm = float(reference_clip(reference, 1.0))
        ref_opt.step()
        assert norm == ref_norm
        for a, b in zip(ours, reference):
            if kind == "adamw-fused":  # dividing by 1/c, not multiplying by c: the last bit may differ
                assert torch.allclose(a, b, rtol=0, atol=1e-6), float((a - b).abs().max())
            else:
                assert torch.equal(a, b)
    if kind == "adamw-fused":
        assert getattr(opt, "grad_scale", None) is None  # never left for a later step


@pytest.mark.parametrize("kind", ["adamw-fused", "adamw-foreach"])
def test_a_non_finite_norm_leaves_weights_and_optimizer_state_alone(kind):
    if kind == "adamw-fused" and not _fused_available():
        pytest.skip("this torch build has no fused AdamW for the CPU")
    params = _params(1)
    opt = _make(kind, params)
    before = [p.detach().clone() for p in params]
    for p, g in zip(params, _grads(0, 1.0)):
        p.grad = g
    params[1].grad[3] = math.nan
    assert math.isnan(clip_and_step(opt, params, 1.0))
    assert all(torch.equal(p, b) for p, b in zip(params, before)) and not opt.state


def test_clipping_off_is_a_plain_step():
    kind = "adamw-fused" if _fused_available() else "adamw-foreach"
    ours, reference = _params(2), _params(2)
    opt, ref_opt = _make(kind, ours), _make(kind, reference)
    for p, q, g in zip(ours, reference, _grads(0, 10.0)):
        p.grad, q.grad = g.clone(), g.clone()
    norm = clip_and_step(opt, ours, math.inf)
    ref_opt.step()
    expected = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in _grads(0, 10.0)])))
    assert norm == pytest.approx(expected, rel=1e-6) and norm > 1.0  # reported, never applied
    assert all(torch.equal(a, b) for a, b in zip(ours, reference))


def test_a_float64_model_is_clipped_as_clip_grad_norm_then_fused_step():
    """The fused kernel takes an fp32 grad_scale only: a float64 model (as the step-by-step
    tests against transformers train) is clipped by clip_grad_norm_'s own multiply and
    stepped by the same fused AdamW, to the bit."""
    if not _fused_available():
        pytest.skip("this torch build has no fused AdamW for the CPU")
    ours, reference = [[p.double() for p in _params(3)] for _ in range(2)]
    ours, reference = [torch.nn.Parameter(p) for p in ours], [torch.nn.Parameter(p) for p in reference]
    opt, ref_opt = _make("adamw-fused", ours), _make("adamw-fused", reference)
    for step, scale in enumerate([10.0, 1e-3, 10.0]):  # clipped, not, clipped
        for p, q, g in zip(ours, reference, _grads(step, scale)):
            p.grad, q.grad = g.double(), g.double()
        assert clip_and_step(opt, ours, 1.0) == float(torch.nn.utils.clip_grad_norm_(reference, 1.0))
        ref_opt.step()
        assert all(a.dtype == torch.float64 and torch.equal(a, b) for a, b in zip(ours, reference))
