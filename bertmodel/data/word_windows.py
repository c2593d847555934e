"""Tagged sentences -> token windows for token classification, with any tokenizer.

The words are given; each is tokenized as transformers' `tokenizer(words,
is_split_into_words=True)` tokenizes it (bertprep's `encode_words`: byte-level BPE gives
every word its leading space, `add_prefix_space=True`, as RoBERTa's NER recipe asks), and
a word's tokens are those its `word_ids()` name: the tokenizer's normalizer and
pre-tokenizer may still split one ("U.S." -> "u . s ." in WordPiece, "(German)" -> "Ġ(",
"German", ")" in byte-level BPE), and all its pieces stay that word's. A word that yields
no token at all (a lone control character) becomes the unknown token, so every word has
a first piece to be predicted from.

Labels: the first piece of a word carries the word's tag (the BERT paper's setup for
CoNLL-2003, transformers' run_ner); the others get -100 and are not scored, or with
label_all_tokens carry it too (B-X as I-X after the first piece, as transformers' run_ner
does). Predictions are always read from the first piece (transformers'
aggregation_strategy="first").

A sentence longer than max_seq_length less the tokenizer's single-text specials
(`[CLS] ... [SEP]`, `<s> ... </s>`: its template) is cut into consecutive windows at word
boundaries, each wrapped in those specials, so every word is predicted exactly once; only
a single word longer than a whole window loses pieces (its first piece is kept).
WordPiece words are encoded once per distinct word, in bulk (nanotoken when installed);
other tokenizers encode each sentence's words and split them by `word_ids`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertmodel.data.classification import PAD_MULTIPLE, as_tokenizer
from bertmodel.errors import BertmodelError
from bertprep.tokenizer import SentenceEncoder

IGNORE_INDEX = -100  # a piece the loss does not score (model.heads' and PyTorch's convention)


@dataclass
class WordWindows:
    input_ids: np.ndarray  # (T,) int32: every window's ids, concatenated
    offsets: np.ndarray  # (W + 1,) int64: window i is [offsets[i], offsets[i + 1])
    labels: np.ndarray | None  # (T,) int64 label ids, -100 where nothing is scored; None: untagged
    word_index: np.ndarray  # (T,) int64: the word (within its sentence) whose first piece this is, else -1
    sentence: np.ndarray  # (W,) int64: the sentence each window belongs to
    max_seq_length: int
    split_sentences: int  # sentences cut into more than one window
    cut_words: int  # words longer than a window, cut to it

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def fit_note(self) -> str:
        """What fitting the sentences to max_seq_length did, as training and evaluation
        report it."""
        split = self.split_sentences
        return (f"{len(self):,} window{'s' if len(self) != 1 else ''} of up to {self.max_seq_length} tokens, "
                f"{split:,} sentence{'s' if split != 1 else ''} split into windows")

    def collate(self, rows, pad_id: int = 0, pad_multiple: int = PAD_MULTIPLE) -> dict[str, np.ndarray]:
        """Windows `rows` padded to the longest (rounded up to pad_multiple, never past
        max_seq_length): input_ids, token_type_ids (all 0), attention_mask and, when
        tagged, labels (-100 at padding)."""
        rows = np.asarray(rows, np.int64)
        starts = self.offsets[rows]
        lengths = self.offsets[rows + 1] - starts
        longest = int(lengths.max()) if len(rows) else 0
        width = min(-(-longest // pad_multiple) * pad_multiple, max(self.max_seq_length, longest))
        mask = np.arange(width) < lengths[:, None]
        flat = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)]) if len(rows) else \
            np.zeros(0, np.int64)
        input_ids = np.full((len(rows), width), pad_id, np.int64)
        input_ids[mask] = self.input_ids[flat]
        batch = {"input_ids": input_ids, "token_type_ids": np.zeros_like(input_ids),
                 "attention_mask": mask.astype(np.int64)}
        if self.labels is not None:
            labels = np.full((len(rows), width), IGNORE_INDEX, np.int64)
            labels[mask] = self.labels[flat]
            batch["labels"] = labels
        return batch

    def word_predictions(self, window: int, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(word indices, their first pieces' logits rows) of one window; logits (T, C)
        for that window's positions (padding beyond its length is ignored)."""
        lo, hi = self.offsets[window], self.offsets[window + 1]
        words = self.word_index[lo:hi]
        keep = words >= 0
        return words[keep], logits[: hi - lo][keep]


def encode_words(tokenizer, sentences: list[list[str]], max_seq_length: int,
                 tags: list[list[str]] | None = None, label_ids: dict[str, int] | None = None,
                 label_all_tokens: bool = False) -> WordWindows:
    """Token windows of `sentences`; with `tags` and `label_ids`, the label of each
    scored piece (a tag not in label_ids is not scored: -100)."""
    tok = as_tokenizer(tokenizer)
    _check_room(tok, max_seq_length)
    return windows_of_pieces(tok, word_pieces(tok, sentences), max_seq_length, tags, label_ids, label_all_tokens)


def word_pieces(tok, sentences: list[list[str]]) -> list[list[np.ndarray]]:
    """Per sentence, each word's token ids (int32), grouped as `word_ids()` groups
    transformers' `tokenizer(words, is_split_into_words=True)`; a word with no token
    gets the unknown token."""
    if tok.kind == "wordpiece":
        # A WordPiece word is tokenized on its own whatever surrounds it: each distinct
        # word once, in bulk.
        vocabulary = list(dict.fromkeys(w for sentence in sentences for w in sentence))
        encoded = SentenceEncoder(tok, "auto").encode(vocabulary)
        pieces = [encoded.ids[encoded.offsets[i]:encoded.offsets[i + 1]].astype(np.int32)
                  for i in range(len(vocabulary))]
        by_word = dict(zip(vocabulary, pieces))
        out = [[by_word[w] for w in sentence] for sentence in sentences]
    else:
        out = [_split_by_word(tok.encode_words(sentence, add_special_tokens=False), len(sentence))
               for sentence in sentences]
    unk = None
    for sentence in out:
        for k, p in enumerate(sentence):
            if not len(p):
                unk = _unknown_piece(tok) if unk is None else unk
                sentence[k] = unk
    return out


def _split_by_word(encoding, n_words: int) -> list[np.ndarray]:
    """An encoding's ids split into its `n_words` words by `word_ids` (a word with no
    token gets an empty array)."""
    ids = np.asarray(encoding.ids, np.int32)
    words = np.asarray([-1 if w is None else w for w in encoding.word_ids], np.int64)
    bounds = np.searchsorted(words, np.arange(n_words + 1), side="left")  # word ids ascend in a pre-split text
    return [ids[bounds[k]:bounds[k + 1]] for k in range(n_words)]


def _unknown_piece(tok) -> np.ndarray:
    if tok.special.unk is None:
        raise BertmodelError("a word yields no token and the tokenizer has no unknown token to stand in for it")
    return np.asarray([tok.special.unk], np.int32)


def _check_room(tok, max_seq_length: int) -> None:
    specials = tok.template.single_specials
    if max_seq_length < specials + 1:
        raise BertmodelError(f"max_seq_length {max_seq_length} leaves no room for a word beside the tokenizer's "
                             f"{specials} special tokens")


def windows_of_pieces(tok, pieces: list[list[np.ndarray]], max_seq_length: int,
                      tags: list[list[str]] | None = None, label_ids: dict[str, int] | None = None,
                      label_all_tokens: bool = False) -> WordWindows:
    """Windows of sentences given as each word's token ids (`word_pieces`), in the
    tokenizer's single-text template."""
    _check_room(tok, max_seq_length)
    budget = max_seq_length - tok.template.single_specials
    inside = _inside_ids(label_ids) if label_all_tokens and label_ids else {}
    ids_parts, label_parts, word_parts = [], [], []
    lengths, window_sentence = [], []
    split_sentences = cut_words = 0
    prefix = np.asarray(tok.template.prefix, np.int32)
    suffix = np.asarray(tok.template.single_suffix, np.int32)
    none_prefix, none_suffix = np.full(len(prefix), IGNORE_INDEX, np.int64), np.full(len(suffix), IGNORE_INDEX, np.int64)
    minus_prefix, minus_suffix = np.full(len(prefix), -1, np.int64), np.full(len(suffix), -1, np.int64)
    for s, sentence_pieces in enumerate(pieces):
        sentence_tags = tags[s] if tags is not None else None
        windows = 0
        start = 0
        while start < len(sentence_pieces):
            used, end = 0, start
            while end < len(sentence_pieces) and (end == start or used + len(sentence_pieces[end]) <= budget):
                used += len(sentence_pieces[end])
                end += 1
            ids, labels, words = [prefix], [none_prefix], [minus_prefix]
            for k in range(start, end):
                p = sentence_pieces[k]
                if len(p) > budget:  # one word longer than a window: keep its first pieces
                    p = p[:budget]
                    cut_words += 1
                ids.append(p)
                first = np.full(len(p), -1, np.int64)
                first[0] = k
                words.append(first)
                if sentence_tags is not None:
                    tag = label_ids.get(sentence_tags[k], IGNORE_INDEX)
                    rest = inside.get(tag, tag) if label_all_tokens else IGNORE_INDEX
                    row = np.full(len(p), rest, np.int64)
                    row[0] = tag
                    labels.append(row)
            ids.append(suffix)
            labels.append(none_suffix)
            words.append(minus_suffix)
            ids_parts.extend(ids)
            word_parts.extend(words)
            if sentence_tags is not None:
                label_parts.extend(labels)
            lengths.append(sum(len(p) for p in ids))
            window_sentence.append(s)
            windows += 1
            start = end
        split_sentences += windows > 1
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return WordWindows(
        input_ids=np.concatenate(ids_parts).astype(np.int32) if ids_parts else np.zeros(0, np.int32),
        offsets=offsets,
        labels=np.concatenate(label_parts) if tags is not None and label_parts else None,
        word_index=np.concatenate(word_parts) if word_parts else np.zeros(0, np.int64),
        sentence=np.asarray(window_sentence, np.int64),
        max_seq_length=max_seq_length, split_sentences=split_sentences, cut_words=cut_words)


def _inside_ids(label_ids: dict[str, int]) -> dict[int, int]:
    """B-X's id -> I-X's id, where the label set has both (the later pieces of a word
    inside an entity are its inside)."""
    return {i: label_ids[f"I-{tag[2:]}"] for tag, i in label_ids.items()
            if tag.startswith("B-") and f"I-{tag[2:]}" in label_ids}
