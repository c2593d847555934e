"""Same corpus + options => byte-identical TOKDIR files, across separate processes.

Each run is a fresh interpreter, so the Rust HashMaps inside `tokenizers`' trainer get
new random seeds: the case where the plain WordPieceTrainer gives different ids and a
few different tokens (LIBRARY-NOTES.md).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from shared_data import SHARED_DATA as DATA  # noqa: E402  ../shared/data beside the checkout
CORPUS = [DATA / "wikitext-2-raw-train-head.txt", DATA / "enwiki_wikiextractor"]
COMPARED = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "training.json")


def _train(out: pathlib.Path, *options: str) -> None:
    _train_on(out, CORPUS, *options)


def _train_on(out: pathlib.Path, corpus: list, *options: str) -> None:
    command = [sys.executable, "-c", "from bertprep.cli import main; main()", "train-tokenizer",
               *map(str, corpus), "--out", str(out), "--quiet", *options]
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(not (DATA / "korean").is_dir(), reason=f"shared Korean data not found at {DATA}")
def test_korean_with_coverage_alphabet_and_scripts_is_byte_identical(tmp_path):
    # Auto normalisation, a coverage alphabet of ~1,000 syllables and the KS X 1001 ones.
    lines, size = [], 0
    with open(DATA / "korean" / "petitions" / "petitions_2019-05", encoding="utf-8") as handle:
        while size < 300_000:
            lines.append(handle.readline())
            size += len(lines[-1].encode("utf-8"))
    corpus = tmp_path / "petitions.jsonl"
    corpus.write_text("".join(lines), encoding="utf-8")
    for out in ("a", "b"):
        _train_on(tmp_path / out, [corpus], "--text-field", "content", "--vocab-size", "16000")
    for name in COMPARED:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    report = json.loads((tmp_path / "a" / "training.json").read_text(encoding="utf-8"))["report"]
    assert report["normalisation"]["strip_accents"] is False and report["alphabet_completed"]["Hangul"] > 0


@pytest.mark.skipif(not CORPUS[0].is_file(), reason=f"shared data not found at {DATA}")
@pytest.mark.parametrize("options", [
    ("--vocab-size", "6000", "--unused", "5"),
    ("--vocab-size", "9000", "--cased", "--limit-alphabet", "90", "--min-frequency", "1"),
], ids=["uncased", "cased-limited-alphabet"])
def test_two_processes_give_byte_identical_files(tmp_path, options):
    _train(tmp_path / "a", *options)
    _train(tmp_path / "b", *options)
    for name in COMPARED:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    vocab = (tmp_path / "a" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(vocab) == int(options[1])
