"""Cross-encoders: the sequence-classification heads with one logit, trained to rank.

A reranker is BertForSequenceClassification (or ModernBertForSequenceClassification,
RobertaForSequenceClassification, XLMRobertaForSequenceClassification) with num_labels 1: the same modules under the same names, exported as that class, which
transformers' AutoModelForSequenceClassification and sentence-transformers' CrossEncoder
load. Only the loss differs from the regression head's MSE:
  bce       labelled pairs: input_ids (B, T), labels (B,) in [0, 1]: binary cross-entropy
            of the logit (torch's BCEWithLogitsLoss, as sentence-transformers'
            BinaryCrossEntropyLoss computes it).
  listwise  groups: input_ids (N, T), every candidate of the batch's queries in a row,
            and candidates (B, C): the rows of each query's candidates, its positive
            first, -1 where a query has fewer than C; softmax cross-entropy over each
            query's candidates with the positive as the target (sentence-transformers'
            cross-encoder MultipleNegativesRankingLoss with scale 1, no activation and no
            in-batch negatives: the hard negatives only).
Shapes: B pairs (bce) or queries (listwise), N candidate rows, T padded length.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from bertmodel.model.heads import BertForSequenceClassification, at_least_fp32
from bertmodel.model.modernbert_heads import ModernBertForSequenceClassification
from bertmodel.model.roberta_heads import RobertaForSequenceClassification, xlm_variant


class RerankOutput(NamedTuple):
    loss: torch.Tensor | None
    logits: torch.Tensor  # (B,) one score per pair, or (N,) per candidate row with `candidates`
    group_logits: torch.Tensor | None  # (B, C) each query's candidates (listwise), -inf where absent


def bce_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of (B,) logits against (B,) targets in [0, 1]."""
    logits = at_least_fp32(logits)
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


def group_scores(logits: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """(B, C) logits of each query's candidates from the (N,) row logits; -inf where a
    query has no C-th candidate (index -1), which the softmax then gives no weight."""
    logits = at_least_fp32(logits)
    picked = logits[candidates.clamp(min=0)]
    return picked.masked_fill(candidates < 0, float("-inf"))


def listwise_loss(group_logits: torch.Tensor) -> torch.Tensor:
    """Mean over queries of the softmax cross-entropy with the positive (column 0) as the target."""
    target = torch.zeros(group_logits.shape[0], dtype=torch.long, device=group_logits.device)
    return F.cross_entropy(group_logits, target)


class _Reranking:
    """The one-logit forward and the reranking losses over a classification head."""

    hf_architecture = ""  # the sequence-classification class's (set by the subclasses)

    def __init__(self, config, num_labels: int = 1):
        if num_labels != 1:
            raise ValueError(f"a reranker has one logit, not {num_labels}")
        super().__init__(config, 1)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                candidates=None) -> RerankOutput:
        logits = super().forward(input_ids, token_type_ids, attention_mask).logits[:, 0]  # (B,) or (N,)
        if candidates is not None:
            grouped = group_scores(logits, candidates)
            return RerankOutput(listwise_loss(grouped), logits, grouped)
        return RerankOutput(bce_loss(logits, labels) if labels is not None else None, logits, None)


class BertForReranking(_Reranking, BertForSequenceClassification):
    hf_architecture = "BertForSequenceClassification"


class ModernBertForReranking(_Reranking, ModernBertForSequenceClassification):
    hf_architecture = "ModernBertForSequenceClassification"


class RobertaForReranking(_Reranking, RobertaForSequenceClassification):
    hf_architecture = "RobertaForSequenceClassification"


RERANKERS = {"bert": BertForReranking, "modernbert": ModernBertForReranking, "roberta": RobertaForReranking,
             "xlm-roberta": xlm_variant(RobertaForReranking)}
