"""Re-measure a shard directory from its rows: what `bertprep inspect` prints.

Nothing here trusts the manifest's statistics: rows are read back (memory-mapped,
shard by shard) and counted with vectorised Arrow/numpy operations.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

from bertprep.shards import schema
from bertprep.storage import stores as storage
from bertprep.errors import BertprepError
from bertprep.shards.manifest import confidence_interval, pairing
from bertprep.instances import MaskingConfig, counts_to_predict
from bertprep.instances import LABEL_NAMES, degenerate_pairs_warning, figures, likely_cause, rows_label
from bertprep.instances import Rows


def read_manifest(out) -> dict:
    path = storage.path(out) / "manifest.json"
    if not path.exists():
        raise BertprepError(f"{out}: no manifest.json, so not a finished build-shards output")
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise BertprepError(f"{path}: not valid JSON ({exc})") from None


def _unreadable(path, exc: Exception) -> BertprepError:
    return BertprepError(f"{path}: unreadable Arrow stream ({str(exc).splitlines()[0]})")


def open_shard(path) -> pa.Table:
    try:
        return pa.ipc.open_stream(storage.open_random_access(path)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise _unreadable(path, exc) from None


def _flat(array: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a record batch's list column, as numpy, zero-copy where
    possible."""
    offsets = array.offsets.to_numpy().astype(np.int64)
    values = array.values.to_numpy()
    return values[offsets[0] : offsets[-1]], offsets - offsets[0]


def _measure_shard(path, special: dict, masking: MaskingConfig, counts: dict, histogram: np.ndarray) -> None:
    """Add one shard's figures, a record batch at a time, read (not memory-mapped,
    whose pages would stay resident): the sums are the same, and memory follows a batch
    (4,096 rows), not the shard or the output."""
    try:
        with storage.open_input(path) as stream:
            for batch in pa.ipc.open_stream(stream):
                _measure_batch(batch, special, masking, counts, histogram)
    except (pa.ArrowInvalid, OSError) as exc:
        raise _unreadable(path, exc) from None


def _measure_batch(batch: pa.RecordBatch, special: dict, masking: MaskingConfig, counts: dict,
                   histogram: np.ndarray) -> None:
    ids, row_offsets = _flat(batch.column(schema.INPUT_IDS))
    positions, mlm_offsets = _flat(batch.column(schema.MASKED_LM_POSITIONS))
    labels, _ = _flat(batch.column(schema.MASKED_LM_IDS))
    lengths = np.diff(row_offsets)
    per_row = np.diff(mlm_offsets)
    at = np.repeat(row_offsets[:-1], per_row) + positions.astype(np.int64)
    shown = ids[at]
    as_mask = shown == special["mask"]
    kept = ~as_mask & (shown == labels)
    counts["rows"] += batch.num_rows
    counts["tokens"] += int(lengths.sum())
    counts["positions"] += len(positions)
    counts["as_mask"] += int(as_mask.sum())
    counts["kept"] += int(kept.sum())
    counts["random"] += int((~as_mask & ~kept).sum())
    counts["nsp_random"] += int(batch.column(schema.NEXT_SENTENCE_LABEL).to_numpy().sum())
    counts["expected_positions"] += int(counts_to_predict(_unmasked_rows(ids, row_offsets, at, labels, special),
                                                          masking).sum())
    histogram += np.bincount(lengths, minlength=len(histogram))[: len(histogram)]


def _unmasked_rows(ids, offsets, at, labels, special: dict) -> Rows:
    """The rows as masking saw them: the originals back at the masked positions (a random
    replacement may be any id with --random-from-whole-vocab), and as specials the
    tokens of the template (`special["template"]`: [CLS]/[SEP], <s>/</s>), which text
    never yields (a literal "[SEP]" encodes as text)."""
    original = ids.copy()
    original[at] = labels
    lengths = np.diff(offsets)
    return Rows(input_ids=original, token_type_ids=np.zeros(len(original), np.int8), offsets=offsets,
                a_lengths=lengths - 2, next_sentence_label=np.zeros(len(lengths), np.int8),
                special=np.isin(original, special["template"]))


def template_ids(tokenizer: dict) -> list[int]:
    """Every id a manifest's tokenizer puts around its rows: the template's (manifests
    before the template was recorded: BERT's [CLS] and [SEP])."""
    template = tokenizer.get("template") or {}
    parts = [template.get(name, []) for name in ("prefix", "middle", "suffix", "single_suffix")]
    return sorted({tokenizer["special_ids"]["cls"], tokenizer["special_ids"]["sep"], *(i for p in parts for i in p)})


def measure(out) -> dict:
    out = storage.path(out)
    manifest = read_manifest(out)
    special = {**manifest["tokenizer"]["special_ids"], "template": template_ids(manifest["tokenizer"])}
    options = manifest["options"]
    counts = dict(rows=0, tokens=0, positions=0, as_mask=0, kept=0, random=0, nsp_random=0, expected_positions=0)
    histogram = np.zeros(options["max_seq_length"] + 1, dtype=np.int64)
    masking = MaskingConfig(max_predictions_per_seq=options["max_predictions_per_seq"],
                            masked_lm_prob=options["masked_lm_prob"])
    for shard in manifest["shards"]:
        _measure_shard(out / shard["name"], special, masking, counts, histogram)
    return _report(manifest, counts, histogram)


def _share(k: int, n: int, expected: float) -> dict:
    low, high = confidence_interval(k, n)
    if not n:
        return {"observed": float("nan"), "expected": expected, "ci95": [low, high], "z": float("nan")}
    sigma = math.sqrt(expected * (1 - expected) / n)
    deviation = k / n - expected  # an expected share of 0 or 1 has no spread: any deviation is infinite
    z = deviation / sigma if sigma else (0.0 if deviation == 0 else math.copysign(math.inf, deviation))
    return {"observed": k / n, "expected": expected, "ci95": [low, high], "z": z}


def _pairs(manifest: dict, c: dict, kind: str) -> dict:
    """The figures build-shards checks for degenerate pairs, from the manifest's corpus
    totals and the rows as measured, with the same warning (or None)."""
    rows = c["rows"]
    found = figures(manifest["totals"], rows, c["nsp_random"], c["tokens"] / rows if rows else 0.0,
                    manifest["options"]["max_seq_length"], kind)
    corpus = manifest.get("corpus", {})
    layout = (corpus.get("sentences", "lines"), corpus.get("document_separator"))
    cause = likely_cause(found, *layout) if found.degenerate() else None
    return {**found.as_dict(), "description": found.describe(), "likely_cause": cause,
            "warning": degenerate_pairs_warning(found, *layout)}


def _report(manifest: dict, c: dict, histogram: np.ndarray) -> dict:
    n = c["positions"]
    options, kind = manifest["options"], pairing(manifest)
    return {
        "directory_rows_in_manifest": manifest["totals"]["rows"],
        "rows": c["rows"],
        "tokens": c["tokens"],
        "shards": len(manifest["shards"]),
        "mask_rate": {
            **_share(n, c["tokens"], options["masked_lm_prob"]),
            # What the count formula gives for these lengths (rounding, the 1 minimum
            # and the max-predictions cap move it off the nominal probability).
            "formula": c["expected_positions"] / c["tokens"] if c["tokens"] else float("nan"),
            # The same as a count: the sum of each row's count, an exact integer to compare
            # counts with (formula x tokens comes back a float a hair off it).
            "formula_positions": c["expected_positions"],
        },
        "masked_positions": n,
        "split": {
            "mask": _share(c["as_mask"], n, 0.8),
            "kept": _share(c["kept"], n, 0.1),
            "random": _share(c["random"], n, 0.1),
        },
        "pairing": kind,
        # The share of rows labelled 1: NSP's random B, SOP's swapped; 0 for FULL-SENTENCES.
        "next_sentence_random": _share(c["nsp_random"], c["rows"], 0.0 if kind == "none" else 0.5),
        "pairs": _pairs(manifest, c, kind),
        "length_histogram": histogram.tolist(),
        "manifest": {
            "created_by": manifest.get("created_by"),
            "options": options,
            "tokenizer": manifest["tokenizer"],
            "totals": manifest["totals"],
        },
    }


def sample_rows(out, count: int) -> list[dict]:
    """The first `count` rows of the first shard as stored, each id with its token:
    `tokens` as the model sees them (masking applied), `masked_lm_tokens` the originals."""
    out = storage.path(out)
    manifest = read_manifest(out)
    vocab = _vocabulary(out)
    table = open_shard(out / manifest["shards"][0]["name"]).slice(0, count)
    samples = []
    for r, row in enumerate(table.to_pylist()):
        samples.append({
            "row": r,
            schema.INPUT_IDS: row[schema.INPUT_IDS],
            "tokens": [vocab[i] for i in row[schema.INPUT_IDS]],
            schema.TOKEN_TYPE_IDS: row[schema.TOKEN_TYPE_IDS],
            schema.MASKED_LM_POSITIONS: row[schema.MASKED_LM_POSITIONS],
            schema.MASKED_LM_IDS: row[schema.MASKED_LM_IDS],
            "masked_lm_tokens": [vocab[i] for i in row[schema.MASKED_LM_IDS]],
            schema.NEXT_SENTENCE_LABEL: row[schema.NEXT_SENTENCE_LABEL],
        })
    return samples


def _vocabulary(out) -> list:
    """id -> token of the tokenizer copied into `out`: vocab.txt (WordPiece), else
    tokenizer.json's model and added tokens (None where an id has no token)."""
    if (out / "vocab.txt").exists():
        return (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    path = out / "tokenizer.json"
    try:
        token_to_id = Tokenizer.from_str(path.read_text(encoding="utf-8")).get_vocab(with_added_tokens=True)
    except (OSError, Exception) as exc:  # tokenizers raises plain Exceptions for a malformed file
        raise BertprepError(f"{path}: cannot read the tokenizer ({str(exc).splitlines()[0]})") from None
    vocab: list = [None] * (max(token_to_id.values()) + 1)
    for token, i in token_to_id.items():
        vocab[i] = token
    return vocab


def _segment_b_start(sample: dict, template: dict | None) -> int:
    """Where B's part of a pair row begins (after the middle separators): the first type
    id 1, or, in a one-type family's row, just past the template's middle (its first
    special id after the prefix: text never yields one)."""
    types = sample[schema.TOKEN_TYPE_IDS]
    if 1 in types or not template:
        return types.index(1)
    original = list(sample[schema.INPUT_IDS])
    for pos, label in zip(sample[schema.MASKED_LM_POSITIONS], sample[schema.MASKED_LM_IDS]):
        original[pos] = label
    a_end = original.index(template["middle"][0], len(template["prefix"]))
    return a_end + len(template["middle"])


# What a row's label means, by pairing: (label 0, label 1).
_ROW_KINDS = {"nsp": ("actual next B", "random B"), "sop": ("in order", "swapped")}


def decode_samples(out, count: int) -> list[str]:
    """The first `count` rows of the first shard, both segments visible (a
    FULL-SENTENCES row has one), each masked position shown as [shown->original]
    (shown = [MASK], a random token or the same)."""
    manifest = read_manifest(out)
    kinds, template = _ROW_KINDS.get(pairing(manifest)), manifest["tokenizer"].get("template")
    lines = []
    for sample in sample_rows(out, count):
        tokens = list(sample["tokens"])
        for pos, original in zip(sample[schema.MASKED_LM_POSITIONS], sample["masked_lm_tokens"]):
            tokens[pos] = f"[{tokens[pos]}->{original}]"
        if kinds is None:  # FULL-SENTENCES: one segment, a [SEP] between documents
            lines.append(f"#{sample['row']} ({len(tokens)} tokens, full sentences)")
            lines.append("  " + " ".join(tokens))
            continue
        boundary = _segment_b_start(sample, template)
        lines.append(f"#{sample['row']} ({len(tokens)} tokens, {kinds[sample[schema.NEXT_SENTENCE_LABEL]]})")
        lines.append("  A: " + " ".join(tokens[:boundary]))
        lines.append("  B: " + " ".join(tokens[boundary:]))
    return lines


def _label_line(report: dict) -> str | None:
    """The pair label's share, worded for the pairing; None for FULL-SENTENCES rows."""
    share, kind = report["next_sentence_random"], report["pairing"]
    if kind not in LABEL_NAMES:
        return None
    why = ("above 0.5 because one-sentence chunks are always random, as in the reference" if kind == "nsp"
           else "0.5 expected")
    return (f"{LABEL_NAMES[kind]}: {share['observed']:.4f} (95% CI {share['ci95'][0]:.4f}-{share['ci95'][1]:.4f}; "
            f"{why})")


def format_report(report: dict) -> str:
    m = report["manifest"]
    rate, split = report["mask_rate"], report["split"]
    lines = [
        f"{m['created_by']}; tokenizer {m['tokenizer']['fingerprint'][:12]} "
        f"({m['tokenizer']['vocab_size']:,} tokens, {_kind(m['tokenizer'])}"
        f"{'uncased' if m['tokenizer']['lowercase'] else 'cased'})",
        "options: " + ", ".join(f"{k}={v}" for k, v in m["options"].items()),
        f"corpus: {m['totals']['documents']:,} documents, {m['totals']['sentences']:,} sentences, "
        f"{m['totals']['corpus_tokens']:,} tokens in {m['totals']['partitions']:,} partitions",
        f"rows: {report['rows']:,} in {report['shards']} shards (manifest says {report['directory_rows_in_manifest']:,}); "
        f"{report['tokens']:,} tokens, mean length {report['tokens'] / max(report['rows'], 1):.1f}",
        f"mask rate: {rate['observed']:.4f} (95% CI {rate['ci95'][0]:.4f}-{rate['ci95'][1]:.4f}); "
        f"nominal {rate['expected']:.4f}, count formula gives {rate['formula']:.4f}",
    ]
    lines.append(f"masked positions: {report['masked_positions']:,}")
    for name in ("mask", "kept", "random"):
        s = split[name]
        lines.append(
            f"  {name:>6}: {s['observed']:.4f} (95% CI {s['ci95'][0]:.4f}-{s['ci95'][1]:.4f}, expected {s['expected']:.2f}, z={s['z']:+.1f})"
        )
    label = _label_line(report)
    if label:
        lines.append(label)
    lines.append(f"{'rows' if report['pairing'] == 'none' else 'pairs'}: {report['pairs']['description']}")
    if report["pairs"]["likely_cause"]:
        lines.append(f"warning: the {rows_label(report['pairing'])} degenerate; "
                     f"likely cause: {report['pairs']['likely_cause']}")
    lines.append("length histogram:")
    lines.extend(_histogram_lines(report["length_histogram"]))
    return "\n".join(lines)


def _kind(tokenizer: dict) -> str:
    """The tokenizer's kind as the summary names it: nothing for WordPiece (BERT's own)."""
    kind = tokenizer.get("kind", "wordpiece")
    return "" if kind == "wordpiece" else f"{kind}, "


def _histogram_lines(histogram: list[int], bins: int = 8) -> list[str]:
    hist = np.asarray(histogram)
    edges = np.linspace(0, len(hist), bins + 1).astype(int)
    sums = [int(hist[lo:hi].sum()) for lo, hi in zip(edges[:-1], edges[1:])]
    top = max(max(sums), 1)
    total = max(sum(sums), 1)
    return [
        f"  {lo:>4}-{hi - 1:<4} {n:>10,} {100 * n / total:5.1f}% {'#' * round(40 * n / top)}"
        for lo, hi, n in zip(edges[:-1], edges[1:], sums)
    ]
