"""Turn instance descriptors into rows in the tokenizer's pair template, vectorised:
`prefix A middle B suffix` with the template's token type ids (BERT's
`[CLS] A [SEP] B [SEP]`, types 0 0 0 1 1; RoBERTa's `<s> A </s></s> B </s>`, all 0).

Rows are kept flat, as Arrow keeps list columns: one values array plus int64 row
offsets. No Python loop runs per token or per row.

A template is `bertprep.tokenizer.Template` (or anything with its fields: prefix,
middle, suffix, their *_types, a_type, b_type); this package takes it as given and
imports nothing from the tokenizer.
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
    a_lengths: np.ndarray  # (N,) int64 tokens in segment A (BERT: first [SEP] at a_len + 1)
    next_sentence_label: np.ndarray  # (N,) int8, 1 = B is random (NSP) or swapped (SOP)
    special: np.ndarray | None = None  # (T,) bool, never masked; None: the pair layout's 3 specials
    # (T,) bool, the token begins a word (whole-word masking); None: words from the
    # vocabulary's "##" pieces (WordPiece)
    word_starts: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def build_rows(ids: np.ndarray, pairs: np.ndarray, template, dtype, word_starts: np.ndarray | None = None) -> Rows:
    """Gather each descriptor's A and B tokens from the partition's flat `ids` into
    `template`'s pair layout; `word_starts` (the partition's, per token) travel with them."""
    a_start, a_len = pairs[:, A_START], pairs[:, A_LEN]
    b_start, b_len = pairs[:, B_START], pairs[:, B_LEN]
    lengths = a_len + b_len + len(template.prefix) + len(template.middle) + len(template.suffix)
    offsets = np.zeros(len(pairs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    row_start = offsets[:-1]
    a_at = row_start + len(template.prefix)  # where A begins in the flat rows
    b_at = a_at + a_len + len(template.middle)
    tokens = np.empty(int(offsets[-1]), dtype=dtype)
    token_types = np.empty(len(tokens), dtype=np.int8)
    special = np.zeros(len(tokens), dtype=bool)
    for at, part, types in ((row_start, template.prefix, template.prefix_types),
                            (a_at + a_len, template.middle, template.middle_types),
                            (offsets[1:] - len(template.suffix), template.suffix, template.suffix_types)):
        _place_specials(tokens, token_types, special, at, part, types)
    a_rows, b_rows = ragged_arange(a_at, a_len), ragged_arange(b_at, b_len)
    a_source, b_source = ragged_arange(a_start, a_len), ragged_arange(b_start, b_len)
    tokens[a_rows], token_types[a_rows] = ids[a_source], template.a_type
    tokens[b_rows], token_types[b_rows] = ids[b_source], template.b_type
    starts = None
    if word_starts is not None:
        starts = np.ones(len(tokens), dtype=bool)  # a special token is a word of its own
        starts[a_rows], starts[b_rows] = word_starts[a_source], word_starts[b_source]
    return Rows(
        input_ids=tokens,
        token_type_ids=token_types,
        offsets=offsets,
        a_lengths=a_len.astype(np.int64),
        next_sentence_label=pairs[:, IS_RANDOM].astype(np.int8),
        special=special,
        word_starts=starts,
    )


def _place_specials(tokens, token_types, special, at: np.ndarray, part, types) -> None:
    """The special tokens `part` (with their type ids) at `at`, `at + 1`, ... of every row."""
    if not len(part):
        return
    where = (at[:, None] + np.arange(len(part))[None, :]).ravel()
    tokens[where] = np.tile(np.asarray(part), len(at))
    token_types[where] = np.tile(np.asarray(types, dtype=np.int8), len(at))
    special[where] = True
