"""Shard directories for tests and benchmarks, conforming to DESIGN.md's shard contract.

- `write_shard_dir(out, rows, vocab)`: rows (lists) -> data-*.arrow + state.json +
  dataset_info.json + tokenizer files + a full manifest.json (written last).
- `synthetic_rows(...)`: realistic NSP/MLM rows from a seeded generator (no corpus needed).
- `build_corpus_shards(corpus, vocab, out)`: real shards of a text corpus, from
  `bertprep build-shards` when it is available, else from the reference builder in
  ../shared/tools (then completed here to the full contract).
- `wiki_to_reference_layout(path)`: WikiExtractor <doc> files -> one sentence per line,
  blank line between documents (a naive splitter; good enough for test data).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from bertprep.shards import schema
from bertprep.storage import sha256_file
from bertprep.tokenizer import SPECIAL_TOKENS, SPECIAL_TOKENS_BY_KEY, SPECIAL_TOKENS_MAP

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def write_tokenizer_files(out: Path, vocab: Path, lowercase: bool = True) -> dict:
    """vocab.txt, tokenizer.json, tokenizer_config.json, special_tokens_map.json; returns
    the manifest's "tokenizer" entry."""
    from tokenizers import BertWordPieceTokenizer

    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(vocab, out / "vocab.txt")
    tokens = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    index = {t: i for i, t in enumerate(tokens)}
    special = {k: index[v] for k, v in SPECIAL_TOKENS_BY_KEY.items()}
    BertWordPieceTokenizer(str(out / "vocab.txt"), lowercase=lowercase).save(str(out / "tokenizer.json"))
    (out / "special_tokens_map.json").write_text(json.dumps(SPECIAL_TOKENS_MAP, indent=2))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase, "model_max_length": 512, **SPECIAL_TOKENS_MAP},
        indent=2))
    files = ["vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
    return {"fingerprint": sha256_file(out / "vocab.txt"), "vocab_size": len(tokens), "lowercase": lowercase,
            "special_ids": special, "files": files}


def write_manifest(out: Path, tokenizer: dict, options: dict) -> dict:
    """A full manifest.json for the .arrow files already in `out` (written last, atomically)."""
    shards = []
    for p in sorted(out.glob("data-*.arrow")):
        rows = pa.ipc.open_stream(pa.memory_map(str(p))).read_all().num_rows
        shards.append({"name": p.name, "rows": rows, "bytes": p.stat().st_size, "sha256": sha256_file(p)})
    state = {"_data_files": [{"filename": s["name"]} for s in shards], "_fingerprint": "test",
             "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
             "_output_all_columns": False, "_split": None}
    (out / "state.json").write_text(json.dumps(state))
    (out / "dataset_info.json").write_text(json.dumps({"features": schema.features_dict(tokenizer["vocab_size"])}))
    manifest = {"format_version": schema.FORMAT_VERSION, "options": options, "tokenizer": tokenizer,
                "shards": shards, "totals": {"rows": sum(s["rows"] for s in shards)}}
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2))
    tmp.replace(out / "manifest.json")
    return manifest


def write_shard_dir(out, rows: list[tuple], vocab: Path, num_shards: int = 1, batch_rows: int = 64,
                    max_seq_length: int = 128, max_predictions_per_seq: int = 20) -> Path:
    """rows: (input_ids, token_type_ids, masked_lm_positions, masked_lm_ids, next_sentence_label)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer_files(out, Path(vocab))
    sch = schema.shard_schema(tokenizer["vocab_size"])
    for i in range(num_shards):
        part = rows[i::num_shards]
        cols = list(zip(*part))
        table = pa.table({name: pa.array(col, sch.field(name).type) for name, col in zip(schema.COLUMNS, cols)},
                         schema=sch)
        with pa.ipc.new_stream(str(out / schema.shard_name(i, num_shards)), sch) as writer:
            for batch in table.to_batches(max_chunksize=batch_rows):
                writer.write_batch(batch)
    write_manifest(out, tokenizer, {"max_seq_length": max_seq_length,
                                    "max_predictions_per_seq": max_predictions_per_seq})
    return out


def synthetic_rows(n: int, vocab_size: int, seed: int = 0, max_seq_length: int = 128,
                   max_predictions: int = 20, short_prob: float = 0.1, special: tuple = (0, 100, 101, 102, 103)):
    """Rows shaped like real ones: 90% full length, 15% of tokens predicted (capped),
    80% of those replaced by [MASK]. Ids are uniform over the non-special vocabulary."""
    rng = np.random.default_rng(seed)
    pad, unk, cls, sep, mask = special
    low = max(special) + 1
    out = []
    for _ in range(n):
        length = max_seq_length if rng.random() > short_prob else int(rng.integers(8, max_seq_length + 1))
        a_len = int(rng.integers(1, length - 3))
        b_len = length - 3 - a_len
        tokens = np.concatenate([[cls], rng.integers(low, vocab_size, a_len), [sep],
                                 rng.integers(low, vocab_size, max(b_len, 1)), [sep]])[:length]
        tokens[-1] = sep
        types = np.r_[np.zeros(a_len + 2, np.int64), np.ones(length - a_len - 2, np.int64)]
        candidates = np.flatnonzero((tokens != cls) & (tokens != sep))
        k = min(max_predictions, max(1, round(length * 0.15)), len(candidates))
        positions = np.sort(rng.choice(candidates, k, replace=False))
        labels = tokens[positions].copy()
        ids = tokens.copy()
        ids[positions[rng.random(k) < 0.8]] = mask
        out.append((ids.tolist(), types.tolist(), positions.tolist(), labels.tolist(), int(rng.random() < 0.5)))
    return out


def wiki_to_reference_layout(paths, out: Path) -> Path:
    """WikiExtractor output -> one sentence per line, a blank line between documents."""
    lines = []
    for path in paths:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        for doc in re.findall(r"<doc[^>]*>(.*?)</doc>", text, flags=re.S):
            paragraphs = [p.strip() for p in doc.strip().splitlines()[1:] if p.strip()]
            for p in paragraphs:
                lines.extend(s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"'(])", p) if s)
            lines.append("")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def build_corpus_shards(corpus, vocab, out, dupe_factor: int = 2, seed: int = 12345,
                        max_seq_length: int = 128, max_predictions: int = 20, pairs: str = "nsp") -> Path:
    """Real shards of `corpus` (one path or a list) with `vocab`, built by
    `bertprep build-shards`; a failed build fails the test that asked for it."""
    out = Path(out)
    corpus = [str(c) for c in (corpus if isinstance(corpus, (list, tuple)) else [corpus])]
    cmd = [sys.executable, "-c", "from bertprep.cli import main; main()", "build-shards", *corpus, "--tokenizer", str(vocab),
           "--out", str(out), "--dupe-factor", str(dupe_factor), "--seed", str(seed), "--quiet",
           "--max-seq-length", str(max_seq_length), "--max-predictions-per-seq", str(max_predictions),
           "--pairs", pairs, "--cache-dir", str(out.parent / f".{out.name}-token-cache")]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or not (out / "manifest.json").exists():
        raise RuntimeError(f"bertprep build-shards failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return out


def write_small_vocab(path: Path, words: int = 250) -> Path:
    """[PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4) then `words` lower-case words w0, w1, ..."""
    path = Path(path)
    path.write_text("\n".join([*SPECIAL_TOKENS, *(f"w{i}" for i in range(words))]) + "\n", encoding="utf-8")
    return path


def small_shard_dir(out, rows: int = 96, words: int = 250, seed: int = 0, num_shards: int = 2,
                    max_seq_length: int = 64, max_predictions: int = 10, batch_rows: int = 16) -> Path:
    """A fast, contract-conformant shard dir of synthetic rows over a small vocabulary."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vocab = write_small_vocab(out.parent / f"{out.name}-vocab.txt", words)
    data = synthetic_rows(rows, words + len(SPECIAL_TOKENS), seed=seed, max_seq_length=max_seq_length,
                          max_predictions=max_predictions, special=(0, 1, 2, 3, 4))
    return write_shard_dir(out, data, vocab, num_shards=num_shards, batch_rows=batch_rows,
                           max_seq_length=max_seq_length, max_predictions_per_seq=max_predictions)
