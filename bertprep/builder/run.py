"""build-shards: corpus -> masked NSP instances -> globally shuffled Arrow shards.

    plan partitions -> read + tokenize (cached) -> NSP pairs -> mask -> scatter -> gather/shuffle -> write

Everything is written into a staging directory `OUT.partial` next to OUT, which holds a
lock, the finished shards and the intermediate work; the manifest is written last and
the staging directory renamed to OUT only then, so OUT never exists in a state that
looks complete but is not, and an existing result is only replaced (with --overwrite)
once its successor is whole. Running the same command again after a crash reuses the
finished work in `OUT.partial` and ends with the same bytes.
"""
from __future__ import annotations

import errno
import math
import os
import pathlib
import shutil
import sys
import time

from bertprep import __version__
from bertprep.shards import schema
from bertprep.storage import stores as storage
from bertprep.storage import remove_stale_temporaries, write_json_atomic
from bertprep.builder.checks import changed_input, contradicted_options, input_states, same_build
from bertprep.builder.progress import TrackedExecutor
from bertprep.builder.tasks import (FingerprintTask, PairTask, ScatterTask, ShardTask, TaskContext,
                                  fingerprint_input, gather_shard, pair_partition, record_batch_rows, scatter_partition)
from bertprep.corpus import CorpusSpec, ReadStats, no_text_error, resolve_input_files
from bertprep.errors import BertprepError, check_parent_is_directory, describe_path
from bertprep.builder.fingerprints import fingerprint_sources, input_fingerprints
from bertprep.builder.mixing import add_sampled, measure_mix
from bertprep.executors import TaskCost, make_executor
from bertprep.shards import build_manifest, write_dataset_files
from bertprep.instances import cap_warnings
from bertprep.instances import degenerate_pairs_warning, figures, rows_label
from bertprep.builder.plan import merge_read_stats, plan_partitions
from bertprep.instances import merge_stats
from bertprep.progress import BuildProgress
from bertprep.tokenizer import load_tokenizer

from bertprep.builder.config import MB, BuildConfig, BuildResult, default_cache_dir


def staging_path(out):
    return out.with_name(out.name + ".partial")


def _check_output(out, overwrite: bool) -> bool:
    """True when OUT holds a finished build (and --overwrite was not given)."""
    if storage.is_remote(out):
        out.check_bucket()
    else:
        check_parent_is_directory(out)
    if out.exists() and not out.is_dir():
        raise BertprepError(f"{out}: output path exists and is a file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        if (out / "manifest.json").exists():
            return True
        if _publishing_interrupted(out):
            return False
        raise BertprepError(f"{out}: already holds files; pass --overwrite to replace it")
    return False


def _publishing_interrupted(out) -> bool:
    """On an object store, publishing copies the finished staging directory into OUT,
    the manifest last: OUT without a manifest, holding only files of a finished staging
    directory, is such a copy cut short (the same command finishes it)."""
    staging = staging_path(out)
    if not storage.is_remote(out) or not (staging / "manifest.json").exists():
        return False
    ours = {str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()}
    return all(str(p.relative_to(out)) in ours for p in out.rglob("*") if p.is_file())


def _finished_result(spec: CorpusSpec, tok, out: pathlib.Path, config: BuildConfig, started: float) -> BuildResult:
    """Running the same command again is always safe: a finished OUT made from the same
    inputs, options, seed and tokenizer is reported complete, untouched."""
    manifest = same_build(out, _plan(spec, input_fingerprints(spec), tok, config))
    if manifest is None:
        raise BertprepError(f"{out}: already holds a finished build of other inputs, options, seed or tokenizer; "
                            "pass --overwrite to replace it")
    return BuildResult(out, manifest, time.perf_counter() - started, manifest["totals"]["text_bytes"], ReadStats(), [],
                       already_complete=True)


def build_shards(spec: CorpusSpec, tokenizer_path, out, config: BuildConfig, overwrite: bool = False, progress: bool = True) -> BuildResult:
    started = time.perf_counter()
    out = storage.path(out)  # a local path or an object-store URL
    finished = _check_output(out, overwrite)
    if config.cache_dir and storage.is_remote(config.cache_dir):
        storage.path(config.cache_dir).mkdir()  # a missing bucket fails now, before any work
    tok = load_tokenizer(tokenizer_path)
    _check_tokenizer(tok, tokenizer_path, config)
    if finished:
        return _finished_result(spec, tok, out, config, started)
    staging = staging_path(out)
    staging.mkdir(parents=True, exist_ok=True)
    with storage.lock_for(staging):
        try:
            result = _build_locked(spec, tok, out, staging, config, progress, started)
        except storage.StoreError:
            raise  # the store failed, not the command: what is done stays for a rerun
        except BertprepError:
            # A problem with the input or the options: this command cannot finish as
            # given, so its staging directory is not worth resuming (tokenized
            # partitions stay in the cache); leave nothing behind.
            storage.rmtree(staging, ignore_errors=True)
            raise
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise BertprepError(f"{staging}: disk full while writing ({os.strerror(exc.errno)}); free space and run the same command again to resume") from None
            if storage.is_remote(staging):
                raise storage.store_error(staging, exc) from None
            raise
    return result


def _check_tokenizer(tok, tokenizer_path, config: BuildConfig) -> None:
    """What every build needs of its tokenizer, before any work: a mask token (rows are
    masked), and nanotoken only where it can encode (WordPiece)."""
    where = describe_path(tokenizer_path)
    tok.require_mask(where)
    if config.engine == "nanotoken" and tok.kind != "wordpiece":
        raise BertprepError(f"--engine nanotoken: {where} is a {tok.kind} tokenizer; nanotoken encodes WordPiece "
                            "only (use --engine auto or tokenizers)")


# The layout of OUT.partial/work (names and contents of the task markers and files).
# Raised whenever it changes, so an unfinished build left by an older bertprep is
# started again rather than resumed from work laid out differently. 2: a partition of
# unknown size is cut while read, so stage 2 numbers its parts, not the plan's
# partitions.
WORK_LAYOUT = 2


def _plan(spec: CorpusSpec, inputs: list[dict], tok, config: BuildConfig) -> dict:
    """What the work in OUT.partial was made from. The inputs' content hashes are part
    of it, so work left from an input that has since changed is never reused."""
    return {
        "work_layout": WORK_LAYOUT,
        "format_version": schema.FORMAT_VERSION,
        "options": config.output_options(),
        "corpus": spec.record(),
        "inputs": inputs,
        "tokenizer": tok.fingerprint(),
    }


def _prepare_work_dir(staging, plan: dict):
    """The work directory of this exact command; work left by a different command is
    discarded (it is ours, never the user's)."""
    import json

    work = staging / "work"
    plan_file = staging / "plan.json"
    try:
        previous = json.loads(plan_file.read_text())
    except (FileNotFoundError, ValueError):
        previous = None
    if previous != json.loads(json.dumps(plan)):
        for child in staging.iterdir():
            if child.name != ".lock":
                storage.rmtree(child) if child.is_dir() else child.unlink()
        work.mkdir()
        write_json_atomic(plan_file, plan)
    else:
        print(f"Resuming the unfinished build in {staging}", file=sys.stderr)
    work.mkdir(exist_ok=True)
    remove_stale_temporaries(work)
    remove_stale_temporaries(staging)
    return work


def _hashed_inputs(spec: CorpusSpec, executor) -> list[dict]:
    """input_fingerprints, one task per input: hashing reads every byte, so the driver
    leaves it to the workers (and a cluster hashes its files in parallel)."""
    calls = [FingerprintTask(i, source) for i, source in enumerate(fingerprint_sources(spec))]
    found = dict(executor.map(fingerprint_input, calls, TaskCost(cpus=1, memory_bytes=TASK_BASE_MEMORY)))
    return [found[i] for i in range(len(calls))]


def _build_locked(spec, tok, out, staging, config: BuildConfig, progress, started) -> BuildResult:
    input_files = resolve_input_files(spec)
    states = input_states(input_files)  # before the fingerprints, so a change while hashing counts too
    warnings: list[str] = []
    # One display for the whole build, from before the executor starts (a Ray cluster
    # takes seconds to start or join): every task's result is counted as it returns.
    starting = f"starting the {config.executor} executor"
    pool = None
    try:
        with BuildProgress(progress, waiting=starting) as bar, \
                make_executor(config.executor, config.workers, config.ray_address) as pool:
            inputs = _hashed_inputs(spec, pool)
            plan = _plan(spec, inputs, tok, config)
            manifest = same_build(staging, plan)
            if manifest is not None:  # stopped after writing its manifest, before publishing it
                _check_and_publish(staging, out, config)
                return BuildResult(out, manifest, time.perf_counter() - started, manifest["totals"]["text_bytes"],
                                   ReadStats(), [])
            work = _prepare_work_dir(staging, plan)
            tokenizer_files = tok.save(staging)
            cache_dir = storage.path(config.cache_dir) if config.cache_dir else default_cache_dir()
            ctx = TaskContext(
                tokenizer_dir=str(staging),
                tokenizer_fingerprint=tok.fingerprint(),
                cache_dir=str(cache_dir),
                work_dir=str(work),
                seed=config.seed,
                dupe_factor=config.dupe_factor,
                pairs=config.pair_config(tok.template),
                masking=config.masking_config(),
                engine=config.engine,
                corpus=spec,
                partition_bytes=config.partition_bytes,
                word_starts=tok.kind != "wordpiece",
            )
            mix = measure_mix(spec, pool, TaskCost(cpus=1, memory_bytes=TASK_BASE_MEMORY)) if spec.mix else None
            partition_plan = plan_partitions(spec, config.partition_bytes, mix)
            executor = TrackedExecutor(pool, bar, config.num_shards, config.shard_rows, config.partition_bytes,
                                       sum(p.size for p in partition_plan))
            partitions, read_stats, pieces_read = _pair_stage(spec, partition_plan, ctx, config, executor, warnings)
            total_rows = sum(sum(p["rows_per_pass"]) for p in partitions)
            if total_rows == 0:
                raise BertprepError(f"{_inputs_label(spec)}: no {rows_label(config.pairs)} could be built "
                                    "(documents too short?)")
            num_shards = config.num_shards or max(1, math.ceil(total_rows / config.shard_rows))
            num_shards = min(num_shards, total_rows)
            stats = _scatter_stage(ctx, config, partitions, num_shards, executor)
            warnings.extend(_pair_warnings(spec, config, stats, partitions))  # judged by the pairing's own rules
            warnings.extend(cap_warnings(stats["length_histogram"], ctx.masking))
            shards = _gather_stage(ctx, config, partitions, num_shards, staging, executor)
            report = executor.report()
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        manifest = build_manifest(
            version=__version__,
            options=config.output_options(),
            corpus=spec.record(),
            inputs=inputs,
            tok=tok,
            tokenizer_files=tokenizer_files,
            shards=shards,
            partitions=partitions,
            stats=stats,
            read_stats=read_stats,
            mix=None if mix is None else add_sampled(mix, pieces_read).record(),
        )
        changed = changed_input(states, input_files)
        if changed:
            raise BertprepError(f"{changed}: changed while the build was reading it; nothing was published "
                                "(run the command again once the input is final)")
        # A task retried after its worker was lost may have left its temporary behind.
        remove_stale_temporaries(staging)
        write_dataset_files(staging, shards, tok.vocab_size, manifest)
        storage.rmtree(work)
        (staging / "plan.json").unlink()
        write_json_atomic(staging / "manifest.json", manifest)  # last: the mark of a whole result
        _check_and_publish(staging, out, config)
        text_bytes = sum(p["text_bytes"] for p in partitions)
        return BuildResult(out, manifest, time.perf_counter() - started, text_bytes, read_stats, warnings, executor=report)
    finally:
        if pool is not None:  # a local Ray started for the build stops beside the last steps
            pool.wait_closed()


def _inputs_label(spec: CorpusSpec) -> str:
    if spec.mix:
        return "--mix " + ", ".join(source.name for source in spec.mix)
    if spec.dataset:
        return spec.dataset
    return ", ".join(spec.paths) if len(spec.paths) <= 3 else f"{spec.paths[0]} (+{len(spec.paths) - 1} more)"


def _pair_stage(spec, plan, ctx, config, executor, warnings) -> tuple[list[dict], ReadStats, list[dict]]:
    """Every planned partition read, tokenized and paired by its own task; the
    partitions from here on (every part of every planned partition: one, unless it was
    cut while read, numbered in plan order), the corpus's read statistics and the read
    counts of every piece."""
    if not plan:
        raise no_text_error(spec)
    calls = [PairTask(ctx, p) for p in plan]  # small descriptors: the tasks read the text
    results = sorted(executor.map(pair_partition, calls, _pair_cost(config)), key=lambda r: r["index"])
    partitions = [{"index": index, **part}
                  for index, part in enumerate(part for result in results for part in result["parts"])]
    for partition in partitions:
        if partition["mismatches"]:
            warnings.append(
                f"partition {partition['index']}: nanotoken differed from tokenizers on "
                f"{partition['mismatches']} sampled sentences; encoded it with tokenizers"
            )
    pieces_read = [part for r in results for part in r["read"]]
    read_stats = merge_read_stats(pieces_read)
    if read_stats.documents == 0:
        raise no_text_error(spec)
    total_docs = sum(p["documents"] for p in partitions)
    if sum(p["tokens"] for p in partitions) == 0:
        raise BertprepError(f"{_inputs_label(spec)}: no text found")
    if total_docs < 2 and config.pairs == "nsp":  # SOP pairs and FULL-SENTENCES rows need no other document
        hint = ("in --sentences prose a document is a file: give several, or cut them with --document-separator"
                if spec.sentences == "prose" else
                "separate documents with a blank line, or use --sentences split for a document per line")
        raise BertprepError(f"{_inputs_label(spec)}: NSP needs at least two documents, found {total_docs} ({hint})")
    return partitions, read_stats, pieces_read


def _pair_warnings(spec: CorpusSpec, config: BuildConfig, stats: dict, partitions: list[dict]) -> list[str]:
    """One warning when documents are so short that the pairs (or rows) degenerate (pair_quality.py)."""
    rows = stats.get("rows", 0)
    totals = {key: sum(p.get(key, 0) for p in partitions)
              for key in ("documents", "sentences", "chunks", "single_sentence_chunks")}
    totals["corpus_tokens"] = sum(p["tokens"] for p in partitions)
    mean_length = sum(i * n for i, n in enumerate(stats["length_histogram"])) / rows if rows else 0.0
    found = figures(totals, rows, stats.get("next_sentence_random", 0), mean_length, config.max_seq_length,
                    config.pairs)
    warning = degenerate_pairs_warning(found, spec.sentences, spec.document_separator)
    return [warning] if warning else []


def _scatter_stage(ctx, config, partitions, num_shards, executor) -> dict:
    # Global row offset of each (partition, pass), in the fixed order passes x partitions.
    offsets, running = {}, 0
    for dupe in range(ctx.dupe_factor):
        for p in partitions:
            offsets[(p["index"], dupe)] = running
            running += p["rows_per_pass"][dupe]
    calls = [
        ScatterTask(ctx, p["index"], p["text_hash"], tuple(offsets[(p["index"], d)] for d in range(ctx.dupe_factor)),
                    num_shards, p["pairs_file"])
        for p in partitions
    ]
    return merge_stats(list(executor.map(scatter_partition, calls, _scatter_cost(config))))


def _gather_stage(ctx, config, partitions, num_shards, staging, executor) -> list[dict]:
    # Partitions are numbered in plan order (_pair_stage returns them so), and every
    # shard task reads all of them: as a range its descriptor stays a few bytes instead
    # of P numbers (~470 KB each at 120,000 partitions, i.e. a TB), sent once per shard.
    indexes = range(len(partitions))
    calls = [ShardTask(ctx, s, num_shards, indexes, str(staging)) for s in range(num_shards)]
    rows_per_shard = math.ceil(sum(sum(p["rows_per_pass"]) for p in partitions) / num_shards)
    return sorted(executor.map(gather_shard, calls, _gather_cost(config, rows_per_shard)), key=lambda s: s["name"])


# Memory requests for a cluster scheduler: generous upper bounds from the sizes that
# drive each task (measured peaks are in docs/SCALING.md), plus an interpreter with
# the tokenizer loaded. A request only stops a node taking more tasks than it can hold.
TASK_BASE_MEMORY = 256 * MB


def _pair_cost(config: BuildConfig) -> TaskCost:
    # The partition's text as Python strings, its token ids and the pair descriptors.
    return TaskCost(cpus=1, memory_bytes=TASK_BASE_MEMORY + 12 * config.partition_bytes)


def _scatter_cost(config: BuildConfig) -> TaskCost:
    # Every pass's rows of one partition (ids, types, masks), as numpy and as Arrow.
    return TaskCost(cpus=1, memory_bytes=TASK_BASE_MEMORY + 4 * config.partition_bytes * config.dupe_factor)


def _gather_cost(config: BuildConfig, rows: int) -> TaskCost:
    # The shard's rows in the mapped scatter batches (resident once read), one copy of
    # them past FEW_SOURCES partitions, and the record batches being taken and written.
    # A row: its ids and segment ids (3 bytes a token, rounded up to 4), its masked
    # positions and labels (4 bytes each) and offsets. Both `rows` (default_shard_rows)
    # and the batch rows shrink as rows grow past 512, so this stays bounded at 8,192.
    row_bytes = 4 * config.max_seq_length + 4 * config.max_predictions_per_seq + 64
    batch_rows = record_batch_rows(config.max_seq_length)
    return TaskCost(cpus=1, memory_bytes=TASK_BASE_MEMORY + (2 * rows + 3 * batch_rows) * row_bytes)


def _check_and_publish(staging, out, config: BuildConfig) -> None:
    problem = contradicted_options(staging, config.whole_word_mask)
    if problem:
        raise BertprepError(f"{staging}: the shards contradict their options ({problem}); not published: "
                            "this is a bug in bertprep, please report it")
    _publish(staging, out)


def _publish(staging, out) -> None:
    """Move the finished staging directory to OUT, replacing an old result only now."""
    if storage.is_remote(out):
        _publish_to_store(staging, out)
        return
    lock_file = staging / ".lock"
    if out.exists():
        old = out.with_name(out.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(out, old)
        os.replace(staging, out)
        shutil.rmtree(old)
    else:
        os.replace(staging, out)
    (out / lock_file.name).unlink(missing_ok=True)


def _publish_to_store(staging, out) -> None:
    """An object store renames nothing: the old result stops counting (its manifest goes
    first), then the finished files are copied into OUT (server-side) and the manifest
    last, the mark of a whole result; until then OUT reads as absent. A copy cut short
    is finished by the same command (`_publishing_interrupted`)."""
    manifest = out / "manifest.json"
    manifest.unlink(missing_ok=True)
    storage.rmtree(out)
    files = [p for p in staging.rglob("*") if p.is_file() and p.name != manifest.name]
    for file in files:
        storage.copy_file(file, out / str(file.relative_to(staging)))
    storage.copy_file(staging / manifest.name, manifest)
    storage.rmtree(staging)
