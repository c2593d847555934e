"""Checks build-shards makes about a finished result, outside the build proper.

- `contradicted_options`: before publishing, the statistics re-measured from the shards
  as written (`inspect`'s measurements, read from the rows, not from the masking step's
  own counters) are compared with what the options imply. A build whose rows contradict
  its options (no masks where 0.15 was asked, a [MASK] share far from 0.8, no random B)
  is an internal bug, and must not ship looking finished.
- `same_build`: whether a finished result (OUT, or a staging directory whose manifest was
  written but not yet published) was made from exactly this command's inputs, options,
  seed and tokenizer, so running the same command again can report it complete.
- `input_states` / `changed_input`: an input rewritten while the build read it would
  leave shards made from neither version; such a build fails naming the file.
"""
from __future__ import annotations

import json
import pathlib

from bertprep.storage import stores as storage
from bertprep.shards import measure

Z_LIMIT = 6.0  # a correct build crosses it with probability ~2e-9 per figure
WHOLE_WORD_SHORTFALL = 0.8  # whole words may leave a row short of its count; not by this much


def contradicted_options(directory: pathlib.Path, whole_word_mask: bool) -> str | None:
    """What contradicts the options in the shards of `directory` (which holds its
    manifest), or None when every figure sits where the options put it."""
    report = measure(directory)
    rate, n = report["mask_rate"], report["masked_positions"]
    problem = contradicted_count(n, rate["formula_positions"], rate["expected"], whole_word_mask)
    if problem:
        return problem
    for name, share in report["split"].items():
        if abs(share["z"]) > Z_LIMIT:
            return (f"a {name} share of {share['observed']:.4f} over {n:,} masked positions where "
                    f"{share['expected']:.2f} is expected (z={share['z']:+.1f})")
    nsp = report["next_sentence_random"]
    pairs = report["pairing"]
    # At least half of the pairs have a random B (one-sentence chunks add more); SOP
    # swaps exactly half on average, FULL-SENTENCES rows have no pair label at all.
    if pairs == "sop" and abs(nsp["observed"] - 0.5) > Z_LIMIT * 0.5 / max(1, report["rows"]) ** 0.5:
        return f"a swapped fraction of {nsp['observed']:.4f} over {report['rows']:,} rows where 0.5 is expected"
    if pairs == "none" and nsp["observed"] != 0:
        return f"pair labels in {nsp['observed']:.4f} of FULL-SENTENCES rows, which have none"
    if pairs == "nsp" and nsp["z"] < -Z_LIMIT:
        return f"a random-B fraction of {nsp['observed']:.4f} over {report['rows']:,} rows where at least 0.5 is expected"
    return None


def contradicted_count(masked: int, formula_positions: int, masked_lm_prob: float,
                       whole_word_mask: bool) -> str | None:
    """Whether `masked` positions contradict the count formula, whose per-row counts sum
    to `formula_positions`. Counts against counts: that sum is an integer (each row
    rounds its own count), never the rate times the tokens, a float that can land a hair
    below it (986 / 6619 * 6619 is 985.9999999999999)."""
    if whole_word_mask:
        if not WHOLE_WORD_SHORTFALL * formula_positions <= masked <= formula_positions:
            return (f"{masked:,} masked positions where --masked-lm-prob {masked_lm_prob} and whole words give "
                    f"{WHOLE_WORD_SHORTFALL:.0%}-100% of {formula_positions:,}")
    elif masked != formula_positions:
        return f"{masked:,} masked positions where --masked-lm-prob {masked_lm_prob} gives {formula_positions:,}"
    return None


def _identity(manifest: dict) -> dict:
    """What a result was made from; `plan` (build.py) holds the same fields."""
    corpus = dict(manifest.get("corpus", {}))
    corpus["paths"] = list(corpus.get("paths", []))
    tokenizer = manifest.get("tokenizer")
    return {
        "format_version": manifest.get("format_version"),
        "options": manifest.get("options"),
        "corpus": corpus,
        "inputs": manifest.get("inputs"),
        "tokenizer": tokenizer.get("fingerprint") if isinstance(tokenizer, dict) else tokenizer,
    }


def same_build(directory: pathlib.Path, plan: dict) -> dict | None:
    """The manifest in `directory` when it records exactly `plan`; None otherwise."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    if _identity(manifest) != json.loads(json.dumps(_identity(plan))):
        return None
    return manifest


def input_states(files) -> dict[str, tuple[int, int]]:
    """(size, modification time) of each input file, to tell whether one changed while
    the build read it. A saved dataset directory counts by its files."""
    states = {}
    for path in files:
        path = storage.path(path)
        members = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for member in members:
            try:
                stat = member.stat()
            except OSError:
                states[str(member)] = (-1, -1)  # gone: that is a change too
                continue
            states[str(member)] = (stat.st_size, stat.st_mtime_ns)
    return states


def changed_input(before: dict[str, tuple[int, int]], files) -> str | None:
    """The first input whose size or modification time differs from `before`."""
    after = input_states(files)
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            return name
    return None
