"""The initial alphabet of WordPiece training: which characters get a token of their own.

A character outside the alphabet can never be encoded: every word holding it becomes
[UNK]. A fixed count (`limit_alphabet`, tokenizers' 1,000) fits English, whose letters are
a few dozen, and not Korean, whose everyday text uses over 2,000 syllables: 1,000 kept
about 900 of them and made 밌 (in 재밌다) [UNK]. So the default follows SentencePiece's
`character_coverage`: keep the most frequent characters until they cover that share of
the character occurrences inside words (0.9995: the rarest 0.05% of occurrences fall out),
whatever the script; `limit_alphabet` stays as an explicit cap.

Counts are of characters after the normaliser and pre-tokenizer (what the trainer sees).
Ranking ties go to the lower code point, and the kept characters are sorted by code point,
so the alphabet is a pure function of the counts (training.py: determinism).
"""
from __future__ import annotations

import collections
from dataclasses import dataclass

import numpy as np


@dataclass
class Alphabet:
    characters: list[str]  # sorted by code point
    continuing: list[str]  # those that can follow a letter inside a word (get a "##" form)
    dropped: int  # distinct characters left out
    dropped_occurrences: int  # their occurrences in the training text
    occurrences: int  # all character occurrences inside words

    @property
    def dropped_share(self) -> float:
        return self.dropped_occurrences / self.occurrences if self.occurrences else 0.0


def raw_char_counts(path, chunk_chars: int = 1 << 22) -> np.ndarray:
    """(0x110000,) int64: occurrences of every code point in a UTF-8 text file."""
    raw = np.zeros(0x110000, dtype=np.int64)
    with open(path, encoding="utf-8", errors="replace") as handle:
        while chunk := handle.read(chunk_chars):
            raw += np.bincount(np.frombuffer(chunk.encode("utf-32-le"), dtype=np.uint32), minlength=0x110000)
    return raw


def nonzero_counts(raw: np.ndarray) -> dict[str, int]:
    """{character: occurrences} of the code points that occur."""
    return {chr(cp): int(raw[cp]) for cp in np.flatnonzero(raw).tolist()}


def normalized_char_counts(raw: np.ndarray, normalizer, pre_tokenizer) -> dict[str, int]:
    """How often each character occurs inside words of the normalized text.

    BertNormalizer and BertPreTokenizer act on each character alone (NFD, per-char
    lower-casing, dropping controls, spacing CJK), so each distinct raw character is
    pushed through the pipeline once and its count carried over.
    """
    counts: collections.Counter[str] = collections.Counter()
    for code_point in np.flatnonzero(raw).tolist():
        normalized = normalizer.normalize_str(chr(code_point))
        for word, _ in pre_tokenizer.pre_tokenize_str(normalized):
            for ch in word:
                counts[ch] += int(raw[code_point])
    return dict(counts)


def choose_alphabet(counts: dict[str, int], coverage: float, limit: int | None,
                    normalizer, pre_tokenizer) -> Alphabet:
    """The most frequent characters (ties: lower code point) covering `coverage` of the
    occurrences, or the `limit` most frequent when a limit is given; sorted by code point."""
    ranked = sorted(counts, key=lambda ch: (-counts[ch], ord(ch)))
    total = sum(counts.values())
    if limit is not None:
        keep = min(limit, len(ranked))
    else:
        keep, covered, needed = 0, 0, coverage * total
        while keep < len(ranked) and covered < needed:
            covered += counts[ranked[keep]]
            keep += 1
    characters = sorted(ranked[:keep])
    continuing = [ch for ch in characters if can_continue_word(ch, normalizer, pre_tokenizer)]
    left_out = ranked[keep:]
    return Alphabet(characters, continuing, len(left_out), sum(counts[ch] for ch in left_out), total)


def can_continue_word(ch: str, normalizer, pre_tokenizer) -> bool:
    """Whether `ch` can follow a letter inside one word (so "##ch" can ever be used)."""
    words = pre_tokenizer.pre_tokenize_str(normalizer.normalize_str("a" + ch))
    return len(words) == 1


def fit_alphabet(alphabet: Alphabet, counts: dict[str, int], room: int) -> int:
    """Drop the rarest characters until alphabet + "##" forms fit in `room` entries;
    returns how many were dropped (also added to the alphabet's dropped counts)."""
    continuing = set(alphabet.continuing)
    ranked = sorted(alphabet.characters, key=lambda ch: (-counts[ch], ord(ch)))
    size = len(alphabet.characters) + len(alphabet.continuing)
    dropped = 0
    while size > room:
        ch = ranked.pop()
        size -= 2 if ch in continuing else 1
        alphabet.dropped_occurrences += counts[ch]
        dropped += 1
    kept = set(ranked)
    alphabet.characters = [ch for ch in alphabet.characters if ch in kept]
    alphabet.continuing = [ch for ch in alphabet.continuing if ch in kept]
    alphabet.dropped += dropped
    return dropped
