"""Next-sentence-prediction pairs, built as google-research/bert's
`create_instances_from_document` builds them (REFERENCE.md, "Building instances").

A partition's tokens live in one flat array; a sentence is a `[start, end)` range of it
and a document a range of sentences. Because segment A is always a run of consecutive
sentences of one document and segment B too (the rest of the chunk, or a run from
another document), an instance is fully described by five integers:
`(a_start, a_len, b_start, b_len, is_random)` into the flat array. Building those
descriptors is the only per-chunk Python work; turning them into token rows and masking
them is vectorised (`rows.py`, `masking.py`).

Deliberate differences from the reference (DESIGN.md):
- A random B never comes from the current document: the other document is drawn
  uniformly from the *other* documents of the partition, instead of ten tries that may
  fall back to the same document (the reference's mislabelled "random" pairs).
- Truncation draws how many tokens each side loses from its front as a
  Binomial(n, 1/2) in one step, which is exactly the distribution of the reference's
  one-token-at-a-time coin flips; the side that loses tokens (the longer one, B on a
  tie) is deterministic in both.
"""
from __future__ import annotations

import random
from bisect import bisect_left

import numpy as np

from bertprep.errors import BertprepError
from bertprep.instances.full_sentences import pack_full_sentences
from bertprep.instances.partition import (A_LEN, A_START, B_LEN, B_START, IS_RANDOM, PAIRINGS,  # noqa: F401
                                          PairConfig, TokenizedPartition)


def truncated_lengths(a_len: int, b_len: int, max_num_tokens: int) -> tuple[int, int]:
    """Lengths after the reference's `truncate_seq_pair`: it removes one token at a
    time from the longer side (B on a tie) until the pair fits."""
    excess = a_len + b_len - max_num_tokens
    if excess <= 0:
        return a_len, b_len
    gap = min(excess, abs(a_len - b_len))
    if a_len > b_len:
        a_len -= gap
    else:
        b_len -= gap
    excess -= gap
    # The sides are now equal: B loses the first token (tie), then A, alternately.
    return a_len - excess // 2, b_len - (excess + 1) // 2


def _uniform_int(rng: random.Random, low: int, high: int) -> int:
    """Uniform in [low, high] from one `random()` call: 3x cheaper than `randint`, with
    a bias below 2**-40 for any range a document can have."""
    return low + int(rng.random() * (high - low + 1))


def _front_cut(rng: random.Random, removed: int) -> int:
    """How many of `removed` tokens come off the front: Binomial(removed, 1/2), the
    distribution of the reference's per-token coin flip."""
    return bin(rng.getrandbits(removed)).count("1") if removed > 0 else 0


def build_pairs(part: TokenizedPartition, config: PairConfig, rng: random.Random, counts: dict | None = None) -> np.ndarray:
    """All NSP instances of one pass over the partition, as an (N, 5) int64 array of
    `(a_start, a_len, b_start, b_len, is_random)`. Documents are visited in order; the
    global shuffle happens later. `counts`, when given, gains "chunks" and
    "single_sentence_chunks" (always random-next, so their share shows how far the NSP
    random fraction is pushed above 0.5)."""
    num_docs = part.num_documents
    if num_docs < 2:
        raise BertprepError("NSP needs at least two documents; this input has one")
    so = part.sentence_offsets.tolist()
    do = part.document_offsets.tolist()
    max_tokens = config.max_num_tokens
    out: list[tuple[int, int, int, int, int]] = []
    chunks = singles = 0
    for d in range(num_docs):
        c, s = _pairs_of_document(so, do, d, num_docs, max_tokens, config.short_seq_prob, rng, out)
        chunks += c
        singles += s
    if counts is not None:
        counts["chunks"] = counts.get("chunks", 0) + chunks
        counts["single_sentence_chunks"] = counts.get("single_sentence_chunks", 0) + singles
    if not out:
        return np.zeros((0, 5), dtype=np.int64)
    return np.asarray(out, dtype=np.int64)


def _pairs_of_document(so, do, d, num_docs, max_tokens, short_seq_prob, rng, out) -> tuple[int, int]:
    """Appends the document's instances to out; returns (chunks, single-sentence chunks)."""
    first, end = do[d], do[d + 1]  # sentence range of this document
    chunks = singles = 0
    # The target length is drawn once per document per pass, as in the reference.
    target = _uniform_int(rng, 2, max_tokens) if rng.random() < short_seq_prob else max_tokens
    i = first
    while i < end:
        # The chunk is sentences i..j: it stops at the first sentence that brings it to
        # the target, or at the end of the document.
        j = min(bisect_left(so, so[i] + target, i + 1, end + 1), end) - 1
        chunk_len = j - i + 1
        chunks += 1
        singles += chunk_len == 1
        a_end = _uniform_int(rng, 1, chunk_len - 1) if chunk_len >= 2 else 1
        a_start, a_stop = so[i], so[i + a_end]
        if chunk_len == 1 or rng.random() < 0.5:
            is_random = 1
            other = _uniform_int(rng, 0, num_docs - 2)
            other += other >= d  # uniform over the *other* documents
            o_first, o_end = do[other], do[other + 1]
            b_first = _uniform_int(rng, o_first, o_end - 1)
            # Sentences join B until it reaches the remaining target or the document
            # ends; the check follows each append, so B gets at least one sentence.
            b_target = target - (a_stop - a_start)
            b_end = min(bisect_left(so, so[b_first] + b_target, b_first + 1, o_end + 1), o_end)
            b_start, b_stop = so[b_first], so[b_end]
            next_i = i + a_end  # the unused sentences of the chunk are put back
        else:
            is_random = 0
            b_start, b_stop = a_stop, so[j + 1]
            next_i = j + 1
        a_len, b_len = a_stop - a_start, b_stop - b_start
        new_a, new_b = truncated_lengths(a_len, b_len, max_tokens)
        a_start += _front_cut(rng, a_len - new_a)
        b_start += _front_cut(rng, b_len - new_b)
        if new_a > 0 and new_b > 0:
            out.append((a_start, new_a, b_start, new_b, is_random))
        i = next_i
    return chunks, singles


def build_sop_pairs(part: TokenizedPartition, config: PairConfig, rng: random.Random,
                    counts: dict | None = None) -> np.ndarray:
    """Sentence-order pairs (ALBERT, Lan et al. 2020): the reference's chunks, A the first
    sentences of a chunk and B the rest, swapped half the time (label 1 = swapped).

    Deliberate differences from ALBERT's script: A and B are always contiguous: a
    one-sentence chunk is split inside the sentence at a uniform token (ALBERT takes a
    random B from another document there, labelled "swapped"); truncation cuts A only at
    its front and B only at its back, so the pair stays adjacent text. Same
    `(a_start, a_len, b_start, b_len, swapped)` descriptors as build_pairs."""
    so = part.sentence_offsets.tolist()
    do = part.document_offsets.tolist()
    max_tokens = config.max_num_tokens
    out: list[tuple[int, int, int, int, int]] = []
    chunks = singles = 0
    for d in range(part.num_documents):
        first, end = do[d], do[d + 1]
        target = _uniform_int(rng, 2, max_tokens) if rng.random() < config.short_seq_prob else max_tokens
        i = first
        while i < end:
            j = min(bisect_left(so, so[i] + target, i + 1, end + 1), end) - 1
            chunk_len = j - i + 1
            chunks += 1
            singles += chunk_len == 1
            if chunk_len >= 2:
                split = so[i + _uniform_int(rng, 1, chunk_len - 1)]
            elif so[i + 1] - so[i] >= 2:
                split = _uniform_int(rng, so[i] + 1, so[i + 1] - 1)
            else:
                i = j + 1
                continue
            a_start, b_stop = so[i], so[j + 1]
            a_len, b_len = truncated_lengths(split - a_start, b_stop - split, max_tokens)
            a_start = split - a_len  # A keeps its end, B its start: they stay adjacent
            swapped = int(rng.random() < 0.5)
            if a_len == 0 or b_len == 0:  # empty sentences: no pair to order
                pass
            elif swapped:
                out.append((split, b_len, a_start, a_len, 1))
            else:
                out.append((a_start, a_len, split, b_len, 0))
            i = j + 1
    if counts is not None:
        counts["chunks"] = counts.get("chunks", 0) + chunks
        counts["single_sentence_chunks"] = counts.get("single_sentence_chunks", 0) + singles
    return np.asarray(out, dtype=np.int64).reshape(-1, 5)


def build_instances(part: TokenizedPartition, config: PairConfig, rng: random.Random,
                    counts: dict | None = None) -> np.ndarray:
    """The descriptors of one pass for the configured pairing (see PAIRINGS)."""
    if config.kind == "sop":
        return build_sop_pairs(part, config, rng, counts)
    if config.kind == "none":
        return pack_full_sentences(part, config.max_seq_length, config.single_specials)
    if part.num_documents < 2:  # NSP's random B needs another document
        return np.zeros((0, 5), np.int64)
    return build_pairs(part, config, rng, counts)
