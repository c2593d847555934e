"""The tokens a WordPiece vocabulary gains from a corpus: whole words and `##` pieces, each
chosen for the pieces it saves.

The corpus's words are counted as the base reads them (its normaliser and
pre-tokenizer: BERT-uncased's accent stripping turns Hangul into jamo, so the new tokens
are jamo strings too, which is what that pipeline matches). Every word starts as the
base encodes it (WordPiece's greedy longest match). Then, greedily, the adjacent pair of
pieces that occurs most often (word frequency x occurrences) becomes one token, `a` +
`##b` -> `ab`, which saves exactly that many pieces on the corpus; the counts are updated
and the next pair taken. This is the WordPiece trainer's own merge loop
(wordpiece_training.py: BPE-style merges, then greedy matching), continued from the
base's segmentation instead of from characters, so frequent words end as one token and
frequent stems and endings as `##` pieces.

The loop is tokenizers' BpeTrainer (Rust, the merge loop of every trainer here) run over
the words spelt in symbols, one private-use character per base piece: its merges are
merges of pieces. A piece's symbol says whether it starts a word (`ab`) or continues one
(`##b`), so every merge decodes to a WordPiece token. Two merges can spell one token (`ab`
+ `##c` and `a` + `##bc`): the second costs no budget. Deterministic as bpe_training.py's
trainer: the symbols are the initial alphabet, in sorted order, and there is no
continuing-subword prefix for the trainer to add while iterating its word HashMap.

Words the base cannot spell (a character with no token, so the whole word is `[UNK]`)
first need those characters: they are added before any merge, the most frequent first
(as `x` at a word's start, `##x` inside one), if they occur `min_frequency` times.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from bertprep.errors import BertprepError
from bertprep.tokenizer.files import LoadedTokenizer
from bertprep.tokenizer.vocab_extension import CONTINUATION, wordpiece_split


@dataclass
class WordPieceAdditions:
    tokens: list[str]  # the new tokens, in the order chosen (characters first)
    characters: int  # of which characters the base lacked
    warnings: list[str] = field(default_factory=list)


def count_words(base: LoadedTokenizer, lines) -> Counter:
    """word -> occurrences, the words as the base's normaliser and pre-tokenizer give them."""
    normalizer, pre_tokenizer = base.tokenizer.normalizer, base.tokenizer.pre_tokenizer
    counts: Counter = Counter()
    for line in lines:
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line)))
    return counts


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
    merged = _merges(pieces, vocab, budget - len(characters), min_frequency)
    tokens = characters + merged
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


# Supplementary private-use planes: 131,068 code points that no text holds and no
# normaliser touches, one per piece (a WordPiece vocabulary is far smaller).
SYMBOL_PLANES = ((0xF0000, 0xFFFFE), (0x100000, 0x10FFFE))


def _symbols(pieces: list[str]) -> dict[str, str]:
    codes = [c for low, high in SYMBOL_PLANES for c in range(low, high)]
    if len(pieces) > len(codes):
        raise BertprepError(f"the corpus's words use {len(pieces):,} distinct pieces of the base; at most "
                            f"{len(codes):,} can be merged")
    return {piece: chr(code) for piece, code in zip(pieces, codes)}


def _merges(pieces: list[tuple[list[str], int]], vocab: set[str], budget: int, min_frequency: int) -> list[str]:
    """The new tokens the merge loop makes of the words' piece lists (module docstring),
    in order: up to `budget`, fewer when no pair occurs min_frequency times."""
    if budget <= 0 or not pieces:
        return []
    alphabet = sorted({piece for split, _ in pieces for piece in split})
    symbol = _symbols(alphabet)
    text_of = {symbol[piece]: piece for piece in alphabet}
    words = [("".join(symbol[piece] for piece in split), freq) for split, freq in pieces]
    slack = budget // 4 + 16  # merges that spell an earlier token's string: retrained with more if short
    while True:
        merges = _train_merges(words, [symbol[piece] for piece in alphabet], budget + slack, min_frequency)
        added, seen = [], set(vocab)
        for left, right in merges:
            token = _decode(left + right, text_of)
            if token not in seen:
                seen.add(token)
                added.append(token)
        if len(added) >= budget or len(merges) < budget + slack:  # enough, or the trainer ran out of pairs
            return added[:budget]
        slack *= 2


def _train_merges(words: list[tuple[str, int]], alphabet: list[str], merges: int,
                  min_frequency: int) -> list[tuple[str, str]]:
    """BpeTrainer's first `merges` merges over the symbol words (each given `freq` times)."""
    scratch = Tokenizer(models.BPE())
    scratch.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + merges, min_frequency=max(min_frequency, 1),
                                  initial_alphabet=alphabet, show_progress=False)
    scratch.train_from_iterator((" ".join([word] * freq) for word, freq in words), trainer)
    learned = json.loads(scratch.to_str())["model"]["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in learned]


def _decode(symbols: str, text_of: dict[str, str]) -> str:
    """The WordPiece token a run of piece symbols spells: the first piece as it is (a
    word start, or `##` inside a word), the others without their `##`."""
    first, *rest = (text_of[ch] for ch in symbols)
    return first + "".join(piece[len(CONTINUATION):] for piece in rest)
