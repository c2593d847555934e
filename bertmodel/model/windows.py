"""Local (sliding-window) attention: each token attends only to the tokens at most
`window` positions away in its own sequence (ModernBERT's local layers, window 64 on
each side of a 128-token local_attention; transformers' bidirectional sliding-window
mask, |q - k| <= window, and the padding mask).

Two ways, with the same results:
- `window_mask`: the dense (B, 1, Q, T) boolean mask for one SDPA call; used for short
  sequences (T <= 2 x the block) and for the last layer's few query rows;
- `banded_attention`: queries in blocks of `block` rows, each block attending to the
  block + window keys either side, so a local layer costs O(T x (block + 2 window))
  instead of O(T^2): at 1,024 tokens a quarter of the scores, at 8,192 a thirty-second,
  and no (B, T, T) mask is ever built. Key positions outside the sequence (the zero
  padding that lets every block take the same shape) are masked like padding.
Shapes: B batch, A heads, T padded length, Q query rows, D head size.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from bertmodel.model.dropout import attention


def window_mask(valid: torch.Tensor | None, window: int, seq_len: int,
                query_positions: torch.Tensor | None = None) -> torch.Tensor:
    """(B, 1, Q, T) bool, True = may attend: key k is a real token (valid (B, T), None:
    all are) within `window` of the query's position (query_positions (B, Q); None:
    every position, Q = T)."""
    keys = torch.arange(seq_len, device=valid.device if valid is not None else None)
    if query_positions is None:
        near = (keys[:, None] - keys[None, :]).abs() <= window  # (T, T)
        near = near[None, None]
    else:
        near = ((query_positions[:, :, None] - keys).abs() <= window)[:, None]  # (B, 1, Q, T)
    return near if valid is None else near & valid[:, None, None, :]


def banded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor | None, window: int,
                     dropout_p: float, block: int) -> torch.Tensor:
    """q, k, v (B, A, T, D) -> (B, A, T, D): every query attends to the real keys within
    `window` of it, computed block by block (module docstring)."""
    B, A, T, D = q.shape
    blocks = -(-T // block)
    Tp = blocks * block
    span = block + 2 * window  # keys a block of queries can reach
    # Keys padded by `window` on the left and up to the last block's reach on the right;
    # block b's keys are then rows [b * block, b * block + span) of the padded keys.
    pad_k = (0, 0, window, Tp - T + window)
    kb = F.pad(k, pad_k).unfold(2, span, block)  # (B, A, blocks, D, span)
    vb = F.pad(v, pad_k).unfold(2, span, block)
    qb = F.pad(q, (0, 0, 0, Tp - T)).view(B, A, blocks, block, D)
    # (B, A, blocks, ...) -> (B * blocks, A, ...): four dimensions, as SDPA takes them
    qb = qb.permute(0, 2, 1, 3, 4).reshape(B * blocks, A, block, D)
    kb = kb.permute(0, 2, 1, 4, 3).reshape(B * blocks, A, span, D)
    vb = vb.permute(0, 2, 1, 4, 3).reshape(B * blocks, A, span, D)
    start = torch.arange(blocks, device=q.device) * block  # first query position of each block
    query_pos = start[:, None] + torch.arange(block, device=q.device)  # (blocks, block)
    key_pos = start[:, None] - window + torch.arange(span, device=q.device)  # (blocks, span)
    near = (query_pos[:, :, None] - key_pos[:, None, :]).abs() <= window  # (blocks, block, span)
    inside = (key_pos >= 0) & (key_pos < T)  # (blocks, span)
    keys_ok = inside[None].expand(B, -1, -1)
    if valid is not None:
        padded_valid = F.pad(valid, (window, Tp - T + window))  # False outside the sequence
        keys_ok = padded_valid.unfold(1, span, block)  # (B, blocks, span)
    mask = (near[None] & keys_ok[:, :, None, :]).reshape(B * blocks, 1, block, span)
    y = attention(qb, kb, vb, mask, dropout_p)  # (B * blocks, A, block, D)
    y = y.view(B, blocks, A, block, D).permute(0, 2, 1, 3, 4).reshape(B, A, Tp, D)
    return y[:, :, :T]


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor | None, window: int,
                    dropout_p: float, block: int, query_positions: torch.Tensor | None = None) -> torch.Tensor:
    """Sliding-window attention, q (B, A, Q, D) at query_positions (B, Q) (None: every
    position, Q = T), k and v (B, A, T, D): banded where that saves work, else one SDPA
    call with the dense mask."""
    T = k.shape[2]
    if query_positions is None and T > 2 * block:
        return banded_attention(q, k, v, valid, window, dropout_p, block)
    return attention(q, k, v, window_mask(valid, window, T, query_positions), dropout_p)
