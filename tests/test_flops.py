"""The FLOP counts behind MFU count what the model computes: padded, every (B, T)
position; unpadded, each sequence alone. So an unpadded batch's count is the sum of its
rows' counts, each row a batch of one at its own length, for every task's formula."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from bertmodel.model.config import BertConfig
from bertmodel.model.unpad import unpadded_extent
from bertmodel.training.metrics import train_flops
from bertmodel.training.metrics import encoder_flops

LENGTHS = [128, 7, 64, 1, 100]
T, P = 128, 20


def mask(lengths, width=T) -> np.ndarray:
    return (np.arange(width)[None, :] < np.asarray(lengths)[:, None]).astype(np.int8)


def test_the_extent_of_a_mask_counts_real_tokens_and_each_rows_own_pairs():
    extent = unpadded_extent(mask([3, 5], width=5))
    assert extent == {"tokens": 8, "attention_pairs": 9 + 25}
    assert unpadded_extent(torch.from_numpy(mask(LENGTHS))) == unpadded_extent(mask(LENGTHS))


@pytest.mark.parametrize("preset", ["tiny", "base"])
@pytest.mark.parametrize("pair_head", [True, False])
def test_pretraining_flops_of_an_unpadded_batch_are_its_rows_flops_summed(preset, pair_head):
    config = BertConfig.preset(preset, vocab_size=30522)
    extent = unpadded_extent(mask(LENGTHS))
    batch = train_flops(config, len(LENGTHS), T, P, pair_head, **extent)
    rows = sum(train_flops(config, 1, n, P, pair_head) for n in LENGTHS)
    assert batch == pytest.approx(rows, rel=1e-12)
    assert batch < train_flops(config, len(LENGTHS), T, P, pair_head)  # padding is not counted
    full = unpadded_extent(mask([T] * 4))  # no padding: the padded count
    assert train_flops(config, 4, T, P, pair_head, **full) == train_flops(config, 4, T, P, pair_head)


@pytest.mark.parametrize("last_layer_rows", [None, 1])
def test_encoder_flops_of_an_unpadded_batch_are_its_rows_flops_summed(last_layer_rows):
    config = BertConfig.preset("base", vocab_size=30522)
    extent = unpadded_extent(mask(LENGTHS))
    batch = encoder_flops(config, len(LENGTHS), T, last_layer_rows, **extent)
    rows = sum(encoder_flops(config, 1, n, last_layer_rows) for n in LENGTHS)
    assert batch == pytest.approx(rows, rel=1e-12)
    assert batch < encoder_flops(config, len(LENGTHS), T, last_layer_rows)
    full = unpadded_extent(mask([T] * 4))
    assert encoder_flops(config, 4, T, last_layer_rows, **full) == encoder_flops(config, 4, T, last_layer_rows)
