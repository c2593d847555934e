"""train-tokenizer on hostile input: words too long to encode are left out before
counting, and Ctrl-C stops the trainer at once."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from tokenizers import pre_tokenizers

from bertprep.tokenizer import load_tokenizer
from bertprep.tokenizer import UNCASED_GROWTH, WORD_BOUNDARIES, LongWords
from bertprep.tokenizer import TokenizerTrainingConfig, train_tokenizer
from bertprep.tokenizer.training import _normalizer
from shard_fixtures import write_corpus


def _documents(path) -> list[list[str]]:
    text = path.read_text(encoding="utf-8")
    return [[s for s in block.split("\n") if s] for block in text.split("\n\n") if block.strip()]


def _random_word(length: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(length))


def test_words_too_long_to_encode_are_left_out(tmp_path):
    documents = _documents(write_corpus(tmp_path / "corpus.txt", documents=60))
    long_word = _random_word(5_000)
    hostile = documents[:30] + [[long_word], [f"The river {long_word.upper()} walked."]] + documents[30:]
    config = TokenizerTrainingConfig(vocab_size=400, heldout_fraction=0)
    clean = train_tokenizer(documents + [["The river walked."]], config, tmp_path / "clean", progress=False)
    report = train_tokenizer(hostile, config, tmp_path / "hostile", progress=False)
    # Exactly the vocabulary of the corpus without the word: none of its pieces counted.
    vocab = (tmp_path / "hostile" / "vocab.txt").read_bytes()
    assert vocab == (tmp_path / "clean" / "vocab.txt").read_bytes()
    assert report.fingerprint == clean.fingerprint
    assert report.warnings[0] == ("left out 2 words longer than --max-chars-per-word 200 (the longest 5,000 "
                                  "characters): they encode as [UNK] anyway")
    tok = load_tokenizer(tmp_path / "hostile")
    assert tok.tokenizer.encode(f"the river {long_word}", add_special_tokens=False).tokens == ["the", "river", "[UNK]"]


def test_word_boundaries_and_growth_match_the_normalizer():
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    for lowercase in (True, False):
        normalizer = _normalizer(lowercase)

        def words(text):
            return [w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))]

        boundaries = [" ", "\t", "\n", "\r", "\u00a0", "\u1680", *map(chr, range(0x2000, 0x200B)),
                      "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
        assert "".join(boundaries) == WORD_BOUNDARIES.replace("\u2000-\u200a", "".join(map(chr, range(0x2000, 0x200B))))
        for ch in boundaries:
            assert words(f"ab{ch}cd") == ["ab", "cd"], repr(ch)
        for ch in ("\v", "\f", "\x85"):  # white space to Python, deleted by the normalizer
            assert words(f"ab{ch}cd") == ["abcd"], repr(ch)
    # Uncased, a Hangul syllable becomes 3 jamo: 70 raw characters make a 210-character
    # word, which encodes as [UNK] at 200 and so must be found although its run is short.
    hangul = "\uac01" * 70
    assert len(words := [w for w, _ in pre_tokenizer.pre_tokenize_str(_normalizer(True).normalize_str(hangul))]) == 1
    assert len(words[0]) == UNCASED_GROWTH * 70
    long_words = LongWords(200, True, _normalizer(True), pre_tokenizer)
    assert long_words.filter(f"ok {hangul} fine") == "ok  fine" and long_words.dropped == 1
    cased = LongWords(200, False, _normalizer(False), pre_tokenizer)
    assert cased.filter(f"ok {hangul} fine") == f"ok {hangul} fine"  # 70 characters when cased
    # A run with a long word is rewritten as its other words (normalized: "Word" -> "word");
    # a long run of short words, and ordinary text, are left as they are.
    assert long_words.filter("A Word,word," + "x" * 300 + ",end B") == "A word , word , , end B"
    run = "word," * 100
    assert long_words.filter(f"A {run} B") == f"A {run} B"
    text = "Ordinary TEXT, with URLs: https://example.org/" + "a" * 60 + " and more."
    assert long_words.filter(text) is text


def test_ctrl_c_stops_training_promptly(tmp_path):
    corpus = tmp_path / "corpus.txt"
    # A word the trainer works on for over a minute (its cost is quadratic in the length),
    # kept in by --max-chars-per-word, so training runs far longer than any exit takes.
    corpus.write_text(f"the cat sat.\n\n{_random_word(600_000)}\n\nthe dog ran.\n", encoding="utf-8")
    out = tmp_path / "tok"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertprep", "train-tokenizer", str(corpus), "--out", str(out),
         "--max-chars-per-word", "1000000", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even if our shell ignores it
    )
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".tok.work-*/train.txt")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # reading and counting characters take well under this
        assert proc.poll() is None, "training ended before it could be interrupted"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("train-tokenizer ignored Ctrl-C for 20 s")
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, stderr.decode().strip()) == (1, "Aborted!")
    assert took < 10, f"{took:.1f} s from Ctrl-C to exit"
    assert not out.exists() and list(tmp_path.glob(".tok*")) == []
