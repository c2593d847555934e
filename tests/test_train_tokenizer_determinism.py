"""Same corpus + options => byte-identical TOKDIR files, across separate processes.

Each run is a fresh interpreter, so the Rust HashMaps inside `tokenizers`' trainer get
new random seeds: the case where the plain WordPieceTrainer gives different ids and a
few different tokens (LIBRARY-NOTES.md).
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from shared_data import SHARED_DATA as DATA  # noqa: E402  ../shared/data beside the checkout
CORPUS = [DATA / "wikitext-2-raw-train-head.txt", DATA / "enwiki_wikiextractor"]
COMPARED = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "training.json")


def _train(out: pathlib.Path, *options: str) -> None:
    command = [sys.executable, "-c", "from bertprep.cli import main; main()", "train-tokenizer",
               *map(str, CORPUS), "--out", str(out), "--quiet", *options]
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr


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
