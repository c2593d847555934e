"""The tokens a WordPiece vocabulary gains from a corpus: whole words and `##` pieces, each
chosen for the pieces it saves.

The corpus's words are counted as the base reads them (its normaliser and
pre-tokenizer: BERT-uncased's accent stripping turns Hangul into jamo, so the new tokens
are jamo strings too, which is what that pipeline matches). Every word starts as the
base encodes it (WordPiece's greedy longest match), and merges continue from there
(piece_merges.py): `a` + `##b` -> `ab`, each saving its count of pieces. This is the
WordPiece trainer's own loop (wordpiece_training.py: BPE-style merges, then greedy
matching), continued from the base's segmentation, so frequent words end as one token
and frequent stems and endings as `##` pieces.

Words the base cannot spell (a character with no token, so the whole word is `[UNK]`)
first need those characters: they are added before any merge, the most frequent first
(as `x` at a word's start, `##x` inside one), if they occur `min_frequency` times.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from bertprep.tokenizer.files import LoadedTokenizer
from bertprep.tokenizer.piece_merges import continued_merges
from bertprep.tokenizer.vocab_extension import CONTINUATION, wordpiece_split


@dataclass
class WordPieceAdditions:
    tokens: list[str]  # the new tokens, in the order chosen (characters first)
    characters: int  # of which characters the base lacked
    warnings: list[str] = field(default_factory=list)


def wordpiece_additions(base: LoadedTokenizer, counts: Counter, budget: int, min_frequency: int) -> WordPieceAdditions:
    """Up to `budget` tokens for the words `counts` (module docstring)."""
    vocab = set(base.tokenizer.get_vocab(with_added_tokens=False))
    words = [(w, f) for w, f in counts.items() if len(w) <= base.max_chars_per_word]
    segmented = _base_segmentation(base, [w for w, _ in words])
    characters = _missing_characters(vocab, words, segmented, budget, min_frequency)
    vocab.update(characters)
    pieces = []
    for (word, freq), split in zip(words, segmented):
        if split is None:  # [UNK] under the base: spelt with the added characters, if they sufficed
            split = wordpiece_split(vocab, word)
        if split is not None and len(split) > 1:
            pieces.append((split, freq))
    merges = continued_merges(pieces, budget - len(characters), min_frequency, vocab, _spell)
    tokens = characters + list(dict.fromkeys(token for _, _, token in merges if token not in vocab))
    warnings = []
    if len(tokens) < budget:
        warnings.append(f"added {len(tokens):,} tokens, {budget - len(tokens):,} fewer than asked: no other pair of "
                        f"pieces occurs {min_frequency:,} times in the corpus")
    return WordPieceAdditions(tokens, len(characters), warnings)


def _base_segmentation(base: LoadedTokenizer, words: list[str]) -> list[list[str] | None]:
    """Each word's pieces under the base (tokenizers' WordPiece), None where it is [UNK]."""
    model = base.tokenizer.model
    out = []
    for word in words:
        pieces = [piece.value for piece in model.tokenize(word)]
        out.append(None if pieces == ["[UNK]"] else pieces)
    return out


def _missing_characters(vocab: set[str], words, segmented, budget: int, min_frequency: int) -> list[str]:
    """The character tokens the [UNK] words lack (`x` first in a word, `##x` after), the
    most frequent first, those seen min_frequency times, at most `budget`."""
    needed: Counter = Counter()
    for (word, freq), split in zip(words, segmented):
        if split is not None:
            continue
        forms = {ch if i == 0 else CONTINUATION + ch for i, ch in enumerate(word)}
        for form in forms - vocab:
            needed[form] += freq
    ranked = sorted((form for form, n in needed.items() if n >= max(min_frequency, 1)),
                    key=lambda form: (-needed[form], form))
    return ranked[:budget]


def _spell(pieces: list[str]) -> str:
    """The WordPiece token of adjacent pieces: the first as it is (a word start, or `##`
    inside a word), the others without their `##`."""
    first, *rest = pieces
    return first + "".join(piece[len(CONTINUATION):] for piece in rest)
