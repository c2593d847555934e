"""Question-answering windows: the question as text A and a window of the context as
text B in the tokenizer's pair template (`[CLS] question [SEP] context-window [SEP]`,
RoBERTa's `<s> question </s></s> context-window </s>`), over long contexts, with
start/end labels, character offsets and max-context flags.

The windowing is Google's `run_squad.py` (`convert_examples_to_features`):
- the question is segment A, cut to `max_query_length` tokens;
- the context is cut into windows of `max_seq_length - len(question) - specials` tokens
  (specials: the template's, 3 for BERT, 4 for RoBERTa) whose starts are `doc_stride`
  tokens apart (Google's `doc_stride` is the step between window
  starts; transformers' `stride`/run_qa.py's `--doc_stride` is the overlap, which is
  `window length - doc_stride` here), the last window ending at the context's end;
- each context token is scored only in the window where it has the most context
  (`_check_is_max_context`: min(tokens to its left, tokens to its right) + 0.01 *
  window length, first window on ties; computed in integers as 100 * min + length,
  which orders exactly as Google's sum does).

With transformers' `stride` = window length - doc_stride, the windows' ids are those of
`tokenizer(question, context, truncation="only_second", max_length=max_seq_length,
stride=stride, return_overflowing_tokens=True)`.

Tokens and their character offsets come from `tokenizers` (our `LoadedTokenizer`), so a
token's offsets index the ORIGINAL context, whatever the normalizer did (lower-casing,
accent stripping, a lower-cased "İ" becoming two characters). A byte-level BPE or
SentencePiece token carries its word's leading space (Ġ, ▁), and its offsets may include
that space (ModernBERT's TemplateProcessing and SentencePiece's ▁ keep it; RoBERTa's
RobertaProcessing trims it, `trim_offsets`): offsets are trimmed of the whitespace at
either end here, as RobertaProcessing trims them, so an answer cut from them is the
answer's characters alone (WordPiece tokens hold no whitespace: nothing to trim). The
answer's labels are the first context token ending after the answer's first character
and the last one starting before its end, as run_qa.py labels from offsets; an answer
not wholly inside a window labels that window's first token ([CLS], <s>: position 0),
as do unanswerable (v2.0) questions.

Each context is tokenized once however many questions share it, in one `tokenizers`
batch (for the offsets); questions, which need only ids, go through bertprep's bulk
encoder (nanotoken when installed, checked against `tokenizers`). The windows are then
assembled with numpy, no loop over windows or tokens: the arrays are ragged, all
windows' tokens end to end, window w being `row_splits[w]:row_splits[w + 1]`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bertmodel.data.squad import SquadExample
from bertmodel.errors import BertmodelError

NOT_CONTEXT = -1  # offsets of [CLS], question, [SEP]: not a character of the context


@dataclass(frozen=True)
class SkippedExample:
    source: str  # the file or dataset it came from
    id: str
    reason: str

    def message(self) -> str:
        return f"{self.source}: question {self.id}: {self.reason}"


@dataclass
class QAFeatures:
    """W windows; per-token arrays hold every window's tokens end to end."""

    input_ids: np.ndarray  # (N,) int32
    token_type_ids: np.ndarray  # (N,) int8: the template's (BERT: 0 for [CLS] question [SEP], 1 for context [SEP])
    offsets: np.ndarray  # (N, 2) int32 [start, end) characters in the example's context; NOT_CONTEXT elsewhere
    token_is_max_context: np.ndarray  # (N,) bool: this window is where the token has most context
    row_splits: np.ndarray  # (W + 1,) int64: window w is tokens row_splits[w]:row_splits[w + 1]
    example_index: np.ndarray  # (W,) int32: index into the examples list given
    window_start: np.ndarray  # (W,) int32: the window's first context token, counted in the context
    context_position: np.ndarray  # (W,) int32: where the context starts in the window (BERT: question + 2)
    start_positions: np.ndarray | None  # (W,) int32 labels when training, 0 = [CLS]
    end_positions: np.ndarray | None
    skipped: list[SkippedExample] = field(default_factory=list)  # training examples left out
    questions_cut: int = 0  # questions longer than max_query_length, cut to it

    def __len__(self) -> int:
        return len(self.example_index)

    @property
    def lengths(self) -> np.ndarray:  # (W,) tokens per window
        return np.diff(self.row_splits)

    def window(self, w: int) -> dict[str, np.ndarray]:
        """One window's per-token arrays (views)."""
        a, b = int(self.row_splits[w]), int(self.row_splits[w + 1])
        return {"input_ids": self.input_ids[a:b], "token_type_ids": self.token_type_ids[a:b],
                "offsets": self.offsets[a:b], "token_is_max_context": self.token_is_max_context[a:b]}

    def padded(self, windows, pad_id: int = 0, multiple_of: int = 1) -> dict[str, np.ndarray]:
        """input_ids, token_type_ids, attention_mask (B, T) int64 for the windows listed,
        padded to the longest of them rounded up to `multiple_of`."""
        windows = np.asarray(windows, dtype=np.int64)
        lengths = self.lengths[windows]
        width = int(-(-lengths.max() // multiple_of) * multiple_of) if len(windows) else 0
        mask = np.arange(width)[None, :] < lengths[:, None]
        index = (self.row_splits[windows][:, None] + np.arange(width)[None, :])[mask]
        out = {"input_ids": np.full(mask.shape, pad_id, np.int64),
               "token_type_ids": np.zeros(mask.shape, np.int64), "attention_mask": mask.astype(np.int64)}
        out["input_ids"][mask] = self.input_ids[index]
        out["token_type_ids"][mask] = self.token_type_ids[index]
        return out


def prepare_qa_features(examples: list[SquadExample], tokenizer, max_seq_length: int = 384,
                        doc_stride: int = 128, max_query_length: int = 64,
                        training: bool = True) -> QAFeatures:
    """Windows of `examples` (see the module docstring). `tokenizer` is a
    `bertprep.tokenizer.files.LoadedTokenizer` or anything `load_tokenizer` takes (a TOKDIR, a
    tokenizer.json, a vocab.txt). With `training`, each window gets start/end labels from
    the example's first answer, and an answerable example whose `answer_start` does not
    point at its answer text (or whose answer has no token) is left out and listed in
    `skipped`, never mislabelled. A question so long that, cut to `max_query_length`, it
    leaves no room for a context token is a BertmodelError naming its file and id."""
    _check_settings(max_seq_length, doc_stride, max_query_length)
    loaded = _as_loaded(tokenizer)
    skipped: list[SkippedExample] = []
    kept = list(range(len(examples)))
    if training:
        kept = [i for i in kept if _answer_ok(examples[i], skipped)]
    contexts: dict[str, int] = {}
    context_of = np.array([contexts.setdefault(examples[i].context, len(contexts)) for i in kept], np.int64)
    template = loaded.template
    ctx_ids, ctx_offsets, ctx_splits = _encode_with_offsets(loaded.tokenizer, list(contexts))
    if loaded.kind != "wordpiece":
        ctx_offsets = _trim_whitespace(list(contexts), ctx_offsets, ctx_splits)
    q_ids, q_splits = _encode_ids(loaded, [examples[i].question for i in kept])
    questions_cut = int(np.count_nonzero(np.diff(q_splits) > max_query_length))
    q_len = np.minimum(np.diff(q_splits), max_query_length)
    max_doc = max_seq_length - q_len - template.pair_specials
    for j in np.flatnonzero(max_doc < 1)[:1]:
        example = examples[kept[j]]
        raise BertmodelError(
            f"{example.source or 'examples'}: question {example.id}: the question has {int(q_len[j])} tokens "
            f"(cut to max_query_length {max_query_length}), so with max_seq_length {max_seq_length} no context "
            "token fits in a window: lower max_query_length or raise max_seq_length")
    n_ctx = np.diff(ctx_splits)[context_of]
    if training:
        span = _answer_spans(examples, kept, context_of, ctx_offsets, ctx_splits, skipped)
        keep = span[:, 0] != -2  # answerable examples whose answer has no token are dropped too
        kept = [k for k, ok in zip(kept, keep) if ok]
        context_of, q_len, max_doc, n_ctx, span = context_of[keep], q_len[keep], max_doc[keep], n_ctx[keep], span[keep]
        q_rows = np.flatnonzero(keep)  # the questions were encoded before this selection
    else:
        q_rows = np.arange(len(kept))
    # Window starts (Google's loop: advance by min(window, doc_stride) until the window
    # reaches the end); an empty context still gets one window so every example has one.
    step = np.minimum(max_doc, doc_stride)
    count = 1 + np.maximum(-(-(n_ctx - max_doc) // step), 0)
    owner = np.repeat(np.arange(len(kept)), count)  # (W,) row in `kept`
    first = np.cumsum(count) - count
    start = ((np.arange(len(owner)) - first[owner]) * step[owner]).astype(np.int64)
    length = np.minimum(max_doc[owner], n_ctx[owner] - start)
    ql = q_len[owner]
    n_prefix, n_middle = len(template.prefix), len(template.middle)
    context_at = n_prefix + ql + n_middle  # (W,) where each window's context starts
    total = context_at + length + len(template.suffix)
    row_splits = np.concatenate([[0], np.cumsum(total)]).astype(np.int64)
    # For each token: its window, its position in the window, and what it is.
    tok_window = np.repeat(np.arange(len(owner)), total)
    pos = np.arange(int(row_splits[-1])) - row_splits[tok_window]
    w_ql, w_context_at = ql[tok_window], context_at[tok_window]
    w_context_end = w_context_at + length[tok_window]
    doc_pos = start[tok_window] + pos - w_context_at  # the token's place in its context
    is_ctx = (pos >= w_context_at) & (pos < w_context_end)
    ctx_index = ctx_splits[context_of[owner]][tok_window] + doc_pos
    q_index = q_splits[q_rows[owner]][tok_window] + pos - n_prefix
    is_q = (pos >= n_prefix) & (pos < n_prefix + w_ql)
    input_ids, token_type_ids = _template_parts(template, pos, w_ql, w_context_at, w_context_end)
    input_ids[is_q] = q_ids[q_index[is_q]]
    input_ids[is_ctx] = ctx_ids[ctx_index[is_ctx]]
    offsets = np.full((len(pos), 2), NOT_CONTEXT, np.int32)
    offsets[is_ctx] = ctx_offsets[ctx_index[is_ctx]]
    best = _max_context_windows(n_ctx, max_doc, step, count)  # per (example, context token)
    token_base = np.concatenate([[0], np.cumsum(n_ctx)])[owner]  # (W,)
    k = (np.arange(len(owner)) - first[owner])  # the window's number within its example
    max_context = np.zeros(len(pos), bool)
    where = np.flatnonzero(is_ctx)
    max_context[where] = best[token_base[tok_window[where]] + doc_pos[where]] == k[tok_window[where]]
    starts = ends = None
    if training:
        inside = (span[owner, 0] >= start) & (span[owner, 1] < start + length) & (span[owner, 0] >= 0)
        shift = context_at - start
        starts = np.where(inside, span[owner, 0] + shift, 0).astype(np.int32)
        ends = np.where(inside, span[owner, 1] + shift, 0).astype(np.int32)
    return QAFeatures(
        input_ids=input_ids, token_type_ids=token_type_ids, offsets=offsets,
        token_is_max_context=max_context, row_splits=row_splits,
        example_index=np.asarray(kept, np.int32)[owner], window_start=start.astype(np.int32),
        context_position=context_at.astype(np.int32), start_positions=starts, end_positions=ends,
        skipped=skipped, questions_cut=questions_cut)


def _template_parts(template, pos, q_len, context_at, context_end) -> tuple[np.ndarray, np.ndarray]:
    """(input ids, token type ids) of every window token (per token: its position, its
    window's question length, context start and end) from the pair template: the special
    tokens where they fall (prefix, middle after the question, suffix after the context)
    and the texts' type ids; the caller fills in the question's and context's ids."""
    input_ids = np.zeros(len(pos), np.int32)
    types = np.full(len(pos), template.a_type, np.int8)
    types[(pos >= context_at) & (pos < context_end)] = template.b_type
    middle_at = len(template.prefix) + q_len
    for parts, part_types, at, present in (
            (template.prefix, template.prefix_types, np.zeros_like(pos), pos < len(template.prefix)),
            (template.middle, template.middle_types, middle_at, (pos >= middle_at) & (pos < context_at)),
            (template.suffix, template.suffix_types, context_end, pos >= context_end)):
        where = np.flatnonzero(present)
        input_ids[where] = np.asarray(parts, np.int32)[pos[where] - at[where]]
        types[where] = np.asarray(part_types, np.int8)[pos[where] - at[where]]
    return input_ids, types


def _trim_whitespace(texts: list[str], offsets: np.ndarray, splits: np.ndarray) -> np.ndarray:
    """Token offsets (text t's tokens are splits[t]:splits[t + 1], counted from its start)
    moved inside the whitespace at either end of each token, as RobertaProcessing's
    `trim_offsets` moves them (a whitespace-only token keeps an empty span at its end)."""
    if not len(offsets):
        return offsets
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    base = np.repeat(np.cumsum(lengths) - lengths, np.diff(splits))  # each token's text, where it starts
    codes = np.frombuffer("".join(texts).encode("utf-32-le"), np.uint32)
    kept = ~np.isin(codes, _whitespace_codes())
    n = len(codes)
    index = np.arange(n + 1)
    # next_kept[i]: the first non-space position >= i (n when none); after_kept[i]: one
    # past the last non-space position < i (0 when none).
    next_kept = np.minimum.accumulate(np.where(np.append(kept, True), index, n)[::-1])[::-1]
    after_kept = np.maximum.accumulate(np.concatenate([[0], np.where(kept, index[1:], 0)]))
    start, end = offsets[:, 0] + base, offsets[:, 1] + base
    new_start = np.minimum(next_kept[start], end)
    new_end = np.maximum(after_kept[end], new_start)
    return np.stack([new_start - base, new_end - base], axis=1).astype(offsets.dtype)


def _whitespace_codes() -> np.ndarray:
    # Every character str.isspace() accepts lies below U+3001 (U+3000 is the last).
    return np.asarray([c for c in range(0x3001) if chr(c).isspace()], np.uint32)


def _check_settings(max_seq_length: int, doc_stride: int, max_query_length: int) -> None:
    if max_seq_length < 4:
        raise BertmodelError(f"max_seq_length must be at least 4 ([CLS] q [SEP] c [SEP]), got {max_seq_length}")
    if doc_stride < 1:
        raise BertmodelError(f"doc_stride must be at least 1, got {doc_stride}")
    if max_query_length < 1:
        raise BertmodelError(f"max_query_length must be at least 1, got {max_query_length}")


def _as_loaded(tokenizer):
    if isinstance(tokenizer, (str, Path)):
        from bertprep.tokenizer import load_tokenizer

        return load_tokenizer(tokenizer)
    if not (hasattr(tokenizer, "tokenizer") and hasattr(tokenizer, "special")):
        raise BertmodelError(f"expected a bertprep LoadedTokenizer or a tokenizer path, got {type(tokenizer).__name__}")
    return tokenizer


def _encode_with_offsets(encoder, texts: list[str]):
    """Flat ids (int32), character offsets ((n, 2) int32) and row splits (int64) of texts
    encoded without special tokens, in one `tokenizers` batch."""
    encodings = encoder.encode_batch(texts, add_special_tokens=False) if texts else []
    sizes = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
    splits = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ids = np.fromiter((i for e in encodings for i in e.ids), np.int32, int(splits[-1]))
    flat = np.fromiter((c for e in encodings for pair in e.offsets for c in pair), np.int32, 2 * int(splits[-1]))
    return ids, flat.reshape(-1, 2), splits


def _encode_ids(loaded, texts: list[str]):
    """Flat ids (int32) and row splits (int64). Questions need no offsets, so they go
    through bertprep's bulk encoder: nanotoken when installed (checked on a sample
    against `tokenizers`, which takes over on any difference), else `tokenizers`."""
    encoded = _sentence_encoder(loaded).encode(texts)
    return encoded.ids.astype(np.int32), encoded.offsets.astype(np.int64)


_ENCODERS: dict[int, tuple] = {}  # id(LoadedTokenizer) -> (it, its SentenceEncoder)


def _sentence_encoder(loaded):
    # Building nanotoken's tokenizer from JSON takes ~0.1 s: once per tokenizer object,
    # not once per call (evaluation prepares features every time it runs).
    from bertprep.tokenizer import SentenceEncoder

    held = _ENCODERS.get(id(loaded))
    if held is None or held[0] is not loaded:
        # nanotoken reads WordPiece pipelines only; the others are encoded by tokenizers.
        engine = "auto" if loaded.kind == "wordpiece" else "tokenizers"
        held = _ENCODERS[id(loaded)] = (loaded, SentenceEncoder(loaded, engine))
    return held[1]


def _answer_ok(example: SquadExample, skipped: list[SkippedExample]) -> bool:
    if example.is_impossible:
        return True
    text, begin = example.answers[0]
    if not text or begin < 0 or example.context[begin:begin + len(text)] != text:
        found = example.context[max(begin, 0):max(begin, 0) + len(text)]
        skipped.append(SkippedExample(example.source, example.id,
                                      f"answer_start {begin} does not point at the answer {text!r} "
                                      f"(the context has {found!r} there)"))
        return False
    return True


def _answer_spans(examples, kept, context_of, ctx_offsets, ctx_splits, skipped) -> np.ndarray:
    """(len(kept), 2) first and last context token of each example's answer, counted in
    its context; -1 for an impossible question (labels [CLS]) and -2 for an answer that
    no token covers (the example is then skipped)."""
    spans = np.full((len(kept), 2), -1, np.int64)
    rows = np.array([r for r, i in enumerate(kept) if not examples[i].is_impossible], np.int64)
    if not len(rows):
        return spans
    begin = np.array([examples[kept[r]].answers[0][1] for r in rows], np.int64)
    end = begin + np.array([len(examples[kept[r]].answers[0][0]) for r in rows], np.int64)
    # One searchsorted over every context at once: shift each context's offsets by its
    # number times a bound on any offset, so the concatenation is sorted.
    bound = int(ctx_offsets.max(initial=0)) + int(end.max()) + 1
    n_contexts = len(ctx_splits) - 1
    shift = np.repeat(np.arange(n_contexts, dtype=np.int64) * bound, np.diff(ctx_splits))
    cid = context_of[rows]
    base = ctx_splits[cid]
    first = np.searchsorted(ctx_offsets[:, 1] + shift, begin + cid * bound, side="right") - base
    last = np.searchsorted(ctx_offsets[:, 0] + shift, end + cid * bound, side="left") - 1 - base
    uncovered = first > last
    for r in rows[uncovered]:
        example = examples[kept[r]]
        skipped.append(SkippedExample(example.source, example.id, f"no token covers the answer {example.answers[0][0]!r}"))
    spans[rows] = np.stack([first, last], axis=1)
    spans[rows[uncovered]] = -2
    return spans


def _max_context_windows(n_ctx, max_doc, step, count) -> np.ndarray:
    """For each example and each of its context tokens p (examples end to end), the
    number of the window where p has the most context (Google's score, first on ties).

    Window k starts at k * step; all but the last (k = K = count - 1) are max_doc long.
    Over the full windows holding p, min(p - start, end - p) is concave in k, so its
    maximum is at floor or ceil of the real optimum (p - (max_doc - 1) / 2) / step,
    clipped to the windows that hold p; the last window, shorter, is scored on its own.
    """
    n_ctx, max_doc, step, count = (a.astype(np.int32) for a in (n_ctx, max_doc, step, count))
    row = np.repeat(np.arange(len(n_ctx), dtype=np.int32), n_ctx)
    p = np.arange(len(row), dtype=np.int32) - np.repeat(np.cumsum(n_ctx, dtype=np.int32) - n_ctx, n_ctx)
    length, s, last = max_doc[row], step[row], (count - 1)[row]
    lo = np.maximum(0, -((length - 1 - p) // s))  # ceil((p - length + 1) / s): first window holding p
    hi = np.minimum(p // s, last - 1)  # last full window holding p (-1 when none)
    best_k = np.full(len(p), -1, np.int32)
    best_score = np.full(len(p), -1, np.int32)
    optimum = (2 * p - length + 1) // (2 * s)
    for k in (np.clip(optimum, lo, hi), np.clip(optimum + 1, lo, hi)):
        score = 100 * np.minimum(p - k * s, k * s + length - 1 - p) + length
        better = (k >= lo) & (k <= hi) & (score > best_score)
        best_k[better], best_score[better] = k[better], score[better]
    last_length = np.minimum(length, n_ctx[row] - last * s)
    score = 100 * np.minimum(p - last * s, last * s + last_length - 1 - p) + last_length
    better = (p >= last * s) & (score > best_score)  # strict: an earlier window wins ties
    best_k[better] = last[better]
    return best_k
