"""build-shards refuses to publish shards whose statistics contradict their options
(build_checks.py): internal bugs, simulated here by patching a build step."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import bertprep.build_tasks as tasks
from bertprep.build import staging_path
from bertprep.cli import main as prep_main
from reliability_checks import invoke, one_line_error
from shard_fixtures import write_corpus, write_vocab


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
