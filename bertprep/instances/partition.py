"""What every instance builder shares: a tokenized partition (the unit of caching and
of work) and the five-integer descriptor of an instance, whose columns name its
segments in the partition's flat token array (pairs.py explains the layout)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Columns of the descriptor array returned by `build_pairs`.
A_START, A_LEN, B_START, B_LEN, IS_RANDOM = range(5)


PAIRINGS = ("nsp", "sop", "none")  # next-sentence pairs, sentence-order pairs, FULL-SENTENCES rows


@dataclass(frozen=True)
class PairConfig:
    max_seq_length: int = 128  # [CLS] A [SEP] B [SEP] never exceeds this
    short_seq_prob: float = 0.1  # chance a document's target length is drawn uniformly from [2, max]
    kind: str = "nsp"  # one of PAIRINGS
    # Special tokens the tokenizer's templates put around a pair and around one text
    # (Template.pair_specials / single_specials): BERT 3 and 2, RoBERTa's
    # `<s> A </s></s> B </s>` 4 and 2. The length budget leaves room for them.
    pair_specials: int = 3
    single_specials: int = 2

    @property
    def max_num_tokens(self) -> int:
        return self.max_seq_length - self.pair_specials  # room for [CLS] and two [SEP] (BERT)


@dataclass
class TokenizedPartition:
    """One partition of the corpus, tokenized: the unit of caching and of work."""

    ids: np.ndarray  # (T,) token ids of every sentence, concatenated
    sentence_offsets: np.ndarray  # (S + 1,) int64: sentence k is ids[so[k]:so[k + 1]]
    document_offsets: np.ndarray  # (D + 1,) int64: document d is sentences [do[d], do[d + 1])
    # (T,) bool: the token begins a word of the tokenizer's pre-tokenizer (Encoding.word_ids),
    # for whole-word masking. None for WordPiece, whose words are read from "##" pieces.
    word_starts: np.ndarray | None = None

    @property
    def num_documents(self) -> int:
        return len(self.document_offsets) - 1

    @property
    def num_sentences(self) -> int:
        return len(self.sentence_offsets) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.sentence_offsets[-1])
