"""The initial alphabet of WordPiece training: which characters get a token of their own.

A character outside the alphabet can never be encoded: every word holding it becomes
[UNK]. A fixed count (`limit_alphabet`, tokenizers' 1,000) fits English, whose letters are
a few dozen, and not Korean, whose everyday text uses over 2,000 syllables: 1,000 kept
about 900 of them and made 밌 (in 재밌다) [UNK]. So the default follows SentencePiece's
`character_coverage`: keep the most frequent characters until they cover that share of
the character occurrences inside words (0.9995: the rarest 0.05% of occurrences fall out),
whatever the script, and never fewer than the `min_alphabet` (1,000) most frequent: a
small alphabet costs little, and the tail coverage alone cuts is real text (on 3 MB of
English Wikipedia it would drop 240 characters seen up to 43 times: μ, £, “, ø), so an
alphabet of up to 1,000 characters is kept whole as before. `limit_alphabet` stays as an
explicit cap.

A sample shows the characters of its own register only: trained on the Korean petitions
(formal prose), 16.2% of held-out NSMC movie reviews still held a character the
petitions never used (밌, 잼, ㅏ, ♥) although 99.95% of the petitions' own occurrences were
covered. So each script making up at least REPERTOIRE_MIN_SHARE of the sample's letters
also gets its everyday repertoire where one is well defined (`repertoire`): for Hangul
the 2,350 syllables of KS X 1001 (the Korean standard set, what Python's euc_kr codec
encodes in two bytes) and the 51 modern compatibility jamo (ㅋㅋ, ㅠㅠ); for the Indic and
Southeast Asian abugidas, Arabic, Hebrew, Georgian and the kana, the letters, marks and
digits of their Unicode block; and for every corpus the printable ASCII characters
(emoticons such as ^^ and ;; in Korean reviews are ASCII punctuation formal text lacks).
Latin, Greek and Cyrillic need no more (a few dozen letters, all in any sample) and CJK
ideographs have no small everyday set. A repertoire is added only whole and only while
the additions take at most REPERTOIRE_MAX_VOCAB of the vocabulary (a small --vocab-size
keeps the sample's alphabet alone, and `vocab_size_for_repertoires` says what size would
take them in); an explicit `limit_alphabet` adds none.

Counts are of characters after the normaliser and pre-tokenizer (what the trainer sees).
Ranking ties go to the lower code point, and the kept characters are sorted by code point,
so the alphabet is a pure function of the counts (wordpiece_training.py: determinism).

Unigram (unigram_training.py) takes the same alphabet without "##" forms: it counts with
a pre-tokenizer that isolates every character, so no character continues a word.
"""
from __future__ import annotations

import collections
import math
import unicodedata
from dataclasses import dataclass, field, replace

import numpy as np


REPERTOIRE_MIN_SHARE = 0.01  # of the sample's letters and marks (scripts.py's mix)
REPERTOIRE_MAX_VOCAB = 0.25  # additions (characters and their "##" forms) take at most this share
# Scripts (scripts.script_of names) whose everyday repertoire is their Unicode block.
_BLOCKS = {
    "Arabic": (0x0600, 0x06FF), "Hebrew": (0x0590, 0x05FF), "Devanagari": (0x0900, 0x097F),
    "Bengali": (0x0980, 0x09FF), "Gurmukhi": (0x0A00, 0x0A7F), "Gujarati": (0x0A80, 0x0AFF),
    "Oriya": (0x0B00, 0x0B7F), "Tamil": (0x0B80, 0x0BFF), "Telugu": (0x0C00, 0x0C7F),
    "Kannada": (0x0C80, 0x0CFF), "Malayalam": (0x0D00, 0x0D7F), "Sinhala": (0x0D80, 0x0DFF),
    "Thai": (0x0E00, 0x0E7F), "Lao": (0x0E80, 0x0EFF), "Myanmar": (0x1000, 0x109F),
    "Georgian": (0x10D0, 0x10FF), "Khmer": (0x1780, 0x17FF), "Hiragana": (0x3040, 0x309F),
    "Katakana": (0x30A0, 0x30FF),
}
_COMPAT_JAMO = (0x3131, 0x3163)  # ㄱ..ㅣ: the modern consonants and vowels


def repertoire(script: str) -> list[str]:
    """The everyday characters of `script` (module docstring; "ASCII": the printable
    ASCII characters); [] when none is defined."""
    if script == "ASCII":
        return [chr(cp) for cp in range(0x21, 0x7F)]
    if script == "Hangul":
        syllables = [chr(cp) for cp in range(0xAC00, 0xD7A4) if len(chr(cp).encode("euc_kr")) == 2]
        return syllables + [chr(cp) for cp in range(_COMPAT_JAMO[0], _COMPAT_JAMO[1] + 1)]
    if script not in _BLOCKS:
        return []
    low, high = _BLOCKS[script]
    return [chr(cp) for cp in range(low, high + 1) if unicodedata.category(chr(cp))[0] in "LM"
            or unicodedata.category(chr(cp)) == "Nd"]


@dataclass
class Alphabet:
    characters: list[str]  # sorted by code point
    continuing: list[str]  # those that can follow a letter inside a word (get a "##" form)
    dropped: int  # distinct characters left out
    dropped_occurrences: int  # their occurrences in the training text
    occurrences: int  # all character occurrences inside words
    completed: dict[str, int] = field(default_factory=dict)  # script -> characters its repertoire added
    not_completed: list[str] = field(default_factory=list)  # scripts whose repertoire did not fit

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
                    normalizer, pre_tokenizer, min_alphabet: int = 0) -> Alphabet:
    """The most frequent characters (ties: lower code point) covering `coverage` of the
    occurrences and at least the `min_alphabet` most frequent, or the `limit` most
    frequent when a limit is given; sorted by code point."""
    ranked = sorted(counts, key=lambda ch: (-counts[ch], ord(ch)))
    total = sum(counts.values())
    if limit is not None:
        keep = min(limit, len(ranked))
    else:
        keep, covered, needed = 0, 0, coverage * total
        while keep < len(ranked) and covered < needed:
            covered += counts[ranked[keep]]
            keep += 1
        keep = max(keep, min(min_alphabet, len(ranked)))
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


def repertoire_additions(characters: list[str], scripts: dict[str, float], normalizer,
                         pre_tokenizer) -> dict[str, tuple[list[str], list[str]]]:
    """script -> (the normalised characters of its repertoire that `characters` lacks, those
    of them that get a "##" form), for ASCII and every script holding REPERTOIRE_MIN_SHARE
    of the letters (`scripts`: script -> share, largest first), in the order they are added."""
    have, additions = set(characters), {}
    for script, share in [("ASCII", 1.0), *scripts.items()]:
        if share < REPERTOIRE_MIN_SHARE:
            continue
        new = sorted({ch for raw in repertoire(script) for word, _ in
                      pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(raw)) for ch in word} - have)
        if new:
            additions[script] = (new, [ch for ch in new if can_continue_word(ch, normalizer, pre_tokenizer)])
            have.update(new)
    return additions


def complete_alphabet(alphabet: Alphabet, scripts: dict[str, float], vocab_size: int, room: int,
                      normalizer, pre_tokenizer) -> None:
    """Add the repertoire of every script holding REPERTOIRE_MIN_SHARE of the letters
    (`scripts`: script -> share, largest first), each whole, as normalised characters,
    while the additions fit in `room` entries and REPERTOIRE_MAX_VOCAB of `vocab_size`."""
    used = len(alphabet.characters) + len(alphabet.continuing)
    budget = min(room - used, int(REPERTOIRE_MAX_VOCAB * vocab_size))
    for script, (new, continuing) in repertoire_additions(alphabet.characters, scripts, normalizer,
                                                          pre_tokenizer).items():
        cost = len(new) + len(continuing)
        if cost > budget:
            alphabet.not_completed.append(script)
            continue
        budget -= cost
        alphabet.completed[script] = len(new)
        alphabet.characters = sorted(alphabet.characters + new)
        alphabet.continuing = sorted(alphabet.continuing + continuing)


def vocab_size_for_repertoires(alphabet: Alphabet, scripts: dict[str, float], specials: int, normalizer,
                               pre_tokenizer) -> int:
    """The smallest vocabulary size at which complete_alphabet adds every repertoire this
    sample calls for, given the alphabet its coverage rule kept (before fit_alphabet):
    the additions (characters and "##" forms) may take REPERTOIRE_MAX_VOCAB of it, and the
    specials, the kept alphabet and the additions must fit whole. It falls as the sample
    grows: a larger sample keeps more of a script's characters itself, so fewer are added."""
    cost = sum(len(new) + len(continuing) for new, continuing in
               repertoire_additions(alphabet.characters, scripts, normalizer, pre_tokenizer).values())
    size = max(math.ceil(cost / REPERTOIRE_MAX_VOCAB),
               specials + len(alphabet.characters) + len(alphabet.continuing) + cost)
    while int(REPERTOIRE_MAX_VOCAB * size) < cost:  # complete_alphabet's rounding, whatever the float
        size += 1
    return size


def alphabet_for_vocabulary(counts: dict[str, int], scripts: dict[str, float], config, reserved: int,
                            normalizer, pre_tokenizer) -> tuple[Alphabet, int | None, list[str]]:
    """The alphabet of a vocabulary of `config.vocab_size` entries, `reserved` of them
    taken (special tokens, [unusedN]): the characters the coverage rule (or the limit)
    keeps, cut to fit, completed by the scripts' repertoires (`config`: a
    TokenizerTrainingConfig). Returns (the alphabet, the vocabulary size the repertoires
    need when some did not fit, else None, the warnings)."""
    alphabet = choose_alphabet(counts, config.character_coverage, config.limit_alphabet, normalizer, pre_tokenizer,
                               config.min_alphabet)
    room = config.vocab_size - reserved
    kept = replace(alphabet)  # the coverage rule's alphabet, before the vocabulary cuts it
    fit_dropped = fit_alphabet(alphabet, counts, room)
    needed = None
    if config.complete_scripts and config.limit_alphabet is None:
        complete_alphabet(alphabet, scripts, config.vocab_size, room, normalizer, pre_tokenizer)
        if alphabet.not_completed:
            needed = vocab_size_for_repertoires(kept, scripts, reserved, normalizer, pre_tokenizer)
    warnings = []
    if fit_dropped:
        warnings.append(f"--vocab-size {config.vocab_size:,} leaves room for only {len(alphabet.characters):,} "
                        f"initial characters: {fit_dropped:,} rare characters left out (they encode as [UNK])")
    return alphabet, needed, warnings
