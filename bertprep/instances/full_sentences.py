"""RoBERTa's FULL-SENTENCES rows (Liu et al. 2019, section 4.2): whole sentences taken
contiguously from one or more documents and packed up to the target length; where a row
crosses into the next document an extra separator ([SEP], RoBERTa's </s>) separates
them. One segment, no pair label.

A partition's sentences are one flat token array and its documents follow each other in
it, so a row is one contiguous token range `[start, start + length)`, stored in the pair
descriptor layout as `(start, length, 0, 0, 0)`; build_full_rows wraps it in the
tokenizer's single-text template (`[CLS] ... [SEP]`, `<s> ... </s>`) and inserts the
document separators. A sentence longer than a whole row is split into row-sized pieces
rather than truncated, so no token of the corpus is lost.
"""
from __future__ import annotations

import numpy as np

from bertprep.instances.partition import TokenizedPartition
from bertprep.instances.rows import Rows, ragged_arange


def document_starts(part: TokenizedPartition) -> np.ndarray:
    """Token offset of each document's first token, ascending (empty documents share one)."""
    return np.unique(part.sentence_offsets[part.document_offsets[:-1]].astype(np.int64))


def pack_full_sentences(part: TokenizedPartition, max_seq_length: int, specials: int = 2) -> np.ndarray:
    """(N, 5) descriptors `(start, length, 0, 0, 0)`: rows of whole sentences, greedily
    filled in corpus order, never longer than max_seq_length with the template's
    `specials` ([CLS] ... [SEP]: 2) and the document separators included."""
    budget = max_seq_length - specials
    so = part.sentence_offsets.tolist()
    first_of_doc = set(document_starts(part).tolist())  # token offsets
    out: list[tuple[int, int, int, int, int]] = []
    start, used, length = -1, 0, 0  # the open row: token start, tokens + inner [SEP]s, token span
    for k in range(part.num_sentences):
        s, n = so[k], so[k + 1] - so[k]
        if n == 0:
            continue
        sep = 1 if start >= 0 and s in first_of_doc else 0
        if start >= 0 and used + sep + n <= budget:
            used, length = used + sep + n, length + n
            continue
        if start >= 0:
            out.append((start, length, 0, 0, 0))
        while n > budget:  # a sentence longer than a row: row-sized pieces
            out.append((s, budget, 0, 0, 0))
            s, n = s + budget, n - budget
        start, used, length = s, n, n
    if start >= 0:
        out.append((start, length, 0, 0, 0))
    return np.asarray(out, dtype=np.int64).reshape(-1, 5)


def build_full_rows(ids: np.ndarray, descriptors: np.ndarray, doc_starts: np.ndarray, template, separator: int,
                    dtype, word_starts: np.ndarray | None = None) -> Rows:
    """`prefix s1 s2 sep s3 ... single_suffix` rows (`[CLS] s1 s2 [SEP] s3 ... [SEP]`), the
    `separator` token at each document start inside a row, type ids 0 throughout."""
    prefix, suffix = np.asarray(template.prefix, np.int64), np.asarray(template.single_suffix, np.int64)
    start, span = descriptors[:, 0], descriptors[:, 1]
    lo = np.searchsorted(doc_starts, start, side="right")
    inner = np.searchsorted(doc_starts, start + span, side="left") - lo  # document starts inside the row
    lengths = span + inner + len(prefix) + len(suffix)
    offsets = np.zeros(len(descriptors) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.full(int(offsets[-1]), separator, dtype=dtype)
    special = np.ones(len(tokens), dtype=bool)
    tokens[(offsets[:-1, None] + np.arange(len(prefix))).ravel()] = np.tile(prefix, len(descriptors))
    tokens[(offsets[1:, None] - len(suffix) + np.arange(len(suffix))).ravel()] = np.tile(suffix, len(descriptors))
    source = ragged_arange(start, span)  # flat token index of every row token
    row = np.repeat(np.arange(len(descriptors)), span)
    # Output position: after the prefix, shifted by the separators of the documents begun so far.
    shift = np.searchsorted(doc_starts, source, side="right") - lo[row]
    at = offsets[:-1][row] + len(prefix) + (source - start[row]) + shift
    tokens[at] = ids[source]
    special[at] = False
    starts = None
    if word_starts is not None:
        starts = np.ones(len(tokens), dtype=bool)  # a special token is a word of its own
        starts[at] = word_starts[source]
    return Rows(input_ids=tokens, token_type_ids=np.zeros(len(tokens), dtype=np.int8), offsets=offsets,
                a_lengths=lengths - len(prefix) - len(suffix),
                next_sentence_label=np.zeros(len(descriptors), dtype=np.int8), special=special, word_starts=starts)
