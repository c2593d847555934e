"""Open bertprep shard directories: check the manifest and the files, memory-map the rows.

A shard directory is a result only once `manifest.json` exists (DESIGN.md, "Shards").
Checks, before any training step:
- `manifest.json` exists and parses; every shard it lists exists with the listed size;
- `verify="sha256"` (the default) also hashes every listed shard and compares with the
  manifest, so a corrupted byte anywhere is found and the file named. Hashing runs at
  ~1 GB/s per core; under DDP each rank hashes only `files[rank::world]`, so a job hashes
  every file once per run. `verify="size"` skips the hashing (for very large corpora on
  trusted storage); a truncated file is still caught by its size and by the Arrow reader;
- the Arrow stream parses, the columns and types are the contract's, row counts match.
Manifests without per-shard entries (e.g. ../shared/tools/reference_builder.py writes only
{"rows": N}) are accepted with a warning: size and checksum checks are then impossible.

Rows stay in the memory map: per record batch we keep only where its offset and value
buffers start inside the file, so `data.collate` can gather a batch with a few numpy
fancy-index operations and no Python per row or per token.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from bertmodel.errors import BertmodelError
from bertprep.shards import schema

from bertprep.storage import sha256_file
# The tokenizer a shard set, checkpoint or model directory holds (tokenizer_info.py);
# re-exported: this is where the rest of bertmodel has always found them.
from bertmodel.data.tokenizer_info import (TOKENIZER_FILES, TokenizerInfo, read_json, tokenizer_info,  # noqa: F401
                                           tokenizer_path)

LIST_COLUMNS = (schema.INPUT_IDS, schema.TOKEN_TYPE_IDS, schema.MASKED_LM_POSITIONS, schema.MASKED_LM_IDS)


class ShardFile:
    """One memory-mapped .arrow stream: its record batches' buffer positions as numpy arrays."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.buffer = pa.memory_map(str(path)).read_buffer()  # zero-copy view of the file
            batches = list(pa.ipc.open_stream(pa.BufferReader(self.buffer)))
        except (pa.ArrowInvalid, OSError) as exc:
            raise BertmodelError(f"{path}: not a readable Arrow IPC stream ({str(exc).splitlines()[0]})") from None
        if not any(b.num_rows for b in batches):
            raise BertmodelError(f"{path}: holds no rows")
        self._check_schema(batches[0].schema)
        self.id_dtype = np.dtype(batches[0].schema.field(schema.INPUT_IDS).type.value_type.to_pandas_dtype())
        base = self.buffer.address
        rows, cols = [], {c: ([], []) for c in LIST_COLUMNS}
        labels = []
        for batch in batches:
            if batch.num_rows == 0:
                continue
            rows.append(batch.num_rows)
            for name in LIST_COLUMNS:
                arr = batch.column(name)
                if arr.null_count or arr.values.null_count:
                    raise BertmodelError(f"{path}: column {name} has nulls")
                offsets, values = arr.offsets, arr.values
                cols[name][0].append(self._element(offsets, base))
                cols[name][1].append(self._element(values, base))
            labels.append(self._element(batch.column(schema.NEXT_SENTENCE_LABEL), base))
        self.rows = int(sum(rows))
        self.batch_rows = np.asarray(rows, np.int64)
        # Per record batch: element index (in a view of the whole file with the column's
        # dtype) of its offsets and of its values.
        self.offsets_at = {c: np.asarray(v[0], np.int64) for c, v in cols.items()}
        self.values_at = {c: np.asarray(v[1], np.int64) for c, v in cols.items()}
        self.labels_at = np.asarray(labels, np.int64)
        self.offset_dtype = np.dtype(batches[0].column(schema.INPUT_IDS).offsets.type.to_pandas_dtype())
        size = self.buffer.size
        self.view = {dt: np.frombuffer(self.buffer, dtype=dt, count=size // np.dtype(dt).itemsize)
                     for dt in {self.id_dtype, self.offset_dtype, np.dtype(np.int8), np.dtype(np.uint16)}}

    def _check_schema(self, got: pa.Schema) -> None:
        for name in schema.COLUMNS:
            if name not in got.names:
                raise BertmodelError(f"{self.path}: column {name!r} is missing (has {', '.join(got.names)})")
        ids_type = got.field(schema.INPUT_IDS).type
        want = {schema.TOKEN_TYPE_IDS: pa.list_(pa.int8()), schema.MASKED_LM_POSITIONS: pa.list_(pa.uint16()),
                schema.MASKED_LM_IDS: ids_type, schema.NEXT_SENTENCE_LABEL: pa.int8()}
        if ids_type not in (pa.list_(pa.uint16()), pa.list_(pa.int32())):
            raise BertmodelError(f"{self.path}: input_ids has type {ids_type}, want list<uint16> or list<int32>")
        for name, typ in want.items():
            if got.field(name).type != typ:
                raise BertmodelError(f"{self.path}: {name} has type {got.field(name).type}, want {typ}")

    def _element(self, arr: pa.Array, base: int) -> int:
        data = arr.to_numpy(zero_copy_only=True)
        addr = data.__array_interface__["data"][0] - base
        if not 0 <= addr <= self.buffer.size or addr % data.itemsize:
            raise BertmodelError(f"{self.path}: unaligned or foreign Arrow buffer (rewrite the shard)")
        return addr // data.itemsize


@dataclass
class ShardDir:
    path: Path
    manifest: dict
    files: list[ShardFile]
    tokenizer: TokenizerInfo
    max_seq_length: int
    max_predictions_per_seq: int

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


def _listed_shards(directory: Path, manifest: dict) -> list[tuple[Path, dict]]:
    entries = manifest.get("shards")
    if entries:
        return [(directory / e["name"], e) for e in entries]
    warnings.warn(f"{directory}/manifest.json lists no shards with sizes and checksums; "
                  "corruption can only be found by the Arrow reader", stacklevel=3)
    found = sorted(directory.glob("data-*.arrow"))
    return [(p, {}) for p in found]


def verify_file(path: Path, entry: dict, checksum: bool) -> None:
    """Raise a one-line error naming `path` when it does not match its manifest entry."""
    if not path.is_file():
        raise BertmodelError(f"{path}: listed in manifest.json but missing")
    size = path.stat().st_size
    if "bytes" in entry and size != entry["bytes"]:
        raise BertmodelError(f"{path}: {size:,} bytes but manifest.json says {entry['bytes']:,} "
                             "(truncated or corrupted; rebuild the shards)")
    if checksum and entry.get("sha256") and sha256_file(path) != entry["sha256"]:
        raise BertmodelError(f"{path}: sha256 differs from manifest.json (corrupted; rebuild the shards)")


def open_shard_dir(directory, verify: str = "sha256", rank: int = 0, world: int = 1,
                   tokenizer: str | Path | None = None) -> ShardDir:
    """Check and memory-map one build-shards output directory.

    verify: "sha256" (hash this rank's share of the files) or "size".
    tokenizer: a vocab.txt or directory to use when the shard directory names none."""
    directory = Path(directory)
    if verify not in ("sha256", "size"):
        raise BertmodelError(f"verify must be 'sha256' or 'size', got {verify!r}")
    if not directory.is_dir():
        raise BertmodelError(f"{directory}: no such shard directory")
    manifest = read_json(directory / "manifest.json",
                         f"{directory} is not a finished build-shards output (manifest.json is written last)")
    listed = _listed_shards(directory, manifest)
    if not listed:
        raise BertmodelError(f"{directory}: no data-*.arrow shards")
    for i, (path, entry) in enumerate(listed):
        verify_file(path, entry, checksum=(verify == "sha256" and i % world == rank))
    files = [ShardFile(path) for path, _ in listed]
    for f, (_, entry) in zip(files, listed):
        if "rows" in entry and f.rows != entry["rows"]:
            raise BertmodelError(f"{f.path}: {f.rows:,} rows but manifest.json says {entry['rows']:,}")
    total = sum(f.rows for f in files)
    want = (manifest.get("totals") or {}).get("rows", manifest.get("rows"))
    if want is not None and total != want:
        raise BertmodelError(f"{directory}: {total:,} rows but manifest.json says {want:,}")
    own = manifest.get("tokenizer") or (directory / "vocab.txt").is_file()
    if tokenizer is None:
        info = tokenizer_info(directory, manifest)
    else:
        if not Path(tokenizer).exists():
            raise BertmodelError(f"{tokenizer}: no such tokenizer file or directory")
        info = tokenizer_info(Path(tokenizer))
        # --tokenizer is for shard dirs that carry none; one that does must agree with it.
        if own and (diff := info.same_as(tokenizer_info(directory, manifest))):
            raise BertmodelError(f"{tokenizer}: not the tokenizer {directory} was built with ({diff})")
        if not own and (top := _max_token_id(files)) >= info.vocab_size:
            raise BertmodelError(f"{tokenizer}: {info.vocab_size:,} tokens, but {directory} holds token id "
                                 f"{top:,}: not the tokenizer these shards were built with")
    options = manifest.get("options") or {}
    max_len = options.get("max_seq_length") or _max_list_length(files, schema.INPUT_IDS)
    max_pred = options.get("max_predictions_per_seq") or _max_list_length(files, schema.MASKED_LM_POSITIONS)
    return ShardDir(directory, manifest, files, info, int(max_len), int(max_pred))


def _max_token_id(files: list[ShardFile]) -> int:
    """The largest id in input_ids and masked_lm_ids (reads those columns once)."""
    top = 0
    for f in files:
        values, offsets = f.view[f.id_dtype], f.view[f.offset_dtype]
        for column in (schema.INPUT_IDS, schema.MASKED_LM_IDS):
            for at, start, n in zip(f.offsets_at[column], f.values_at[column], f.batch_rows):
                lo, hi = int(offsets[at]), int(offsets[at + n])
                if hi > lo:
                    top = max(top, int(values[start + lo:start + hi].max()))
    return top


def _max_list_length(files: list[ShardFile], column: str) -> int:
    """Longest row of a list column, from the offsets (used when the manifest lacks options)."""
    longest = 0
    for f in files:
        view = f.view[f.offset_dtype]
        for at, n in zip(f.offsets_at[column], f.batch_rows):
            longest = max(longest, int(np.diff(view[at:at + n + 1]).max()))
    return longest
