"""A partition whose size the plan cannot know (a whole compressed file) is cut as it is
read into parts of about --partition-size: each a partition of its own from then on, so
the task holds one part, not the file; the result is deterministic and resumable."""
from __future__ import annotations

import gzip
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bertprep.cli import main as prep_main
from bertprep.corpus import CorpusSpec
from bertprep.builder import text_bytes
from bertprep.builder import cut_while_reading, plan_partitions, read_partition
from reliability_checks import finished_markers, invoke, kill_at
from shard_fixtures import check_shard_dir, shard_bytes, write_corpus, write_vocab

documents_strategy = st.lists(st.lists(st.text(alphabet="ab é漢", min_size=0, max_size=30), min_size=1, max_size=4),
                              min_size=0, max_size=60)


def chars(part) -> int:
    return text_bytes(part)  # what a part's size is counted in: UTF-8 and a newline per sentence


@settings(max_examples=300, deadline=None)
@given(documents_strategy, st.integers(min_value=1, max_value=200))
def test_parts_keep_every_document_in_order_and_are_cut_at_the_limit(documents, limit):
    parts = list(cut_while_reading(iter(documents), limit))
    assert len(parts) >= 1
    assert [d for part in parts for d in part] == documents  # none lost, none repeated, in order
    for i, part in enumerate(parts[:-1]):
        assert part, i
        # closed by the first document that brings it to the limit (not before, not after)
        assert chars(part) >= limit and chars(part[:-1]) < limit, (i, chars(part))
    if len(parts) > 1:
        last = parts[-1]
        # a tail under a quarter of the limit joins the part before it: the last part is
        # either a quarter of the limit, or a full part with that small tail behind it
        assert chars(last) >= limit // 4
    assert list(cut_while_reading(iter(documents), None)) == [documents]


def test_parts_are_drawn_while_reading():
    """The reader is not run to its end before the first part comes out."""
    read = []

    def documents():
        for i in range(100):
            read.append(i)
            yield [f"sentence {i} " * 3]

    parts = cut_while_reading(documents(), 100)
    next(parts)
    assert len(read) < 20


class Document(list):
    """A document that can be watched with a weak reference (a plain list cannot)."""


def test_a_part_handed_over_and_cleared_is_not_kept():
    """Once the consumer has cleared a part (as the pair task does once it is
    tokenized), none of its documents is alive any more, the last part included: the
    generator keeps no reference of its own while the consumer works."""
    import gc
    import weakref

    documents = (Document([f"sentence {i} " * 4]) for i in range(230))  # ~50 bytes each
    sizes = []
    for part in cut_while_reading(documents, 500):
        watched = [weakref.ref(d) for d in part]
        sizes.append(text_bytes(part))
        part.clear()
        gc.collect()
        assert all(w() is None for w in watched), len(sizes)
    assert len(sizes) > 10 and all(size >= 500 for size in sizes[:-1])


def _gzipped_corpus(tmp_path, documents=300, seed=7):
    plain = write_corpus(tmp_path / "corpus.txt", documents=documents, seed=seed)
    packed = tmp_path / "corpus.txt.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    return plain, packed


def test_a_compressed_file_builds_in_parts_with_the_same_bytes_for_any_worker_count(tmp_path):
    plain, packed = _gzipped_corpus(tmp_path)
    vocab = write_vocab(tmp_path / "vocab.txt")
    spec = CorpusSpec(paths=(str(packed),))
    [whole] = plan_partitions(spec, 8192)  # one partition: its text size is unknown when planning
    assert not whole.sized
    documents, _ = read_partition(whole, spec)
    expected_parts = len(list(cut_while_reading(iter(documents), 8192)))
    assert expected_parts >= 10  # ~180 KB of text
    outs = {}
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        result = invoke(prep_main, "build-shards", packed, "--tokenizer", vocab, "--out", out, "--partition-size", "8192",
                        "--num-shards", 3, "--workers", workers, "--cache-dir", tmp_path / f"cache{workers}", "--quiet")
        assert result.exit_code == 0, result.output
        check_shard_dir(out)
        outs[workers] = shard_bytes(out)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["totals"]["partitions"] == expected_parts
        assert manifest["totals"]["documents"] == 300
        assert manifest["totals"]["text_bytes"] == text_bytes(documents)  # every part's text counted once
    assert outs[1] == outs[2]


def test_a_cut_file_between_other_inputs_shifts_their_numbering_and_keeps_every_document(tmp_path):
    """A plain file before and after the cut one: the later file's partitions are
    numbered after the cut file's parts (not by their plan index), and every document of
    all three inputs is in the shards, the same for 1 and 2 workers."""
    before = write_corpus(tmp_path / "before.txt", documents=80, seed=1)
    _, packed = _gzipped_corpus(tmp_path)
    after = write_corpus(tmp_path / "after.txt", documents=80, seed=2)
    vocab = write_vocab(tmp_path / "vocab.txt")
    spec = CorpusSpec(paths=(str(before), str(packed), str(after)))
    plan = plan_partitions(spec, 8192)
    sized = [p.sized for p in plan]
    assert False in sized and sized.index(False) < len(sized) - 1  # a cut partition, then more
    documents = sum(len(read_partition(p, spec)[0]) for p in plan)
    parts = sum(1 if p.sized else len(list(cut_while_reading(iter(read_partition(p, spec)[0]), 8192))) for p in plan)
    assert parts > len(plan)
    outs = {}
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        result = invoke(prep_main, "build-shards", before, packed, after, "--tokenizer", vocab, "--out", out,
                        "--partition-size", "8192", "--num-shards", 3, "--workers", workers,
                        "--cache-dir", tmp_path / f"cache{workers}", "--quiet")
        assert result.exit_code == 0, result.output
        check_shard_dir(out)
        totals = json.loads((out / "manifest.json").read_text())["totals"]
        assert totals["partitions"] == parts and totals["documents"] == documents == 460
        outs[workers] = shard_bytes(out)
    assert outs[1] == outs[2]


def test_a_compressed_file_that_fits_one_part_builds_as_its_plain_twin(tmp_path):
    """Below --partition-size nothing is cut, and part 0 is named and seeded as an uncut
    partition: a .gz gives the bytes of the same text uncompressed."""
    plain, packed = _gzipped_corpus(tmp_path, documents=40)
    vocab = write_vocab(tmp_path / "vocab.txt")
    outs = []
    for corpus in (plain, packed):
        out = tmp_path / f"out-{corpus.suffix}"
        result = invoke(prep_main, "build-shards", corpus, "--tokenizer", vocab, "--out", out, "--num-shards", 2,
                        "--workers", 1, "--cache-dir", tmp_path / "cache", "--quiet")
        assert result.exit_code == 0, result.output
        outs.append({name: data for name, data in shard_bytes(out).items() if name != "manifest.json"})
    assert outs[0] == outs[1]  # the manifests differ only in naming their input


def test_a_build_killed_after_some_parts_resumes_to_the_same_bytes(tmp_path):
    plain, packed = _gzipped_corpus(tmp_path)
    vocab = write_vocab(tmp_path / "vocab.txt")
    options = [packed, "--tokenizer", vocab, "--partition-size", "8192", "--num-shards", 3, "--workers", 1, "--quiet"]
    straight = tmp_path / "straight"
    result = invoke(prep_main, "build-shards", *options, "--out", straight, "--cache-dir", tmp_path / "cache0")
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    args = ["build-shards", *options, "--out", out, "--cache-dir", tmp_path / "cache"]
    # killed while scattering the third part: the pair task (all parts) has finished
    kill_at("bertprep.builder.run:scatter_partition", "prep", args, tmp_path / "paused", after=2)
    finished = finished_markers(out)
    assert sum(m.startswith("pairs-") for m in finished) == 1 and sum(m.startswith("scatter-") for m in finished) == 2
    result = invoke(prep_main, *args)
    assert result.exit_code == 0, result.output
    assert shard_bytes(out) == shard_bytes(straight)
