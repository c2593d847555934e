"""The attention pattern our packed (and padded) batches use is, per sequence, the mask
transformers builds for ModernBERT: `create_bidirectional_sliding_window_mask` in the
local layers (|q - k| <= window, real keys only), `create_bidirectional_mask` in the
global ones. The pattern is read off the computation itself, not off a mask we build:
with zero queries and keys every allowed key gets the same weight, and one-hot values
(a key's position) make each output row the set of keys it attended to. So the dense
mask, the banded kernel (blocks of `block` queries) and the packing are all checked,
for any lengths, window and block Hypothesis draws."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertmodel.model.unpad import Packing
from bertmodel.model.windows import local_attention

transformers = pytest.importorskip("transformers")
from transformers.masking_utils import (create_bidirectional_mask,  # noqa: E402
                                        create_bidirectional_sliding_window_mask)


def transformers_masks(mask: torch.Tensor, local_attention_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(global, local) (B, 1, T, T) bool masks transformers' ModernBERT builds for the SDPA path."""
    config = transformers.ModernBertConfig(local_attention=local_attention_size, num_hidden_layers=2, hidden_size=8,
                                           num_attention_heads=1, intermediate_size=8, vocab_size=8,
                                           pad_token_id=0, bos_token_id=0, eos_token_id=0, cls_token_id=0,
                                           sep_token_id=0)
    config._attn_implementation = "sdpa"
    B, T = mask.shape
    embeds = torch.zeros(B, T, 8)
    full = torch.ones(B, 1, T, T, dtype=torch.bool)
    globally = create_bidirectional_mask(config=config, inputs_embeds=embeds, attention_mask=mask)
    locally = create_bidirectional_sliding_window_mask(config=config, inputs_embeds=embeds, attention_mask=mask)
    return (full if globally is None else globally), (full if locally is None else locally)


def attended(packing: Packing, T: int, window: int | None, block: int) -> torch.Tensor:
    """(N, T) bool: the keys (positions in its own sequence) each real token attends to."""
    N = packing.index.numel()
    zeros = torch.zeros(N, T, dtype=torch.float64)
    values = torch.nn.functional.one_hot(packing.positions(), T).double()  # key -> its position
    out = packing.attend(zeros, zeros, values, 1, 0.0, window=window, block=block)
    return out > 0


@settings(max_examples=120, deadline=None)
@given(lengths=st.lists(st.integers(1, 48), min_size=1, max_size=4), local_size=st.integers(1, 12).map(lambda h: 2 * h),
       block=st.sampled_from([2, 4, 8, 16]))
def test_packed_attention_pattern_is_transformers_mask_per_sequence(lengths, local_size, block):
    T = max(lengths)
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    theirs_global, theirs_local = transformers_masks(mask, local_size)
    packing = Packing.from_mask(mask, "repad")
    ours_local = attended(packing, T, local_size // 2, block)
    ours_global = attended(packing, T, None, block)
    for b, n in enumerate(lengths):
        rows = slice(int(packing.offsets[b]), int(packing.offsets[b + 1]))
        assert torch.equal(ours_local[rows], theirs_local[b, 0, :n]), (b, n)
        assert torch.equal(ours_global[rows], theirs_global[b, 0, :n]), (b, n)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=3), half=st.integers(1, 6),
       block=st.sampled_from([2, 4, 8]))
def test_padded_local_attention_pattern_is_transformers_mask(lengths, half, block):
    """The padded path (no packing): the banded kernel where T > 2 x block, the dense mask
    below; every real query row sees what transformers' mask lets it."""
    T = max(lengths)
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    _, theirs_local = transformers_masks(mask, 2 * half)
    B = len(lengths)
    zeros = torch.zeros(B, 1, T, T, dtype=torch.float64)
    values = torch.eye(T, dtype=torch.float64).expand(B, 1, T, T)
    seen = local_attention(zeros, zeros, values, mask.bool(), half, 0.0, block) > 0  # (B, 1, T, T)
    real = mask.bool()
    for b in range(B):
        assert torch.equal(seen[b, 0][real[b]], theirs_local[b, 0][real[b]])
