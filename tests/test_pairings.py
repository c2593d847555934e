"""SOP pairs and FULL-SENTENCES rows (`build-shards --pairs sop|none`): Hypothesis
properties on drawn partitions, and real builds checked by the shared validator."""
from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertprep.instances import build_full_rows, document_starts, pack_full_sentences
from bertprep.instances import PairConfig, TokenizedPartition, build_sop_pairs
from bertprep.instances import MaskingConfig, Vocabulary, apply_masking
from bertprep.tokenizer.templates import bert_template
from shared_data import SHARED_DATA

CLS, SEP, MASK = 101, 102, 103
BERT = bert_template(CLS, SEP)
VOCAB_SIZE = 1000


def make_partition(doc_sentence_lengths: list[list[int]]) -> TokenizedPartition:
    lengths = [n for doc in doc_sentence_lengths for n in doc]
    so = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=so[1:])
    do = np.zeros(len(doc_sentence_lengths) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in doc_sentence_lengths], out=do[1:])
    ids = (200 + np.arange(so[-1]) % (VOCAB_SIZE - 200)).astype(np.uint16)  # ids tell their position
    return TokenizedPartition(ids, so, do)


partitions = st.lists(st.lists(st.integers(0, 150), min_size=1, max_size=10), min_size=1, max_size=10
                      ).map(make_partition)


def doc_of_tokens(part: TokenizedPartition) -> np.ndarray:
    so, do = part.sentence_offsets, part.document_offsets
    return np.repeat(np.repeat(np.arange(part.num_documents), np.diff(do)), np.diff(so))


@given(partitions, st.integers(0, 2**32 - 1), st.sampled_from([8, 16, 32, 128]))
@settings(max_examples=150, deadline=None)
def test_sop_pairs_are_contiguous_text_of_one_document(part, seed, max_seq):
    pairs = build_sop_pairs(part, PairConfig(max_seq_length=max_seq, kind="sop"), random.Random(seed))
    doc = doc_of_tokens(part)
    for a_start, a_len, b_start, b_len, swapped in pairs.tolist():
        if swapped:  # label 1: A is the later segment
            a_start, a_len, b_start, b_len = b_start, b_len, a_start, a_len
        assert a_len > 0 and b_len > 0 and a_len + b_len <= max_seq - 3
        assert a_start + a_len == b_start  # adjacent: the first segment ends where the second begins
        assert len(set(doc[a_start:b_start + b_len].tolist())) == 1


def test_sop_swaps_half_of_the_pairs():
    # 40 documents of 30 sentences, 20 seeds: n ~ 5,000 pairs; 6 sigma of a fair coin is
    # 0.042, the bound; a swap rate off by 0.06 (0.44 or 0.56) would fail it.
    rng = np.random.default_rng(0)
    part = make_partition([rng.integers(5, 40, 30).tolist() for _ in range(40)])
    labels = np.concatenate([build_sop_pairs(part, PairConfig(128, kind="sop"), random.Random(s))[:, 4]
                             for s in range(20)])
    n = len(labels)
    assert n > 3000
    assert abs(labels.mean() - 0.5) < 6 * math.sqrt(0.25 / n)


@given(partitions, st.sampled_from([8, 16, 32, 128]))
@settings(max_examples=150, deadline=None)
def test_full_sentences_rows_fit_and_lose_no_sentence(part, max_seq):
    descriptors = pack_full_sentences(part, max_seq)
    starts = document_starts(part)
    rows = build_full_rows(part.ids, descriptors, starts, BERT, SEP, np.uint16)
    lengths = rows.lengths
    assert (lengths <= max_seq).all()
    # Every corpus token appears once, in order, and only specials are added.
    assert np.array_equal(rows.input_ids[~rows.special], part.ids)
    flat_row = np.repeat(np.arange(rows.num_rows), lengths)
    first = rows.offsets[:-1]
    assert (rows.input_ids[first] == CLS).all() and (rows.input_ids[rows.offsets[1:] - 1] == SEP).all()
    inner_seps = np.bincount(flat_row[rows.special], minlength=rows.num_rows) - 2
    doc = doc_of_tokens(part)
    for r, (start, span) in enumerate(descriptors[:, :2].tolist()):
        # one [SEP] per document boundary crossed inside the row
        assert inner_seps[r] == len(np.unique(doc[start:start + span])) - 1
    # Whole sentences: a row starts at a sentence start unless it continues a split
    # sentence longer than a row.
    so = set(part.sentence_offsets.tolist())
    budget = max_seq - 2
    previous = None
    for start, span in descriptors[:, :2].tolist():
        if start not in so:  # only the next piece of a sentence split at a full row
            assert previous is not None and previous[1] == budget and sum(previous) == start
        previous = (start, span)
    assert (rows.token_type_ids == 0).all() and (rows.next_sentence_label == 0).all()


def test_full_sentences_masking_never_picks_a_separator():
    part = make_partition([[5, 7, 3], [4, 9], [6], [8, 8, 8]])
    rows = build_full_rows(part.ids, pack_full_sentences(part, 32), document_starts(part), BERT, SEP, np.uint16)
    vocab = Vocabulary(MASK, VOCAB_SIZE, np.arange(200, VOCAB_SIZE, dtype=np.int32))
    original = rows.input_ids.copy()
    masked = apply_masking(rows, MaskingConfig(20, 0.5), vocab, np.random.default_rng(1))
    flat = np.repeat(rows.offsets[:-1], np.diff(masked.offsets)) + masked.positions
    assert not rows.special[flat].any()
    assert (np.isin(original[flat], [CLS, SEP]) == False).all()  # noqa: E712
    # 50% of each row's tokens (specials counted), capped by the candidates
    lengths, specials = rows.lengths, np.add.reduceat(rows.special.astype(int), rows.offsets[:-1])
    want = np.minimum(np.maximum(1, np.rint(lengths * 0.5)), lengths - specials)
    assert np.array_equal(np.diff(masked.offsets), want)


WIKI = SHARED_DATA / "enwiki_wikiextractor" / "wiki_00"
VOCAB_FILE = SHARED_DATA / "bert-base-uncased-vocab.txt"
VALIDATOR = SHARED_DATA.parent / "tools" / "validate_shards.py"


@pytest.fixture(scope="module")
def wiki_corpus(tmp_path_factory):
    if not WIKI.exists():
        pytest.skip(f"shared data absent ({WIKI})")
    from bertmodel.data.synthetic import wiki_to_reference_layout

    return wiki_to_reference_layout([WIKI], tmp_path_factory.mktemp("wiki") / "wiki.txt")


@pytest.mark.parametrize("pairs", ["sop", "none"])
def test_real_builds_record_their_pairing(wiki_corpus, tmp_path, pairs):
    from bertmodel.data.synthetic import build_corpus_shards

    out = build_corpus_shards(wiki_corpus, VOCAB_FILE, tmp_path / pairs, dupe_factor=1, pairs=pairs)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["options"]["pairs"] == pairs
    done = subprocess.run([sys.executable, str(VALIDATOR), "--vocab", str(VOCAB_FILE), str(out)],
                          capture_output=True, text=True)
    # The shared validator checks every pairing: SOP's [CLS] A [SEP] B [SEP] as NSP's, and
    # FULL-SENTENCES rows (read from the manifest's pairs option) as one segment.
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("OK:"), done.stdout
    if pairs == "sop":
        assert abs(manifest["statistics"]["next_sentence_random_fraction"] - 0.5) < 0.05
    else:  # FULL-SENTENCES: every row is a continuation
        assert manifest["statistics"]["next_sentence_random_fraction"] == 0
        assert abs(manifest["statistics"]["mask_rate"] - 0.15) < 0.01
