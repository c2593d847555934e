"""The CPU dropout mask (bertmodel/model/dropout.py): its rate, its scale, every lane of
every draw, replay from a seed, its gradient, and the attention math path it runs in."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bertmodel.model.dropout import LANE_VALUES, Dropout, attention, dropout


def _drawn_rate(p: float) -> float:
    return round(p * LANE_VALUES) / LANE_VALUES


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_each_lane_drops_at_the_rate_and_keeps_the_expectation(p):
    torch.manual_seed(0)
    n = 1 << 21
    y = dropout(torch.ones(n), p, training=True)
    rate = _drawn_rate(p)
    kept = y != 0
    # Kept values are exactly 1 / (1 - p'), so the expectation is the input's.
    assert torch.equal(y[kept], torch.full_like(y[kept], 1 / (1 - rate)))
    # Element i comes from lane i % 4 of an int64 draw below 2^62, whose top lane has only
    # 14 uniform bits: a lane-wise rate checks that the mask reads only uniform bits.
    sd = math.sqrt(rate * (1 - rate) / (n // 4))
    for lane in range(4):
        dropped = float((~kept[lane::4]).double().mean())
        assert abs(dropped - rate) < 5 * sd, (lane, dropped, rate)
    assert abs(float(y.double().mean()) - 1.0) < 5 * math.sqrt(rate / (1 - rate) / n)


def test_the_mask_replays_from_the_seed_and_its_gradient_is_the_mask():
    x = torch.randn(3, 1001, requires_grad=True)
    torch.manual_seed(7)
    a = dropout(x, 0.1, True)
    torch.manual_seed(7)
    b = dropout(x, 0.1, True)
    c = dropout(x, 0.1, True)
    assert torch.equal(a, b) and not torch.equal(b, c)
    a.sum().backward()
    scale = 1 / (1 - _drawn_rate(0.1))
    expected = torch.where(a != 0, torch.tensor(scale), torch.tensor(0.0))
    assert torch.allclose(x.grad, expected, rtol=0, atol=1e-6)


def test_off_in_eval_and_at_rate_zero_and_all_dropped_at_rate_one():
    x = torch.randn(64)
    assert dropout(x, 0.1, training=False) is x and dropout(x, 0.0, training=True) is x
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros(64))


def _qkv_mask(seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(3, 4, 9, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    lengths = torch.tensor([9, 5, 1])
    mask = (torch.arange(9)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, T)
    return q, k, v, mask


def test_the_cpu_math_path_equals_sdpa_where_nothing_is_dropped():
    # p = 1e-9 rounds to no dropped lane, so the math path runs and must be SDPA exactly.
    q, k, v, mask = _qkv_mask()
    ours = attention(q, k, v, mask, dropout_p=1e-9)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(ours, ref, atol=1e-12)
    grads = torch.autograd.grad(ours.sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.sum(), (q, k, v))
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-12)


def test_masked_keys_never_reach_the_output_with_dropout_on():
    q, k, v, mask = _qkv_mask(1)
    poisoned = v.detach().clone()
    poisoned.masked_fill_(~mask.transpose(-1, -2), 1e6)  # values at padded keys
    torch.manual_seed(3)
    a = attention(q, k, v, mask, dropout_p=0.3)
    torch.manual_seed(3)
    b = attention(q, k, poisoned, mask, dropout_p=0.3)
    assert torch.equal(a, b)
    torch.manual_seed(3)
    no_mask = attention(q, k, poisoned, None, dropout_p=0.3)
    assert not torch.allclose(a, no_mask)  # the poison would show if the mask were ignored


def test_attention_dropout_is_unbiased():
    # Averaged over draws, the dropped-out attention converges on the undropped one.
    q, k, v, mask = _qkv_mask(2)
    with torch.no_grad():
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.manual_seed(0)
        mean = sum(attention(q, k, v, mask, dropout_p=0.5) for _ in range(4000)) / 4000
    assert (mean - ref).abs().max() < 0.1 * ref.abs().max()


def test_a_row_with_no_key_averages_the_values_instead_of_nan():
    q, k, v, mask = _qkv_mask(4)
    mask = mask.clone()
    mask[2] = False  # the third sequence has no key at all
    torch.manual_seed(0)
    out = attention(q, k, v, mask, dropout_p=1e-9)
    assert torch.isfinite(out).all()
    assert torch.allclose(out[2], v[2].mean(-2, keepdim=True).expand_as(out[2]), atol=1e-12)


def test_a_rate_outside_0_1_is_refused_as_torch_refuses_it():
    with pytest.raises(ValueError, match="between 0 and 1"):
        dropout(torch.ones(4), -0.1, True)
    with pytest.raises(ValueError, match="between 0 and 1"):
        Dropout(1.5)


def test_half_precision_attention_computes_in_fp32_as_sdpa_does():
    q, k, v, mask = _qkv_mask(5)
    q, k, v = (t.detach().to(torch.bfloat16) for t in (q, k, v))
    ours = attention(q, k, v, mask, dropout_p=1e-9)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert ours.dtype == torch.bfloat16
    # SDPA's math path upcasts to fp32 and rounds once at the end: so must this one.
    assert torch.equal(ours, ref) or (ours.float() - ref.float()).abs().max() <= 2 ** -8 * ref.float().abs().max()


@pytest.mark.slow  # inductor compiles C++: a few seconds
def test_compiled_with_inductor_s_own_random_numbers_the_rate_holds_on_every_lane():
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(lambda x: dropout(x, 0.1, True), dynamic=True)  # fallback_random off: the default
    y = compiled(torch.ones(1 << 20))
    rate = _drawn_rate(0.1)
    sd = math.sqrt(rate * (1 - rate) / (1 << 18))
    for lane in range(4):
        assert abs(float((y[lane::4] == 0).double().mean()) - rate) < 5 * sd, lane
    assert torch.equal(y[y != 0], torch.full_like(y[y != 0], 1 / (1 - rate)))
