"""MiniLMv2's loss: multi-head self-attention relation distillation (Wang et al. 2021,
"MiniLMv2: Multi-Head Self-Attention Relation Distillation for Compressing Pretrained
Transformers", section 3).

Inputs: one teacher layer's and the student's last layer's queries, keys and values, all
attention heads side by side, (B, T, W) with W the model's width (model/layer_states.py
takes them as the attention uses them); teacher and student may differ in width and head
count. Each is split into A_r relation heads of width d_r = W / A_r (A_r the same on both
sides, so relations compare head for head whatever the widths), and per relation head

    R_QQ = softmax(Q_r Q_r^T / sqrt(d_r)),  R_KK from K,  R_VV from V     (B, A_r, T, T)

with padding keys masked out of every softmax. The loss is

    KL(R_QQ^T || R_QQ^S) + KL(R_KK^T || R_KK^S) + KL(R_VV^T || R_VV^S)

each KL summed over the keys and averaged over the relation heads and the real
(non-padding) query tokens of the batch. No label is needed: any text will do. Related:
the MSE on hidden states (TinyBERT) that tasks may add (hidden_mse below).

Precision: the relations are computed in at least fp32 with autocast off (a bf16 score
matrix would round the softmax's inputs at ~3 significant digits); float64 stays float64.
Shapes: B batch, T padded length, W width, A_r relation heads, d_r = W / A_r.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F


class RelationLosses(NamedTuple):
    query: torch.Tensor  # KL of the Q-Q relations, a scalar
    key: torch.Tensor  # K-K
    value: torch.Tensor  # V-V

    @property
    def total(self) -> torch.Tensor:
        return self.query + self.key + self.value


def _exact(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def log_relations(states: torch.Tensor, heads: int, real: torch.Tensor) -> torch.Tensor:
    """(B, T, W) states -> (B, A_r, T, T) log softmax(S_r S_r^T / sqrt(d_r)) over the
    keys, real (B, T) bool: padding keys get the dtype's lowest score, so probability 0."""
    B, T, W = states.shape
    d = W // heads
    s = _exact(states).view(B, T, heads, d).transpose(1, 2)  # (B, A_r, T, d_r)
    scores = torch.matmul(s, s.transpose(-1, -2)) / math.sqrt(d)
    scores = scores.masked_fill(~real[:, None, None, :], torch.finfo(scores.dtype).min)
    return scores.log_softmax(-1)


def relation_kl(teacher: torch.Tensor, student: torch.Tensor, heads: int, real: torch.Tensor) -> torch.Tensor:
    """KL(R_teacher || R_student) of one kind of state (Q, K or V), summed over keys,
    averaged over relation heads and real query tokens. A padding key has probability 0 on
    both sides and adds exactly 0 (its log-probabilities are finite: no 0 x inf)."""
    log_t = log_relations(teacher, heads, real)
    log_s = log_relations(student, heads, real)
    kl = F.kl_div(log_s, log_t, reduction="none", log_target=True).sum(-1)  # (B, A_r, T): per query row
    queries = real.to(kl.dtype)[:, None, :]
    return (kl * queries).sum() / (heads * queries.sum())


def relation_losses(teacher, student, heads: int, attention_mask: torch.Tensor) -> RelationLosses:
    """teacher, student: (query, key, value) triples of (B, T, W_t) and (B, T, W_s)."""
    real = attention_mask.bool()
    with torch.autocast(attention_mask.device.type, enabled=False):
        return RelationLosses(*(relation_kl(t, s, heads, real) for t, s in zip(teacher[:3], student[:3])))


def hidden_mse(student: torch.Tensor, teacher: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the real tokens' features (TinyBERT's hidden-state loss):
    (B, T, W) each, the student's already projected to the teacher's width."""
    real = attention_mask.bool()
    with torch.autocast(attention_mask.device.type, enabled=False):
        diff = _exact(student)[real] - _exact(teacher)[real]  # (N, W)
        return diff.pow(2).mean()
