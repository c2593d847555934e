"""Static masked-LM masking, as the reference's `create_masked_lm_predictions`
(REFERENCE.md, "Masking"), vectorised over many rows at once.

Per row: `num_to_predict = min(max_predictions, max(1, round(len(tokens) * p)))`
(round half to even, length including the special tokens), capped by the number of
candidates; candidates are every position except the specials (every token the
tokenizer's template adds: [CLS] and the two [SEP]s of a BERT pair row, `<s>` and three
`</s>` of RoBERTa's; the prefix, suffix and every separator of a FULL-SENTENCES row:
`Rows.special`);
a uniformly random subset of that size is chosen (random keys per position, the
smallest keys win: the same distribution as the reference's shuffle-and-take). Each
chosen position independently becomes [MASK] (80%), stays (10%) or takes a random
id (10%). Labels are the original ids; positions ascend.

Deliberate difference (DESIGN.md): random replacements are drawn from the ordinary
vocabulary only (never [PAD]/[UNK]/[CLS]/[SEP]/[MASK] or [unusedN]) unless
`random_from_whole_vocab` restores Google's whole-vocabulary draw.

Whole-word masking follows the reference's grouping (a `##` piece joins the previous
piece's group, groups taken in random order, skipping any that would overshoot), except
that a group never crosses [SEP]: the reference lets a `##` piece at the start of B
join A's last word. Tokenizers other than WordPiece say where words start per token
(`Rows.word_starts`, from the pre-tokenizer's words, `Encoding.word_ids`): a token that
does not start a word joins the previous token's group, by the same rule. A table per
vocabulary entry cannot say it for byte-level BPE, where "hello," is the two words
"hello" and "," although "," carries no leading-space mark.

`mask_padded` applies the same rules to a padded (B, T) batch of original tokens: the
trainer's dynamic masking calls it, so build-shards and training share one
implementation of the rules.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertprep.errors import BertprepError
from bertprep.instances.rows import Rows

# The random keys are drawn as a (rows x longest row) matrix per chunk of rows. A chunk
# holds ROWS_PER_CHUNK rows, or fewer when the rows are long enough that this would pass
# KEYS_PER_CHUNK keys: up to 512 tokens a chunk is always 4,096 rows (the output at
# those lengths is unchanged), at 8,192 it is 256, so the matrix (and argpartition's
# index matrix beside it) stays ~16 MB each whatever --max-seq-length is. The chunking
# depends only on the rows' lengths, so the output is as deterministic as before.
ROWS_PER_CHUNK = 4096
KEYS_PER_CHUNK = ROWS_PER_CHUNK * 512


def rows_per_chunk(longest: int) -> int:
    """Rows per key matrix for rows of at most `longest` tokens."""
    return max(1, min(ROWS_PER_CHUNK, KEYS_PER_CHUNK // max(1, longest)))


MASK_SHARE, KEEP_SHARE = 0.8, 0.1


@dataclass(frozen=True)
class MaskingConfig:
    max_predictions_per_seq: int = 20  # cap on masked positions per row
    masked_lm_prob: float = 0.15  # share of tokens (specials included) to predict
    whole_word_mask: bool = False  # mask all pieces of a word together
    random_from_whole_vocab: bool = False  # Google's draw: any id, specials included


@dataclass(frozen=True)
class Vocabulary:
    """What masking needs to know of the tokenizer."""

    mask_id: int
    vocab_size: int
    ordinary_ids: np.ndarray  # the pool random replacements come from
    is_continuation: np.ndarray | None = None  # (V,) bool, token starts with "##" (WordPiece only)


@dataclass
class MaskedLM:
    positions: np.ndarray  # (M,) uint16, ascending within each row
    labels: np.ndarray  # (M,) original ids
    offsets: np.ndarray  # (N + 1,) int64 row boundaries
    num_masked: int = 0  # positions set to [MASK]
    num_kept: int = 0  # positions left unchanged
    num_random: int = 0  # positions given a random id


def num_to_predict(lengths: np.ndarray, config: MaskingConfig, candidates: np.ndarray) -> np.ndarray:
    """The reference's count for rows of `lengths` tokens (specials included), capped by
    `candidates`, the positions each row may mask. Rows at hand go through
    `counts_to_predict`, which counts their candidates."""
    lengths = np.asarray(lengths, dtype=np.int64)
    wanted = np.rint(lengths * config.masked_lm_prob).astype(np.int64)  # half to even
    wanted = np.minimum(config.max_predictions_per_seq, np.maximum(1, wanted))
    return np.minimum(wanted, candidates)


def counts_to_predict(rows: Rows, config: MaskingConfig) -> np.ndarray:
    """How many positions each row masks (whole words may leave a row short of it): the
    count for its length, capped by its candidates, its length less its specials (a pair
    row's 3; a FULL-SENTENCES row's [CLS], final [SEP] and one [SEP] per document
    boundary). The one rule: masking counts with it, and so does build-shards' check of
    the rows read back (shards/inspect.py, from their [CLS]/[SEP] tokens)."""
    return _counts(rows, config, _special_positions(rows)[0])


def _counts(rows: Rows, config: MaskingConfig, special_row: np.ndarray) -> np.ndarray:
    candidates = rows.lengths - np.bincount(special_row, minlength=rows.num_rows)
    return num_to_predict(rows.lengths, config, candidates)


def _special_positions(rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """(row, position) of every never-masked token: `rows.special` when set, else the
    pair layout's [CLS], first [SEP] (at a_len + 1) and last [SEP]."""
    if rows.special is not None:
        flat = np.flatnonzero(rows.special)
        row = np.searchsorted(rows.offsets, flat, side="right") - 1
        return row, flat - rows.offsets[row]
    n = np.arange(rows.num_rows)
    row = np.repeat(n, 3)
    pos = np.stack([np.zeros(rows.num_rows, np.int64), rows.a_lengths + 1, rows.lengths - 1], 1).ravel()
    return row, pos


def choose_positions(rows: Rows, config: MaskingConfig, vocab: Vocabulary, rng: np.random.Generator):
    """(positions, counts): chosen positions per row, flat, ascending within a row."""
    if config.whole_word_mask:
        return _whole_word_positions(rows, config, vocab, rng)
    lengths = rows.lengths
    special_row, special_pos = _special_positions(rows)
    counts = _counts(rows, config, special_row)
    pieces = []
    step = rows_per_chunk(int(lengths.max()) if rows.num_rows else 0)
    for lo in range(0, rows.num_rows, step):
        hi = min(lo + step, rows.num_rows)
        a, b = np.searchsorted(special_row, [lo, hi])
        pieces.append(_chunk_positions(lengths[lo:hi], special_row[a:b] - lo, special_pos[a:b], counts[lo:hi], rng))
    positions = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return positions, counts


def _chunk_positions(lengths, special_row, special_pos, counts, rng) -> np.ndarray:
    width = int(lengths.max())
    grid = np.arange(width)[None, :]
    keys = rng.random((len(lengths), width))
    keys[grid >= lengths[:, None]] = 2.0  # above every real key: never chosen
    keys[special_row, special_pos] = 2.0
    k = int(counts.max())
    smallest = np.argpartition(keys, k - 1, axis=1)[:, :k] if k < width else np.argsort(keys, axis=1)
    order = np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1, kind="stable")
    ranked = np.take_along_axis(smallest, order, axis=1)[:, :k]
    taken = np.arange(k)[None, :] < counts[:, None]
    ranked = np.sort(np.where(taken, ranked, width), axis=1)  # unused slots sort last
    return ranked[np.arange(k)[None, :] < counts[:, None]]


def _continues_word(rows: Rows, vocab: Vocabulary) -> np.ndarray:
    """(T,) bool: the token continues the word of the token before it."""
    if rows.word_starts is not None:
        return ~rows.word_starts
    if vocab.is_continuation is None:
        raise BertprepError("whole-word masking needs to know where words start: this tokenizer's rows carry no "
                            "word starts and its vocabulary no '##' pieces")
    return vocab.is_continuation[rows.input_ids]


def _whole_word_positions(rows: Rows, config, vocab: Vocabulary, rng):
    lengths = rows.lengths
    continuation = _continues_word(rows, vocab)
    special_row, special_pos = _special_positions(rows)
    wanted = _counts(rows, config, special_row)
    specials = np.split(special_pos, np.searchsorted(special_row, np.arange(1, rows.num_rows)))
    chosen_rows, counts = [], np.zeros(rows.num_rows, dtype=np.int64)
    for r in range(rows.num_rows):
        start, length, seps = int(rows.offsets[r]), int(lengths[r]), set(specials[r].tolist())
        is_cont = continuation[start : start + length]
        groups: list[list[int]] = []
        for pos in range(length):
            if pos in seps:
                continue
            if is_cont[pos] and groups and pos - 1 not in seps and groups[-1][-1] == pos - 1:
                groups[-1].append(pos)
            else:
                groups.append([pos])
        chosen: list[int] = []
        for g in rng.permutation(len(groups)):
            if len(chosen) >= wanted[r]:
                break
            if len(chosen) + len(groups[g]) > wanted[r]:
                continue
            chosen.extend(groups[g])
        chosen.sort()
        chosen_rows.append(chosen)
        counts[r] = len(chosen)
    flat = [p for chosen in chosen_rows for p in chosen]
    return np.asarray(flat, dtype=np.int64), counts


def apply_masking(rows: Rows, config: MaskingConfig, vocab: Vocabulary, rng: np.random.Generator) -> MaskedLM:
    """Mask `rows.input_ids` in place; return positions, labels and the split."""
    positions, counts = choose_positions(rows, config, vocab, rng)
    offsets = np.zeros(rows.num_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat_index = np.repeat(rows.offsets[:-1], counts) + positions
    labels = rows.input_ids[flat_index].copy()
    draw = rng.random(len(flat_index))
    to_mask = draw < MASK_SHARE
    to_random = draw >= MASK_SHARE + KEEP_SHARE
    num_random = int(to_random.sum())
    if config.random_from_whole_vocab:
        replacement = rng.integers(0, vocab.vocab_size, num_random)
    else:
        replacement = vocab.ordinary_ids[rng.integers(0, len(vocab.ordinary_ids), num_random)]
    new_ids = labels.copy()
    new_ids[to_mask] = vocab.mask_id
    new_ids[to_random] = replacement
    rows.input_ids[flat_index] = new_ids
    num_masked = int(to_mask.sum())
    return MaskedLM(
        positions=positions.astype(np.uint16),
        labels=labels,
        offsets=offsets,
        num_masked=num_masked,
        num_kept=len(flat_index) - num_masked - num_random,
        num_random=num_random,
    )


def mask_padded(tokens: np.ndarray, lengths: np.ndarray, special: np.ndarray, config: MaskingConfig,
                vocab: Vocabulary, rng: np.random.Generator,
                word_starts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same rules on a padded batch: tokens (B, T) original ids, lengths (B,), special
    (B, T) bool (never masked), word_starts (B, T) bool or None (whole words from the
    vocabulary's "##" pieces) -> (masked tokens (B, T), positions (B, P), labels (B, P)),
    P = config.max_predictions_per_seq, unused slots position 0 and label -1."""
    tokens = np.asarray(tokens)
    B, T = tokens.shape
    real = np.arange(T)[None, :] < np.asarray(lengths)[:, None]
    offsets = np.zeros(B + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    rows = Rows(input_ids=tokens[real], token_type_ids=np.zeros(int(offsets[-1]), np.int8), offsets=offsets,
                a_lengths=np.asarray(lengths, np.int64) - 2, next_sentence_label=np.zeros(B, np.int8),
                special=np.asarray(special)[real],
                word_starts=None if word_starts is None else np.asarray(word_starts)[real])
    masked = apply_masking(rows, config, vocab, rng)
    out = tokens.copy()
    out[real] = rows.input_ids
    P = config.max_predictions_per_seq
    counts = np.diff(masked.offsets)
    slot = np.arange(len(masked.positions)) - np.repeat(masked.offsets[:-1], counts)
    row = np.repeat(np.arange(B), counts)
    positions = np.zeros((B, P), np.int64)
    labels = np.full((B, P), -1, np.int64)
    positions[row, slot] = masked.positions
    labels[row, slot] = masked.labels
    return out, positions, labels


CAP_WARNING_SHARE = 0.9  # warn when the cap leaves less than this share of the formula's rate


def cap_warnings(length_histogram, config: MaskingConfig) -> list[str]:
    """A warning when `max_predictions_per_seq` holds the mask rate well below what
    `masked_lm_prob` gives for the rows' observed lengths (e.g. 20 at length 512:
    about 4% instead of 15%; Google's phase 2 uses 80)."""
    counts = np.asarray(length_histogram, dtype=np.int64)
    lengths = np.flatnonzero(counts)
    lengths = lengths[lengths >= 3]  # [CLS] A [SEP] B [SEP] has at least 3 specials
    counts = counts[lengths]
    tokens = int((lengths * counts).sum())
    if tokens == 0:
        return []
    uncapped = MaskingConfig(int(lengths.max()), config.masked_lm_prob)
    # A histogram does not say how many specials a row has: take a pair row's 3. Only
    # the shortest rows' candidates bind; this warning is about the long rows' cap.
    candidates = lengths - 3
    capped_rate = int((num_to_predict(lengths, config, candidates) * counts).sum()) / tokens
    uncapped_rate = int((num_to_predict(lengths, uncapped, candidates) * counts).sum()) / tokens
    if capped_rate >= CAP_WARNING_SHARE * uncapped_rate:
        return []
    needed = int(num_to_predict(lengths[-1:], uncapped, candidates[-1:])[0])
    return [
        f"--max-predictions-per-seq {config.max_predictions_per_seq} caps masking at {capped_rate:.1%} of tokens, "
        f"well below --masked-lm-prob {config.masked_lm_prob:g} ({uncapped_rate:.1%} for these row lengths): "
        f"raise --max-predictions-per-seq to {needed} (rows of up to {int(lengths[-1])} tokens)"
    ]
