"""build-shards refuses to publish shards whose statistics contradict their options
(build_checks.py): internal bugs, simulated here by patching a build step."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import bertprep.builder.tasks as tasks
from bertprep.builder import staging_path
from bertprep.builder import contradicted_options
from bertprep.cli import main as prep_main
from bertprep.shards import measure
from reliability_checks import invoke, one_line_error
from shard_fixtures import read_rows, write_corpus, write_vocab


@pytest.fixture
def args(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents=150)
    vocab = write_vocab(tmp_path / "vocab.txt")
    return ["build-shards", corpus, "--tokenizer", vocab, "--out", tmp_path / "out", "--workers", 1, "--quiet",
            "--cache-dir", tmp_path / "cache"]


def masking_that_forgets_mask(rows, config, vocab, rng):
    """Chooses and labels positions, counts them as masked, but writes nothing."""
    before = rows.input_ids.copy()
    masked = ORIGINAL_MASKING(rows, config, vocab, rng)
    rows.input_ids[:] = before
    return masked


ORIGINAL_MASKING = tasks.apply_masking
ORIGINAL_SAVE = tasks._save_npz


def pairs_without_random_b(path, arrays):
    """Saves the pair descriptors with every random B labelled is-next."""
    if pathlib.Path(path).name.startswith("pairs-"):
        arrays = {name: np.column_stack([a[:, :4], np.zeros(len(a), a.dtype)]) for name, a in arrays.items()}
    return ORIGINAL_SAVE(path, arrays)


def test_a_good_build_is_published(args, tmp_path):
    result = invoke(prep_main, *args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("target, broken, message", [
    ("apply_masking", masking_that_forgets_mask, "a mask share of 0.0000 over"),
    ("_save_npz", pairs_without_random_b, "a random-B fraction of 0.0000 over"),
], ids=["no-mask-written", "no-random-b"])
def test_contradicting_statistics_are_refused_before_publishing(args, tmp_path, monkeypatch, target, broken, message):
    monkeypatch.setattr(tasks, target, broken)
    result = invoke(prep_main, *args)
    error = one_line_error(result, staging_path(tmp_path / "out"), exit_code=1)
    assert "the shards contradict their options (" + message in error and "not published" in error
    assert not (tmp_path / "out").exists() and not staging_path(tmp_path / "out").exists()


def test_no_positions_at_all_is_refused(args, tmp_path, monkeypatch):
    def nothing_masked(rows, config, vocab, rng):
        masked = ORIGINAL_MASKING(rows, config, vocab, rng)
        masked.positions = masked.positions[:0]
        masked.labels = masked.labels[:0]
        masked.offsets = np.zeros_like(masked.offsets)
        return masked

    monkeypatch.setattr(tasks, "apply_masking", nothing_masked)
    error = one_line_error(invoke(prep_main, *args), exit_code=1)
    assert "contradict their options (0 masked positions where --masked-lm-prob 0.15 gives" in error


# FULL-SENTENCES rows short enough for the candidates to cap the count. At
# --max-seq-length 8 (6 tokens between [CLS] and [SEP]) the documents below pack into
# 160 rows: 40 of 3 tokens ([CLS] river [SEP]: 2 specials, 1 candidate), 40 of 7
# ([CLS] bread [SEP] cheese [SEP] rain [SEP]: 4 specials, 3 candidates) and 80 of 8
# ([CLS] + 6 words + [SEP]: 6 candidates). A pair row's 3 specials would give 0, 4 and 5
# candidates: too few at 3 and 8 tokens, too many at 7.
SHORT_DOCUMENTS = ["river", "the children walked across the bridge",
                   "bread", "cheese", "rain", "the teacher wrote a new letter"] * 40


@pytest.fixture
def short_rows_args(tmp_path):
    corpus = tmp_path / "short.txt"
    corpus.write_text("\n\n".join(SHORT_DOCUMENTS) + "\n", encoding="utf-8")
    vocab = write_vocab(tmp_path / "vocab.txt")
    return ["build-shards", corpus, "--tokenizer", vocab, "--out", tmp_path / "out", "--workers", 1, "--quiet",
            "--cache-dir", tmp_path / "cache", "--pairs", "none", "--max-seq-length", 8, "--dupe-factor", 1,
            "--max-predictions-per-seq", 8]


# --masked-lm-prob -> masked positions (rows of 3 / 7 / 8 tokens), and what a pair row's
# 3 specials would give. 0.15 wants 1 per row: only the 3-token rows are capped (1, not
# 0), as on real text. 0.9 wants 3 / 6 / 7: every row is capped, to 1 / 3 / 6 (pair
# rule 0 / 4 / 5).
SHORT_ROW_COUNTS = {0.15: (40 * 1 + 40 * 1 + 80 * 1, 40 * 0 + 40 * 1 + 80 * 1),
                    0.9: (40 * 1 + 40 * 3 + 80 * 6, 40 * 0 + 40 * 4 + 80 * 5)}


@pytest.mark.parametrize("prob", sorted(SHORT_ROW_COUNTS))
def test_short_full_sentences_rows_pass_the_count_check(short_rows_args, tmp_path, prob):
    result = invoke(prep_main, *short_rows_args, "--masked-lm-prob", prob)
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    assert contradicted_options(out, whole_word_mask=False) is None
    report = measure(out)
    assert {length: rows for length, rows in enumerate(report["length_histogram"]) if rows} == {3: 40, 7: 40, 8: 80}
    masked, by_pair_rule = SHORT_ROW_COUNTS[prob]
    assert report["masked_positions"] == masked != by_pair_rule
    assert report["mask_rate"]["formula"] * report["tokens"] == pytest.approx(masked)
    # Each row's count, with its own [CLS]/[SEP] tokens as the specials.
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    cls_sep = {vocab.index("[CLS]"), vocab.index("[SEP]")}
    for row in read_rows(out):
        tokens = list(row["input_ids"])
        for position, label in zip(row["masked_lm_positions"], row["masked_lm_ids"]):
            tokens[position] = label
        wanted = min(8, max(1, round(len(tokens) * prob)))
        assert len(row["masked_lm_positions"]) == min(wanted, sum(token not in cls_sep for token in tokens))


def masking_by_the_pair_rule(rows, config, vocab, rng):
    """Masks as if every row had a pair row's 3 specials: a row of 3 tokens keeps none of
    its positions (its original token goes back), the others are untouched."""
    masked = ORIGINAL_MASKING(rows, config, vocab, rng)
    counts = np.diff(masked.offsets)
    kept_per_row = np.minimum(counts, rows.lengths - 3)
    slot = np.arange(len(masked.positions)) - np.repeat(masked.offsets[:-1], counts)
    keep = slot < np.repeat(kept_per_row, counts)
    dropped = np.repeat(rows.offsets[:-1], counts)[~keep] + masked.positions[~keep]
    rows.input_ids[dropped] = masked.labels[~keep]
    masked.positions, masked.labels = masked.positions[keep], masked.labels[keep]
    masked.offsets = np.concatenate([[0], np.cumsum(kept_per_row)])
    return masked


def test_short_rows_masked_by_another_rule_are_refused(short_rows_args, tmp_path, monkeypatch):
    # The check still catches a real contradiction: rows masked by the pair rule.
    monkeypatch.setattr(tasks, "apply_masking", masking_by_the_pair_rule)
    error = one_line_error(invoke(prep_main, *short_rows_args), staging_path(tmp_path / "out"), exit_code=1)
    assert "the shards contradict their options (120 masked positions where --masked-lm-prob 0.15 gives 160)" in error
    assert "not published" in error and not (tmp_path / "out").exists()
