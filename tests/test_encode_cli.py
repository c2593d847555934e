"""`bertprep encode`: tokens or ids, one line per input, one-line errors."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from bertprep.cli import main
from bertprep.tokenizer import build_tokenizer

from shared_data import SHARED_DATA as DATA  # noqa: E402  ../shared/data beside the checkout
UNCASED = DATA / "bert-base-uncased-vocab.txt"
CASED = DATA / "bert-base-cased-vocab.txt"
needs_data = pytest.mark.skipif(not UNCASED.is_file(), reason=f"shared data not found at {DATA}")
SMALL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "##s", ".", "[", "]", "mask"]


def encode(*args, input=None):
    return CliRunner().invoke(main, ["encode", *map(str, args)], input=input)


@needs_data
def test_google_vocab_tokens_and_ids():
    result = encode("--tokenizer", UNCASED, "Hello, my dog is cute", "unaffable [MASK]")
    assert result.exit_code == 0, result.output
    assert result.stdout == "hello , my dog is cute\nuna ##ffa ##ble [ mask ]\n"
    result = encode("--tokenizer", UNCASED, "--ids", "Hello, my dog is cute")
    assert result.stdout == "7592 1010 2026 3899 2003 10140\n"
    result = encode("--tokenizer", UNCASED, "--ids", "--special", "Hello, my dog is cute")
    assert result.stdout == "101 7592 1010 2026 3899 2003 10140 102\n"
    result = encode("--tokenizer", CASED, "--ids", "Hello , my dog is cute")  # inferred cased
    assert result.stdout == "8667 117 1139 3676 1110 10509\n"
    result = encode("--tokenizer", CASED, "--lowercase", "Hello")
    assert result.stdout == "hello\n"


def test_stdin_lines_and_tokdir(tmp_path):
    build_tokenizer(SMALL, lowercase=True).save(tmp_path / "tok")
    result = encode("--tokenizer", tmp_path / "tok", input="The cats sat.\n\n[MASK] dog\r\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == "the cat ##s sat .\n\n[ mask ] [UNK]\n"
    result = encode("--tokenizer", tmp_path / "tok" / "tokenizer.json", "--special", "--ids", "cat")
    assert result.stdout == "2 6 3\n"


def test_errors_are_one_line_naming_the_file(tmp_path):
    missing = tmp_path / "nope"
    result = encode("--tokenizer", missing, "x")
    assert result.exit_code == 1 and result.stderr == f"Error: {missing}: no such file or directory\n"

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n", encoding="utf-8")
    result = encode("--tokenizer", vocab, "x")
    assert result.exit_code == 1 and result.stderr == f"Error: {vocab}: vocabulary lacks [MASK]\n"

    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "WordPiece", "vocab": ', encoding="utf-8")
    result = encode("--tokenizer", bad, "x")
    assert result.exit_code == 1
    assert result.stderr == f"Error: {bad}: not a tokenizer (invalid JSON: Expecting value at line 1)\n"

    result = encode("x")
    assert result.exit_code == 2 and "Missing option '--tokenizer'" in result.stderr


def test_invalid_utf8_is_replaced_and_reported(tmp_path):
    build_tokenizer(SMALL, lowercase=True).save(tmp_path / "tok")
    # stdin: a Latin-1 byte in the middle of a word (U+FFFD is then dropped by the
    # normalizer, as Google's tokenizer drops it).
    result = encode("--tokenizer", tmp_path / "tok", input=b"the cat\xe9 sat\nthe cat\n\xff\xfe sat\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == "the cat sat\nthe cat\nsat\n"
    assert result.stderr == "warning: 3 invalid byte sequences replaced with U+FFFD in lines 1, 3 of stdin\n"
    # Arguments reach Python with undecodable bytes as lone surrogates (surrogateescape):
    # run the real command so argv is decoded as it is for a user.
    run = subprocess.run(
        [sys.executable, "-m", "bertprep", "encode", "--tokenizer", str(tmp_path / "tok"), b"the cat\xe9 sat", "sat"],
        capture_output=True, env={**os.environ, "LC_ALL": "C.UTF-8"},
    )
    assert run.returncode == 0, run.stderr.decode(errors="replace")
    assert run.stdout == b"the cat sat\nsat\n"
    assert run.stderr == b"warning: 1 invalid byte sequence replaced with U+FFFD in argument 1\n"
