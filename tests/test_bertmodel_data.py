"""bertmodel's shard reader: manifest and checksum checks, collation, sample order."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pytest

from bertmodel.data import BatchLoader, SampleOrder, ShardDataset, eval_batches
from bertmodel.errors import BertmodelError
from bertmodel.data.shards import open_shard_dir
from bertmodel.data.synthetic import SHARED, build_corpus_shards, small_shard_dir

DATA = SHARED / "data"
needs_data = pytest.mark.skipif(not (DATA / "google_sample_text.txt").exists(),
                                reason="../shared/data (google_sample_text.txt, bert vocab) is not available")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("data") / "small", rows=96, num_shards=2)


def rows_of(directory) -> list[dict]:
    manifest = json.loads((directory / "manifest.json").read_text())
    out = []
    for s in manifest["shards"]:
        out.extend(pa.ipc.open_stream(pa.memory_map(str(directory / s["name"]))).read_all().to_pylist())
    return out


def check_batch(batch: dict, expected: list[dict], pad: int, P: int) -> None:
    longest = max(len(r["input_ids"]) for r in expected)
    T = batch["input_ids"].shape[1]
    assert T == -(-longest // 8) * 8
    assert batch["masked_lm_positions"].shape == batch["masked_lm_labels"].shape == (len(expected), P)
    for i, r in enumerate(expected):
        n, m = len(r["input_ids"]), len(r["masked_lm_positions"])
        assert batch["input_ids"][i, :n].tolist() == r["input_ids"]
        assert (batch["input_ids"][i, n:] == pad).all()
        assert batch["token_type_ids"][i, :n].tolist() == r["token_type_ids"]
        assert (batch["token_type_ids"][i, n:] == 0).all()
        assert batch["attention_mask"][i].tolist() == [1] * n + [0] * (T - n)
        assert batch["masked_lm_positions"][i, :m].tolist() == r["masked_lm_positions"]
        assert (batch["masked_lm_positions"][i, m:] == 0).all()
        assert batch["masked_lm_labels"][i, :m].tolist() == r["masked_lm_ids"]
        assert (batch["masked_lm_labels"][i, m:] == -100).all()
        assert batch["next_sentence_label"][i] == r["next_sentence_label"]


def test_collate_matches_arrow_rows(small):
    ds = ShardDataset([open_shard_dir(small)])
    expected = rows_of(small)
    assert len(ds) == len(expected) == 96
    rows = np.array([95, 0, 47, 48, 17, 17, 63])  # across both files and several record batches
    check_batch(ds.collate(rows), [expected[r] for r in rows], pad=0, P=10)


@needs_data
def test_collate_real_shards(tmp_path):
    out = build_corpus_shards(DATA / "google_sample_text.txt", DATA / "bert-base-uncased-vocab.txt",
                              tmp_path / "shards", dupe_factor=2)
    ds = ShardDataset([open_shard_dir(out)])
    expected = rows_of(out)
    rows = np.random.default_rng(0).permutation(len(ds))[:16]
    batch = ds.collate(rows)
    check_batch(batch, [expected[r] for r in rows], pad=0, P=20)
    assert batch["input_ids"][:, 0].tolist() == [101] * 16  # [CLS] from the real vocabulary


def test_sample_order_is_a_pure_function_of_seed_epoch_index():
    a, b = SampleOrder(50, seed=7), SampleOrder(50, seed=7)
    whole = a.take(0, 150)
    assert (b.take(37, 80) == whole[37:117]).all()  # a seek, across epoch boundaries
    for e in range(3):
        assert sorted(whole[50 * e:50 * (e + 1)].tolist()) == list(range(50))  # each epoch a permutation
    assert (whole[:50] != whole[50:100]).any()  # and a different one per epoch
    assert (SampleOrder(50, seed=8).take(0, 50) != whole[:50]).any()


def test_ranks_split_the_global_batch():
    order = SampleOrder(1000, seed=1)
    global_rows = order.take(64, 32)
    parts = [order.rank_rows(64, 8, rank, 4) for rank in range(4)]
    assert sorted(np.concatenate(parts).tolist()) == sorted(global_rows.tolist())
    assert (parts[1] == global_rows[1::4]).all()


def test_loader_yields_the_order_and_cursor(small):
    ds = ShardDataset([open_shard_dir(small)])
    order = SampleOrder(len(ds), seed=3)
    loader = BatchLoader(ds, order, batch_size=4, cursor=40, rank=1, world=2)
    try:
        first, second = next(loader), next(loader)
    finally:
        loader.close()
    assert first.cursor == 48 and second.cursor == 56
    want = ds.collate(order.take(48, 8)[1::2])
    assert (second.tensors["input_ids"].numpy() == want["input_ids"]).all()
    assert second.tokens == int(want["attention_mask"].sum())
    lengths = want["attention_mask"].sum(1).astype(np.int64)
    assert second.attention_pairs == int((lengths ** 2).sum())


def test_eval_batches_are_disjoint_per_rank(small):
    """Each rank sees its own rows (r::world in file order): together every row once."""
    ds = ShardDataset([open_shard_dir(small)])

    def identity(ids, length, nsp):
        return tuple(ids[:length].tolist()) + (int(nsp),)

    seen = [[identity(ids, int(mask.sum()), nsp)
             for b in eval_batches(ds, 8, r, 2)
             for ids, mask, nsp in zip(b["input_ids"], b["attention_mask"], b["next_sentence_label"])]
            for r in range(2)]
    rows = [tuple(r["input_ids"]) + (r["next_sentence_label"],) for r in rows_of(small)]
    assert len(set(rows)) == len(rows) == 96  # rows tell themselves apart
    assert seen[0] == rows[0::2] and seen[1] == rows[1::2]


def test_missing_manifest_is_named(small, tmp_path):
    copy = shutil.copytree(small, tmp_path / "unfinished")
    (copy / "manifest.json").unlink()
    with pytest.raises(BertmodelError, match=r"unfinished/manifest.json is missing: .*not a finished"):
        open_shard_dir(copy)


def test_corrupted_shard_is_named_by_checksum(small, tmp_path):
    copy = shutil.copytree(small, tmp_path / "corrupt")
    shard = copy / "data-00001-of-00002.arrow"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size, one flipped byte in the row data
    shard.write_bytes(bytes(raw))
    with pytest.raises(BertmodelError, match=r"data-00001-of-00002.arrow: sha256 differs"):
        open_shard_dir(copy)
    open_shard_dir(copy, verify="size")  # sizes only: this corruption goes unseen (documented)


def test_truncated_shard_is_named(small, tmp_path):
    copy = shutil.copytree(small, tmp_path / "short")
    shard = copy / "data-00000-of-00002.arrow"
    shard.write_bytes(shard.read_bytes()[:-100])
    for verify in ("sha256", "size"):
        with pytest.raises(BertmodelError, match=r"data-00000-of-00002.arrow: .* bytes but manifest.json says"):
            open_shard_dir(copy, verify=verify)


def test_truncated_shard_without_sizes_is_named_by_the_reader(small, tmp_path):
    copy = shutil.copytree(small, tmp_path / "bare")
    (copy / "manifest.json").write_text(json.dumps({"rows": 96}))  # like reference_builder.py writes
    shard = copy / "data-00000-of-00002.arrow"
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.warns(UserWarning, match="lists no shards"):
        with pytest.raises(BertmodelError, match=r"data-00000-of-00002.arrow: not a readable Arrow IPC stream"):
            open_shard_dir(copy)


def test_missing_shard_file_is_named(small, tmp_path):
    copy = shutil.copytree(small, tmp_path / "gone")
    (copy / "data-00001-of-00002.arrow").unlink()
    with pytest.raises(BertmodelError, match=r"data-00001-of-00002.arrow: listed in manifest.json but missing"):
        open_shard_dir(copy)


def test_wrong_column_type_is_named(small, tmp_path):
    copy = shutil.copytree(small, tmp_path / "types")
    shard = copy / "data-00000-of-00002.arrow"
    table = pa.ipc.open_stream(shard.read_bytes()).read_all()  # not memory-mapped: we overwrite the file
    table = table.set_column(4, "next_sentence_label", table.column(4).cast(pa.int64()))
    with pa.ipc.new_stream(str(shard), table.schema) as w:
        w.write_table(table)
    with pytest.raises(BertmodelError, match=r"next_sentence_label has type int64, want int8"):
        _open_ignoring_size(copy)


def _open_ignoring_size(directory):
    manifest = json.loads((directory / "manifest.json").read_text())
    for s in manifest["shards"]:
        s.pop("bytes"), s.pop("sha256")
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return open_shard_dir(directory)


def test_rows_longer_than_the_model_are_rejected(small):
    ds = ShardDataset([open_shard_dir(small)])
    with pytest.raises(BertmodelError, match=r"more than the model's 16 positions"):
        ds.collate(np.arange(8), max_len=16)


def test_tokenizer_from_manifest_and_files(small):
    d = open_shard_dir(small)
    assert d.tokenizer.vocab_size == 255
    assert d.tokenizer.special_ids == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert set(d.tokenizer.files) == {"vocab.txt", "tokenizer.json", "tokenizer_config.json",
                                      "special_tokens_map.json"}
    assert (d.max_seq_length, d.max_predictions_per_seq) == (64, 10)


def test_a_tokenizer_json_is_a_tokenizer_too(tmp_path):
    # README: a TOKDIR, a tokenizer.json or a bare vocab.txt wherever a tokenizer is taken.
    from bertmodel.data.shards import tokenizer_info
    from bertprep.tokenizer import build_tokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s"]
    build_tokenizer(words, lowercase=True).save(tmp_path / "tok")
    from_dir = tokenizer_info(tmp_path / "tok")
    from_json = tokenizer_info(tmp_path / "tok" / "tokenizer.json")
    assert from_json.vocab_size == from_dir.vocab_size == 8
    assert from_json.special_ids == from_dir.special_ids == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert from_json.same_as(from_dir) is None
    assert from_json.files["vocab.txt"].read_text() == (tmp_path / "tok" / "vocab.txt").read_text()
