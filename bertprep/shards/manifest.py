"""The files that describe a shard directory: manifest.json (ours), and state.json +
dataset_info.json (what `datasets.load_from_disk` needs, LIBRARY-NOTES.md)."""
from __future__ import annotations

import hashlib
import json
import math

from bertprep.shards import schema
from bertprep.storage import stores as storage
from bertprep.storage import write_json_atomic


def observed_statistics(stats: dict, options: dict) -> dict:
    """Rates derived from the raw counts gathered while masking."""
    positions = max(stats["masked_positions"], 1)
    rows = max(stats["rows"], 1)
    lengths = stats["length_histogram"]
    return {
        **stats,
        "mask_rate": stats["masked_positions"] / max(stats["tokens"], 1),
        "masked_lm_prob": options["masked_lm_prob"],
        "share_mask": stats["masked_as_mask"] / positions,
        "share_kept": stats["masked_kept"] / positions,
        "share_random": stats["masked_random"] / positions,
        "next_sentence_random_fraction": stats["next_sentence_random"] / rows,
        "mean_length": sum(i * n for i, n in enumerate(lengths)) / rows,
        "full_length_fraction": lengths[-1] / rows,
    }


def build_manifest(*, version, options, corpus, inputs, tok, tokenizer_files, shards, partitions, stats, read_stats,
                   mix=None) -> dict:
    """The manifest's fields; `mix` (bertprep.corpus.MixPlan.record: sources, weights,
    temperature, rates and the achieved shares) only for a mix of sources."""
    manifest = {
        "format_version": schema.FORMAT_VERSION,
        "created_by": f"bertprep {version}",
        "options": options,
        "corpus": corpus,  # how the inputs were read: paths, --sentences, --text-field, dataset
        "inputs": inputs,
        "tokenizer": {
            "fingerprint": tok.fingerprint(),
            "kind": tok.kind,  # wordpiece, bpe, unigram
            "vocab_size": tok.vocab_size,
            "lowercase": tok.lowercase,
            "strip_accents": tok.strip_accents,
            "max_chars_per_word": tok.max_chars_per_word,
            "special_ids": tok.special.as_dict(),
            # The special tokens around a row and their type ids (tokenizer/templates.py):
            # what a reader needs to find A and B in a row of a one-type family (RoBERTa).
            "template": tok.template.as_dict(),
            "files": sorted(tokenizer_files),
        },
        "shards": shards,
        "totals": {
            "rows": sum(s["rows"] for s in shards),
            "bytes": sum(s["bytes"] for s in shards),
            "tokens": stats["tokens"],
            "partitions": len(partitions),
            "documents": sum(p["documents"] for p in partitions),
            "sentences": sum(p["sentences"] for p in partitions),
            "corpus_tokens": sum(p["tokens"] for p in partitions),
            # Chunks of sentences pairing walked over, all passes; one-sentence ones are
            # always random-next (older pair markers lack the counts: 0).
            "chunks": sum(p.get("chunks", 0) for p in partitions),
            "single_sentence_chunks": sum(p.get("single_sentence_chunks", 0) for p in partitions),
            "text_bytes": sum(p["text_bytes"] for p in partitions),
            "invalid_bytes_replaced": read_stats.invalid_bytes,
        },
        "statistics": observed_statistics(stats, options),
    }
    if mix is not None:
        manifest["mix"] = mix
    return manifest


def pairing(manifest: dict) -> str:
    """The pairing a manifest records (nsp, sop or none); outputs written before `--pairs` are NSP."""
    return manifest.get("options", {}).get("pairs", "nsp")


# What a directory's rows are, by pairing (--pairs), for dataset_info.json.
DESCRIPTIONS = {"nsp": "masked LM + next sentence prediction", "sop": "masked LM + sentence order prediction",
                "none": "masked LM, FULL-SENTENCES rows"}


def write_dataset_files(directory, shards: list[dict], vocab_size: int, manifest: dict) -> None:
    directory = storage.path(directory)
    # A content fingerprint, so two identical builds have identical state.json too.
    fingerprint = hashlib.sha256(
        json.dumps([s["sha256"] for s in shards]).encode()
    ).hexdigest()[:16]
    state = {
        "_data_files": [{"filename": s["name"]} for s in shards],
        "_fingerprint": fingerprint,
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }
    info = {
        "description": f"BERT pre-training instances ({DESCRIPTIONS[pairing(manifest)]}) built by bertprep",
        "features": schema.features_dict(vocab_size),
        "dataset_size": sum(s["bytes"] for s in shards),
        "size_in_bytes": sum(s["bytes"] for s in shards),
    }
    write_json_atomic(directory / "state.json", state)
    write_json_atomic(directory / "dataset_info.json", info)


def confidence_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion."""
    if trials == 0:
        return (0.0, 1.0)
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))  # rounding can step past 0 or 1
