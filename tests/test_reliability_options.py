"""Reliability: nonsense options for train-tokenizer, build-shards and
pretrain. Each gives one line, "Error: " and the option or path, a non-zero exit, and
writes nothing. Usage errors (a value click's types reject, a missing option) are one
line too: no usage block (bertprep.cli.OneLineErrors).

Already covered elsewhere, not repeated here: build-shards --max-seq-length 4/600,
--masked-lm-prob 1.5, --max-predictions-per-seq 0, --workers 0 and an OUT that is a file
(tests/test_build_shards.py::test_cli_errors_are_one_line); train-tokenizer's existing
TOKDIR without --overwrite and --sample-bytes lots (tests/test_train_tokenizer.py::
test_cli_errors_are_one_line)."""
from __future__ import annotations

import pytest

from bertmodel.cli import main as model_main
from bertmodel.data.synthetic import small_shard_dir
from bertprep.cli import main as prep_main
from reliability_checks import invoke, nothing_left, one_line_error
from shard_fixtures import write_corpus, write_vocab


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("inputs")
    return write_corpus(base / "corpus.txt", documents=30), write_vocab(base / "vocab.txt")


BUILD_SHARDS = [
    (["--max-seq-length", "7"], 1, "--max-seq-length: 7 is outside 8..8192 (the longest context of the models here; BERT has 512 positions)"),
    (["--max-seq-length", "8193"], 1, "--max-seq-length: 8193 is outside 8..8192 (the longest context of the models here; BERT has 512 positions)"),
    (["--masked-lm-prob", "0"], 1, "--masked-lm-prob: 0.0 is not strictly between 0 and 1"),
    (["--masked-lm-prob", "1"], 1, "--masked-lm-prob: 1.0 is not strictly between 0 and 1"),
    (["--masked-lm-prob", "-0.1"], 1, "--masked-lm-prob: -0.1 is not strictly between 0 and 1"),
    (["--max-predictions-per-seq", "-3"], 1, "--max-predictions-per-seq: must be at least 1"),
    (["--workers", "-1"], 1, "--workers: must be at least 1"),
    (["--short-seq-prob", "1.5"], 1, "--short-seq-prob: 1.5 is not between 0 and 1"),
    (["--dupe-factor", "0"], 1, "--dupe-factor: must be at least 1"),
    (["--shard-rows", "0"], 1, "--shard-rows: must be at least 1"),
    (["--num-shards", "0"], 1, "--num-shards: must be at least 1"),
    (["--partition-size", "100"], 1, "--partition-size: must be at least 1 KB"),
    (["--partition-size", "lots"], 2,
     "Invalid value for '--partition-size': 'lots' is not a size: use bytes or a unit, e.g. 500MB, 1.5GB, 20MiB"),
    (["--max-seq-length", "abc"], 2, "Invalid value for '--max-seq-length': 'abc' is not a valid integer."),
    (["--engine", "fast"], 2, "Invalid value for '--engine': 'fast' is not one of 'auto', 'nanotoken', 'tokenizers'."),
    (["--no-such-option"], 2, "No such option '--no-such-option'."),
]


@pytest.mark.parametrize("extra, code, message", BUILD_SHARDS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_build_shards_options(inputs, tmp_path, extra, code, message):
    corpus, vocab = inputs
    result = invoke(prep_main, "build-shards", corpus, "--tokenizer", vocab, "--out", tmp_path / "out", "--quiet",
                    "--cache-dir", tmp_path / "cache", *extra)
    assert one_line_error(result, exit_code=code) == message
    nothing_left(tmp_path)


def test_build_shards_missing_tokenizer_option(inputs, tmp_path):
    corpus, _ = inputs
    result = invoke(prep_main, "build-shards", corpus, "--out", tmp_path / "out")
    assert one_line_error(result, exit_code=2) == "Missing option '--tokenizer'."
    nothing_left(tmp_path)


def test_build_shards_output_under_a_file(inputs, tmp_path):
    corpus, vocab = inputs
    a_file = tmp_path / "file"
    a_file.write_text("x")
    result = invoke(prep_main, "build-shards", corpus, "--tokenizer", vocab, "--out", a_file / "out", "--quiet")
    assert one_line_error(result, exit_code=1) == f"{a_file}: is a file, so {a_file / 'out'} cannot be created in it"
    nothing_left(tmp_path, "file")


def test_build_shards_existing_output_without_overwrite(inputs, tmp_path):
    corpus, vocab = inputs
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    args = [corpus, "--tokenizer", vocab, "--quiet", "--workers", 1, "--cache-dir", tmp_path / "cache"]
    result = invoke(prep_main, "build-shards", *args, "--out", mine)
    assert one_line_error(result, mine) == f"{mine}: already holds files; pass --overwrite to replace it"
    assert (mine / "notes.txt").read_text() == "keep me"
    out = tmp_path / "out"
    assert invoke(prep_main, "build-shards", *args, "--out", out).exit_code == 0
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in out.iterdir()}
    # The same command again is always safe: complete, exit 0, OUT untouched.
    again = invoke(prep_main, "build-shards", *args, "--out", out)
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith(f"{out}: already complete (") and again.stdout.endswith("nothing to do\n")
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in out.iterdir()} == before
    # Anything else (here another seed) still needs --overwrite.
    result = invoke(prep_main, "build-shards", *args, "--out", out, "--seed", 7)
    assert one_line_error(result, out) == (f"{out}: already holds a finished build of other inputs, options, seed or "
                                           "tokenizer; pass --overwrite to replace it")
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in out.iterdir()} == before
    nothing_left(tmp_path, "cache", "mine", "out")


TRAIN_TOKENIZER = [
    (["--vocab-size", "3"], 2, "Invalid value for '--vocab-size': 3 is not in the range x>=6."),
    (["--vocab-size", "8", "--unused", "5"], 1, "--vocab-size: 8 is too small: the 5 special tokens and 5 [unused] "
                                               "slots leave no room (need at least 11)"),
    (["--sample-bytes", "0"], 1, "--sample-bytes: must be positive"),
    (["--heldout-fraction", "1"], 2, "Invalid value for '--heldout-fraction': 1.0 is not in the range 0<=x<1."),
    (["--heldout-fraction", "-0.5"], 2, "Invalid value for '--heldout-fraction': -0.5 is not in the range 0<=x<1."),
    (["--unused", "-1"], 2, "Invalid value for '--unused': -1 is not in the range x>=0."),
    (["--min-frequency", "-1"], 2, "Invalid value for '--min-frequency': -1 is not in the range x>=0."),
    (["--limit-alphabet", "0"], 2, "Invalid value for '--limit-alphabet': 0 is not in the range x>=1."),
    (["--max-chars-per-word", "0"], 2, "Invalid value for '--max-chars-per-word': 0 is not in the range x>=1."),
    (["--sentences", "words"], 2, "Invalid value for '--sentences': 'words' is not one of 'lines', 'split', 'prose'."),
]


@pytest.mark.parametrize("extra, code, message", TRAIN_TOKENIZER, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_train_tokenizer_options(inputs, tmp_path, extra, code, message):
    corpus, _ = inputs
    result = invoke(prep_main, "train-tokenizer", corpus, "--out", tmp_path / "tok", "--quiet", *extra)
    assert one_line_error(result, exit_code=code) == message
    nothing_left(tmp_path)


def test_train_tokenizer_output_paths(inputs, tmp_path):
    corpus, _ = inputs
    a_file = tmp_path / "file"
    a_file.write_text("x")
    result = invoke(prep_main, "train-tokenizer", corpus, "--out", a_file, "--quiet")
    assert one_line_error(result, exit_code=2) == f"Invalid value for '--out': Directory '{a_file}' is a file."
    result = invoke(prep_main, "train-tokenizer", corpus, "--out", a_file / "tok", "--quiet", "--vocab-size", 60)
    assert one_line_error(result, exit_code=1) == f"{a_file}: is a file, so {a_file / 'tok'} cannot be created in it"
    result = invoke(prep_main, "train-tokenizer", "--out", tmp_path / "tok")
    assert one_line_error(result, exit_code=2) == "give at least one INPUT file or directory, or --dataset"
    nothing_left(tmp_path, "file")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("options") / "shards", rows=16, num_shards=1)


PRETRAIN = [
    (["--max-steps", "0"], 2, "Invalid value for '--max-steps': 0 is not in the range x>=1."),
    (["--batch-size", "0"], 2, "Invalid value for '--batch-size': 0 is not in the range x>=1."),
    (["--grad-accum", "0"], 2, "Invalid value for '--grad-accum': 0 is not in the range x>=1."),
    (["--lr", "0"], 2, "Invalid value for '--lr': 0.0 is not in the range x>0."),
    (["--warmup-ratio", "2"], 2, "Invalid value for '--warmup-ratio': 2.0 is not in the range 0<=x<=1."),
    (["--keep-last", "0"], 2, "Invalid value for '--keep-last': 0 is not in the range x>=1."),
    (["--preset", "huge"], 2, "Invalid value for '--preset': 'huge' is not one of 'tiny', 'mini', 'small', "
                              "'medium', 'base', 'large'."),
    (["--hidden", "100", "--heads", "3"], 1, "hidden size 100 is not divisible by 3 heads"),
]


@pytest.mark.parametrize("extra, code, message", PRETRAIN, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_pretrain_options(shards, tmp_path, extra, code, message):
    result = invoke(model_main, "pretrain", "--data", shards, "--out", tmp_path / "run", "--preset", "tiny",
                    "--no-progress", *extra)
    assert one_line_error(result, exit_code=code) == message
    nothing_left(tmp_path)


def test_pretrain_output_paths(shards, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    base = ["pretrain", "--data", shards, "--preset", "tiny", "--max-steps", 1, "--no-progress"]
    result = invoke(model_main, *base, "--out", a_file)
    assert one_line_error(result, exit_code=2) == f"Invalid value for '--out': Directory '{a_file}' is a file."
    result = invoke(model_main, *base, "--out", a_file / "run")
    assert one_line_error(result, exit_code=1) == f"{a_file}: is a file, so {a_file / 'run'} cannot be created in it"
    # An existing directory that is not a run: refused, never written into. (An existing
    # run directory is resumed: tests/test_train.py.)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("keep me")
    result = invoke(model_main, *base, "--out", theirs)
    assert one_line_error(result, theirs, exit_code=1) == (
        f"{theirs}: exists and is not a run directory (no run.json or checkpoints); "
        "choose a new or empty --out")
    assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]
    result = invoke(model_main, *base, "--out", tmp_path / "run", "--data", a_file)
    assert one_line_error(result, exit_code=2) == f"Invalid value for '--data': Directory '{a_file}' is a file."
    result = invoke(model_main, *base, "--out", tmp_path / "run", "--data", tmp_path / "nowhere")
    assert one_line_error(result, exit_code=2) == f"Invalid value for '--data': Directory '{tmp_path / 'nowhere'}' does not exist."
    nothing_left(tmp_path, "file", "theirs")


def test_help_is_still_help():
    for main, command in ((prep_main, "build-shards"), (prep_main, "train-tokenizer"), (model_main, "pretrain")):
        result = invoke(main, command, "--help")
        assert result.exit_code == 0 and result.stdout.startswith("Usage: ") and "Example:" in result.stdout
