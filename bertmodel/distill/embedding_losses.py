"""The losses a bi-encoder student learns a teacher by, as modules over the student (the
training module tasks/embed_distill.py hands the trainer: its forward takes the batch,
teacher targets included, and returns the loss; checkpoints and exports see the student).

EmbeddingMSE (sentence-transformers' MSELoss; Reimers & Gurevych 2020, "Making Monolingual
Sentence Embeddings Multilingual using Knowledge Distillation"): texts (B, T) and the
teacher's unit vectors of them (B, D); loss = mean over B x D of (s - t)^2, s the
student's vector after its projection (where the widths differ) and normalisation, as
the student's modules Pooling -> Dense -> Normalize give it to sentence-transformers.

MarginMSE (sentence-transformers' MarginMSELoss; Hofstätter et al. 2020, "Improving
Efficient Neural Ranking Models with Cross-Architecture Knowledge Distillation"):
(query, positive, negatives...) rows as the embed task collates them (queries (B, Tq),
passages (B(1 + n), Tp) column-major: every positive, then every first negative, ...)
and the teacher's margins t(q, p) - t(q, n_i) (B, n); loss = mean over B x n of
((s(q, p) - s(q, n_i)) - (t(q, p) - t(q, n_i)))^2 with s the dot product of the student's
(normalised) vectors, pairwise_dot_score as there.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from bertmodel.model.heads import at_least_fp32


class DistillationOutput(NamedTuple):
    loss: torch.Tensor
    student: torch.Tensor  # (B, D) the student's vectors (MSE) or (B, n) its margins (MarginMSE), detached


class EmbeddingMSE(torch.nn.Module):
    def __init__(self, student: torch.nn.Module):
        super().__init__()
        self.student = student

    def forward(self, input_ids, attention_mask, token_type_ids=None, teacher_embeddings=None) -> DistillationOutput:
        vectors = at_least_fp32(self.student.embed(input_ids, attention_mask, token_type_ids))  # (B, D)
        loss = F.mse_loss(vectors, teacher_embeddings.to(vectors.dtype))
        return DistillationOutput(loss, vectors.detach())


class MarginMSE(torch.nn.Module):
    def __init__(self, student: torch.nn.Module):
        super().__init__()
        self.student = student

    def forward(self, input_ids, attention_mask, token_type_ids=None, passage_input_ids=None,
                passage_attention_mask=None, passage_token_type_ids=None, text_ids=None,
                teacher_margins=None) -> DistillationOutput:
        queries = at_least_fp32(self.student.embed(input_ids, attention_mask, token_type_ids))  # (B, D)
        passages = at_least_fp32(self.student.embed(passage_input_ids, passage_attention_mask,
                                                    passage_token_type_ids))  # (B(1 + n), D)
        B = queries.shape[0]
        columns = passages.view(-1, B, passages.shape[-1])  # (1 + n, B, D): positives, then each negative
        positive = (queries * columns[0]).sum(-1)  # (B,)
        margins = torch.stack([positive - (queries * negative).sum(-1) for negative in columns[1:]], dim=1)  # (B, n)
        loss = F.mse_loss(margins, teacher_margins.to(margins.dtype))
        return DistillationOutput(loss, margins.detach())
