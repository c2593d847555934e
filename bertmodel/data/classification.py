"""Encode labelled texts for sequence classification: ragged ids, segments and labels.

Each example is wrapped in the tokenizer's own template, as transformers' tokenizer on
the same files wraps it: BERT's `[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]` (type ids 0
for `[CLS]`, A and the first `[SEP]`, 1 for B and the last `[SEP]`), RoBERTa's
`<s> A </s></s> B </s>` and ModernBERT's `[CLS] A [SEP] B [SEP]` with one token type
(bertprep's Template, read off the post-processor). It is cut to `max_seq_length` the
way transformers' tokenizers do (`truncation=True`, strategy "longest_first",
implemented by the `tokenizers` library's `truncate_encodings`): with a budget
M = max_seq_length - the pair's special tokens (3 for BERT, 4 for RoBERTa) and lengths
a, b,
- a + b <= M: nothing is cut;
- otherwise, with s = min(a, b): when s <= M - s only the longer is cut, to M - s;
  else both are cut, the shorter (or A on a tie) to M // 2 and the longer to
  M // 2 + M % 2.
A single text is cut to max_seq_length - its special tokens (2 for every family we read).
The tokens removed are always at the end.

Texts are encoded in bulk without special tokens (bertprep's `SentenceEncoder`:
nanotoken when installed, checked against `tokenizers` on a sample of every call, or
`tokenizers`), then truncated and assembled with numpy over flat arrays, never a Python
loop per row. The result stays flat (`input_ids`, `token_type_ids`, `offsets`), so a
collate pads each batch to its own longest row (`pad_batch`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertmodel.data.labels import LabelSpace
from bertmodel.data.tables import LabelledTexts
from bertmodel.data.tokenizer_info import loaded_tokenizer
from bertmodel.errors import BertmodelError
from bertprep.tokenizer import LoadedTokenizer, SentenceEncoder, Template

PAD_MULTIPLE = 8  # as the pre-training collate: few distinct shapes, tensor-core friendly


@dataclass
class EncodedExamples:
    input_ids: np.ndarray  # (T,) int32: every row's ids, concatenated
    token_type_ids: np.ndarray  # (T,) int8
    offsets: np.ndarray  # (N + 1,) int64: row i is [offsets[i], offsets[i + 1])
    labels: np.ndarray | None  # (N,) int64 class ids or float32 targets; None when unlabelled
    max_seq_length: int
    truncated: int  # rows that were cut to max_seq_length
    engine: str  # the bulk encoder that produced the ids ("nanotoken" or "tokenizers")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def fit_note(self) -> str:
        """What fitting the rows to max_seq_length did, as training and evaluation report it."""
        return f"{self.truncated:,} truncated to {self.max_seq_length} tokens"

    @property
    def lengths(self) -> np.ndarray:
        """(N,) int64 tokens per row, special tokens included."""
        return np.diff(self.offsets)

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, token_type_ids) of row i."""
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return self.input_ids[lo:hi], self.token_type_ids[lo:hi]


def truncation_warning(count: int, noun: str, fit_note: str, max_seq_length: int, positions: int) -> str:
    """What prediction says of `count` inputs (`noun`s) some of which were cut to
    max_seq_length (`fit_note`: the encoded data's own account), and how far a model of
    `positions` positions reads."""
    more = (f"--max-seq-length up to the model's {positions:,} positions reads more" if max_seq_length < positions
            else f"the model reads at most {positions:,} tokens")
    return f"{count:,} {noun}{'s' if count != 1 else ''} read ({fit_note}; the rest of each is not read); {more}"


def as_tokenizer(tokenizer) -> LoadedTokenizer:
    """A LoadedTokenizer, or one loaded from a TOKDIR / tokenizer.json / vocab.txt /
    RUN/hf directory / released tokenizer directory (once per version of its files)."""
    if isinstance(tokenizer, LoadedTokenizer):
        return tokenizer
    return loaded_tokenizer(Path(tokenizer))


def encode_texts(tokenizer, texts: list[str], pairs: list[str] | None = None,
                 max_seq_length: int = 128, engine: str = "auto") -> EncodedExamples:
    """Encode texts (and text pairs) into flat rows; labels None."""
    tok = as_tokenizer(tokenizer)
    template = tok.template
    special = template.pair_specials if pairs is not None else template.single_specials
    if max_seq_length < special:
        raise BertmodelError(f"max_seq_length {max_seq_length} leaves no room for the "
                             f"{special} special tokens of {'a pair' if pairs is not None else 'a text'}")
    if pairs is not None and len(pairs) != len(texts):
        raise BertmodelError(f"{len(texts):,} texts but {len(pairs):,} text pairs")
    encoder = SentenceEncoder(tok, engine)
    first = encoder.encode(list(texts))
    engines = {first.engine}
    a_ids, a_len = first.ids, np.diff(first.offsets)
    if pairs is None:
        keep_a = np.minimum(a_len, max_seq_length - special)
        b_ids, b_len, keep_b = None, None, None
    else:
        second = encoder.encode(list(pairs))
        engines.add(second.engine)
        b_ids, b_len = second.ids, np.diff(second.offsets)
        keep_a, keep_b = longest_first(a_len, b_len, max_seq_length - special)
    input_ids, token_type_ids, offsets = _assemble(
        a_ids, first.offsets[:-1], keep_a,
        None if b_ids is None else (b_ids, second.offsets[:-1], keep_b), template)
    truncated = int(np.count_nonzero(keep_a < a_len)) if pairs is None else int(
        np.count_nonzero((keep_a < a_len) | (keep_b < b_len)))
    # Both texts of a pair go through the same encoder; "tokenizers" wins when a sample
    # check made either call fall back, so the field never claims more than is true.
    return EncodedExamples(input_ids=input_ids, token_type_ids=token_type_ids, offsets=offsets,
                           labels=None, max_seq_length=max_seq_length, truncated=truncated,
                           engine="tokenizers" if "tokenizers" in engines else "nanotoken")


def encode_examples(tokenizer, data: LabelledTexts, label_space: LabelSpace | None,
                    max_seq_length: int = 128, engine: str = "auto") -> EncodedExamples:
    """Encode a table's texts (and pairs) and, when `label_space` is given and the data
    has labels, its label ids (an unknown label is an error naming the record)."""
    labels = None
    if label_space is not None and data.labels is not None:
        labels = label_space.encode(data)  # before tokenizing: a bad label fails fast
    encoded = encode_texts(tokenizer, data.texts, data.pairs, max_seq_length, engine)
    encoded.labels = labels
    return encoded


def longest_first(a: np.ndarray, b: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens kept of A and of B per row under `tokenizers`' "longest_first" rule for
    pairs (the module docstring); `budget` excludes the special tokens."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    short, long = np.minimum(a, b), np.maximum(a, b)
    # Only the longer is cut, to what the shorter leaves (never below the shorter) ...
    n_short = short
    n_long = np.where(short > budget, short, np.maximum(short, budget - short))
    # ... unless that still does not fit: then both are cut to about half each.
    both = n_short + n_long > budget
    n_short = np.where(both, budget // 2, n_short)
    n_long = np.where(both, budget // 2 + budget % 2, n_long)
    swap = a > b  # A is the longer one
    keep_a = np.where(swap, n_long, n_short)
    keep_b = np.where(swap, n_short, n_long)
    fits = a + b <= budget
    return np.where(fits, a, np.minimum(a, keep_a)), np.where(fits, b, np.minimum(b, keep_b))


def _ragged_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(starts[i], starts[i] + lengths[i]) over i, without a loop."""
    lengths = np.asarray(lengths, np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(np.asarray(starts, np.int64) - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


def _assemble(a_ids, a_start, keep_a, pair, template: Template):
    """Flat `prefix A single_suffix` or `prefix A middle B suffix` rows (the template's
    special tokens, e.g. `[CLS] A [SEP] B [SEP]`) from the kept prefix of each segment."""
    n = len(keep_a)
    keep_b = pair[2] if pair is not None else np.zeros(n, np.int64)
    specials = template.pair_specials if pair is not None else template.single_specials
    lengths = keep_a + keep_b + specials
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    row_start = offsets[:-1]
    input_ids = np.empty(int(offsets[-1]), np.int32)
    token_type_ids = np.zeros(int(offsets[-1]), np.int8)
    _place(input_ids, token_type_ids, row_start, template.prefix, template.prefix_types)
    a_at = _ragged_index(row_start + len(template.prefix), keep_a)
    input_ids[a_at] = a_ids[_ragged_index(a_start, keep_a)]
    token_type_ids[a_at] = template.a_type
    after_a = row_start + len(template.prefix) + keep_a
    if pair is None:  # one text: every type id 0, as transformers' single template
        _place(input_ids, token_type_ids, after_a, template.single_suffix, (0,) * len(template.single_suffix))
        return input_ids, token_type_ids, offsets
    b_ids, b_start, _ = pair
    _place(input_ids, token_type_ids, after_a, template.middle, template.middle_types)
    b_at = _ragged_index(after_a + len(template.middle), keep_b)
    input_ids[b_at] = b_ids[_ragged_index(b_start, keep_b)]
    token_type_ids[b_at] = template.b_type
    _place(input_ids, token_type_ids, offsets[1:] - len(template.suffix), template.suffix, template.suffix_types)
    return input_ids, token_type_ids, offsets


def _place(input_ids: np.ndarray, token_type_ids: np.ndarray, starts: np.ndarray, ids, types) -> None:
    """Write the special tokens `ids` (type ids `types`) at `starts` of every row."""
    for k, (token, type_id) in enumerate(zip(ids, types)):
        input_ids[starts + k] = token
        token_type_ids[starts + k] = type_id


def pad_batch(encoded: EncodedExamples, rows, pad_id: int = 0,
              pad_multiple: int = PAD_MULTIPLE) -> dict[str, np.ndarray]:
    """Rows `rows` padded to the batch's longest row, rounded up to `pad_multiple` but
    never past max_seq_length: int64 input_ids, token_type_ids, attention_mask (B, T)
    and, when the data is labelled, labels (B,) (int64 ids or float32 targets)."""
    rows = np.asarray(rows, np.int64)
    starts = encoded.offsets[rows]
    lengths = encoded.offsets[rows + 1] - starts
    longest = int(lengths.max()) if len(rows) else 0
    width = min(-(-longest // pad_multiple) * pad_multiple, max(encoded.max_seq_length, longest))
    mask = np.arange(width) < lengths[:, None]  # (B, T)
    flat = _ragged_index(starts, lengths)  # row-major order, as mask's True cells
    input_ids = np.full((len(rows), width), pad_id, np.int64)
    token_type_ids = np.zeros((len(rows), width), np.int64)
    input_ids[mask] = encoded.input_ids[flat]
    token_type_ids[mask] = encoded.token_type_ids[flat]
    batch = {"input_ids": input_ids, "token_type_ids": token_type_ids,
             "attention_mask": mask.astype(np.int64)}
    if encoded.labels is not None:
        batch["labels"] = encoded.labels[rows]
    return batch
