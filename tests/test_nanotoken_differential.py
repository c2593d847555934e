"""nanotoken against tokenizers on drawn text: the build spot-checks a sample of every
partition (encoding.py), so the engines must agree on whatever text the sample misses."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertprep.tokenizer import SentenceEncoder, nanotoken_available
from bertprep.tokenizer import load_tokenizer
from shard_fixtures import write_vocab
from shared_data import SHARED_DATA

pytestmark = pytest.mark.skipif(not nanotoken_available(), reason="nanotoken (the [fast] extra) is not installed")

GOOGLE_VOCAB = SHARED_DATA / "bert-base-uncased-vocab.txt"

characters = st.one_of(
    st.characters(codec="utf-8"),  # anything, control and format characters included
    st.sampled_from("àéîõüçñßÅØæœ\u0301\u0308\u0327"),  # accents, precomposed and combining
    st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),  # CJK ideographs
    st.sampled_from("\t\n\r\x00\x0b\x0c\x1f\x7f\x85\xa0\u2028\u200b\u200d\ufeff"),  # controls and spaces
    st.sampled_from(".,;:!?'\"()[]{}-–—…/\\@#$%^&*_+=<>|~`"),
    st.sampled_from("abcdefghijklmnopqrstuvwxyz ABCXYZ"),
)
words = st.one_of(
    st.text(characters, max_size=12),
    st.sampled_from(["the", "river", "running", "unaffable", "[MASK]", "[CLS]", "##ing", "can't"]),
    st.text(st.sampled_from("abcde"), min_size=90, max_size=300),  # longer than max_chars_per_word
)
sentences = st.lists(words, max_size=20).map(" ".join)


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    vocab = GOOGLE_VOCAB if GOOGLE_VOCAB.exists() else write_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt")
    tok = load_tokenizer(vocab)
    return SentenceEncoder(tok, "nanotoken"), SentenceEncoder(tok, "tokenizers")


@given(batch=st.lists(sentences, min_size=1, max_size=8))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_nanotoken_encodes_drawn_text_as_tokenizers_does(encoders, batch):
    fast, reference = encoders
    ragged = fast._fast.encode_batch(batch, add_special_tokens=False)  # the raw engine, no fallback
    ids, offsets = reference.encode_reference(batch)
    ours_offsets = np.asarray(ragged.offsets, dtype=np.int64)
    ours_ids = np.asarray(ragged.ids, dtype=np.uint32)
    for k, sentence in enumerate(batch):
        ours = ours_ids[ours_offsets[k] : ours_offsets[k + 1]].tolist()
        theirs = ids[offsets[k] : offsets[k + 1]].tolist()
        assert ours == theirs, (sentence, ours, theirs)
