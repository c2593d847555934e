"""The BERT encoder (`BertModel`), shared by every task's head, for one device.

Module and parameter names are exactly those of `transformers.BertModel` (under the
`bert.` prefix of every head model), so state dicts need no renaming to export or import
(LIBRARY-NOTES.md lists them). What differs is how the work is done:
- attention is one `scaled_dot_product_attention` call on a fused Q/K/V projection
  (the three `Linear`s are kept for their names; their weights are concatenated per call);
- a head that reads only some positions (MLM slots, [CLS]) passes them as
  `query_index`: the last layer then computes only those rows (see Encoder);
- there are no position_ids / token_type_ids buffers (positions are a slice of the table);
- embedding tables narrower than H (ELECTRA's `embedding_size`, config.embedding_width)
  are projected to H by `embeddings_project`, as transformers' ElectraModel does;
- with `unpad` set (model/unpad.py) only the real tokens are computed, packed as (N, H),
  with the same results at every real position.
Shapes: B batch, T padded sequence length, H hidden, A heads, D = H / A, P predictions,
V vocabulary.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertmodel.model.config import BertConfig
from bertmodel.model.dropout import Dropout, attention
from bertmodel.model.linear import Linear, linear
from bertmodel.model.unpad import Packing, UnpaddableEncoder

class Embeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        E = config.embedding_width  # H, or ELECTRA's embedding_size
        # padding_idx as transformers: the [PAD] row gets no gradient from the lookup. It
        # matters where padded positions reach the loss (QA's softmax over the window).
        self.word_embeddings = nn.Embedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, E)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, E)
        self.LayerNorm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.shape[1]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)  # (B, T, H)
        x = x + self.position_embeddings.weight[:T]  # positions 0..T-1, broadcast over B
        return self.dropout(self.LayerNorm(x))

    def packed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, packing: Packing) -> torch.Tensor:
        """The real tokens' embeddings, (N, H)."""
        x = (self.word_embeddings(packing.pack(input_ids)) + self.token_type_embeddings(packing.pack(token_type_ids))
             + self.position_embeddings(packing.positions()))
        return self.dropout(self.LayerNorm(x))


class SelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.query = Linear(H, H)
        self.key = Linear(H, H)
        self.value = Linear(H, H)


class DenseLayerNorm(nn.Module):
    """`dense` then dropout then LayerNorm(residual + x): transformers' *Output blocks."""

    def __init__(self, in_features: int, config: BertConfig):
        super().__init__()
        self.dense = Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(residual + self.dropout(self.dense(x)))


class Attention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = SelfAttention(config)  # named as in transformers: attention.self.query
        self.output = DenseLayerNorm(config.hidden_size, config)
        self.num_heads = config.num_attention_heads
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: torch.Tensor, mask, xq: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, H) -> (B, T, H); or, given query rows xq (B, Q, H), only those rows
        attend (to all of x) and (B, Q, H) comes back. With mask a Packing, x is the
        packed (N, H) and so is the result (or (B, Q, H) at xq)."""
        if isinstance(mask, Packing):
            return self._packed(x, mask, xq)
        B, T, H = x.shape
        A, D = self.num_heads, H // self.num_heads
        s = self.self
        if xq is None:  # one (3H, H) projection instead of three
            weight = torch.cat([s.query.weight, s.key.weight, s.value.weight])
            bias = torch.cat([s.query.bias, s.key.bias, s.value.bias])
            q, k, v = linear(x, weight, bias).view(B, T, 3, A, D).permute(2, 0, 3, 1, 4).unbind(0)
            xq = x
        else:
            weight = torch.cat([s.key.weight, s.value.weight])
            bias = torch.cat([s.key.bias, s.value.bias])
            k, v = linear(x, weight, bias).view(B, T, 2, A, D).permute(2, 0, 3, 1, 4).unbind(0)
            q = s.query(xq).view(B, -1, A, D).transpose(1, 2)
        # q (B, A, Q, D), k and v (B, A, T, D); mask (B, 1, 1, T) broadcasts over heads and queries
        y = attention(q, k, v, mask, self.dropout_p if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, -1, H)  # (B, Q, H)
        return self.output(y, xq)

    def _packed(self, x: torch.Tensor, packing: Packing, xq: torch.Tensor | None) -> torch.Tensor:
        s, H = self.self, x.shape[-1]
        dropout_p = self.dropout_p if self.training else 0.0
        if xq is None:
            weight = torch.cat([s.query.weight, s.key.weight, s.value.weight])
            bias = torch.cat([s.query.bias, s.key.bias, s.value.bias])
            q, k, v = linear(x, weight, bias).split(H, dim=-1)  # (N, H) each
            return self.output(packing.attend(q, k, v, self.num_heads, dropout_p), x)
        B, Q, _ = xq.shape
        k, v = linear(x, torch.cat([s.key.weight, s.value.weight]),
                        torch.cat([s.key.bias, s.value.bias])).split(H, dim=-1)
        y = packing.attend(s.query(xq).reshape(B * Q, H), k, v, self.num_heads, dropout_p, queries_per_seq=Q)
        return self.output(y.view(B, Q, H), xq)


class Intermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))  # exact erf GELU, transformers' "gelu"


class Layer(nn.Module):
    """Post-LN transformer block (Devlin et al. 2019 / Vaswani et al. 2017)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = DenseLayerNorm(config.intermediate_size, config)

    def forward(self, x: torch.Tensor, mask, query_index: torch.Tensor | None = None):
        """query_index (B, Q): compute the output only at these positions -> (B, Q, H).
        Packed (mask a Packing, x (N, H)): the same, query_index still per sequence."""
        xq = None
        if query_index is not None and isinstance(mask, Packing):
            B, Q = query_index.shape
            xq = x.index_select(0, mask.query_rows(query_index)).view(B, Q, -1)  # (B, Q, H)
        elif query_index is not None:
            xq = x.gather(1, query_index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))  # (B, Q, H)
        x = self.attention(x, mask, xq)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))

    def forward(self, x: torch.Tensor, mask,
                query_index: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, H) -> (B, T, H), or (B, Q, H) at query_index: the last layer then runs
        its queries, feed-forward and LayerNorms only there (keys/values still use all T)."""
        for i, layer in enumerate(self.layer):
            last = i == len(self.layer) - 1
            x = layer(x, mask, query_index if last else None)
        return x


class Pooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))  # the [CLS] state -> (B, H)


class BertModel(UnpaddableEncoder):
    embeddings_class = Embeddings  # RoBERTa's counts positions otherwise (model/roberta.py)

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.embeddings = self.embeddings_class(config)
        if config.embedding_width != config.hidden_size:  # ElectraModel's name and place: after the dropout
            self.embeddings_project = Linear(config.embedding_width, config.hidden_size)
        self.encoder = Encoder(config)
        # transformers' BertForQuestionAnswering and BertForMaskedLM have no pooler.
        self.pooler = Pooler(config) if add_pooling_layer else None
        self.unpad: str | None = None  # a model/unpad.py kernel: compute real tokens only

    def forward(self, input_ids, token_type_ids, attention_mask, query_index=None) -> torch.Tensor:
        """Hidden states (B, T, H), or (B, Q, H) at query_index (see Encoder). Unpadded,
        the same values at real tokens and zeros at padding."""
        if self.unpad is not None and attention_mask is not None:
            packing = Packing.from_mask(attention_mask, self.unpad)
            x = self._project(self.embeddings.packed(input_ids, token_type_ids, packing))
            x = self.encoder(x, packing, query_index)
            return x if query_index is not None else packing.unpack(x)
        # (B, T) 1/0 -> (B, 1, 1, T) bool, True = may attend; broadcast over heads and queries.
        mask = None if _attends_everywhere(attention_mask) else attention_mask.bool()[:, None, None, :]
        return self.encoder(self._project(self.embeddings(input_ids, token_type_ids)), mask, query_index)

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        """(.., E) embeddings -> (.., H): `embeddings_project` where the tables are narrower."""
        project = getattr(self, "embeddings_project", None)
        return x if project is None else project(x)

    def embedding_tables(self) -> list[nn.Embedding]:
        emb = self.embeddings
        return [emb.word_embeddings, emb.position_embeddings, emb.token_type_embeddings]


def _attends_everywhere(attention_mask: torch.Tensor | None) -> bool:
    """No mask, or a CPU batch without padding (most pre-training batches: BERT's pairing
    fills rows to the target length). Attention then runs without a mask, as
    transformers' SDPA path also drops an all-ones mask: the same scores, without a
    masked_fill over every layer's (B, A, T, T) scores (36 ms of a 3.9 s base step at
    8 x 128 in the profiler; below the step's run-to-run noise when timed). Only on the
    CPU, where reading the mask costs nothing; on CUDA it would be a host sync every
    step. Not under torch.compile, which would break the graph there."""
    if attention_mask is None:
        return True
    return (attention_mask.device.type == "cpu" and not torch.compiler.is_compiling()
            and bool(attention_mask.all()))


def init_weights(module: nn.Module, config: BertConfig, word_embeddings: nn.Embedding | None = None,
                 skip: tuple[nn.Module, ...] = ()) -> None:
    """BERT's init (`module.apply`-style, one module): every weight ~ N(0, 0.02), biases
    0, LayerNorm 1/0; the [PAD] row of the word embeddings 0 as transformers does
    (padding_idx). Modules in `skip` (a tied decoder) keep what they have."""
    std = config.initializer_range
    if module in skip:
        return
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module is word_embeddings:
            with torch.no_grad():
                module.weight[config.pad_token_id].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
