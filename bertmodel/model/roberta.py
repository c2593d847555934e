"""The RoBERTa encoder (`RobertaModel`, also XLM-R's): BERT's (model/encoder.py) with
RoBERTa's embeddings, under the `roberta.` prefix of every head model, with exactly the
parameter names of transformers' RobertaModel.

What the embeddings do differently (transformers' RobertaEmbeddings, after fairseq):
- a token's position is the number of non-padding tokens up to and including it, plus
  `pad_token_id`; a padding token's is `pad_token_id` itself
  (create_position_ids_from_input_ids). So the first real token reads row pad + 1, the
  table has max_sequence_length + pad + 1 rows, and padding is told by its id, not by the
  attention mask;
- the position table has `padding_idx` too: its padding row gets no gradient, as the
  word table's [PAD] row gets none;
- one token type (type_vocab_size 1): segment ids are not read, every token adds row 0
  (transformers' zeros buffer when no token_type_ids are given; a BERT tokenizer's pair
  ids of 1 would not fit the table). A table of more types reads them as BERT does.
Shapes: B batch, T padded length, N real tokens, H hidden.
"""
from __future__ import annotations

import torch
from torch import nn

from bertmodel.model.config import RobertaConfig
from bertmodel.model.dropout import Dropout
from bertmodel.model.encoder import BertModel
from bertmodel.model.unpad import Packing


def position_ids(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """(B, T) ids -> (B, T) rows of the position table: pad + the count of real tokens
    so far at real tokens, pad at padding (transformers' create_position_ids_from_input_ids)."""
    real = input_ids.ne(pad_token_id).long()
    return real.cumsum(1) * real + pad_token_id


class RobertaEmbeddings(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        H, pad = config.hidden_size, config.pad_token_id
        self.word_embeddings = nn.Embedding(config.vocab_size, H, padding_idx=pad)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, H, padding_idx=pad)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, H)
        self.LayerNorm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.pad_token_id = pad

    def _types(self, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        """Each token's type row, (.., H); row 0, broadcast, where there is one type."""
        if token_type_ids is None or self.token_type_embeddings.num_embeddings == 1:
            return self.token_type_embeddings.weight[0]
        return self.token_type_embeddings(token_type_ids)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        positions = position_ids(input_ids, self.pad_token_id)  # (B, T)
        x = self.word_embeddings(input_ids) + self._types(token_type_ids)  # (B, T, H)
        x = x + self.position_embeddings(positions)
        return self.dropout(self.LayerNorm(x))

    def packed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None, packing: Packing) -> torch.Tensor:
        """The real tokens' embeddings, (N, H); positions counted on the padded ids."""
        positions = packing.pack(position_ids(input_ids, self.pad_token_id))  # (N,)
        types = None if token_type_ids is None else packing.pack(token_type_ids)
        x = self.word_embeddings(packing.pack(input_ids)) + self._types(types) + self.position_embeddings(positions)
        return self.dropout(self.LayerNorm(x))


class RobertaModel(BertModel):
    """BERT's encoder (attention, layers, pooler, unpadding) on RoBERTa's embeddings."""

    embeddings_class = RobertaEmbeddings
