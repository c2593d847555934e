"""The three task kinds of build-shards, as pure functions of their arguments.

1. `pair_partition`    tokenize a partition (or load it from the cache) and build the
                       NSP descriptors of every dupe pass -> work/pairs-P.npz (a
                       partition of unknown size, cut while read: pairs-P[-J].npz,
                       one per part, each a partition of its own from stage 2 on)
2. `scatter_partition` turn descriptors into masked rows and scatter them into
                       per-shard record batches -> work/scatter-P.arrow
3. `gather_shard`      collect one shard's batches from every partition, shuffle,
                       write the final shard

Every random stream is derived from (seed, stage, partition or shard, dupe pass), and
every output is written under a temporary name and renamed, with a JSON marker written
last; a rerun finds the marker and reuses the work, so a killed build resumes and ends
with the same bytes (DESIGN.md, "Determinism and scale").
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

# The system allocator hands freed memory back to the OS between tasks; Arrow's
# default pool keeps it, which inflates every worker's resident size.
pa.set_memory_pool(pa.system_memory_pool())

from bertprep.shards import schema
from bertprep.storage import stores as storage
from bertprep.shards import ArrowWriter
from bertprep.storage import write_bytes_atomic, write_json_atomic
from bertprep.tokenizer import SentenceEncoder
from bertprep.instances import build_full_rows, document_starts
from bertprep.instances import PairConfig, build_instances
from bertprep.instances import MaskingConfig, Vocabulary, apply_masking
from bertprep.corpus import CorpusSpec
from bertprep.builder.fingerprints import fingerprint_source
from bertprep.builder.partitions import TokenCache, hash_documents, text_bytes, tokenize_documents
from bertprep.builder.plan import PartitionPlan, cut_while_reading, iter_partition_documents
from bertprep.corpus import vocabulary_lookup
from bertprep.instances import add_stats, empty_stats
from bertprep.instances import build_rows
from bertprep.tokenizer import LoadedTokenizer, load_tokenizer

RECORD_BATCH_ROWS = 4096  # rows per record batch in the final shards, up to 512 tokens a row
RECORD_BATCH_TOKENS = RECORD_BATCH_ROWS * 512


def record_batch_rows(max_seq_length: int) -> int:
    """Rows per record batch of a final shard: 4,096 up to 512 tokens a row (unchanged
    bytes there), then fewer (256 at 8,192), so a batch, which the gather task takes,
    copies and writes a few at a time, stays ~2 M tokens, whatever the row length."""
    return max(1, min(RECORD_BATCH_ROWS, RECORD_BATCH_TOKENS // max(1, max_seq_length)))


FEW_SOURCES = 64  # a gather takes from the mapped batches directly up to this many partitions


@dataclass(frozen=True)
class TaskContext:
    """Everything a task needs besides its own partition/shard; small and picklable."""

    tokenizer_dir: str  # the tokenizer as saved into the output (workers load it)
    tokenizer_fingerprint: str
    cache_dir: str
    work_dir: str
    seed: int
    dupe_factor: int
    pairs: PairConfig
    masking: MaskingConfig
    engine: str  # "auto" | "nanotoken" | "tokenizers"
    corpus: CorpusSpec  # how to read the inputs (the pair tasks read their own pieces)
    partition_bytes: int  # the plan's target: the part size of a partition cut while read
    word_starts: bool = False  # tokenized partitions carry word starts (tokenizers other than WordPiece)


@dataclass(frozen=True)
class PairTask:
    """Stage 1: read, tokenize and pair one partition of the plan (bertprep/builder/plan.py)."""

    ctx: TaskContext
    partition: PartitionPlan


@dataclass(frozen=True)
class FingerprintTask:
    """Before stage 1: hash one input, as the manifest records it."""

    index: int
    source: tuple  # corpus.fingerprint_sources


@dataclass(frozen=True)
class ScatterTask:
    """Stage 2: mask one partition's pairs and scatter its rows over the shards."""

    ctx: TaskContext
    index: int  # in the order of all parts of all partitions (= the plan's when none is cut)
    text_hash: str
    pass_offsets: tuple[int, ...]  # global row offset of each dupe pass of this partition
    num_shards: int
    pairs_file: str  # in the work directory, as the pair task named it


@dataclass(frozen=True)
class ShardTask:
    """Stage 3: gather, shuffle and write one output shard."""

    ctx: TaskContext
    shard: int
    num_shards: int
    partitions: range  # every partition index, in order
    out_dir: str


def stream_seed(*parts) -> int:
    """A 64-bit seed for one random stream, from its coordinates."""
    text = ":".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


# Workers load the tokenizer once per process, and keep it for the next build with the
# same one. Keyed by its fingerprint (equal fingerprints, equal encodings), not its
# directory: the same output directory rebuilt with another tokenizer in one process must
# not reuse it, and a released tokenizer takes most of a second to load.
_TOKENIZERS: dict[tuple[str, str], tuple[LoadedTokenizer, SentenceEncoder | None]] = {}
KEPT_TOKENIZERS = 4


def _tokenizer(ctx: TaskContext, need_encoder: bool = False):
    key = (ctx.tokenizer_fingerprint, ctx.engine)
    if key not in _TOKENIZERS and len(_TOKENIZERS) >= KEPT_TOKENIZERS:
        _TOKENIZERS.clear()
    tok, encoder = _TOKENIZERS.get(key, (None, None))
    if tok is None:
        with storage.local_copy(ctx.tokenizer_dir) as directory:  # a store's files, fetched once
            tok = load_tokenizer(directory)
        if tok.fingerprint() != ctx.tokenizer_fingerprint:
            raise RuntimeError(f"{ctx.tokenizer_dir}: tokenizer changed during the build")
    if need_encoder and encoder is None:
        encoder = SentenceEncoder(tok, ctx.engine)
    _TOKENIZERS[key] = (tok, encoder)
    return tok, encoder


def id_dtype(vocab_size: int):
    """The numpy twin of the shard schema's id type."""
    return schema.token_type(vocab_size).to_pandas_dtype()


def vocabulary_for_masking(tok: LoadedTokenizer) -> Vocabulary:
    """What masking needs of `tok`: its mask id, the random-replacement pool and, for
    WordPiece, which entries are "##" pieces (other kinds say where words start per
    token, in their tokenized partitions: instances/masking.py)."""
    mask = tok.require_mask(str(tok.source) if tok.source is not None else "tokenizer")
    if tok.kind != "wordpiece":
        return Vocabulary(mask, tok.vocab_size, tok.ordinary_ids())
    continuation = np.fromiter((w.startswith("##") for w in tok.vocab), dtype=bool, count=tok.vocab_size)
    return Vocabulary(mask, tok.vocab_size, tok.ordinary_ids(), continuation)


def _work(ctx: TaskContext, name: str):
    return storage.path(ctx.work_dir) / name  # a local path or an object-store URL


def _read_marker(path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


# --- stage 0 -----------------------------------------------------------------------


def fingerprint_input(task: FingerprintTask) -> tuple[int, dict]:
    return task.index, fingerprint_source(task.source)


# --- stage 1 -----------------------------------------------------------------------


def pair_partition(task: PairTask) -> dict:
    """Read, tokenize and pair one planned partition. A partition of a size not known
    when planning (a whole compressed file, a streamed dataset) is cut as it is read,
    at document boundaries, into parts of about --partition-size (plan.cut_while_reading):
    each part is tokenized, cached and paired alone, so the task holds one part at a
    time, not the file. Its result lists the parts; the totals are theirs summed."""
    ctx, partition = task.ctx, task.partition
    marker = _work(ctx, f"pairs-{partition.index:06d}.json")
    done = _read_marker(marker)
    cache = TokenCache(ctx.cache_dir, ctx.word_starts)
    # Finished by an earlier, interrupted run of this plan, and its tokens are still
    # cached (a later stage reads them; a cleaned or different cache means reading and
    # tokenizing again).
    if (done is not None and done.get("pieces") == partition.descriptor() and "parts" in done
            and all(cache.has(part["text_hash"], ctx.tokenizer_fingerprint) for part in done["parts"])):
        return done
    tok, encoder = _tokenizer(ctx, need_encoder=True)
    known_word = vocabulary_lookup(tok) if ctx.corpus.sentences == "prose" else None
    read: list[dict] = []
    documents = iter_partition_documents(partition, ctx.corpus, read, known_word)
    limit = None if partition.sized else ctx.partition_bytes
    parts: list[dict] = []
    # A plain loop, no enumerate: its reused tuple would keep the previous part's text
    # alive while the next one is read (_pair_part clears each part once tokenized).
    for part_documents in cut_while_reading(documents, limit):
        parts.append(_pair_part(ctx, partition.index, len(parts), part_documents, cache, tok, encoder))
    result = {
        "index": partition.index,
        "pieces": partition.descriptor(),  # what was read: this marker belongs to this plan only
        "planned_bytes": partition.size,
        "read": read,  # the corpus read statistics of each piece, merged by the driver
        "text_bytes": sum(part["text_bytes"] for part in parts),
        "rows_per_pass": [sum(counts) for counts in zip(*(part["rows_per_pass"] for part in parts))],
        "parts": parts,
    }
    write_json_atomic(marker, result, fsync=False)
    return result


def _pair_part(ctx: TaskContext, index: int, number: int, documents: list[list[str]], cache: TokenCache,
               tok, encoder) -> dict:
    """Tokenize (or load from the cache) and pair part `number` of partition `index`.
    Part 0 is named and seeded as an uncut partition is, so cutting changes nothing for
    a partition that fits in one part."""
    name = f"pairs-{index:06d}" + (f"-{number:04d}" if number else "")
    text_hash, num_bytes = hash_documents(documents), text_bytes(documents)
    part = cache.load(text_hash, ctx.tokenizer_fingerprint)
    engine, mismatches, cached = "cache", 0, part is not None
    if part is None:
        part, encoded = tokenize_documents(documents, encoder)
        part.ids = part.ids.astype(id_dtype(tok.vocab_size))
        engine, mismatches = encoded.engine, encoded.mismatches
        cache.save(text_hash, ctx.tokenizer_fingerprint, part)
    documents.clear()  # the tokens are all later steps need; the caller's list is this one
    passes = {}
    counts = []
    chunks = {"chunks": 0, "single_sentence_chunks": 0}
    for dupe in range(ctx.dupe_factor):
        where = (index, dupe) if number == 0 else (index, number, dupe)
        rng = random.Random(stream_seed(ctx.seed, "pairs", *where))
        pairs = build_instances(part, ctx.pairs, rng, chunks)
        passes[f"pass_{dupe}"] = pairs
        counts.append(len(pairs))
    _save_npz(_work(ctx, f"{name}.npz"), passes)
    return {
        "pairs_file": f"{name}.npz",
        "text_hash": text_hash,
        "text_bytes": num_bytes,
        "documents": part.num_documents,
        "sentences": part.num_sentences,
        "tokens": part.num_tokens,
        "rows_per_pass": counts,
        **chunks,  # over all passes, for the degenerate-pairs check (pair_quality.py)
        "engine": engine,
        "cached": cached,
        "mismatches": mismatches,
    }


def _save_npz(path, arrays: dict) -> None:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_bytes_atomic(path, buffer.getbuffer(), fsync=False)


# --- stage 2 -----------------------------------------------------------------------


def _record_batch(rows, masked, vocab_size: int) -> pa.RecordBatch:
    ids_type = schema.token_type(vocab_size)
    row_offsets = pa.array(rows.offsets.astype(np.int32))
    mlm_offsets = pa.array(masked.offsets.astype(np.int32))
    ids_np = id_dtype(vocab_size)
    arrays = [
        pa.ListArray.from_arrays(row_offsets, pa.array(rows.input_ids.astype(ids_np, copy=False), ids_type)),
        pa.ListArray.from_arrays(row_offsets, pa.array(rows.token_type_ids, pa.int8())),
        pa.ListArray.from_arrays(mlm_offsets, pa.array(masked.positions, pa.uint16())),
        pa.ListArray.from_arrays(mlm_offsets, pa.array(masked.labels.astype(ids_np, copy=False), ids_type)),
        pa.array(rows.next_sentence_label, pa.int8()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema.shard_schema(vocab_size))


def scatter_partition(task: ScatterTask) -> dict:
    """Mask every pass of one partition and write its rows as `num_shards` record
    batches, batch s holding the rows bound for shard s. Rows are dealt to shards
    round-robin in a random order, continuing from the partition's global row offset,
    so shards end up within one row of equal size."""
    ctx, index, text_hash, num_shards = task.ctx, task.index, task.text_hash, task.num_shards
    pass_offsets = task.pass_offsets
    marker = _work(ctx, f"scatter-{index:06d}.json")
    done = _read_marker(marker)
    if done is not None:
        return done
    tok, _ = _tokenizer(ctx)
    vocab = vocabulary_for_masking(tok)
    part = TokenCache(ctx.cache_dir, ctx.word_starts).load(text_hash, ctx.tokenizer_fingerprint)
    if part is None:
        raise RuntimeError(f"tokenized partition {index} vanished from the cache {ctx.cache_dir}")
    stats = empty_stats(ctx.pairs.max_seq_length)
    per_shard: list[list[pa.RecordBatch]] = [[] for _ in range(num_shards)]
    with storage.open_whole(_work(ctx, task.pairs_file)) as file, np.load(file) as saved:
        for dupe in range(ctx.dupe_factor):
            pairs = saved[f"pass_{dupe}"]
            rng = np.random.default_rng(stream_seed(ctx.seed, "mask", index, dupe))
            # Deal rows to shards: the k-th row of a random order goes to shard
            # (global offset + k) mod num_shards. Ordering the descriptors by shard
            # before building rows makes each shard's rows one contiguous slice.
            dealt = np.empty(len(pairs), dtype=np.int64)
            dealt[rng.permutation(len(pairs))] = (pass_offsets[dupe] + np.arange(len(pairs))) % num_shards
            order = np.argsort(dealt, kind="stable")
            bounds = np.searchsorted(dealt[order], np.arange(num_shards + 1))
            # The tokenizer's own templates: BERT's [CLS] A [SEP] B [SEP], RoBERTa's <s> A </s></s> B </s>.
            if ctx.pairs.kind == "none":
                rows = build_full_rows(part.ids, pairs[order], document_starts(part), tok.template, tok.special.sep,
                                       id_dtype(tok.vocab_size), part.word_starts)
            else:
                rows = build_rows(part.ids, pairs[order], tok.template, id_dtype(tok.vocab_size), part.word_starts)
            masked = apply_masking(rows, ctx.masking, vocab, rng)
            add_stats(stats, rows, masked)
            batch = _record_batch(rows, masked, tok.vocab_size)
            for s in range(num_shards):
                per_shard[s].append(batch.slice(bounds[s], bounds[s + 1] - bounds[s]))
    # One record batch per shard (all passes together), so shard s reads batch s.
    scatter_file = _work(ctx, f"scatter-{index:06d}.arrow")
    with ArrowWriter(scatter_file, schema.shard_schema(tok.vocab_size), stream=False, fsync=False) as writer:
        for pieces in per_shard:
            writer.write(pa.concat_batches(pieces))
    write_json_atomic(marker, stats, fsync=False)
    return stats


# --- stage 3 -----------------------------------------------------------------------


def gather_shard(task: ShardTask) -> dict:
    """Collect shard `shard`'s rows from every partition (fixed order), shuffle them and
    write the final Arrow IPC stream file."""
    ctx, shard, num_shards, partitions, out_dir = task.ctx, task.shard, task.num_shards, task.partitions, task.out_dir
    name = schema.shard_name(shard, num_shards)
    marker = _work(ctx, f"shard-{shard:05d}.json")
    done = _read_marker(marker)
    if done is not None and (storage.path(out_dir) / name).exists():
        return done
    batches = []
    for index in partitions:
        # Memory-mapped: only this shard's batches are paged in, so memory follows
        # the shard size, not the corpus size. The batches keep the map alive.
        # On an object store: ranged reads of this batch and the footer.
        reader = pa.ipc.open_file(storage.open_random_access(_work(ctx, f"scatter-{index:06d}.arrow")))
        batches.append(reader.get_batch(shard))
    rng = np.random.default_rng(stream_seed(ctx.seed, "shard", shard))
    order = rng.permutation(sum(b.num_rows for b in batches))
    writer = write_shuffled(storage.path(out_dir) / name, batches, order, batches[0].schema,
                            record_batch_rows(ctx.pairs.max_seq_length))
    result = {"name": name, "rows": writer.rows, "bytes": writer.bytes, "sha256": writer.sha256}
    write_json_atomic(marker, result, fsync=False)
    return result


def write_shuffled(path, batches: list, order: np.ndarray, row_schema: pa.Schema,
                   batch_rows: int = RECORD_BATCH_ROWS) -> ArrowWriter:
    """The rows of `batches` (laid end to end; empty ones allowed) in the order `order`,
    as one Arrow stream file at `path`, one output record batch of `batch_rows` rows at
    a time: the task never holds a shuffled copy of the whole shard. Returns the closed
    writer (rows, bytes, sha256)."""
    batches = [b for b in batches if b.num_rows]
    if len(batches) > FEW_SOURCES:
        # With many partitions each output batch would draw from thousands of tiny
        # batches (one take each, ~1 ms per 1,000 rows of overhead): one copy of the
        # shard, then one take per output batch, is ~10x faster at 2,500 partitions.
        batches = pa.Table.from_batches(batches, schema=row_schema).combine_chunks().to_batches()
    starts = np.cumsum([0] + [b.num_rows for b in batches])
    with ArrowWriter(path, row_schema, batch_rows=batch_rows, digest=True) as writer:
        for lo in range(0, len(order), batch_rows):
            writer.write(_take_rows(batches, starts, order[lo:lo + batch_rows], row_schema))
    return writer


def _take_rows(batches: list, starts: np.ndarray, rows: np.ndarray, row_schema: pa.Schema) -> pa.Table:
    """Rows `rows` (indices into the batches laid end to end, starting at `starts`), in
    that order."""
    source = np.searchsorted(starts, rows, side="right") - 1
    by_source = np.argsort(source, kind="stable")  # rows grouped by the batch holding them
    grouped_rows, grouped_source = rows[by_source], source[by_source]
    present, first = np.unique(grouped_source, return_index=True)
    last = np.append(first[1:], len(grouped_rows))
    # One take per source batch (a small one each when there are thousands of
    # partitions), then one take to put the rows back in the order asked for.
    pieces = [batches[b].take(pa.array(grouped_rows[lo:hi] - starts[b])) for b, lo, hi in zip(present, first, last)]
    grouped = pa.Table.from_batches(pieces, schema=row_schema).combine_chunks()
    inverse = np.empty_like(by_source)
    inverse[by_source] = np.arange(len(by_source))
    return grouped.take(pa.array(inverse))


__all__ = [
    "TaskContext",
    "FingerprintTask",
    "fingerprint_input",
    "PairTask",
    "ScatterTask",
    "ShardTask",
    "pair_partition",
    "scatter_partition",
    "gather_shard",
    "write_shuffled",
    "record_batch_rows",
    "stream_seed",
]
