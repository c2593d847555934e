"""Property and statistical tests of NSP pairs (instances.py), rows (rows.py) and
masking (masking.py), on drawn partitions and seeds."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertprep.instances import PairConfig, TokenizedPartition, build_pairs, truncated_lengths
from bertprep.masking import MaskingConfig, Vocabulary, apply_masking, num_to_predict
from bertprep.rows import build_rows, ragged_arange

CLS, SEP, MASK = 101, 102, 103
VOCAB_SIZE = 1000
ORDINARY = np.arange(200, VOCAB_SIZE, dtype=np.int32)
VOCAB = Vocabulary(MASK, VOCAB_SIZE, ORDINARY, np.arange(VOCAB_SIZE) % 7 == 0)


def make_partition(doc_sentence_lengths: list[list[int]], seed: int = 0) -> TokenizedPartition:
    lengths = [n for doc in doc_sentence_lengths for n in doc]
    so = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=so[1:])
    do = np.zeros(len(doc_sentence_lengths) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in doc_sentence_lengths], out=do[1:])
    # Token ids encode their own position, so tests can tell where a token came from.
    ids = (200 + np.arange(so[-1]) % (VOCAB_SIZE - 200)).astype(np.uint16)
    return TokenizedPartition(ids, so, do)


partitions = st.lists(
    st.lists(st.integers(1, 60), min_size=1, max_size=12), min_size=2, max_size=12
).map(make_partition)


def reference_truncate(a_len: int, b_len: int, limit: int) -> tuple[int, int]:
    """The reference loop: drop one token from the longer side (B on a tie)."""
    while a_len + b_len > limit:
        if a_len > b_len:
            a_len -= 1
        else:
            b_len -= 1
    return a_len, b_len


@given(st.integers(1, 600), st.integers(1, 600), st.integers(2, 509))
def test_truncated_lengths_match_the_reference_loop(a, b, limit):
    assert truncated_lengths(a, b, limit) == reference_truncate(a, b, limit)


@given(partitions, st.integers(0, 2**32 - 1), st.sampled_from([8, 16, 32, 128]))
@settings(max_examples=150, deadline=None)
def test_pairs_stay_inside_documents_and_random_b_is_another_document(part, seed, max_seq):
    pairs = build_pairs(part, PairConfig(max_seq_length=max_seq), random.Random(seed))
    so, do = part.sentence_offsets, part.document_offsets
    doc_of_token = np.repeat(np.repeat(np.arange(part.num_documents), np.diff(do)), np.diff(so))
    for a_start, a_len, b_start, b_len, is_random in pairs:
        assert a_len >= 1 and b_len >= 1 and a_len + b_len <= max_seq - 3
        a_doc = doc_of_token[a_start]
        assert doc_of_token[a_start + a_len - 1] == a_doc
        b_doc = doc_of_token[b_start]
        assert doc_of_token[b_start + b_len - 1] == b_doc
        if is_random:
            assert b_doc != a_doc  # the documented fix: never the same document
        else:
            assert b_doc == a_doc and b_start >= a_start + a_len  # B follows A


@given(partitions, st.integers(0, 2**32 - 1))
@settings(max_examples=50, deadline=None)
def test_same_seed_same_pairs(part, seed):
    one = build_pairs(part, PairConfig(), random.Random(seed))
    two = build_pairs(part, PairConfig(), random.Random(seed))
    assert np.array_equal(one, two)


def test_one_document_is_an_error():
    from bertprep.errors import BertprepError

    with pytest.raises(BertprepError, match="at least two documents"):
        build_pairs(make_partition([[5, 6, 7]]), PairConfig(), random.Random(0))


def test_ragged_arange():
    assert ragged_arange(np.array([5, 0, 10]), np.array([2, 0, 3])).tolist() == [5, 6, 10, 11, 12]


def masked_rows(part, seed, max_seq=128, masking=MaskingConfig()):
    pairs = build_pairs(part, PairConfig(max_seq_length=max_seq), random.Random(seed))
    rows = build_rows(part.ids, pairs, CLS, SEP, np.uint16)
    original = rows.input_ids.copy()
    masked = apply_masking(rows, masking, VOCAB, np.random.default_rng(seed))
    return pairs, rows, original, masked


@given(partitions, st.integers(0, 2**32 - 1), st.sampled_from([8, 32, 128]), st.sampled_from([1, 5, 20]), st.sampled_from([0.05, 0.15, 0.5]), st.booleans())
@settings(max_examples=150, deadline=None)
def test_row_and_masking_invariants(part, seed, max_seq, max_pred, prob, whole_word):
    config = MaskingConfig(max_pred, prob, whole_word_mask=whole_word)
    pairs, rows, original, masked = masked_rows(part, seed, max_seq, config)
    for r in range(rows.num_rows):
        lo, hi = rows.offsets[r], rows.offsets[r + 1]
        tokens, before, types = rows.input_ids[lo:hi], original[lo:hi], rows.token_type_ids[lo:hi]
        a_start, a_len, b_start, b_len, _ = pairs[r]
        length = hi - lo
        assert length == a_len + b_len + 3 <= max_seq
        # [CLS] A [SEP] B [SEP] with the source tokens in place
        assert before[0] == CLS and before[a_len + 1] == SEP and before[-1] == SEP
        assert np.array_equal(before[1 : a_len + 1], part.ids[a_start : a_start + a_len])
        assert np.array_equal(before[a_len + 2 : -1], part.ids[b_start : b_start + b_len])
        assert types.tolist() == [0] * (a_len + 2) + [1] * (b_len + 1)
        positions = masked.positions[masked.offsets[r] : masked.offsets[r + 1]].astype(np.int64)
        labels = masked.labels[masked.offsets[r] : masked.offsets[r + 1]]
        assert positions.tolist() == sorted(set(positions.tolist()))
        assert not set(positions.tolist()) & {0, a_len + 1, length - 1}
        assert np.array_equal(labels, before[positions])
        untouched = np.ones(length, dtype=bool)
        untouched[positions] = False
        assert np.array_equal(tokens[untouched], before[untouched])
        changed = tokens[positions]
        assert np.all((changed == MASK) | (changed == labels) | np.isin(changed, ORDINARY))
        wanted = min(max_pred, max(1, round(length * prob)), length - 3)
        if whole_word:
            assert len(positions) <= wanted
            # A "##" piece belongs to the previous piece's word, never across [SEP]:
            # every word is masked whole or not at all.
            chosen = set(positions.tolist())
            for p in range(2, length - 1):
                if p - 1 != a_len + 1 and p != a_len + 1 and VOCAB.is_continuation[before[p]]:
                    assert (p in chosen) == (p - 1 in chosen), (p, before.tolist(), sorted(chosen))
        else:
            assert len(positions) == wanted


@given(partitions, st.integers(0, 2**32 - 1))
@settings(max_examples=30, deadline=None)
def test_same_seed_same_masking(part, seed):
    _, rows1, _, m1 = masked_rows(part, seed)
    _, rows2, _, m2 = masked_rows(part, seed)
    assert np.array_equal(rows1.input_ids, rows2.input_ids)
    assert np.array_equal(m1.positions, m2.positions) and np.array_equal(m1.labels, m2.labels)


def test_num_to_predict_rounds_half_to_even_like_python():
    lengths = np.arange(5, 513)
    for prob in (0.15, 0.1, 0.2, 0.5):
        config = MaskingConfig(80, prob)
        expected = [min(80, max(1, round(n * prob)), n - 3) for n in lengths]
        assert num_to_predict(lengths, config).tolist() == expected


def big_partition(seed: int) -> TokenizedPartition:
    rng = np.random.default_rng(seed)
    docs = [list(rng.integers(3, 40, rng.integers(1, 25))) for _ in range(1500)]
    return make_partition(docs)


def z_score(k: int, n: int, p: float) -> float:
    return (k / n - p) / math.sqrt(p * (1 - p) / n)


def test_masking_statistics_on_many_positions():
    # ~190k masked positions; a correct implementation sits within |z| < 6 with
    # overwhelming probability (the bound is wide on purpose: fixed seed, no flakes),
    # while a 1-point bias in a share would give |z| > 10.
    _, rows, original, masked = masked_rows(big_partition(1), seed=7)
    n = len(masked.positions)
    assert n >= 25_000
    assert abs(z_score(masked.num_masked, n, 0.8)) < 6
    assert abs(z_score(masked.num_kept, n, 0.1)) < 6
    assert abs(z_score(masked.num_random, n, 0.1)) < 6
    # The rate: exactly the count formula per row, which sits near 0.15 of tokens.
    rate = n / len(rows.input_ids)
    assert abs(rate - 0.15) < 0.005
    # Random replacements are uniform over the ordinary vocabulary: no special ids.
    flat = np.repeat(rows.offsets[:-1], np.diff(masked.offsets)) + masked.positions
    shown = rows.input_ids[flat]
    random_ones = shown[(shown != MASK) & (shown != masked.labels)]
    assert np.isin(random_ones, ORDINARY).all()


def test_whole_vocab_draw_reaches_specials():
    part = big_partition(2)
    _, rows, _, masked = masked_rows(part, 3, masking=MaskingConfig(random_from_whole_vocab=True))
    flat = np.repeat(rows.offsets[:-1], np.diff(masked.offsets)) + masked.positions
    shown = rows.input_ids[flat]
    random_ones = shown[(shown != MASK) & (shown != masked.labels)]
    assert (random_ones < 200).any()  # ids below the ordinary range do occur


def test_next_sentence_random_fraction_matches_reference_behaviour():
    # Single-sentence chunks are always random-next, so the fraction sits above 0.5
    # (REFERENCE.md: about 0.56 on typical text). Over ~16k rows the sd is ~0.004, so (0.5, 0.65) is a wide bound.
    part = big_partition(3)
    fractions = []
    for seed in range(3):
        pairs = build_pairs(part, PairConfig(), random.Random(seed))
        fractions.append(pairs[:, 4].mean())
        assert len(pairs) > 5_000
    mean = float(np.mean(fractions))
    assert 0.5 < mean < 0.65


def test_pairs_follow_the_reference_shapes():
    """What the invariants above cannot see: A spans a random number of sentences, B
    follows A exactly when not truncated, a random B starts at a random sentence, and
    truncation cuts from the front as often as from the back."""
    rng = np.random.default_rng(5)
    short_sentences = make_partition([[5] * 30 for _ in range(200)])
    pairs = np.concatenate([build_pairs(short_sentences, PairConfig(), random.Random(s)) for s in range(3)])
    so = set(short_sentences.sentence_offsets.tolist())
    do = set(short_sentences.sentence_offsets[short_sentences.document_offsets].tolist())
    untruncated_next = pairs[(pairs[:, 4] == 0) & (pairs[:, 1] + pairs[:, 3] < 125)]
    assert len(untruncated_next) > 100
    assert np.array_equal(untruncated_next[:, 2], untruncated_next[:, 0] + untruncated_next[:, 1])
    assert all(a in so for a in untruncated_next[:, 0].tolist())
    a_sentences = untruncated_next[:, 1] // 5
    assert len(set(a_sentences.tolist())) > 10  # the split point is uniform over the chunk
    random_b = pairs[pairs[:, 4] == 1]
    at_document_start = np.mean([b in do for b in random_b[:, 2].tolist()])
    assert at_document_start < 0.2  # ~1/30 when the start sentence is uniform

    long_sentences = make_partition([list(rng.integers(60, 100, 6)) for _ in range(200)])
    starts = set(long_sentences.sentence_offsets.tolist())
    pairs = np.concatenate([build_pairs(long_sentences, PairConfig(), random.Random(s)) for s in range(3)])
    # Every pair here is truncated (two sentences exceed 125 tokens); A loses tokens
    # from the front in a Binomial(n, 1/2) share, so it rarely starts on a sentence.
    front_cut = np.mean([a not in starts for a in pairs[:, 0].tolist()])
    assert front_cut > 0.8
