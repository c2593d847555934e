"""The in-batch-negatives loss of a bi-encoder (InfoNCE; sentence-transformers'
MultipleNegativesRankingLoss), its Matryoshka form, and the duplicate rule.

For a batch of B queries q_i, their positives p_i and n hard negatives each, every query
is scored against every passage of the batch, its own positive, the other queries'
positives and every hard negative (B x B(1 + n) candidates, column-major: the B
positives, then the B first negatives, ...), by cosine similarity times `scale` (20,
sentence-transformers' default: a temperature of 0.05), and the loss is the mean over
queries of the cross-entropy with the query's own positive as the target:

    loss = -1/B sum_i [ s cos(q_i, p_i) - log sum_j exp(s cos(q_i, c_j)) ]

Duplicates. A batch drawn from real data holds the same passage twice (SQuAD: five
questions share a paragraph) or the same query twice; counted as a negative, the copy
of a query's own positive pushes the query away from the very text it should find.
sentence-transformers avoids that with a batch sampler (NoDuplicatesBatchSampler) that
never puts a text twice in a batch; here the data order stays the trainer's (shuffled,
resumable, the same as every task's) and the loss leaves such candidates out instead:
for query i, a candidate with the same text as p_i, and the positive of another row with
the same query text, get no weight (-inf before the softmax). Texts are compared by id
(data/pairs.Pairs.text_ids: one id per distinct string). On a batch without duplicates
this is exactly MultipleNegativesRankingLoss (tests/test_embed_steps.py).

Matryoshka (Kusupati et al. 2022; sentence-transformers' MatryoshkaLoss): the same loss
on the first d dimensions of the embeddings (renormalised by the cosine) for each d of
`dims`, summed with `weights` (default 1 each), so a prefix of the vector is itself a
usable embedding.

Shapes: B queries, N = B(1 + n) candidates, D embedding width.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

DEFAULT_SCALE = 20.0


def cosine_matrix(queries: torch.Tensor, passages: torch.Tensor) -> torch.Tensor:
    """(B, N) cosine similarities (sentence-transformers' cos_sim: each row normalised,
    norms clamped at 1e-12 as F.normalize does)."""
    return F.normalize(queries, p=2, dim=-1) @ F.normalize(passages, p=2, dim=-1).T


def duplicate_mask(text_ids: torch.Tensor) -> torch.Tensor:
    """(B, N) bool, True where query i must not see candidate j as a negative: j's text
    is i's positive's, or j is the positive of another row with i's query. text_ids
    (B, 2 + n): per row the ids of its query, positive and negatives."""
    B = text_ids.shape[0]
    query, positive = text_ids[:, 0], text_ids[:, 1]
    candidates = text_ids[:, 1:].T.reshape(-1)  # column-major, as the passages are laid out
    mask = candidates[None, :] == positive[:, None]
    mask[:, :B] |= query[None, :] == query[:, None]
    mask[torch.arange(B), torch.arange(B)] = False  # the row's own positive is the target
    return mask


def in_batch_loss(queries: torch.Tensor, passages: torch.Tensor, scale: float = DEFAULT_SCALE,
                  text_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The InfoNCE loss above: queries (B, D), passages (N, D) with the B positives first."""
    B = queries.shape[0]
    scores = cosine_matrix(queries, passages) * scale
    if text_ids is not None:
        scores = scores.masked_fill(duplicate_mask(text_ids), float("-inf"))
    return F.cross_entropy(scores, torch.arange(B, device=scores.device))


def contrastive_loss(queries: torch.Tensor, passages: torch.Tensor, scale: float = DEFAULT_SCALE,
                     text_ids: torch.Tensor | None = None, dims: tuple[int, ...] | None = None,
                     weights: tuple[float, ...] | None = None) -> torch.Tensor:
    """in_batch_loss, or its Matryoshka sum over the prefixes `dims` of the embeddings."""
    if not dims:
        return in_batch_loss(queries, passages, scale, text_ids)
    weights = weights or (1.0,) * len(dims)
    return sum(w * in_batch_loss(queries[:, :d], passages[:, :d], scale, text_ids) for d, w in zip(dims, weights))
