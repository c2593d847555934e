"""Dropout, and attention with dropout on its probabilities, at a third of torch's CPU cost.

On the CPU, `F.dropout` (and the math path `scaled_dot_product_attention` takes whenever
dropout_p > 0) draws its mask with `bernoulli_`: one Mersenne-Twister call and a float
conversion per element, about 10 ns each (fwd + bwd 11 ms per million elements on 2
cores). A MiniLM step on MRPC-length pairs drops out 10 million elements, so 13% of the
step went there (torch profiler, one step of batch 16, 2 threads). Here the mask comes
from int64 draws, four 16-bit lanes each, compared with a threshold: 3.2 ms per million,
fwd + bwd, the same measurement; the MiniLM step on MRPC took 0.88x its time with it
(8 alternating rounds of 36 steps in one process; measured on full 16-bit lanes, before
the 14-bit mask below added one `&` per lane).

The rate is quantised to 1/16384 (14 bits of each lane), so p = 0.1 drops 1638/16384 =
0.09998 of the elements; the kept ones are scaled by 1 / (1 - that), so the expectation
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

LANE_VALUES = 1 << 14  # uniform values per 16-bit lane: its low 14 bits
WORD_END = 1 << 62  # draws in [0, 2^62): lanes 0-2 all 16 bits uniform, lane 3 its low 14


def lane_threshold(p: float) -> int:
    """The rate p as a lane threshold: round(p * 16384), the rate drawn being that / 16384."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    return round(p * LANE_VALUES)


def keep_scale(x: torch.Tensor, threshold: int) -> torch.Tensor:
    """A fresh CPU mask like x: 0 where dropped, 1 / (1 - p') where kept, with
    p' = threshold / 16384 the rate actually drawn."""
    n = x.numel()  # numel, not a product of sizes: a symbolic size under torch.compile
    # randint, unlike random_(), is traced by torch.compile; its range stays below 2^63
    # because inductor's own randint computes high - low in int64.
    words = torch.randint(0, WORD_END, ((n + 3) // 4,), dtype=torch.int64)
    keep = (words.view(torch.int16)[:n] & (LANE_VALUES - 1)) >= threshold  # P(keep) = 1 - p'
    return keep.to(x.dtype).mul_(LANE_VALUES / (LANE_VALUES - threshold)).view(x.shape)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    threshold = lane_threshold(p)
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or threshold >= LANE_VALUES:
        return F.dropout(x, p, True)  # p ~ 1 (all dropped) has no finite scale: torch's answer
    return x * keep_scale(x, threshold)


class Dropout(nn.Module):
    """`nn.Dropout` with the CPU mask above; no parameters, so state dicts are unchanged."""

    def __init__(self, p: float):
        super().__init__()
        lane_threshold(p)  # a rate outside [0, 1] is refused here, as nn.Dropout does
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              dropout_p: float) -> torch.Tensor:
    """`F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)`:
    q (B, A, Q, D), k and v (B, A, T, D), mask bool broadcastable to (B, A, Q, T), True =
    may attend. With dropout on the CPU, the math path SDPA takes there (scores, softmax,
    dropout, values; in fp32 for half types, as SDPA computes them), with the mask above
    and a plain softmax: SDPA's math path also runs a fully-masked-row check (an `all` and
    a `where` over every score, 1.3 ms a layer at MiniLM/MRPC sizes). A masked score is
    the dtype's lowest value rather than -inf; a row with no key at all gives zeros, as
    SDPA does. Only a mask with its own row per query (B, 1, Q, T) can hold such a row
    (a padding query outside every local window, model/windows.py): a padding mask
    (B, 1, 1, T) always leaves [CLS], so it is not checked."""
    if dropout_p == 0.0 or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    if q.dtype in (torch.float16, torch.bfloat16):
        return attention(q.float(), k.float(), v.float(), mask, dropout_p).to(q.dtype)
    scores = torch.matmul(q * (1.0 / math.sqrt(q.shape[-1])), k.transpose(-2, -1))  # (B, A, Q, T)
    if mask is not None:
        scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)  # matmul keeps its inputs, not its output
    probs = scores.softmax(-1)
    if mask is not None and mask.shape[-2] > 1:
        probs = probs * mask.any(-1, keepdim=True)  # rows with no key: zeros, as SDPA
    return torch.matmul(dropout(probs, dropout_p, True), v)
