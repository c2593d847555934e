"""Our tokenizer against Google's tokenization.py on the shared corpora.

The oracle below is a minimal re-implementation of Google's BasicTokenizer +
WordpieceTokenizer written from the spec in shared/REFERENCE.md ("Tokenization"), not
copied code. Every line of the shared corpora must tokenize identically.
"""
from __future__ import annotations

import pathlib
import unicodedata

import pytest

from bertprep.tokenizer import load_tokenizer

from shared_data import SHARED_DATA as DATA  # noqa: E402  ../shared/data beside the checkout
UNCASED = DATA / "bert-base-uncased-vocab.txt"
CASED = DATA / "bert-base-cased-vocab.txt"
CORPORA = [DATA / "wikitext-2-raw-train-head.txt", DATA / "google_sample_text.txt",
           *sorted((DATA / "enwiki_wikiextractor").glob("wiki_0*"))]

needs_data = pytest.mark.skipif(not UNCASED.is_file(), reason=f"shared data not found at {DATA}")

# REFERENCE.md step 2: the CJK ideograph blocks that get spaces around them.
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf")


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


class GoogleTokenizer:
    """BasicTokenizer + WordpieceTokenizer as REFERENCE.md specifies them."""

    def __init__(self, vocab_path: pathlib.Path, lowercase: bool, max_chars: int = 200):
        tokens = vocab_path.read_text(encoding="utf-8").split("\n")
        self.vocab = {token.strip(): i for i, token in enumerate(tokens) if token.strip()}
        self.lowercase = lowercase
        self.max_chars = max_chars

    def basic(self, text: str) -> list[str]:
        # 1. clean: drop NUL, U+FFFD and Cc/Cf (except tab/newline/CR); whitespace -> " "
        cleaned = []
        for ch in text:
            if ord(ch) in (0, 0xFFFD) or _is_control(ch):
                continue
            cleaned.append(" " if _is_whitespace(ch) else ch)
        # 2. spaces around CJK ideographs
        spaced = "".join(f" {ch} " if _is_cjk(ch) else ch for ch in cleaned)
        # 3. whitespace split; lower-case + NFD + drop Mn only when uncased
        words = []
        for word in spaced.split():
            if self.lowercase:
                word = word.lower()
                word = "".join(ch for ch in unicodedata.normalize("NFD", word)
                               if unicodedata.category(ch) != "Mn")
            # 4. every punctuation char is its own token
            current = ""
            for ch in word:
                if _is_punctuation(ch):
                    if current:
                        words.append(current)
                    words.append(ch)
                    current = ""
                else:
                    current += ch
            if current:
                words.append(current)
        return " ".join(words).split()

    def wordpiece(self, word: str) -> list[str]:
        # 5. greedy longest-match-first; too long or any unmatched position -> [UNK]
        if len(word) > self.max_chars:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            match = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    match = piece
                    break
                end -= 1
            if match is None:
                return ["[UNK]"]
            pieces.append(match)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        return [piece for word in self.basic(text) for piece in self.wordpiece(word)]


def _mismatches(google: GoogleTokenizer, ours, lines: list[str]) -> list[tuple[str, list, list]]:
    encodings = ours.tokenizer.encode_batch(lines, add_special_tokens=False)
    bad = []
    for line, encoding in zip(lines, encodings):
        expected = google.tokenize(line)
        if encoding.tokens != expected:
            bad.append((line, expected, encoding.tokens))
    return bad


def _lines(path: pathlib.Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def test_oracle_on_known_ids():
    # SOURCES.md: "hello , my dog is cute" -> these ids for bert-base-uncased.
    if not UNCASED.is_file():
        pytest.skip(f"shared data not found at {DATA}")
    google = GoogleTokenizer(UNCASED, lowercase=True)
    tokens = google.tokenize("Hello, my dog is cute")
    assert [google.vocab[t] for t in tokens] == [7592, 1010, 2026, 3899, 2003, 10140]
    assert google.tokenize("Naïve CAFÉ") == ["naive", "cafe"]
    assert google.tokenize("x" * 201) == ["[UNK]"]


@needs_data
@pytest.mark.parametrize("corpus", CORPORA, ids=lambda p: p.name)
def test_uncased_matches_google_on_every_line(corpus):
    google = GoogleTokenizer(UNCASED, lowercase=True)
    ours = load_tokenizer(UNCASED)
    assert ours.lowercase is True
    lines = _lines(corpus)
    assert len(lines) > 30
    bad = _mismatches(google, ours, lines)
    assert bad == [], f"{len(bad)} of {len(lines)} lines differ; first: {bad[0]}"


@needs_data
@pytest.mark.parametrize("corpus", CORPORA, ids=lambda p: p.name)
def test_cased_matches_google_on_every_line(corpus):
    google = GoogleTokenizer(CASED, lowercase=False)
    ours = load_tokenizer(CASED)
    assert ours.lowercase is False
    lines = _lines(corpus)
    bad = _mismatches(google, ours, lines)
    assert bad == [], f"{len(bad)} of {len(lines)} lines differ; first: {bad[0]}"


@needs_data
def test_words_of_101_to_200_chars_match_google():
    google = GoogleTokenizer(UNCASED, lowercase=True)
    ours = load_tokenizer(UNCASED)
    # Words built from real text: the corpus's words glued together, 101..250 chars.
    words = [w for w in _lines(CORPORA[0])[5].lower().split() if w.isalpha()]
    glued = "".join(words)
    assert len(glued) >= 250
    lines = []
    for length in (100, 101, 150, 199, 200, 201, 250):
        lines.append(f"The word {glued[:length]} is long .")
        lines.append(f"{glued[:length].capitalize()}, again")
    bad = _mismatches(google, ours, lines)
    assert bad == []
    # The point of max_chars_per_word=200: a 150-char word is split, not [UNK].
    encoding = ours.tokenizer.encode(lines[4], add_special_tokens=False)
    assert len(glued[:150]) == 150 and "[UNK]" not in encoding.tokens
    assert ours.tokenizer.encode(lines[10], add_special_tokens=False).tokens[2] == "[UNK]"  # 201


@needs_data
def test_literal_special_tokens_in_text_are_text_as_in_google():
    google = GoogleTokenizer(UNCASED, lowercase=True)
    ours = load_tokenizer(UNCASED)
    lines = ["The [MASK] sat on [CLS] the [SEP] mat [PAD] [UNK] .", "[mask]", "[MASK]"]
    assert _mismatches(google, ours, lines) == []
    assert ours.tokenizer.encode("[MASK]", add_special_tokens=False).tokens == ["[", "mask", "]"]
