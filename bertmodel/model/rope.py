"""Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer"), as transformers'
ModernBERT computes them, so logits match its classes to fp32 rounding.

A query or key vector of head size D is rotated pairwise by position p: dimension i
(i < D/2) and i + D/2 turn by the angle p * theta^(-2i/D) ("rotate_half" layout, the one
transformers' checkpoints use). The angles are computed in fp32 from integer positions
and applied in fp32, then cast back, as transformers does under autocast; a float64
model rotates in float64 (transformers' `.float()` would round its q and k to fp32).
There is no table to learn or to outgrow: a model trained at 1,024 tokens runs at 8,192
with the same weights (context extension then trains it there, with the larger global
theta).
Shapes: P positions, D head size.
"""
from __future__ import annotations

import torch


def inverse_frequencies(theta: float, head_dim: int, device=None) -> torch.Tensor:
    """(D/2,) theta^(-2i/D), the same float32 expression transformers evaluates."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim)).to(device)


def cos_sin(positions: torch.Tensor, theta: float, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """positions (...,) integer -> cos and sin (..., D) in `dtype`."""
    freqs = positions[..., None].float() * inverse_frequencies(theta, head_dim, positions.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (..., D) rotated by cos/sin broadcastable to it, in fp32 (float64 for float64 x),
    returned in x's dtype."""
    xf = x if x.dtype == torch.float64 else x.float()
    return (xf * cos + _rotate_half(xf) * sin).to(x.dtype)
