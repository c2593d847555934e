"""Property and statistical tests of NSP pairs (instances.py), rows (rows.py) and
masking (masking.py), on drawn partitions and seeds."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from bertprep.instances import PairConfig, TokenizedPartition, build_pairs, truncated_lengths
from bertprep.instances import MaskingConfig, Vocabulary, apply_masking, num_to_predict
from bertprep.instances import build_rows, ragged_arange
from bertprep.tokenizer.templates import Template, bert_template

CLS, SEP, MASK = 101, 102, 103
BERT = bert_template(CLS, SEP)
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
    rows = build_rows(part.ids, pairs, BERT, np.uint16)
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
        assert num_to_predict(lengths, config, lengths - 3).tolist() == expected  # a pair row's candidates


def big_partition(seed: int) -> TokenizedPartition:
    rng = np.random.default_rng(seed)
    docs = [list(rng.integers(3, 40, rng.integers(1, 25))) for _ in range(1500)]
    return make_partition(docs)


def z_score(k: int, n: int, p: float) -> float:
    return (k / n - p) / math.sqrt(p * (1 - p) / n)


# Every statistical bound below is |z| < 6 (or the chi-square equivalent): a correct
# implementation crosses it with probability ~2e-9 per check, so fixed seeds never flake,
# and a bias of 6 standard errors fails half the time, of 8 almost always. Each test
# states that smallest bias for its sample.
Z_BOUND = 6.0


def observed_split(rows, original, masked):
    """[MASK]/kept/random counts read from the rows themselves: at every labelled
    position, what the row now holds against the original token there. A random draw
    that happens to equal the original reads as kept, so the expected shares are
    kept 0.1 + 0.1/V, random 0.1 (1 - 1/V) for V ordinary ids."""
    flat = np.repeat(rows.offsets[:-1], np.diff(masked.offsets)) + masked.positions.astype(np.int64)
    before, shown = original[flat], rows.input_ids[flat]
    assert np.array_equal(masked.labels, before)  # the labels are the original tokens
    is_mask = shown == MASK
    is_kept = shown == before
    is_random = ~is_mask & ~is_kept
    return before, shown, int(is_mask.sum()), int(is_kept.sum()), is_random


def chi_square_uniform(draws: np.ndarray, pool: np.ndarray) -> tuple[float, int]:
    counts = np.bincount(np.searchsorted(pool, draws), minlength=len(pool))
    expected = len(draws) / len(pool)
    return float(((counts - expected) ** 2 / expected).sum()), len(pool) - 1


def chi_square_independence(x: np.ndarray, y: np.ndarray, buckets: int = 8) -> tuple[float, int]:
    table = np.zeros((buckets, buckets))
    np.add.at(table, (x % buckets, y % buckets), 1)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    return float(((table - expected) ** 2 / expected).sum()), (buckets - 1) ** 2


def chi_square_bound(dof: int) -> float:
    return dof + Z_BOUND * math.sqrt(2 * dof)  # chi-square: mean dof, sd sqrt(2 dof)


def specials_per_row(rows) -> np.ndarray:
    """The template's tokens in each row (3 in a BERT pair row, 4 in RoBERTa's)."""
    if rows.special is None:
        return np.full(rows.num_rows, 3)
    return np.add.reduceat(rows.special.astype(np.int64), rows.offsets[:-1]) if rows.num_rows else np.zeros(0, int)


def check_masking_statistics(rows, original, masked, pool: np.ndarray, config: MaskingConfig) -> int:
    """The 80/10/10 split and the random draw, all counted from the output rows."""
    before, shown, n_mask, n_kept, is_random = observed_split(rows, original, masked)
    n, v = len(shown), len(pool)
    if rows.special is not None:  # never a token of the template
        assert not rows.special[np.repeat(rows.offsets[:-1], np.diff(masked.offsets)) + masked.positions].any()
    assert abs(z_score(n_mask, n, 0.8)) < Z_BOUND, n_mask / n
    assert abs(z_score(n_kept, n, 0.1 + 0.1 / v)) < Z_BOUND, n_kept / n
    assert abs(z_score(int(is_random.sum()), n, 0.1 * (1 - 1 / v))) < Z_BOUND, is_random.mean()
    # Random replacements: uniform over the ordinary ids, whatever the original was.
    draws = shown[is_random]
    assert np.isin(draws, pool).all()
    stat, dof = chi_square_uniform(draws, pool)
    assert stat < chi_square_bound(dof), (stat, dof)
    stat, dof = chi_square_independence(before[is_random].astype(np.int64), draws.astype(np.int64))
    assert stat < chi_square_bound(dof), (stat, dof)
    # Labelled positions per row: the count formula for the row's length, capped by its
    # tokens less the template's specials; whole words may leave a row short of it, never over it.
    counts, wanted = np.diff(masked.offsets), num_to_predict(rows.lengths, config, rows.lengths - specials_per_row(rows))
    if config.whole_word_mask:
        assert (counts <= wanted).all() and counts.sum() >= 0.8 * wanted.sum(), (counts.sum(), wanted.sum())
    else:
        assert np.array_equal(counts, wanted)
    return n


def test_masking_statistics_on_many_positions():
    # 5,432 rows, 83,561 masked positions, 8,280 random draws over 800 ordinary ids.
    # Standard errors: [MASK] share sqrt(.8 * .2 / 83561) = 0.14 points, kept/random
    # 0.10 points; so a bias of 0.8 point in the [MASK] share or 0.6 point in the
    # kept/random shares fails (6 standard errors), and a 1-point bias gives |z| ~7 / ~10.
    # Random draws: 10.4 per id on average; a draw confined to 90% of the ids, or one
    # that depends on the original token, exceeds the chi-square bounds many times over.
    _, rows, original, masked = masked_rows(big_partition(1), seed=7)
    n = check_masking_statistics(rows, original, masked, ORDINARY, MaskingConfig())
    assert n > 80_000
    rate = n / len(rows.input_ids)
    assert abs(rate - 0.15) < 0.005


vocab_sizes = st.integers(400, 30_000)
# The pair templates of the families build-shards reads (tokenizer/templates.py):
# BERT's and DeBERTa-v3's [CLS] A [SEP] B [SEP] (types 0/1), RoBERTa's <s> A </s></s> B </s>
# and ModernBERT's [CLS] A [SEP] B [SEP], both one type.
TEMPLATES = {
    "wordpiece": BERT,
    "roberta": Template(prefix=(CLS,), middle=(SEP, SEP), suffix=(SEP,), single_suffix=(SEP,), prefix_types=(0,),
                        middle_types=(0, 0), suffix_types=(0,), a_type=0, b_type=0),
    "modernbert": Template(prefix=(CLS,), middle=(SEP,), suffix=(SEP,), single_suffix=(SEP,), prefix_types=(0,),
                           middle_types=(0,), suffix_types=(0,), a_type=0, b_type=0),
}


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), vocab_sizes, st.sampled_from([32, 64, 128]),
       st.sampled_from([None, 0.1, 0.3]), st.sampled_from([0.15, 0.2, 1 / 3]), st.sampled_from(sorted(TEMPLATES)),
       st.booleans())
@settings(max_examples=12, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate))  # no slow shrinking
def test_masking_statistics_hold_for_drawn_seeds_lengths_and_vocabularies(corpus_seed, seed, vocab_size, max_seq,
                                                                          continuation_share, prob, family,
                                                                          words_per_token):
    """The same bounds over drawn corpora (document and sentence lengths), vocabularies
    (ordinary pools of 200 to 29,800 ids), seeds, rates that do not divide the lengths
    evenly, the pair templates of BERT, RoBERTa (4 specials) and ModernBERT (one type),
    and whole-word masking (None: off; else that share of the tokens continue a word,
    told by the vocabulary's "##" pieces as WordPiece's, or per token as the word starts
    a BPE or Unigram partition carries). Each example masks >= 20,000 positions, so a
    bias above 6 * sqrt(.16 / 20000) = 1.7 points in the [MASK] share or 1.3 points in
    kept/random fails every example: the 80/10/10 split is drawn per position, whole
    words or not (Google's create_pretraining_data.py)."""
    rng = np.random.default_rng(corpus_seed)
    docs = [list(rng.integers(1, 60, rng.integers(1, 20))) for _ in range(400)]
    lengths = [n for d in docs for n in d]
    so = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    do = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    special = 200  # ids below are reserved, [CLS]/[SEP]/[MASK] among them: a corpus never holds them as text
    pool = np.arange(special, vocab_size, dtype=np.int32)
    ids = rng.integers(special, vocab_size, so[-1]).astype(np.uint16)
    part = TokenizedPartition(ids, so, do)
    whole_word = continuation_share is not None
    template = TEMPLATES[family]
    is_continuation = word_starts = None
    if whole_word and words_per_token:
        word_starts = np.random.default_rng(seed).random(len(ids)) >= continuation_share
    elif whole_word:
        is_continuation = np.random.default_rng(seed).random(vocab_size) < continuation_share
        is_continuation[:special] = False
    vocab = Vocabulary(MASK, vocab_size, pool, is_continuation)
    config = PairConfig(max_seq_length=max_seq, pair_specials=template.pair_specials)
    pairs = np.concatenate([build_pairs(part, config, random.Random(seed + k)) for k in range(4)])
    rows = build_rows(part.ids, pairs, template, np.uint16, word_starts)
    assert rows.lengths.max() <= max_seq
    original = rows.input_ids.copy()
    config = MaskingConfig(masked_lm_prob=prob, whole_word_mask=whole_word)
    masked = apply_masking(rows, config, vocab, np.random.default_rng(seed))
    assert len(masked.positions) >= 20_000
    check_masking_statistics(rows, original, masked, pool, config)


def word_groups(before: np.ndarray, a_len: int) -> list[list[int]]:
    """Google's whole-word grouping, read from a row: a "##" piece joins the word before
    it, except at the start of a segment; [CLS] and [SEP] are no word."""
    sep = a_len + 1
    groups: list[list[int]] = []
    for p in range(1, len(before) - 1):
        if p == sep:
            continue
        if VOCAB.is_continuation[before[p]] and p - 1 not in (0, sep) and groups:
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


@given(partitions, st.integers(0, 2**32 - 1), st.sampled_from([16, 64, 128]), st.sampled_from([1, 5, 20]),
       st.sampled_from([0.15, 0.5]))
@settings(max_examples=100, deadline=None)
def test_whole_word_masking_takes_whole_groups_up_to_the_target(part, seed, max_seq, max_pred, prob):
    """Google's rule: groups in random order, each taken unless it would overshoot the
    target, until the target is reached. So the chosen positions are a union of whole
    groups, never more than the target, and when fewer, every group left out is too big
    for the room that was left."""
    config = MaskingConfig(max_pred, prob, whole_word_mask=True)
    pairs, rows, original, masked = masked_rows(part, seed, max_seq, config)
    observed_split(rows, original, masked)  # labels are the original tokens
    for r in range(rows.num_rows):
        lo, hi = rows.offsets[r], rows.offsets[r + 1]
        before, length, a_len = original[lo:hi], hi - lo, int(pairs[r][1])
        chosen = set(masked.positions[masked.offsets[r] : masked.offsets[r + 1]].tolist())
        wanted = min(max_pred, max(1, round(length * prob)), length - 3)
        groups = word_groups(before, a_len)
        taken = [g for g in groups if set(g) <= chosen]
        assert sum(len(g) for g in taken) == len(chosen), "a word masked in part"
        assert len(chosen) <= wanted
        room = wanted - len(chosen)
        assert all(len(g) > room for g in groups if g not in taken), (wanted, len(chosen))


def test_whole_vocab_draw_reaches_specials():
    part = big_partition(2)
    _, rows, _, masked = masked_rows(part, 3, masking=MaskingConfig(random_from_whole_vocab=True))
    flat = np.repeat(rows.offsets[:-1], np.diff(masked.offsets)) + masked.positions
    shown = rows.input_ids[flat]
    random_ones = shown[(shown != MASK) & (shown != masked.labels)]
    assert (random_ones < 200).any()  # ids below the ordinary range do occur


def test_next_sentence_random_fraction_is_what_the_algorithm_gives():
    """A corpus whose pairs the algorithm fixes up to its coins: D1 one-sentence documents
    and D2 two-sentence ones, every document shorter than the target (short_seq_prob 0).
    A one-sentence chunk is always random-next: 1 random row. A two-sentence chunk flips
    the NSP coin: heads, one is-next row; tails, a random row for the first sentence,
    whose second is then put back and becomes a one-sentence chunk: 2 random rows. With
    K ~ Binomial(D2, 1/2) tails, the fraction is (D1 + 2K) / (D1 + D2 + K), exactly."""
    d1, d2, passes = 1_000, 4_000, 3
    rng = np.random.default_rng(11)
    docs = [[int(rng.integers(5, 60))] for _ in range(d1)] + [list(rng.integers(5, 60, 2)) for _ in range(d2)]
    order = rng.permutation(len(docs))
    part = make_partition([docs[i] for i in order])
    pairs = np.concatenate([build_pairs(part, PairConfig(short_seq_prob=0.0), random.Random(s)) for s in range(passes)])
    n1, n2, k = passes * d1, passes * d2, passes * d2 / 2  # K over all passes: mean n2/2, sd sqrt(n2)/2

    def fraction(tails):
        return (n1 + 2 * tails) / (n1 + n2 + tails)

    tails = len(pairs) - n1 - n2  # each tail adds one row ...
    assert int(pairs[:, 4].sum()) == n1 + 2 * tails  # ... and two random ones, exactly
    expected = fraction(k)  # 0.714
    standard_error = (n1 + 2 * n2) / (n1 + n2 + k) ** 2 * math.sqrt(n2) / 2  # delta method: 0.0034
    observed = pairs[:, 4].mean()
    # |z| < 6: an NSP coin of 0.53 instead of 0.5 moves the fraction by 6.5 standard
    # errors (fails about 2 runs in 3), 0.55 by 10.7 (always; the old bound of
    # (0.5, 0.65) let it through).
    assert abs(observed - expected) < Z_BOUND * standard_error, (observed, expected, standard_error)


def test_truncation_cuts_front_and_back_equally_for_a_and_b():
    """Documents of 100-token sentences: every chunk is two sentences (the second
    reaches the 125-token target), A one sentence and B one sentence, so every pair is
    200 tokens cut to 125: B loses 38 (it loses first on a tie), A 37. The reference
    flips a coin per removed token for front or back, so the tokens cut from each
    side's front are Binomial(38, 1/2) for B and Binomial(37, 1/2) for A."""
    part = make_partition([[100] * 6 for _ in range(300)])
    pairs = np.concatenate([build_pairs(part, PairConfig(short_seq_prob=0.0), random.Random(s)) for s in range(2)])
    assert (pairs[:, 1] == 63).all() and (pairs[:, 3] == 62).all()
    for column, removed in ((0, 37), (2, 38)):
        front = pairs[:, column] % 100  # tokens cut before the segment's start
        assert (front <= removed).all()
        # Mean removed/2, sd sqrt(removed)/2 per pair; over ~2,400 pairs the standard
        # error is 0.06 tokens, so a bias of 0.4 tokens (1%) to either end fails.
        standard_error = math.sqrt(removed / 4 / len(front))
        assert abs(front.mean() - removed / 2) < Z_BOUND * standard_error, (column, front.mean())
        assert abs(front.var() / (removed / 4) - 1) < 0.15  # binomial spread, not a fixed split


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
