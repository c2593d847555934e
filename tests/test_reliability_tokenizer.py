"""Reliability: tokenizer problems. A vocabulary without the special tokens,
an empty one or a tokenizer.json that is not one stops build-shards (and pretrain's
--tokenizer) with one line naming the file; a vocabulary beyond the uint16 range makes
int32 shards that datasets opens and bertmodel trains on. tests/test_tokenizer.py covers
the loader's messages in the library; tests/test_encode_cli.py the encode command."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from bertmodel.cli import main as model_main
from bertmodel.data.synthetic import small_shard_dir
from bertprep.cli import main as prep_main
from reliability_checks import invoke, nothing_left, one_line_error
from shard_fixtures import SPECIALS, read_rows, write_corpus, write_vocab


def _vocab_without(*tokens):
    def make(path):
        write_vocab(path)
        path.write_text("".join(t + "\n" for t in path.read_text().split() if t not in tokens))
        return path
    return make


def _write(name, data: bytes):
    def make(path):
        target = path.with_name(name)
        target.write_bytes(data)
        return target
    return make


def _tokdir_without_files(path):
    folder = path.with_name("tokdir")
    folder.mkdir()
    (folder / "README").write_text("nothing here")
    return folder


def _duplicate(path):
    write_vocab(path)
    path.write_text(path.read_text() + "river\n")
    return path


BAD_TOKENIZERS = {
    "no-mask": (_vocab_without("[MASK]"), "{0}: vocabulary lacks [MASK]"),
    "no-cls-sep": (_vocab_without("[CLS]", "[SEP]"), "{0}: vocabulary lacks [CLS], [SEP]"),
    "empty-vocab": (_write("vocab.txt", b""), "{0}: empty vocabulary"),
    "blank-line": (_write("vocab.txt", "\n".join(SPECIALS[:3] + [""] + SPECIALS[3:]).encode()),
                   "{0}: line 4 is empty (expected one token per line)"),
    "duplicate-token": (_duplicate, "{0}: duplicate token 'river' (ids 43 and 64)"),
    "json-not-a-tokenizer": (_write("tokenizer.json", b'{"hello": "world"}\n'),
                             "{0}: not a WordPiece tokenizer (model type None)"),
    "json-bpe-without-specials": (_write("tokenizer.json", b'{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}'),
                                  "{0}: no [CLS]/<s> or [SEP]/</s> token: an encoder's sequences need both"),
    "json-invalid": (_write("tokenizer.json", b'{"model": {"type": "WordPiece", '),
                     "{0}: not a tokenizer (invalid JSON: Expecting property name enclosed in double quotes at line 1)"),
    "json-binary": (_write("tokenizer.json", b"\x89PNG\r\n\x1a\n\x00\x00\xff"),
                    "{0}: not a tokenizer (not UTF-8 text: byte 0)"),
    "json-empty-vocab": (_write("tokenizer.json", b'{"model": {"type": "WordPiece", "vocab": {}}}'),
                         "{0}: empty vocabulary"),
    "directory-without-files": (_tokdir_without_files, "{0}: directory has no tokenizer.json or vocab.txt"),
}


@pytest.mark.parametrize("case", list(BAD_TOKENIZERS))
def test_build_shards_refuses_a_bad_tokenizer(case, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents=20)
    make, expected = BAD_TOKENIZERS[case]
    tokenizer = make(tmp_path / "vocab.txt")
    before = sorted(p.name for p in tmp_path.iterdir())
    result = invoke(prep_main, "build-shards", corpus, "--tokenizer", tokenizer, "--out", tmp_path / "out",
                    "--workers", 1, "--quiet", "--cache-dir", tmp_path / "cache")
    assert one_line_error(result, tokenizer, exit_code=1) == expected.format(tokenizer)
    nothing_left(tmp_path, *before)  # the tokenizer is checked before anything is written


@pytest.mark.parametrize("case", ["no-mask", "empty-vocab"])
def test_pretrain_refuses_a_bad_tokenizer(case, tmp_path):
    shards = small_shard_dir(tmp_path / "shards", rows=16, num_shards=1)
    make, _ = BAD_TOKENIZERS[case]
    tokenizer = make(tmp_path / "bad-vocab.txt")
    result = invoke(model_main, "pretrain", "--data", shards, "--out", tmp_path / "run", "--preset", "tiny",
                    "--max-steps", 1, "--no-progress", "--tokenizer", tokenizer)
    expected = {"no-mask": f"{tokenizer}: vocabulary lacks [MASK]", "empty-vocab": f"{tokenizer}: empty vocabulary"}
    assert one_line_error(result, tokenizer, exit_code=1) == expected[case]
    assert not (tmp_path / "run").exists()


FILLER = 70_000


def test_vocab_beyond_uint16_gives_int32_shards_that_load_and_train(tmp_path):
    """Every ordinary token sits above id 65,535, so a uint16 anywhere would wrap."""
    import datasets

    tokens = write_vocab(tmp_path / "small.txt").read_text().split()
    words = tokens[len(SPECIALS):]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + [f"filler{i}" for i in range(FILLER)] + words) + "\n")
    size = len(SPECIALS) + FILLER + len(words)
    corpus = write_corpus(tmp_path / "corpus.txt", documents=40)
    out = tmp_path / "shards"
    result = invoke(prep_main, "build-shards", corpus, "--tokenizer", vocab, "--out", out, "--workers", 1,
                    "--quiet", "--cache-dir", tmp_path / "cache", "--dupe-factor", 1, "--max-seq-length", 64)
    assert result.exit_code == 0, result.output

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"]["vocab_size"] == size
    shard = out / manifest["shards"][0]["name"]
    schema = pa.ipc.open_stream(pa.memory_map(str(shard))).schema
    assert str(schema.field("input_ids").type) == "list<item: int32>"
    assert str(schema.field("masked_lm_ids").type) == "list<item: int32>"
    assert str(schema.field("masked_lm_positions").type) == "list<item: uint16>"
    loaded = datasets.load_from_disk(str(out))
    assert loaded.features["input_ids"].feature.dtype == "int32"
    assert len(loaded) == manifest["totals"]["rows"]

    specials = set(range(len(SPECIALS)))
    for row in read_rows(out):
        # Text gives specials and words only; a filler id can only be a random replacement
        # at a masked position. A wrapped word id would land among the fillers.
        masked = set(row["masked_lm_positions"])
        assert all(i in specials or FILLER < i < size
                   for p, i in enumerate(row["input_ids"]) if p not in masked)
        assert all(0 <= i < size for i in row["input_ids"])
        assert all(FILLER < i < size for i in row["masked_lm_ids"])

    run = tmp_path / "run"
    result = invoke(model_main, "pretrain", "--data", out, "--out", run, "--preset", "tiny", "--batch-size", 2,
                    "--max-steps", 1, "--no-progress")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].startswith(f"{run}: step 1, loss ")
    config = json.loads((run / "hf" / "config.json").read_text())
    assert config["vocab_size"] == size


def test_train_tokenizer_out_is_checked_before_reading(tmp_path):
    """train-tokenizer makes the tokenizer, so its "tokenizer problems" are its output:
    an existing TOKDIR is refused before the corpus is read (the corpus here is missing,
    and the message is about the output, which the user must fix either way)."""
    existing = tmp_path / "tok"
    existing.mkdir()
    (existing / "vocab.txt").write_text("[PAD]\n")
    corpus = write_corpus(tmp_path / "corpus.txt", documents=10)
    result = invoke(prep_main, "train-tokenizer", corpus, "--out", existing, "--quiet")
    assert one_line_error(result, existing) == f"{existing}: exists and is not empty (use --overwrite to replace it)"
    assert (existing / "vocab.txt").read_text() == "[PAD]\n"
