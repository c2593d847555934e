"""The ModernBERT-style encoder (`ModernBertModel`; Warner et al. 2024, "Smarter, Better,
Faster, Longer", arXiv 2412.13663): rotary positions (model/rope.py), pre-LayerNorm
without biases, a GELU-gated MLP (GeGLU), and global attention every third layer with
sliding-window attention (model/windows.py) between, up to 8,192 tokens. No position or
segment embeddings: token_type_ids are accepted and ignored, so the tasks' batches feed
either architecture.

Module and parameter names are exactly those of `transformers.ModernBertModel` (under the
`model.` prefix of every head), so state dicts move with no renaming. What it shares with
the BERT encoder (model/encoder.py) is taken from the same modules: the attention call and
dropout (model/dropout.py), the CPU linear (model/linear.py), unpadded execution
(model/unpad.py: `unpad` set, only the real tokens are computed, packed (N, H), the local
window applied per sequence) and the last layer computing only the rows a head reads
(`query_index`: the MLM slots, [CLS]).
Shapes: B batch, T padded length, N real tokens, H hidden, A heads, D = H / A, Q query
rows per sequence, I GLU width.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertmodel.model.config import ModernBertConfig
from bertmodel.model.dropout import Dropout, attention
from bertmodel.model.encoder import _attends_everywhere
from bertmodel.model.linear import Linear, linear
from bertmodel.model.rope import cos_sin, rotate
from bertmodel.model.unpad import Packing, UnpaddableEncoder
from bertmodel.model.windows import local_attention


@dataclass
class Context:
    """What every layer of one forward reads: the padding (or the packing), and each
    layer type's rotary cos/sin at every token ((T, D) padded, (N, D) packed)."""

    packing: Packing | None
    valid: torch.Tensor | None  # (B, T) bool, True = real token; None: no padding (padded path)
    rope: dict[bool, tuple[torch.Tensor, torch.Tensor]]  # local? -> (cos, sin)


class ModernBertEmbeddings(nn.Module):
    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.drop = Dropout(config.embedding_dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))


class ModernBertAttention(nn.Module):
    def __init__(self, config: ModernBertConfig, layer: int):
        super().__init__()
        H = config.hidden_size
        self.Wqkv = Linear(H, 3 * H, bias=config.attention_bias)  # rows: Q, then K, then V
        self.Wo = Linear(H, H, bias=config.attention_bias)
        self.out_drop = Dropout(config.attention_dropout)
        self.heads = config.num_attention_heads
        self.dropout_p = config.attention_dropout
        self.local = config.is_local(layer)
        self.window = config.window if self.local else None
        self.block = config.local_attention  # query rows per block of banded attention

    def forward(self, x: torch.Tensor, ctx: Context, query_index: torch.Tensor | None = None,
                xq: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, H) normed -> (B, T, H); with query_index (B, Q) and its rows xq
        (B, Q, H), only those rows attend -> (B, Q, H). Packed: x (N, H) -> (N, H)."""
        if ctx.packing is not None:
            return self._packed(x, ctx, query_index, xq)
        B, T, H = x.shape
        A, D = self.heads, H // self.heads
        cos, sin = ctx.rope[self.local]  # (T, D)
        dropout_p = self.dropout_p if self.training else 0.0
        W, b = self.Wqkv.weight, self.Wqkv.bias
        if query_index is None:
            q, k, v = linear(x, W, b).view(B, T, 3, A, D).permute(2, 0, 3, 1, 4).unbind(0)  # (B, A, T, D) each
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        else:
            k, v = linear(x, W[H:], None if b is None else b[H:]).view(B, T, 2, A, D).permute(2, 0, 3, 1, 4).unbind(0)
            k = rotate(k, cos, sin)
            q = linear(xq, W[:H], None if b is None else b[:H]).view(B, -1, A, D).transpose(1, 2)  # (B, A, Q, D)
            q = rotate(q, cos[query_index][:, None], sin[query_index][:, None])
        if self.local:
            y = local_attention(q, k, v, ctx.valid, self.window, dropout_p, self.block, query_index)
        else:
            mask = None if ctx.valid is None else ctx.valid[:, None, None, :]
            y = attention(q, k, v, mask, dropout_p)
        return self.out_drop(self.Wo(y.transpose(1, 2).reshape(B, -1, H)))

    def _packed(self, x: torch.Tensor, ctx: Context, query_index, xq) -> torch.Tensor:
        packing, H = ctx.packing, x.shape[-1]
        A, D = self.heads, H // self.heads
        cos, sin = (t[:, None] for t in ctx.rope[self.local])  # (N, 1, D): one angle per token, every head
        dropout_p = self.dropout_p if self.training else 0.0
        W, b = self.Wqkv.weight, self.Wqkv.bias
        if query_index is None:
            q, k, v = linear(x, W, b).view(-1, 3, A, D).unbind(1)  # (N, A, D) each
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            y = packing.attend(q.reshape(-1, H), k.reshape(-1, H), v.reshape(-1, H), A, dropout_p,
                               window=self.window, block=self.block)
            return self.out_drop(self.Wo(y))
        B, Q, _ = xq.shape
        k, v = linear(x, W[H:], None if b is None else b[H:]).view(-1, 2, A, D).unbind(1)
        k = rotate(k, cos, sin)
        rows = packing.query_rows(query_index)
        q = rotate(linear(xq, W[:H], None if b is None else b[:H]).reshape(B * Q, A, D), cos[rows], sin[rows])
        y = packing.attend(q.reshape(-1, H), k.reshape(-1, H), v.reshape(-1, H), A, dropout_p, queries_per_seq=Q,
                           window=self.window, block=self.block, query_positions=query_index)
        return self.out_drop(self.Wo(y.view(B, Q, H)))


class ModernBertMLP(nn.Module):
    """GeGLU (Shazeer 2020): Wi gives the GELU input and its gate, I columns each."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.Wi = Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.drop = Dropout(config.mlp_dropout)
        self.Wo = Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(F.gelu(value) * gate))  # exact erf GELU, transformers' "gelu"


class ModernBertEncoderLayer(nn.Module):
    """Pre-LN block: x + attn(norm(x)), then x + mlp(norm(x)). Layer 0 has no attn_norm:
    the embedding norm has just normalised its input (transformers: nn.Identity)."""

    def __init__(self, config: ModernBertConfig, layer: int):
        super().__init__()
        self.attn_norm = (nn.Identity() if layer == 0 else
                          nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias))
        self.attn = ModernBertAttention(config, layer)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.mlp = ModernBertMLP(config)

    def forward(self, x: torch.Tensor, ctx: Context, query_index: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, H) -> (B, T, H), or (B, Q, H) at query_index (keys and values still
        cover every token). Packed: (N, H), query_index still per sequence."""
        h = self.attn_norm(x)
        if query_index is None:
            x = x + self.attn(h, ctx)
        else:
            if ctx.packing is not None:
                B, Q = query_index.shape
                rows = ctx.packing.query_rows(query_index)
                xq, hq = (t.index_select(0, rows).view(B, Q, -1) for t in (x, h))
            else:
                index = query_index.unsqueeze(-1).expand(-1, -1, x.shape[-1])
                xq, hq = x.gather(1, index), h.gather(1, index)
            x = xq + self.attn(h, ctx, query_index, hq)
        return x + self.mlp(self.mlp_norm(x))


class ModernBertModel(UnpaddableEncoder):
    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.config = config
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(ModernBertEncoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.unpad: str | None = None  # a model/unpad.py kernel: compute real tokens only

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> dict[bool, tuple[torch.Tensor, torch.Tensor]]:
        c, D = self.config, self.config.hidden_size // self.config.num_attention_heads
        kinds = {c.is_local(i) for i in range(c.num_hidden_layers)}
        return {local: cos_sin(positions, c.local_rope_theta if local else c.global_rope_theta, D, dtype)
                for local in kinds}

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, query_index=None) -> torch.Tensor:
        """Hidden states after the final norm, (B, T, H), or (B, Q, H) at query_index.
        Unpadded, the same values at real tokens and zeros at padding. token_type_ids:
        ignored (no segment embeddings)."""
        T = input_ids.shape[1]
        if self.unpad is not None and attention_mask is not None:
            packing = Packing.from_mask(attention_mask, self.unpad)
            x = self.embeddings(packing.pack(input_ids))  # (N, H)
            ctx = Context(packing, None, self._rope(packing.positions(), x.dtype))
        else:
            x = self.embeddings(input_ids)  # (B, T, H)
            valid = None if _attends_everywhere(attention_mask) else attention_mask.bool()
            ctx = Context(None, valid, self._rope(torch.arange(T, device=input_ids.device), x.dtype))
        for i, layer in enumerate(self.layers):
            x = layer(x, ctx, query_index if i == len(self.layers) - 1 else None)
        x = self.final_norm(x)
        if ctx.packing is not None and query_index is None:
            return ctx.packing.unpack(x)
        return x

    def embedding_tables(self) -> list[nn.Embedding]:
        return [self.embeddings.tok_embeddings]
