"""Merges continued from a base tokenizer's own segmentation of a corpus's words: the
merge loop of every trainer here (BPE-style: the adjacent pair that occurs most often,
word frequency x occurrences, becomes one token, and the counts are updated), started
from the pieces the base gives each word instead of from characters. Each merge saves
exactly its count of pieces on the corpus, so the first N merges are the N that save the
most, greedily.

The loop is tokenizers' BpeTrainer (Rust) run over the words spelt in symbols, one
private-use character per base piece: its merges are merges of pieces. Deterministic as
bpe_training.py's trainer: the symbols are the initial alphabet, in sorted order of their
pieces, and there is no continuing-subword prefix for the trainer to add while iterating
its word HashMap; ties between equal counts follow the symbols' ids.

A merge's token is spelt by the caller (`spell`: WordPiece drops the `##` of every piece
after the first, BPE concatenates). Two merges can spell one token (`ab` + `c` and `a` +
`bc`), or a token the base already has: such merges cost no budget.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Callable

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from bertprep.errors import BertprepError
from bertprep.tokenizer.files import LoadedTokenizer

# Supplementary private-use planes: 131,068 code points that no text holds and no
# normaliser touches, one per piece (a vocabulary's pieces in a corpus are far fewer).
SYMBOL_PLANES = ((0xF0000, 0xFFFFE), (0x100000, 0x10FFFE))


def count_words(base: LoadedTokenizer, lines) -> Counter:
    """word -> occurrences, the words as the base's normaliser and pre-tokenizer give them
    (a byte-level BPE's in its byte alphabet, `Ġword`)."""
    normalizer, pre_tokenizer = base.tokenizer.normalizer, base.tokenizer.pre_tokenizer
    counts: Counter = Counter()
    for line in lines:
        text = normalizer.normalize_str(line) if normalizer is not None else line
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(text))
    return counts


def continued_merges(words: list[tuple[list[str], int]], budget: int, min_frequency: int, known: set[str],
                     spell: Callable[[list[str]], str]) -> list[tuple[str, str, str]]:
    """(left, right, token) of the merges learned over `words` (pieces, frequency), in
    order, until `budget` of them made tokens not in `known` (fewer when no pair occurs
    min_frequency times); left and right are spelt as tokens too."""
    words = [(split, freq) for split, freq in words if len(split) > 1]
    if budget <= 0 or not words:
        return []
    alphabet = sorted({piece for split, _ in words for piece in split})
    symbol = _symbols(alphabet)
    piece_of = {symbol[piece]: piece for piece in alphabet}
    spelt = [("".join(symbol[piece] for piece in split), freq) for split, freq in words]
    slack = budget // 4 + 16  # merges that make no new token: learned again with room for more if short
    while True:
        learned = _learn(spelt, [symbol[piece] for piece in alphabet], budget + slack, min_frequency)
        merges, seen = [], set(known)
        for left, right in learned:
            token = spell([piece_of[ch] for ch in left + right])
            merges.append((spell([piece_of[ch] for ch in left]), spell([piece_of[ch] for ch in right]), token))
            if token not in seen:
                seen.add(token)
                if len(seen) - len(known) == budget:
                    return merges
        if len(learned) < budget + slack:  # the trainer ran out of pairs seen min_frequency times
            return merges
        slack *= 2


def _symbols(pieces: list[str]) -> dict[str, str]:
    codes = [c for low, high in SYMBOL_PLANES for c in range(low, high)]
    if len(pieces) > len(codes):
        raise BertprepError(f"the corpus's words use {len(pieces):,} distinct pieces of the base; at most "
                            f"{len(codes):,} can be merged")
    return {piece: chr(code) for piece, code in zip(pieces, codes)}


def _learn(words: list[tuple[str, int]], alphabet: list[str], merges: int, min_frequency: int) -> list[tuple[str, str]]:
    """BpeTrainer's first `merges` merges over the symbol words (each given `freq` times)."""
    scratch = Tokenizer(models.BPE())
    scratch.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + merges, min_frequency=max(min_frequency, 1),
                                  initial_alphabet=alphabet, show_progress=False)
    scratch.train_from_iterator((" ".join([word] * freq) for word, freq in words), trainer)
    learned = json.loads(scratch.to_str())["model"]["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in learned]
