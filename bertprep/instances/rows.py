"""Turn instance descriptors into `[CLS] A [SEP] B [SEP]` rows, vectorised.

Rows are kept flat, as Arrow keeps list columns: one values array plus int64 row
offsets. No Python loop runs per token or per row.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertprep.instances.partition import A_LEN, A_START, B_LEN, B_START, IS_RANDOM


def ragged_arange(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of `arange(s, s + n)` for each (s, n), without a Python loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    row_starts = np.cumsum(lengths) - lengths
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - row_starts, lengths)
    return np.arange(total, dtype=np.int64) + shift


@dataclass
class Rows:
    """A batch of NSP instances before masking (or after: `input_ids` is then masked)."""

    input_ids: np.ndarray  # (T,) flat tokens of all rows
    token_type_ids: np.ndarray  # (T,) int8 segment ids
    offsets: np.ndarray  # (N + 1,) int64 row boundaries into the flat arrays
    a_lengths: np.ndarray  # (N,) int64 tokens in segment A (first [SEP] at a_len + 1)
    next_sentence_label: np.ndarray  # (N,) int8, 1 = B is random (NSP) or swapped (SOP)
    special: np.ndarray | None = None  # (T,) bool, never masked; None: the pair layout's 3 specials

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def build_rows(ids: np.ndarray, pairs: np.ndarray, cls_id: int, sep_id: int, dtype) -> Rows:
    """Gather each descriptor's A and B tokens from the partition's flat `ids`."""
    a_start, a_len = pairs[:, A_START], pairs[:, A_LEN]
    b_start, b_len = pairs[:, B_START], pairs[:, B_LEN]
    lengths = a_len + b_len + 3
    offsets = np.zeros(len(pairs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    row_start = offsets[:-1]
    tokens = np.empty(int(offsets[-1]), dtype=dtype)
    tokens[row_start] = cls_id
    tokens[row_start + 1 + a_len] = sep_id
    tokens[offsets[1:] - 1] = sep_id
    tokens[ragged_arange(row_start + 1, a_len)] = ids[ragged_arange(a_start, a_len)]
    tokens[ragged_arange(row_start + 2 + a_len, b_len)] = ids[ragged_arange(b_start, b_len)]
    # Segment ids: 0 for [CLS], A and the first [SEP]; 1 for B and the last [SEP].
    token_types = np.zeros(len(tokens), dtype=np.int8)
    token_types[ragged_arange(row_start + 2 + a_len, b_len + 1)] = 1
    return Rows(
        input_ids=tokens,
        token_type_ids=token_types,
        offsets=offsets,
        a_lengths=a_len.astype(np.int64),
        next_sentence_label=pairs[:, IS_RANDOM].astype(np.int8),
    )
