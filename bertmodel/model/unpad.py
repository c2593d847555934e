"""Unpadded execution of the encoder: only the real tokens of a batch are computed.

A padded batch (B, T) with attention_mask holds N = sum of lengths real tokens. Packed,
every per-token operation (the embeddings, the Q/K/V, output and feed-forward matmuls,
GELU, LayerNorm, dropout) runs on (N, H) instead of (B, T, H) (MosaicBERT's unpadding;
Portes et al. 2023). Attention is the only operation that needs to know where one
sequence ends; two kernels do it, with the same results:
- "repad": scatter the packed Q/K/V into (B, T) and call scaled_dot_product_attention
  with the padding mask, then gather the real rows back. The CPU choice: torch 2.13's CPU
  SDPA has no kernel for jagged tensors (it unbinds them to a math path), and attention
  alone (base dims, forward + backward, 2 loaded cores) took 4-5x the repad time at
  SST-2-like and 128-token lengths; one SDPA call per sequence took 1.8x at 128 (and
  between 0.5x and 3x at 512, too noisy there to choose it);
- "jagged": nested tensors with layout=torch.jagged (one SDPA call, no padding at all),
  so CUDA can run its flash / memory-efficient kernels, which an arbitrary padding mask
  keeps it from. On CPU it falls back to a slow per-sequence math path (correct, tested).
Shapes: B batch, T padded length, N real tokens, H hidden, A heads, D = H / A,
Q query rows per sequence (the last layer's, see encoder.Encoder).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bertmodel.errors import BertmodelError
from bertmodel.model.dropout import attention
from bertmodel.model.windows import local_attention

KERNELS = ("repad", "jagged")
MODES = ("auto", "on", "off")


def unpadded_extent(attention_mask) -> dict[str, int]:
    """What an unpadded batch computes, from its (B, T) 1/0 mask (numpy or torch):
    `tokens`, its real tokens, and `attention_pairs`, each sequence's own query-key
    pairs summed (the sum of its lengths squared); training/metrics.py's
    train_flops keywords (the data loader counts them per batch)."""
    lengths = attention_mask.sum(1)
    return {"tokens": int(lengths.sum()), "attention_pairs": int((lengths * lengths).sum())}


@dataclass
class Packing:
    """Where the real tokens of a padded (B, T) batch are, computed once per forward."""

    index: torch.Tensor  # (N,) flat positions b * T + t of the real tokens, ascending
    offsets: torch.Tensor  # (B + 1,) start of each sequence in the packed rows
    batch: int
    seq: int
    mask: torch.Tensor  # (B, 1, 1, T) bool, True = real token: the repad kernel's SDPA mask
    kernel: str

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor, kernel: str) -> "Packing":
        B, T = attention_mask.shape
        real = attention_mask.bool()
        # nonzero: a data-dependent size (a host sync on CUDA, a graph break under
        # torch.compile), paid once per forward, not per layer.
        index = real.flatten().nonzero().squeeze(1)
        offsets = F.pad(real.sum(1).cumsum(0), (1, 0))
        return cls(index, offsets, B, T, real[:, None, None, :], kernel)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...): the real tokens' rows."""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(N, C) -> (B, T, C), zeros at padding."""
        out = x.new_zeros(self.batch * self.seq, x.shape[-1]).index_copy(0, self.index, x)
        return out.view(self.batch, self.seq, -1)

    def positions(self) -> torch.Tensor:
        """(N,) each real token's position within its sequence."""
        return self.index % self.seq

    def query_rows(self, query_index: torch.Tensor) -> torch.Tensor:
        """(B, Q) positions within each sequence -> (B * Q,) packed rows."""
        return (self.offsets[:-1, None] + query_index).flatten()

    def _jagged(self, t: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """(N, A, D) -> nested (B, A, j, D), the layout SDPA takes."""
        return torch.nested.nested_tensor_from_jagged(t.contiguous(), offsets).transpose(1, 2)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, dropout_p: float,
               queries_per_seq: int | None = None, window: int | None = None, block: int = 128,
               query_positions: torch.Tensor | None = None) -> torch.Tensor:
        """q (M, H): every real token (M = N), or queries_per_seq rows of each sequence
        (M = B * Q, at query_positions (B, Q) when `window` is set); k and v (N, H) ->
        (M, H): each query attends to the real tokens of its own sequence, or, with
        `window`, to those at most `window` positions away (model/windows.py; always the
        repad kernel: nested tensors take no mask)."""
        B, T, H = self.batch, self.seq, k.shape[-1]
        D = H // heads
        if self.kernel == "jagged" and window is None:
            q_offsets = (self.offsets if queries_per_seq is None else
                         torch.arange(B + 1, device=q.device) * queries_per_seq)
            y = F.scaled_dot_product_attention(
                self._jagged(q.view(-1, heads, D), q_offsets), self._jagged(k.view(-1, heads, D), self.offsets),
                self._jagged(v.view(-1, heads, D), self.offsets), dropout_p=dropout_p)
            return y.transpose(1, 2).values().reshape(-1, H)  # (M, A, D) -> (M, H)
        # repad: (N, H) -> (B, A, T, D), the padded path's exact SDPA call
        k, v = (self.unpack(t).view(B, T, heads, D).transpose(1, 2) for t in (k, v))
        if queries_per_seq is None:
            q = self.unpack(q).view(B, T, heads, D).transpose(1, 2)
        else:
            q = q.view(B, queries_per_seq, heads, D).transpose(1, 2)  # (B, A, Q, D)
        if window is None:
            y = attention(q, k, v, self.mask, dropout_p)
        else:
            y = local_attention(q, k, v, self.mask[:, 0, 0], window, dropout_p, block, query_positions)
        y = y.transpose(1, 2).reshape(B, -1, H)  # (B, T or Q, H)
        return self.pack(y) if queries_per_seq is None else y.reshape(-1, H)


# Heads whose batches are mostly padding and measured faster packed on a CPU (resolve).
PACKED_ON_CPU = ("BertForSequenceClassification", "BertForTokenClassification", "BertForMultipleChoice",
                 "ModernBertForSequenceClassification", "ModernBertForTokenClassification",
                 "ModernBertForMultipleChoice",
                 # ELECTRA's discriminator is the BERT encoder: the same kernels, the same trade
                 "ElectraForSequenceClassification", "ElectraForTokenClassification", "ElectraForMultipleChoice",
                 # and so is RoBERTa's (XLM-R's under its own names)
                 *(f"{prefix}{head}" for prefix in ("Roberta", "XLMRoberta")
                   for head in ("ForSequenceClassification", "ForTokenClassification", "ForMultipleChoice")))


def resolve(mode: str, device: torch.device, model: torch.nn.Module | None = None) -> str | None:
    """--unpad auto|on|off on this device -> the kernel to use, or None (padded).

    auto: what benchmarks/bench_train_step.py measured as faster. On a 2-core CPU (load
    1.8) the packed step took 0.96-1.05x the padded one on full-length pre-training
    batches (8 x 128; 1.01x at 4 x 512: nothing to save there), so pre-training stays
    padded; on SST-2-like classification batches (54% padding) it took 0.52x, on
    CoNLL-2003 token classification batches of 16 sentences (54% padding, MiniLM) 0.60x
    and on e-CARE multiple-choice batches of 16 x 2 (35% padding) 0.71x, so those three
    heads run packed (repad) on the CPU. On CUDA
    the jagged kernel is what unpadding is for, but it has not been measured on a GPU,
    so auto stays padded there too until benchmarks/gpu_check.py says otherwise.
    """
    if mode not in MODES:
        raise BertmodelError(f"unpad must be auto, on or off, got {mode!r}")
    if mode == "on":
        return "jagged" if device.type == "cuda" else "repad"
    # (an ELECTRA pair's hf_architecture is its discriminator's, which may be a token
    # classifier's: it is pre-training, and stays padded as pre-training does)
    if mode == "auto" and device.type == "cpu" and not hasattr(model, "submodels") and \
            getattr(model, "hf_architecture", "") in PACKED_ON_CPU:
        return "repad"
    return None


def set_unpad(model: torch.nn.Module, kernel: str | None) -> None:
    """Switch the BertModel of `model` (a head model, or a BertModel) to packed execution
    with `kernel` (None: padded). An attribute, not a parameter: state dicts are unchanged.
    A head whose loss reads padded positions too (QA's softmax over the whole window, as
    transformers computes it) stays padded: its values there would change."""
    if kernel is not None and kernel not in KERNELS:
        raise BertmodelError(f"unknown unpad kernel {kernel!r}; choose {' or '.join(KERNELS)}")
    if hasattr(model, "submodels"):  # several head models in one (ELECTRA's generator and discriminator)
        for part in model.submodels():
            set_unpad(part, kernel)
        return
    bert = _bert_of(model)
    if bert is not None:
        bert.unpad = None if getattr(model, "reads_padding", False) else kernel


def unpad_kernel(model: torch.nn.Module) -> str | None:
    """The kernel `model` runs its encoder with, as set_unpad left it (None: padded)."""
    if hasattr(model, "submodels"):
        return unpad_kernel(model.submodels()[-1])
    bert = _bert_of(model)
    return None if bert is None else bert.unpad


class UnpaddableEncoder(torch.nn.Module):
    """An encoder that can compute only its real tokens: `unpad` names the kernel (None:
    padded). The encoders derive from it, so this module needs none of them."""

    unpad: str | None = None


def _bert_of(model: torch.nn.Module):
    if isinstance(model, UnpaddableEncoder):
        return model
    # a head model: its encoder under transformers' name ("bert", or ModernBERT's "model")
    encoder = getattr(model, getattr(model, "encoder_name", "bert"), None)
    return encoder if isinstance(encoder, UnpaddableEncoder) else None
