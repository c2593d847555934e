"""BERT for pre-training (masked LM + next sentence prediction), for one device.

Module and parameter names are exactly those of `transformers.BertForPreTraining`, so the
state dict needs no renaming to export or import (LIBRARY-NOTES.md lists them). What
differs is how the work is done:
- attention is one `scaled_dot_product_attention` call on a fused Q/K/V projection
  (the three `Linear`s are kept for their names; their weights are concatenated per call);
- the MLM head runs only at `masked_lm_positions`: hidden states are gathered to
  (B, P, H) with P = max_predictions_per_seq (a static shape, padded slots carry label
  -100), so the (B, T, V) logits transformers builds never exist; the gather happens
  before the last layer, which then computes only [CLS] and those P rows;
- there are no position_ids / token_type_ids buffers (positions are a slice of the table).
Shapes: B batch, T padded sequence length, H hidden, A heads, D = H / A, P predictions,
V vocabulary.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertmodel.config import BertConfig

IGNORE_INDEX = -100  # label of padded prediction slots (the transformers / PyTorch convention)


class PretrainingOutput(NamedTuple):
    loss: torch.Tensor | None  # mlm_loss + nsp_loss, as transformers sums them
    mlm_loss: torch.Tensor | None  # mean over real (non -100) prediction slots
    nsp_loss: torch.Tensor | None
    mlm_logits: torch.Tensor  # (B, P, V), only at masked_lm_positions
    nsp_logits: torch.Tensor  # (B, 2); class 0 = B follows A


class Embeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.shape[1]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)  # (B, T, H)
        x = x + self.position_embeddings.weight[:T]  # positions 0..T-1, broadcast over B
        return self.dropout(self.LayerNorm(x))


class SelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.query = nn.Linear(H, H)
        self.key = nn.Linear(H, H)
        self.value = nn.Linear(H, H)


class DenseLayerNorm(nn.Module):
    """`dense` then dropout then LayerNorm(residual + x): transformers' *Output blocks."""

    def __init__(self, in_features: int, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(residual + self.dropout(self.dense(x)))


class Attention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = SelfAttention(config)  # named as in transformers: attention.self.query
        self.output = DenseLayerNorm(config.hidden_size, config)
        self.num_heads = config.num_attention_heads
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, xq: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, H) -> (B, T, H); or, given query rows xq (B, Q, H), only those rows
        attend (to all of x) and (B, Q, H) comes back."""
        B, T, H = x.shape
        A, D = self.num_heads, H // self.num_heads
        s = self.self
        if xq is None:  # one (3H, H) projection instead of three
            weight = torch.cat([s.query.weight, s.key.weight, s.value.weight])
            bias = torch.cat([s.query.bias, s.key.bias, s.value.bias])
            q, k, v = F.linear(x, weight, bias).view(B, T, 3, A, D).permute(2, 0, 3, 1, 4).unbind(0)
            xq = x
        else:
            weight = torch.cat([s.key.weight, s.value.weight])
            bias = torch.cat([s.key.bias, s.value.bias])
            k, v = F.linear(x, weight, bias).view(B, T, 2, A, D).permute(2, 0, 3, 1, 4).unbind(0)
            q = s.query(xq).view(B, -1, A, D).transpose(1, 2)
        # q (B, A, Q, D), k and v (B, A, T, D); mask (B, 1, 1, T) broadcasts over heads and queries
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, -1, H)  # (B, Q, H)
        return self.output(y, xq)


class Intermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))  # exact erf GELU, transformers' "gelu"


class Layer(nn.Module):
    """Post-LN transformer block (Devlin et al. 2019 / Vaswani et al. 2017)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = DenseLayerNorm(config.intermediate_size, config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, query_index: torch.Tensor | None = None):
        """query_index (B, Q): compute the output only at these positions -> (B, Q, H)."""
        xq = None
        if query_index is not None:
            xq = x.gather(1, query_index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))  # (B, Q, H)
        x = self.attention(x, mask, xq)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None,
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
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))  # the [CLS] state -> (B, H)


class BertModel(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config)

    def forward(self, input_ids, token_type_ids, attention_mask, query_index=None) -> torch.Tensor:
        """Hidden states (B, T, H), or (B, Q, H) at query_index (see Encoder)."""
        # (B, T) 1/0 -> (B, 1, 1, T) bool, True = may attend; broadcast over heads and queries.
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        return self.encoder(self.embeddings(input_ids, token_type_ids), mask, query_index)


class PredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class LMPredictionHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = PredictionHeadTransform(config)
        # The decoder's weight is tied to the word embeddings and its bias is `bias`
        # (BertForPreTraining._tied_weights_keys); both are set by the parent.
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(x))


class PreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = LMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class BertForPreTraining(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = PreTrainingHeads(config)
        self.tie_weights()
        self.apply(self._init_weights)

    def tie_weights(self) -> None:
        predictions = self.cls.predictions
        predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight
        predictions.decoder.bias = predictions.bias

    def _init_weights(self, module: nn.Module) -> None:
        # BERT's init: every weight ~ N(0, 0.02), biases 0, LayerNorm 1/0; [PAD] row 0
        # as transformers does (padding_idx), MLM output bias 0.
        std = self.config.initializer_range
        if isinstance(module, nn.Linear) and module is not self.cls.predictions.decoder:
            nn.init.normal_(module.weight, mean=0.0, std=std)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module is self.bert.embeddings.word_embeddings:
                with torch.no_grad():
                    module.weight[self.config.pad_token_id].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, LMPredictionHead):
            nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T) token ids, masking applied
        token_type_ids: torch.Tensor,  # (B, T) 0/1
        attention_mask: torch.Tensor | None,  # (B, T) 1 = real token, 0 = padding
        masked_lm_positions: torch.Tensor,  # (B, P) positions to predict, padded slots any valid index
        masked_lm_labels: torch.Tensor | None = None,  # (B, P) original ids, -100 in padded slots
        next_sentence_label: torch.Tensor | None = None,  # (B,) 0 = B follows A, 1 = random
    ) -> PretrainingOutput:
        # Only [CLS] (for NSP) and the P prediction slots are ever read from the last
        # layer, so it runs at those 1 + P positions alone: same values there, ~(T-1-P)/T
        # of the last layer's work saved (the last-layer pruning of MLPerf BERT entries).
        B, P = masked_lm_positions.shape
        query_index = torch.cat([masked_lm_positions.new_zeros(B, 1), masked_lm_positions], 1).long()
        hidden = self.bert(input_ids, token_type_ids, attention_mask, query_index)  # (B, 1 + P, H)
        nsp_logits = self.cls.seq_relationship(self.bert.pooler(hidden))  # [CLS] -> (B, 2)
        mlm_logits = self.cls.predictions(hidden[:, 1:])  # (B, P, H) -> (B, P, V)

        mlm_loss = nsp_loss = loss = None
        if masked_lm_labels is not None:
            mlm_loss = F.cross_entropy(mlm_logits.flatten(0, 1).float(), masked_lm_labels.flatten().long(),
                                       ignore_index=IGNORE_INDEX)
            loss = mlm_loss
        if next_sentence_label is not None:
            nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label.long())
            loss = nsp_loss if loss is None else loss + nsp_loss
        return PretrainingOutput(loss, mlm_loss, nsp_loss, mlm_logits, nsp_logits)

    def num_params(self, embeddings: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())  # parameters() yields tied tensors once
        if not embeddings:
            emb = self.bert.embeddings
            n -= sum(m.weight.numel() for m in (emb.word_embeddings, emb.position_embeddings,
                                                 emb.token_type_embeddings))
        return n

    def param_groups(self, weight_decay: float) -> list[dict]:
        """Optimizer groups, BERT's convention (google-research/bert optimization.py,
        exclude_from_weight_decay=["LayerNorm", "bias"]): decay every matrix, including
        the embedding tables; no decay on biases and LayerNorm, i.e. on every 1-D tensor."""
        decay, no_decay = [], []
        for _, p in self.named_parameters():  # tied parameters appear once
            if p.requires_grad:
                (decay if p.dim() >= 2 else no_decay).append(p)
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]
