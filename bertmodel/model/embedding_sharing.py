"""How two models read one embedding table (ELECTRA's generator and discriminator, model/rtd.py).

- `ProjectedEmbedding`: a table read at a narrower width through a bias-free projection;
  as a table, its `weight` is the product (so a model built on it exports as a plain one).
- `DisentangledEmbedding`: DeBERTaV3's gradient-disentangled sharing (He et al. 2021,
  arXiv 2111.09543, section 3.2): stop-gradient(shared) + a delta of its own from 0.
Both are read as nn.Embedding is: called with ids, `weight` for a tied decoder.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertmodel.model.modernbert_heads import _trunc_normal

EMBEDDING_SHARING = ("tied", "gdes")  # ELECTRA's, DeBERTaV3's gradient-disentangled


class ProjectedEmbedding(nn.Module):
    """The discriminator's token table (`table`, V x H_d) read at the generator's width
    through `project` (H_d -> H_g, no bias): as a table, `weight` = table.weight project^T."""

    def __init__(self, table: nn.Embedding, width: int, std: float, cutoff: float):
        super().__init__()
        self.table = table
        self.project = nn.Linear(table.embedding_dim, width, bias=False)
        _trunc_normal(self.project.weight, std, cutoff)

    @property
    def weight(self) -> torch.Tensor:  # (V, H_g)
        return self.table.weight @ self.project.weight.t()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.linear(self.table(input_ids), self.project.weight)


class DisentangledEmbedding(nn.Module):
    """DeBERTaV3's discriminator table: `shared` (the generator's E, read without its
    gradient) + `delta` (E_delta, from 0); `weight` is what the discriminator reads."""

    def __init__(self, shared: nn.Embedding):
        super().__init__()
        self.shared = shared
        self.delta = nn.Parameter(torch.zeros_like(shared.weight))
        self.padding_idx = shared.padding_idx
        self.embedding_dim = shared.embedding_dim

    @property
    def weight(self) -> torch.Tensor:  # (V, E)
        return self.shared.weight.detach() + self.delta

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight, self.padding_idx)


def disentangle(embeddings: nn.Module, table: str) -> None:
    """The discriminator's `embeddings.<table>` read as sg(E) + E_delta."""
    setattr(embeddings, table, DisentangledEmbedding(getattr(embeddings, table)))
