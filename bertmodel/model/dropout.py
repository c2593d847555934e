"""Dropout, and attention with dropout on its probabilities, at a third of torch's CPU cost.

On the CPU, `F.dropout` (and the math path `scaled_dot_product_attention` takes whenever
dropout_p > 0) draws its mask with `bernoulli_`: one Mersenne-Twister call and a float
conversion per element, about 10 ns each (fwd + bwd 11 ms per million elements on 2
cores). A MiniLM step on MRPC-length pairs drops out 10 million elements, so 13% of the
step went there (torch profiler, one step of batch 16, 2 threads). Here the mask comes
from int64 draws, four 16-bit lanes each, compared with a threshold: 3.2 ms per million,
fwd + bwd, the same measurement; the MiniLM step on MRPC took 0.88x its time with it
(8 alternating rounds of 36 steps in one process).

The rate is quantised to 1/65536 (a lane's 16 bits), so p = 0.1 drops 6554/65536 =
0.100006 of the elements; the kept ones are scaled by 1 / (1 - that), so the expectation
is exactly the input's, as torch's is. The draws come from torch's default CPU
generator, so `torch.manual_seed` and a saved RNG state replay them (resume stays
bit-exact), and torch.compile traces them (with inductor's `fallback_random`, the very
same draws). On other devices torch's own kernels run: CUDA's Philox dropout is fused
and cheap, and SDPA's flash kernels handle dropout there.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

LANE_VALUES = 1 << 16  # values of one 16-bit lane
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def keep_scale(shape, p: float, dtype: torch.dtype) -> torch.Tensor:
    """A fresh CPU mask of `shape`: 0 where dropped, 1 / (1 - p') where kept, with
    p' = round(p * 65536) / 65536 the rate actually drawn."""
    n = math.prod(shape)
    threshold = round(p * LANE_VALUES)
    # randint over the whole int64 range: all 64 bits uniform (random_() leaves the sign
    # bit 0), and, unlike random_(), torch.compile traces it.
    words = torch.randint(INT64_MIN, INT64_MAX, ((n + 3) // 4,), dtype=torch.int64)
    keep = words.view(torch.int16)[:n] >= threshold - LANE_VALUES // 2  # signed lanes: P = 1 - p'
    return keep.to(dtype).mul_(LANE_VALUES / (LANE_VALUES - threshold)).view(shape)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or round(p * LANE_VALUES) >= LANE_VALUES:
        return F.dropout(x, p, True)  # p = 1 (all dropped) has no finite scale: torch's answer
    return x * keep_scale(x.shape, p, x.dtype)


class Dropout(nn.Module):
    """`nn.Dropout` with the CPU mask above; no parameters, so state dicts are unchanged."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              dropout_p: float) -> torch.Tensor:
    """`F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)`:
    q (B, A, Q, D), k and v (B, A, T, D), mask bool broadcastable to (B, A, Q, T), True =
    may attend. With dropout on the CPU, the same math path SDPA takes there (scores,
    softmax, dropout, values), with the mask above and a plain softmax: SDPA's math path
    also runs a fully-masked-row check (an `all` and a `where` over every score, 1.3 ms a
    layer at MiniLM/MRPC sizes). Here a masked score is the dtype's lowest value rather
    than -inf, so a row with no key at all averages the values (as transformers' eager
    attention does) instead of needing that check; a row with a key is unchanged."""
    if dropout_p == 0.0 or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    scores = torch.matmul(q * (1.0 / math.sqrt(q.shape[-1])), k.transpose(-2, -1))  # (B, A, Q, T)
    if mask is not None:
        scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)  # matmul keeps its inputs, not its output
    return torch.matmul(dropout(scores.softmax(-1), dropout_p, True), v)
