"""Reliability: bad input through the real CLIs of train-tokenizer and
build-shards. Each bad input gives one line naming the file, a non-zero exit, and leaves
no TOKDIR, OUT or OUT.partial behind. The corpus reader's own messages are tested in
tests/test_corpus.py; here the same inputs go through both commands end to end."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import re
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertprep.cli import main
from reliability_checks import invoke, nothing_left, one_line_error
from shard_fixtures import read_rows, write_corpus, write_vocab

COMMANDS = ("train-tokenizer", "build-shards")
SENTENCES = "A sentence of text here.\nAnother one follows it.\n\n" * 400


def run(command: str, tmp_path, *inputs, extra=()):
    """Run `command` on inputs with its output in tmp_path/out; the vocabulary and cache
    live outside tmp_path so that nothing_left(tmp_path) sees only the inputs."""
    out = tmp_path / "out"
    if command == "train-tokenizer":
        args = ["train-tokenizer", *inputs, "--out", out, "--vocab-size", 60, "--quiet"]
    else:
        vocab = write_vocab(tmp_path.parent / f"{tmp_path.name}-vocab.txt")
        args = ["build-shards", *inputs, "--tokenizer", vocab, "--out", out, "--workers", 1, "--quiet",
                "--cache-dir", tmp_path.parent / f"{tmp_path.name}-cache"]
    return invoke(main, *args, *extra)


def _missing(tmp_path):
    return [tmp_path / "missing.txt"], (), "{0}: no such file or directory"


def _empty(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    return [tmp_path / "empty.txt"], (), "{0}: no text found"


def _blank(tmp_path):
    (tmp_path / "blank.txt").write_text("\n   \n\t\n\n")
    return [tmp_path / "blank.txt"], (), "{0}: no text found"


def _empty_and_blank(tmp_path):
    (tmp_path / "a.txt").write_text("")
    (tmp_path / "b.txt").write_text(" \n\n")
    return [tmp_path / "a.txt", tmp_path / "b.txt"], (), "{0}, {1}: no text found"


def _no_text_files(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "picture.png").write_bytes(b"\x89PNG\r\n")
    (folder / "model.bin").write_bytes(b"\x00" * 10)
    return [folder], (), "{0}: no text, JSONL or Parquet files in this directory"


def _binary(tmp_path):
    (tmp_path / "image.txt").write_bytes(bytes(range(256)) * 64)
    return [tmp_path / "image.txt"], (), (
        "{0}: looks like a binary file, not UTF-8 text (8,256 of its first 16,384 characters are NUL or undecodable)")


def _binary_among_text(tmp_path):
    # A stray binary file inside a corpus directory stops the run and is named: it is
    # the wrong file (a .gz named .txt, UTF-16, an image), not text with a few bad bytes.
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text(SENTENCES)
    (folder / "b.txt").write_bytes(gzip.compress(SENTENCES.encode()))
    return [folder], (), "{0}/b.txt: looks like a binary file, not UTF-8 text (it starts like gzip data (name it .gz))"


def _only_bad_bytes(tmp_path):
    (tmp_path / "junk.txt").write_bytes(b"\n" * 100 + b"\x80 \x00\x81\n\xff")
    return [tmp_path / "junk.txt"], (), "{0}: no usable text (3 undecodable byte sequences)"


def _truncated(suffix, compress, kind):
    def make(tmp_path):
        data = compress(SENTENCES.encode() * 4)
        path = tmp_path / f"corpus.txt{suffix}"
        path.write_bytes(data[: len(data) // 2])
        return [path], (), (f"{{0}}: truncated or corrupt {kind} data (", r".+\)")
    return make


def _corrupt_gzip(tmp_path):
    path = tmp_path / "corpus.txt.gz"
    data = bytearray(gzip.compress(SENTENCES.encode() * 4))
    data[len(data) // 2] ^= 0xFF  # a flipped byte in the deflate stream (or its CRC)
    path.write_bytes(bytes(data))
    return [path], (), ("{0}: truncated or corrupt gzip data (", r".+\)")


def _jsonl_bad_line(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"text": "A first record."}\n{"text": "broken\n')
    return [path], (), "{0}:2: invalid JSON: Unterminated string starting at column 10"


def _jsonl_no_field(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"body": "A first record."}\n')
    return [path], (), "{0}:1: no 'text' field (fields: body); choose one with --text-field"


def _jsonl_wrong_text_field(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"body": "A first record."}\n')
    return [path], ("--text-field", "content"), "{0}:1: no field 'content' (fields: body); choose one with --text-field"


def _parquet_no_column(tmp_path):
    path = tmp_path / "table.parquet"
    pq.write_table(pa.table({"body": ["One text.", "Two texts."]}), path)
    return [path], ("--text-field", "content"), "{0}: no field 'content' (fields: body); choose one with --text-field"


def _parquet_not_parquet(tmp_path):
    path = tmp_path / "table.parquet"
    path.write_bytes(b"PAR1 but not really")
    return [path], (), ("{0}: not a readable Parquet file (", r".+\)")


CASES = {
    "missing": _missing,
    "empty": _empty,
    "all-blank": _blank,
    "empty-and-blank": _empty_and_blank,
    "directory-without-text-files": _no_text_files,
    "binary": _binary,
    "binary-among-text": _binary_among_text,
    "only-undecodable-bytes": _only_bad_bytes,
    "truncated-gz": _truncated(".gz", gzip.compress, "gzip"),
    "truncated-bz2": _truncated(".bz2", bz2.compress, "bzip2"),
    "truncated-xz": _truncated(".xz", lzma.compress, "xz"),
    "corrupt-gz": _corrupt_gzip,
    "jsonl-bad-line": _jsonl_bad_line,
    "jsonl-no-text-field": _jsonl_no_field,
    "jsonl-missing-text-field": _jsonl_wrong_text_field,
    "parquet-missing-column": _parquet_no_column,
    "parquet-corrupt": _parquet_not_parquet,
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_leaves_nothing(command, case, tmp_path):
    inputs, extra, expected = CASES[case](tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run(command, tmp_path, *inputs, extra=extra)
    message = one_line_error(result, inputs[0], exit_code=1)
    if isinstance(expected, tuple):  # (exact start, regex of the library's own detail)
        start, detail = expected
        assert re.fullmatch(re.escape(start.format(*map(str, inputs))) + detail, message), message
    else:
        assert message == expected.format(*map(str, inputs))
    assert result.stdout == ""
    nothing_left(tmp_path, *before)


@pytest.mark.parametrize("command", COMMANDS)
def test_unreadable_file(command, tmp_path):
    path = tmp_path / "secret.txt"
    path.write_text(SENTENCES)
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as root: chmod 000 does not stop root from reading")
        result = run(command, tmp_path, path)
        assert one_line_error(result, path) == f"{path}: permission denied"
        nothing_left(tmp_path, "secret.txt")
    finally:
        path.chmod(0o644)


@pytest.mark.parametrize("command", COMMANDS)
def test_invalid_utf8_is_replaced_and_reported_not_fatal(command, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents=60)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Caf\xff opened the shop.\nThe baker walked \xc3\xc3 home.\n\n"
                    + corpus.read_bytes()[:3000])
    result = run(command, tmp_path, corpus, bad)
    assert result.exit_code == 0, result.output
    # The summary line names the count and the file; nothing on stderr is an error.
    assert f"3 invalid byte sequences replaced in {bad}" in result.stdout
    assert "Error" not in result.stderr
    assert (tmp_path / "out").is_dir()


def test_one_document_is_an_error_for_build_shards_only(tmp_path):
    lonely = tmp_path / "one.txt"
    lonely.write_text("The river walked.\nThe city played.\nThe boat opened.\n")
    result = run("build-shards", tmp_path, lonely)
    assert one_line_error(result, lonely) == (
        f"{lonely}: NSP needs at least two documents, found 1 (separate documents with a blank line, "
        "or use --sentences split for a document per line)")
    nothing_left(tmp_path, "one.txt")
    # A tokenizer needs no pairs: one document is enough to train one.
    assert run("train-tokenizer", tmp_path, lonely).exit_code == 0


def test_one_sentence_documents_build_with_a_warning(tmp_path):
    """Legal, as in Google's script: a one-sentence document can only give a random-next
    pair, so every label is 1. We build it (it is what the reference does) but warn, on
    stderr, that NSP learns nothing from it and how to get is-next pairs."""
    single = tmp_path / "single.txt"
    words = "the river walked across old bridge over green garden in morning light".split()
    single.write_text("\n\n".join(" ".join(words[i % 7:i % 7 + 6]) + "." for i in range(120)) + "\n")
    result = run("build-shards", tmp_path, single)
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "warning: the NSP pairs degenerate: NSP random B 1.000 (about 0.5 expected), 100.0% single-sentence "
        "chunks, 120 documents of 1.0 sentences (7 tokens) on average, mean row length 17.0 of 128; likely "
        "cause: every document is one sentence, so no pair can be is-next; if each line is a paragraph, use "
        "--sentences split, and for hard-wrapped books or articles --sentences prose\n")
    assert "NSP random B 1.000" in result.stdout
    rows = read_rows(tmp_path / "out")
    assert rows and all(r["next_sentence_label"] == 1 for r in rows)


def test_a_normal_corpus_gets_no_nsp_warning(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents=60)
    result = run("build-shards", tmp_path, corpus)
    assert result.exit_code == 0 and result.stderr == "", result.output


@pytest.mark.slow
def test_100mb_single_line_through_build_shards_stays_bounded(tmp_path):
    """A 100 MB file with no newline, through the whole build (about 10 s with nanotoken,
    about 100 s with --engine tokenizers' path only). Peak RSS is summed over the whole
    process tree (so the pool workers' pages shared with the parent count twice): the
    bound is generous but far below what holding tokenizers' Encoding objects for the
    whole partition took before (3.7 GB)."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
    from measure import run_measured

    path = tmp_path / "one-line.txt"
    block = b"Hello world. This is text. " * 37_037  # about 1 MB
    with open(path, "wb") as stream:
        for _ in range(100):
            stream.write(block)
    vocab = write_vocab(tmp_path / "vocab.txt")
    vocab.write_text(vocab.read_text() + "hello\nworld\nthis\nis\ntext\n")
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", "from bertprep.cli import main; main()", "build-shards", str(path),
           "--tokenizer", str(vocab), "--out", str(out), "--workers", "2", "--quiet",
           "--cache-dir", str(tmp_path / "cache")]
    seconds, peak, output = run_measured(cmd)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["totals"]["rows"] > 0
    assert "1 line over 1,000,000 characters cut" in output
    assert peak < 1.5e9, f"peak RSS {peak / 1e6:,.0f} MB in {seconds:.0f} s"
