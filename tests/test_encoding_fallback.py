"""The bulk encoder: nanotoken output is spot-checked against tokenizers, and any
difference hands the partition to tokenizers (DESIGN.md, "Tokenizer")."""
import numpy as np
import pytest

from bertprep.builder import BuildConfig, build_shards
from bertprep.corpus import CorpusSpec
from bertprep.tokenizer import SentenceEncoder, nanotoken_available
from bertprep.tokenizer import load_tokenizer
from shard_fixtures import shard_bytes, write_corpus, write_vocab

needs_nanotoken = pytest.mark.skipif(not nanotoken_available(), reason="nanotoken (the [fast] extra) is not installed")
SENTENCES = ["The river walked across the bridge.", "Children played music in the evening.", "[MASK] and bakers"] * 50


@needs_nanotoken
def test_agreeing_engines_keep_nanotoken(tmp_path):
    tok = load_tokenizer(write_vocab(tmp_path / "vocab.txt"))
    fast = SentenceEncoder(tok, "nanotoken").encode(SENTENCES)
    reference = SentenceEncoder(tok, "tokenizers").encode(SENTENCES)
    assert fast.engine == "nanotoken" and fast.mismatches == 0
    assert np.array_equal(fast.ids, reference.ids) and np.array_equal(fast.offsets, reference.offsets)


class Disagreeing:
    """nanotoken's interface, off by one on the first token of every sentence about the river."""

    def __init__(self, real):
        self.real = real

    def encode_batch(self, sentences, add_special_tokens=False):
        ragged = self.real.encode_batch(sentences, add_special_tokens=add_special_tokens)
        ids = np.array(ragged.ids)
        for i, s in enumerate(sentences):
            if "river" in s:
                ids[ragged.offsets[i]] += 1
        return type("Ragged", (), {"ids": ids, "offsets": ragged.offsets})


@needs_nanotoken
def test_a_disagreeing_engine_is_replaced_by_tokenizers(tmp_path):
    tok = load_tokenizer(write_vocab(tmp_path / "vocab.txt"))
    encoder = SentenceEncoder(tok, "nanotoken")
    encoder._fast = Disagreeing(encoder._fast)
    result = encoder.encode(SENTENCES)
    reference = SentenceEncoder(tok, "tokenizers").encode(SENTENCES)
    assert result.engine == "tokenizers" and result.mismatches > 0
    assert np.array_equal(result.ids, reference.ids)


@needs_nanotoken
def test_shards_are_the_same_bytes_with_either_engine(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents=60)
    vocab = write_vocab(tmp_path / "vocab.txt")
    for engine in ("nanotoken", "tokenizers"):
        config = BuildConfig(workers=1, engine=engine, cache_dir=str(tmp_path / f"cache-{engine}"))
        build_shards(CorpusSpec(paths=(str(corpus),)), vocab, tmp_path / engine, config, progress=False)
    assert shard_bytes(tmp_path / "nanotoken") == shard_bytes(tmp_path / "tokenizers")
