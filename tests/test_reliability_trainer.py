"""Reliability: what `bertmodel pretrain` does with data it must not train on.
Each case is one line naming the file, exit 1, and no RUN directory.

The library-level checks are in tests/test_bertmodel_data.py (missing manifest, checksum,
truncation, missing shard, column types) and tests/test_train.py (--init-from with
another vocabulary, sequences longer than the model's positions, with the exact CLI
message in test_sequences_longer_than_positions_are_rejected); here each goes through the
CLI, plus the cases those files do not have."""
from __future__ import annotations

import json
import shutil

import pytest

from bertmodel.cli import main
from bertmodel.model.config import BertConfig
from bertmodel.hf import export_hf
from bertmodel.model import BertForPreTraining
from bertmodel.data.shards import tokenizer_info
from bertmodel.data.synthetic import small_shard_dir, write_small_vocab
from bertprep.builder import BuildConfig, build_shards, staging_path
from bertprep.corpus import CorpusSpec
from reliability_checks import invoke, one_line_error
from shard_fixtures import write_corpus, write_vocab

SHARD = "data-00000-of-00001.arrow"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("trainer") / "shards", rows=32, num_shards=1)


def pretrain(data, run, *extra):
    return invoke(main, "pretrain", "--data", data, "--out", run, "--preset", "tiny", "--batch-size", 4,
                  "--max-steps", 1, "--no-progress", *extra)


def _flip_a_byte(shard):
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))


DAMAGE = {
    "truncated": (lambda d: (d / SHARD).write_bytes((d / SHARD).read_bytes()[:-100]), (),
                  "{shard}: {size} bytes but manifest.json says {full} (truncated or corrupted; rebuild the shards)"),
    "truncated-verify-size": (lambda d: (d / SHARD).write_bytes((d / SHARD).read_bytes()[:-100]),
                              ("--verify", "size"),
                              "{shard}: {size} bytes but manifest.json says {full} (truncated or corrupted; "
                              "rebuild the shards)"),
    "flipped-byte": (lambda d: _flip_a_byte(d / SHARD), (),
                     "{shard}: sha256 differs from manifest.json (corrupted; rebuild the shards)"),
    "missing-shard": (lambda d: (d / SHARD).unlink(), (), "{shard}: listed in manifest.json but missing"),
    "no-manifest": (lambda d: (d / "manifest.json").unlink(), (),
                    "{dir}/manifest.json is missing: {dir} is not a finished build-shards output "
                    "(manifest.json is written last)"),
    "manifest-not-json": (lambda d: (d / "manifest.json").write_text('{"shards": [\n'), (),
                          "{dir}/manifest.json is not valid JSON (Expecting value: line 2 column 1 (char 13))"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_shard_dir_is_named(shards, tmp_path, case):
    damaged = shutil.copytree(shards, tmp_path / "damaged")
    full = (damaged / SHARD).stat().st_size
    damage, extra, expected = DAMAGE[case]
    damage(damaged)
    size = (damaged / SHARD).stat().st_size if (damaged / SHARD).exists() else 0
    result = pretrain(damaged, tmp_path / "run", *extra)
    message = one_line_error(result, damaged, exit_code=1)
    assert message == expected.format(shard=damaged / SHARD, dir=damaged, size=f"{size:,}", full=f"{full:,}")
    assert not (tmp_path / "run").exists()


def test_an_unfinished_build_is_not_training_data(tmp_path, monkeypatch):
    """build-shards killed before its manifest leaves OUT.partial; pointing pretrain at it
    (or at OUT, which does not exist yet) is refused."""
    corpus = write_corpus(tmp_path / "corpus.txt", documents=40)
    vocab = write_vocab(tmp_path / "vocab.txt")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as if the run stopped while writing shards

    monkeypatch.setattr("bertprep.builder.tasks.gather_shard", killed)
    monkeypatch.setattr("bertprep.builder.run.gather_shard", killed)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        build_shards(CorpusSpec(paths=(str(corpus),)), vocab, out,
                     BuildConfig(workers=1, cache_dir=str(tmp_path / "cache")), progress=False)
    partial = staging_path(out)
    assert partial.is_dir() and not out.exists()
    result = pretrain(partial, tmp_path / "run")
    assert one_line_error(result, partial) == (
        f"{partial}/manifest.json is missing: {partial} is not a finished build-shards output "
        "(manifest.json is written last)")
    result = pretrain(out, tmp_path / "run")
    assert one_line_error(result, out, exit_code=2) == f"Invalid value for '--data': Directory '{out}' does not exist."
    assert not (tmp_path / "run").exists()


def test_init_from_with_another_tokenizer(shards, tmp_path):
    other = write_small_vocab(tmp_path / "other-vocab.txt", 250)
    other.write_text(other.read_text().replace("w10\n", "zebra\n"))
    export_hf(BertForPreTraining(BertConfig.preset("tiny", vocab_size=255)), tmp_path / "other",
              tokenizer=tokenizer_info(other))
    result = pretrain(shards, tmp_path / "run", "--init-from", tmp_path / "other")
    assert one_line_error(result, tmp_path / "other", exit_code=1) == (
        f"{tmp_path / 'other'}: its tokenizer is not the one {shards} was built with (vocab.txt contents differ); "
        "use shards built with the model's tokenizer")
    export_hf(BertForPreTraining(BertConfig.preset("tiny", vocab_size=300)), tmp_path / "v300")
    result = pretrain(shards, tmp_path / "run", "--init-from", tmp_path / "v300")
    assert one_line_error(result, exit_code=1) == (
        f"{tmp_path / 'v300'}: vocab size 300 but the shards' tokenizer has 255; use shards built with the model's "
        "tokenizer")
    assert not (tmp_path / "run").exists()


def test_tokenizer_option_must_be_the_shards_own(shards, tmp_path):
    """--tokenizer is for shard dirs that carry none; it used to override the shards'
    own silently (and a smaller one crashed with an IndexError in the embedding)."""
    other = write_small_vocab(tmp_path / "other-vocab.txt", 250)
    other.write_text(other.read_text().replace("w10\n", "zebra\n"))
    result = pretrain(shards, tmp_path / "run", "--tokenizer", other)
    assert one_line_error(result, other, exit_code=1) == (
        f"{other}: not the tokenizer {shards} was built with (vocab.txt contents differ)")
    smaller = write_small_vocab(tmp_path / "smaller-vocab.txt", 40)
    result = pretrain(shards, tmp_path / "run", "--tokenizer", smaller)
    assert one_line_error(result, smaller, exit_code=1) == (
        f"{smaller}: not the tokenizer {shards} was built with (vocab size 45 vs 255)")
    same = shards / "vocab.txt"
    assert pretrain(shards, tmp_path / "run", "--tokenizer", same).exit_code == 0


def test_tokenizer_option_too_small_for_bare_shards(shards, tmp_path):
    """Shards that carry no tokenizer (as reference_builder.py writes them): the ids are
    checked against --tokenizer's size before any step."""
    bare = shutil.copytree(shards, tmp_path / "bare")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (bare / name).unlink()
    manifest = json.loads((bare / "manifest.json").read_text())
    del manifest["tokenizer"]
    (bare / "manifest.json").write_text(json.dumps(manifest))
    smaller = write_small_vocab(tmp_path / "smaller-vocab.txt", 40)
    result = pretrain(bare, tmp_path / "run", "--tokenizer", smaller)
    message = one_line_error(result, smaller, exit_code=1)
    assert message.startswith(f"{smaller}: 45 tokens, but {bare} holds token id ")
    assert message.endswith(": not the tokenizer these shards were built with")
    result = pretrain(bare, tmp_path / "run")
    assert one_line_error(result, bare) == (
        f"{bare}: no tokenizer: the manifest names none and there is no vocab.txt, tokenizer.json or SentencePiece "
        "model (pass --tokenizer)")


def test_eval_data_with_another_tokenizer(shards, tmp_path):
    other = small_shard_dir(tmp_path / "other", rows=16, words=200, num_shards=1)
    result = pretrain(shards, tmp_path / "run", "--eval-data", other)
    assert one_line_error(result, exit_code=1) == (
        "--eval-data uses another tokenizer than --data (vocab size 205 vs 255)")
    assert not (tmp_path / "run").exists()
