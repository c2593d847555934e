"""One layer's insides, for a distillation that learns them (MiniLMv2's self-attention
relations, TinyBERT's hidden states): the layer's queries, keys and values as its
attention uses them, and its output.

`layer_states(encoder, layer, ...)` runs the embeddings and the layers below `layer`
through their own modules, then takes Q, K and V from that layer's input with the layer's
own projections (transformers' hidden_states[layer - 1] is that input), and, when asked,
the layer's output (transformers' hidden_states[layer]). No encoder's forward changes,
nothing above `layer` runs, and the attention's probabilities are never materialised
(SDPA keeps them to itself): the one cost beyond the forward up to `layer` is a second
Q/K/V projection where the layer's output is wanted too.

What "as the attention uses them" means per architecture:
- BERT, RoBERTa, an ELECTRA discriminator (post-LN): `attention.self.query/key/value` of
  the layer's input, each (B, T, H) with head h in columns h*D .. (h+1)*D;
- ModernBERT (pre-LN, one fused Wqkv, rotary positions): Q and K of the *normed* input
  (attn_norm; layer 0 has none), rotated by the layer's own RoPE base (local or global),
  and V as projected. The scores Q K^T are made of exactly these, so the relations are
  those of what the layer attends with; an unnormed residual stream is not what Wqkv
  reads, and Q before its rotation carries no position at all. V is never rotated.

The states are computed padded, (B, T, H), whatever the encoder's `unpad` says: the
relations a distillation builds from them are (B, A, T, T) anyway.
Shapes: B batch, T padded length, H hidden (all heads side by side).
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from bertmodel.model.encoder import BertModel, _attends_everywhere
from bertmodel.model.linear import linear
from bertmodel.model.modernbert import Context, ModernBertModel
from bertmodel.model.rope import rotate


class LayerStates(NamedTuple):
    query: torch.Tensor  # (B, T, H): every head's queries side by side, as the scores use them
    key: torch.Tensor  # (B, T, H)
    value: torch.Tensor  # (B, T, H)
    hidden: torch.Tensor | None  # (B, T, H): the layer's output, when asked for


def num_layers(encoder) -> int:
    return len(_layers(encoder))


def layer_states(encoder, layer: int, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                 attention_mask: torch.Tensor | None, output: bool = False) -> LayerStates:
    """Layer `layer` (counted from 1) of `encoder` (a BertModel, RobertaModel or
    ModernBertModel) on the batch: its Q, K, V, and its output when `output`."""
    if not 1 <= layer <= num_layers(encoder):
        raise ValueError(f"layer {layer} of an encoder of {num_layers(encoder)} layers")
    if isinstance(encoder, ModernBertModel):
        return _modernbert(encoder, layer, input_ids, attention_mask, output)
    return _bert(encoder, layer, input_ids, token_type_ids, attention_mask, output)


def unread_parameters(encoder, output: bool) -> list[str]:
    """The encoder's parameters (its own names) that layer_states of its last layer never
    reads, so no loss made of those states reaches them: the pooler, ModernBERT's final
    norm, and, without the layer's output, what comes after its Q/K/V projections."""
    last = f"{'layers' if isinstance(encoder, ModernBertModel) else 'encoder.layer'}.{num_layers(encoder) - 1}."
    after_qkv = (("attn.Wo.", "mlp_norm.", "mlp.") if isinstance(encoder, ModernBertModel)
                 else ("attention.output.", "intermediate.", "output."))
    unread = ("pooler.", "final_norm.") + (() if output else tuple(last + part for part in after_qkv))
    return [name for name, _ in encoder.named_parameters() if name.startswith(unread)]


def _layers(encoder):
    return encoder.layers if isinstance(encoder, ModernBertModel) else encoder.encoder.layer


def _bert(encoder: BertModel, layer: int, input_ids, token_type_ids, attention_mask, output: bool) -> LayerStates:
    # (B, T) 1/0 -> (B, 1, 1, T) bool, as BertModel.forward builds it
    mask = None if _attends_everywhere(attention_mask) else attention_mask.bool()[:, None, None, :]
    x = encoder._project(encoder.embeddings(input_ids, token_type_ids))  # (B, T, H)
    blocks = encoder.encoder.layer
    for block in blocks[:layer - 1]:
        x = block(x, mask)
    block = blocks[layer - 1]
    s = block.attention.self
    weight = torch.cat([s.query.weight, s.key.weight, s.value.weight])
    bias = torch.cat([s.query.bias, s.key.bias, s.value.bias])
    q, k, v = linear(x, weight, bias).chunk(3, dim=-1)  # (B, T, H) each
    return LayerStates(q, k, v, block(x, mask) if output else None)


def _modernbert(encoder: ModernBertModel, layer: int, input_ids, attention_mask, output: bool) -> LayerStates:
    T = input_ids.shape[1]
    x = encoder.embeddings(input_ids)  # (B, T, H)
    valid = None if _attends_everywhere(attention_mask) else attention_mask.bool()
    ctx = Context(None, valid, encoder._rope(torch.arange(T, device=input_ids.device), x.dtype))
    for block in encoder.layers[:layer - 1]:
        x = block(x, ctx)
    block = encoder.layers[layer - 1]
    attn = block.attn
    B, _, H = x.shape
    A = attn.heads
    q, k, v = linear(block.attn_norm(x), attn.Wqkv.weight, attn.Wqkv.bias).view(B, T, 3, A, H // A).unbind(2)
    cos, sin = (t[:, None] for t in ctx.rope[attn.local])  # (T, 1, D): one angle per token, every head
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # (B, T, A, D)
    hidden = block(x, ctx) if output else None
    return LayerStates(q.reshape(B, T, H), k.reshape(B, T, H), v.reshape(B, T, H), hidden)
