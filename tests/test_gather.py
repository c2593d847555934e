"""The shard task's shuffle, written one record batch at a time: the rows are exactly
the shard's rows in the drawn order, whatever the number and sizes of the partitions'
batches (empty ones included), and the bytes do not depend on whether it takes from the
mapped batches directly or from one copy (the many-partitions path)."""
import numpy as np
import pyarrow as pa
import pytest

from bertprep.builder import tasks as build_tasks
from bertprep.builder import BuildConfig, build_shards
from bertprep.corpus import CorpusSpec
from shard_fixtures import shard_bytes, write_corpus, write_vocab

SCHEMA = pa.schema([("input_ids", pa.list_(pa.uint16())), ("label", pa.int8())])


def partition_batches(rng, count: int, mean_rows: int) -> list[pa.RecordBatch]:
    batches = []
    for _ in range(count):
        n = int(rng.integers(0, 2 * mean_rows))  # some empty, as a partition with no row for a shard
        offsets = np.concatenate([[0], np.cumsum(rng.integers(1, 40, n))]).astype(np.int32)
        ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 30000, offsets[-1]).astype(np.uint16)))
        batches.append(pa.record_batch([ids, pa.array(rng.integers(0, 2, n).astype(np.int8))], schema=SCHEMA))
    return batches


def shuffled(batches, order, path, monkeypatch, few_sources):
    monkeypatch.setattr(build_tasks, "FEW_SOURCES", few_sources)
    writer = build_tasks.write_shuffled(path, batches, order, SCHEMA)
    return writer.sha256, pa.ipc.open_stream(pa.memory_map(str(path))).read_all()


@pytest.mark.parametrize("count,mean_rows", [(1, 9000), (3, 3000), (70, 150), (900, 12)])
def test_rows_come_out_in_the_drawn_order_and_bytes_match_the_one_copy_path(tmp_path, monkeypatch, count, mean_rows):
    rng = np.random.default_rng(count)
    batches = partition_batches(rng, count, mean_rows)
    total = sum(b.num_rows for b in batches)
    order = rng.permutation(total)
    whole = pa.Table.from_batches([b for b in batches if b.num_rows], schema=SCHEMA)
    direct_sha, direct = shuffled(batches, order, tmp_path / "direct.arrow", monkeypatch, 10 ** 6)
    assert direct.equals(whole.take(pa.array(order)))
    copy_sha, copy = shuffled(batches, order, tmp_path / "copy.arrow", monkeypatch, 0)
    assert copy.equals(direct) and copy_sha == direct_sha


def test_a_build_has_the_same_bytes_on_both_gather_paths(tmp_path, monkeypatch):
    corpus, vocab = write_corpus(tmp_path / "corpus.txt", documents=80), write_vocab(tmp_path / "vocab.txt")

    def build(out, few_sources):
        monkeypatch.setattr(build_tasks, "FEW_SOURCES", few_sources)
        config = BuildConfig(workers=1, partition_bytes=4096, num_shards=2, cache_dir=str(tmp_path / f"{out}.cache"))
        return build_shards(CorpusSpec(paths=(str(corpus),)), vocab, tmp_path / out, config, progress=False)

    direct = build("direct", 10 ** 6)
    build("copy", 0)
    assert direct.manifest["totals"]["partitions"] > 3
    assert shard_bytes(tmp_path / "direct") == shard_bytes(tmp_path / "copy")
