"""build-shards end to end: the contract, determinism, caching, resume, locking."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pytest
from click.testing import CliRunner

from bertprep.builder import BuildConfig, build_shards, staging_path
from bertprep.cli import main
from bertprep.corpus import CorpusSpec
from bertprep.errors import BertprepError
from bertprep.storage import DirectoryLock
from shard_fixtures import SHARED_DATA, check_shard_dir, read_rows, shard_bytes, write_corpus, write_vocab


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus.txt", documents=80)


@pytest.fixture
def vocab(tmp_path):
    return write_vocab(tmp_path / "vocab.txt")


def build(corpus, vocab, out, cache, **options):
    options.setdefault("workers", 1)
    config = BuildConfig(cache_dir=str(cache), **options)
    return build_shards(CorpusSpec(paths=(str(corpus),)), vocab, out, config, progress=False)


def test_contract_datasets_and_manifest(corpus, vocab, tmp_path):
    import datasets

    out = tmp_path / "out"
    result = build(corpus, vocab, out, tmp_path / "cache", dupe_factor=3, max_seq_length=64, num_shards=3)
    manifest = check_shard_dir(out, max_seq_length=64)
    assert result.manifest == manifest
    assert not staging_path(out).exists()
    names = sorted(p.name for p in out.glob("*.arrow"))
    assert names == [f"data-0000{i}-of-00003.arrow" for i in range(3)]
    loaded = datasets.load_from_disk(str(out))
    assert len(loaded) == manifest["totals"]["rows"]
    assert loaded.features["input_ids"].feature.dtype == "uint16"
    single = datasets.Dataset.from_file(str(out / names[0]))
    assert len(single) == manifest["shards"][0]["rows"]
    # Shards within one row of equal size, totals and statistics consistent.
    sizes = [s["rows"] for s in manifest["shards"]]
    assert max(sizes) - min(sizes) <= 1
    stats = manifest["statistics"]
    rows = read_rows(out)
    assert stats["rows"] == len(rows)
    assert stats["tokens"] == sum(len(r["input_ids"]) for r in rows)
    assert stats["next_sentence_random"] == sum(r["next_sentence_label"] for r in rows)
    assert stats["masked_positions"] == sum(len(r["masked_lm_positions"]) for r in rows)
    assert manifest["options"]["dupe_factor"] == 3 and manifest["options"]["seed"] == 12345
    assert manifest["tokenizer"]["special_ids"]["mask"] == 6
    assert {"vocab.txt", "tokenizer.json"} <= set(manifest["tokenizer"]["files"])
    schema = pa.ipc.open_stream(pa.memory_map(str(out / names[0]))).schema
    assert str(schema.field("masked_lm_positions").type) == "list<item: uint16>"
    assert str(schema.field("next_sentence_label").type) == "int8"


def test_every_shard_mixes_the_whole_corpus(vocab, tmp_path):
    # Two input files, each its own documents: with a global shuffle every shard holds
    # rows from both, not one file per shard.
    first = tmp_path / "first.txt"
    second = tmp_path / "second.txt"
    first.write_text("\n\n".join("The river walked across the bridge . " * 3 for _ in range(40)))
    second.write_text("\n\n".join("Children played music in the evening . " * 3 for _ in range(40)))
    out = tmp_path / "out"
    config = BuildConfig(workers=1, num_shards=4, cache_dir=str(tmp_path / "c"), partition_bytes=2048)
    build_shards(CorpusSpec(paths=(str(first), str(second))), vocab, out, config, progress=False)
    vocab_list = (out / "vocab.txt").read_text().split()
    river, music = vocab_list.index("river"), vocab_list.index("music")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["totals"]["partitions"] >= 4  # each file spans its own partitions
    for shard in manifest["shards"]:
        table = pa.ipc.open_stream(pa.memory_map(str(out / shard["name"]))).read_all()
        labels_and_ids = [set(r["input_ids"]) | set(r["masked_lm_ids"]) for r in table.to_pylist()]
        assert any(river in s for s in labels_and_ids) and any(music in s for s in labels_and_ids)


def test_same_bytes_with_one_or_two_workers(corpus, vocab, tmp_path):
    one = build(corpus, vocab, tmp_path / "one", tmp_path / "c1", workers=1, partition_bytes=4096, num_shards=3)
    two = build(corpus, vocab, tmp_path / "two", tmp_path / "c2", workers=2, partition_bytes=4096, num_shards=3)
    assert one.manifest["totals"]["partitions"] > 3
    assert shard_bytes(tmp_path / "one") == shard_bytes(tmp_path / "two")
    assert one.manifest == two.manifest


def test_seed_changes_the_output(corpus, vocab, tmp_path):
    build(corpus, vocab, tmp_path / "a", tmp_path / "c", seed=1)
    build(corpus, vocab, tmp_path / "b", tmp_path / "c", seed=2)
    a, b = shard_bytes(tmp_path / "a"), shard_bytes(tmp_path / "b")
    assert a["data-00000-of-00001.arrow"] != b["data-00000-of-00001.arrow"]


def test_tokenized_partitions_are_cached(corpus, vocab, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    build(corpus, vocab, tmp_path / "a", cache, max_seq_length=128)
    cached = sorted(p.name for p in cache.rglob("*.npz"))
    assert cached

    def no_tokenizing(self, sentences):
        raise AssertionError("tokenized again")

    monkeypatch.setattr("bertprep.tokenizer.encoding.SentenceEncoder.encode", no_tokenizing)
    result = build(corpus, vocab, tmp_path / "b", cache, max_seq_length=64, seed=9, dupe_factor=2)
    check_shard_dir(tmp_path / "b", max_seq_length=64)
    assert result.manifest["totals"]["rows"] > 0
    assert sorted(p.name for p in cache.rglob("*.npz")) == cached


def test_existing_output_needs_overwrite_and_survives_a_failed_rebuild(corpus, vocab, tmp_path, monkeypatch):
    out = tmp_path / "out"
    build(corpus, vocab, out, tmp_path / "c")
    before = shard_bytes(out)
    with pytest.raises(BertprepError, match="--overwrite"):
        build(corpus, vocab, out, tmp_path / "c", seed=5)

    import errno

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    # The scatter files are the bulk of the intermediate writes: fail the first one.
    monkeypatch.setattr("bertprep.shards.writer.atomic_output", disk_full)
    config = BuildConfig(workers=1, cache_dir=str(tmp_path / "c"), seed=5)
    with pytest.raises(BertprepError, match="disk full"):
        build_shards(CorpusSpec(paths=(str(corpus),)), vocab, out, config, overwrite=True, progress=False)
    assert shard_bytes(out) == before  # the previous result is intact
    monkeypatch.undo()
    build_shards(CorpusSpec(paths=(str(corpus),)), vocab, out, config, overwrite=True, progress=False)
    assert shard_bytes(out) != before and json.loads((out / "manifest.json").read_text())["options"]["seed"] == 5


def test_second_concurrent_run_is_refused(corpus, vocab, tmp_path):
    out = tmp_path / "out"
    staging = staging_path(out)
    staging.mkdir()
    with DirectoryLock(staging):
        with pytest.raises(BertprepError, match="another build-shards run"):
            build(corpus, vocab, out, tmp_path / "c")
    assert not out.exists()


@pytest.mark.parametrize("marker", ["pairs-*.json", "scatter-*.json", "shard-*.json"])
def test_killed_run_resumes_to_the_same_bytes(vocab, tmp_path, marker):
    corpus = write_corpus(tmp_path / "corpus.txt", documents=1500, seed=3)
    common = [str(corpus), "--tokenizer", str(vocab), "--partition-size", "8KB", "--num-shards", "4",
              "--dupe-factor", "2", "--workers", "1", "--quiet", "--cache-dir", str(tmp_path / "cache")]
    cli = [sys.executable, "-c", "from bertprep.cli import main; main()", "build-shards"]
    subprocess.run(cli + common + ["--out", str(tmp_path / "straight")], check=True, capture_output=True)

    out = tmp_path / "killed"
    work = staging_path(out) / "work"
    proc = subprocess.Popen(cli + common + ["--out", str(out), "--cache-dir", str(tmp_path / "cache2")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not list(work.glob(marker)) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists()
    rerun = subprocess.run(cli + common + ["--out", str(out), "--cache-dir", str(tmp_path / "cache2")], capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert shard_bytes(out) == shard_bytes(tmp_path / "straight")
    assert not staging_path(out).exists()
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


def test_cli_errors_are_one_line(corpus, vocab, tmp_path):
    runner = CliRunner()
    base = ["build-shards", str(corpus), "--tokenizer", str(vocab), "--out", str(tmp_path / "o"), "--quiet"]
    cases = [
        (["--max-seq-length", "4"], "--max-seq-length: 4 is outside 8..8192 (the longest context of the models here; BERT has 512 positions)"),
        (["--max-seq-length", "9000"], "--max-seq-length: 9000 is outside 8..8192 (the longest context of the models here; BERT has 512 positions)"),
        (["--masked-lm-prob", "1.5"], "--masked-lm-prob: 1.5 is not strictly between 0 and 1"),
        (["--max-predictions-per-seq", "0"], "--max-predictions-per-seq: must be at least 1"),
        (["--workers", "0"], "--workers: must be at least 1"),
    ]
    for extra, message in cases:
        result = runner.invoke(main, base + extra)
        assert result.exit_code != 0
        assert result.output.strip() == f"Error: {message}"
    (tmp_path / "file").write_text("x")
    result = runner.invoke(main, ["build-shards", str(corpus), "--tokenizer", str(vocab), "--out", str(tmp_path / "file")])
    assert result.exit_code == 1 and "output path exists and is a file" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_one_document_corpus_is_an_error(vocab, tmp_path):
    lonely = tmp_path / "one.txt"
    lonely.write_text("The river walked.\nThe city played.\nThe boat opened.\n")
    with pytest.raises(BertprepError, match="NSP needs at least two documents, found 1"):
        build(lonely, vocab, tmp_path / "out", tmp_path / "c")
    assert not (tmp_path / "out").exists()


def test_inspect_remeasures(corpus, vocab, tmp_path):
    out = tmp_path / "out"
    build(corpus, vocab, out, tmp_path / "c", dupe_factor=4)
    runner = CliRunner()
    result = runner.invoke(main, ["inspect", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    manifest = json.loads((out / "manifest.json").read_text())
    assert report["rows"] == manifest["totals"]["rows"]
    assert report["tokens"] == manifest["statistics"]["tokens"]
    assert report["masked_positions"] == manifest["statistics"]["masked_positions"]
    assert report["mask_rate"]["observed"] == pytest.approx(report["mask_rate"]["formula"])
    shown = runner.invoke(main, ["inspect", str(out), "--show", "2"])
    assert shown.exit_code == 0
    assert "mask rate:" in shown.output and "  A: [CLS]" in shown.output and "  B: " in shown.output


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data is absent")
def test_real_wikipedia_shards_pass_the_contract_validator(tmp_path):
    wiki = sorted(str(p) for p in (SHARED_DATA / "enwiki_wikiextractor").iterdir())
    vocab = SHARED_DATA / "bert-base-uncased-vocab.txt"
    out = tmp_path / "out"
    config = BuildConfig(workers=2, dupe_factor=2, cache_dir=str(tmp_path / "c"), partition_bytes=1 << 20)
    build_shards(CorpusSpec(paths=tuple(wiki), sentences="split"), vocab, out, config, progress=False)
    manifest = check_shard_dir(out)
    tool = SHARED_DATA.parent / "tools" / "validate_shards.py"
    checked = subprocess.run([sys.executable, str(tool), str(out), "--vocab", str(vocab)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip().splitlines()[-1].startswith("OK:")
    stats = manifest["statistics"]
    assert manifest["totals"]["rows"] > 5000
    assert 0.52 < stats["next_sentence_random_fraction"] < 0.60
    assert abs(stats["share_mask"] - 0.8) < 0.02 and abs(stats["share_random"] - 0.1) < 0.02
    assert os.path.exists(out / "tokenizer.json")


def test_work_from_a_changed_input_is_not_reused(vocab, tmp_path, monkeypatch):
    # An interrupted build leaves OUT.partial; if the input changes before the rerun,
    # the rerun must start over, not mix old partitions into new shards.
    corpus = write_corpus(tmp_path / "corpus.txt", documents=80, seed=1)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("bertprep.builder.run.gather_shard", crash)
    with pytest.raises(KeyboardInterrupt):
        build(corpus, vocab, tmp_path / "out", tmp_path / "c")
    assert (staging_path(tmp_path / "out") / "work").is_dir()
    monkeypatch.undo()
    write_corpus(corpus, documents=80, seed=2)
    build(corpus, vocab, tmp_path / "out", tmp_path / "c")
    build(corpus, vocab, tmp_path / "fresh", tmp_path / "c2")
    assert shard_bytes(tmp_path / "out") == shard_bytes(tmp_path / "fresh")


def test_rebuild_with_another_tokenizer_in_one_process(corpus, vocab, tmp_path):
    # Workers (and the in-process executor) keep the loaded tokenizer; a rebuild of the
    # same OUT with another vocabulary must use the new one, and must not poison the
    # token cache shared by both builds.
    words = vocab.read_text().split("\n")
    other = tmp_path / "other-vocab.txt"
    other.write_text("\n".join(words[:7] + list(reversed(words[7:-1]))) + "\n")
    build(corpus, vocab, tmp_path / "out", tmp_path / "cache")
    config = BuildConfig(workers=1, cache_dir=str(tmp_path / "cache"))
    build_shards(CorpusSpec(paths=(str(corpus),)), other, tmp_path / "out", config, overwrite=True, progress=False)
    build(corpus, other, tmp_path / "fresh", tmp_path / "fresh-cache")
    assert shard_bytes(tmp_path / "out") == shard_bytes(tmp_path / "fresh")


def test_resume_after_the_token_cache_was_cleaned(corpus, vocab, tmp_path, monkeypatch):
    import shutil

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("bertprep.builder.run.scatter_partition", crash)
    with pytest.raises(KeyboardInterrupt):
        build(corpus, vocab, tmp_path / "out", tmp_path / "cache")
    monkeypatch.undo()
    shutil.rmtree(tmp_path / "cache")
    build(corpus, vocab, tmp_path / "out", tmp_path / "cache")
    build(corpus, vocab, tmp_path / "straight", tmp_path / "cache2")
    assert shard_bytes(tmp_path / "out") == shard_bytes(tmp_path / "straight")


VALIDATOR = SHARED_DATA.parent / "tools" / "validate_shards.py"


@pytest.mark.skipif(not VALIDATOR.exists(), reason="../shared/tools/validate_shards.py is absent")
def test_whole_word_mask_build_passes_the_contract_validator(tmp_path):
    """--whole-word-mask end to end: the validator's checks (with its exact count
    formula: this corpus's words are at most two pieces, so every row reaches its
    count), and every word of every row masked whole or not at all."""
    corpus = write_corpus(tmp_path / "corpus.txt", documents=150)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build-shards", str(corpus), "--tokenizer", str(vocab), "--out", str(out),
                                       "--whole-word-mask", "--workers", "1", "--quiet",
                                       "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    checked = subprocess.run([sys.executable, str(VALIDATOR), str(out), "--vocab", str(vocab)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tokens = vocab.read_text().splitlines()
    continuation = {i for i, t in enumerate(tokens) if t.startswith("##")}
    rows = read_rows(out)
    pieces_masked = 0
    for row in rows:
        ids, labels, chosen = row["input_ids"], row["masked_lm_ids"], set(row["masked_lm_positions"])
        first_b = row["token_type_ids"].index(1)
        original = list(ids)
        for p, label in zip(row["masked_lm_positions"], labels):
            original[p] = label
        for p in range(2, len(ids) - 1):
            if original[p] in continuation and p not in (1, first_b):
                assert (p in chosen) == (p - 1 in chosen), (p, original, sorted(chosen))
                pieces_masked += p in chosen
    assert pieces_masked > 100  # words of several pieces were masked, whole
