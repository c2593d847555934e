"""The partition plan (bertprep/builder/plan.py, bertprep/corpus/boundaries.py): cut without reading the
corpus, every document read by exactly one partition, none split, none lost. Checked
against the whole-file reader (`iter_documents`) on the real shared data and on drawn
files of every text layout."""
from __future__ import annotations

import gzip
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertprep.corpus import boundaries
from bertprep.corpus import CorpusSpec, ReadStats, iter_documents
from bertprep.errors import BertprepError
from bertprep.builder import merge_read_stats, plan_partitions, read_partition
from shared_data import SHARED_DATA


def planned_documents(spec: CorpusSpec, target: int) -> tuple[list, list]:
    plan = plan_partitions(spec, target)
    documents, counts = [], []
    for partition in plan:
        docs, read = read_partition(partition, spec)
        documents.extend(docs)
        counts.extend(read)
    return plan, documents, counts


def check_tiles(plan, path) -> None:
    """The pieces of one text file cover it exactly, in order, without overlap."""
    pieces = [p for part in plan for p in part.pieces if p.path == str(path.absolute())]
    assert pieces[0].start == 0 and pieces[-1].end == path.stat().st_size and pieces[-1].last
    for before, after in zip(pieces, pieces[1:]):
        assert before.end == after.start and not before.last


def assert_same_as_whole(spec: CorpusSpec, target: int) -> list:
    whole_stats = ReadStats()
    whole = list(iter_documents(spec, whole_stats))
    plan, documents, counts = planned_documents(spec, target)
    assert documents == whole
    assert merge_read_stats(counts).summary() == whole_stats.summary()
    return plan


REAL = [
    ("google_sample_text.txt", "lines", "blank"),
    ("wikitext-2-raw-train-head.txt", "lines", "heading"),
    ("enwiki_wikiextractor/wiki_00", "split", "doc"),
    ("enwiki_wikiextractor/wiki_01", "prose", "doc"),
]


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs ../shared/data (the real corpus files)")
@pytest.mark.parametrize("name, sentences, layout", REAL)
@pytest.mark.parametrize("target", [200, 4096, 50_000])
def test_real_files_planned_in_pieces_read_the_same_documents(name, sentences, layout, target):
    path = SHARED_DATA / name
    plan = assert_same_as_whole(CorpusSpec(paths=(str(path),), sentences=sentences), target)
    assert {p.layout for part in plan for p in part.pieces} == {layout}
    check_tiles(plan, path)
    if target < path.stat().st_size // 4:
        assert len(plan) > 2
    # Every cut is where the reader starts a document: the partition after it opens with one.
    for part in plan[1:]:
        head = path.read_bytes()[part.pieces[0].start:][:200].decode("utf-8", "replace")
        if layout == "doc":
            assert head.startswith("<doc ")
        elif layout == "heading":
            assert head.startswith(" = ") and not head.startswith(" = = ")
        else:
            assert path.read_bytes()[:part.pieces[0].start].endswith(b"\n\n")


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs ../shared/data (the real corpus files)")
def test_several_real_files_pack_into_partitions_in_input_order():
    spec = CorpusSpec(paths=(str(SHARED_DATA / "enwiki_wikiextractor"), str(SHARED_DATA / "google_sample_text.txt")),
                      sentences="split")
    plan = assert_same_as_whole(spec, 700_000)
    # 3 MB of WikiExtractor then 4 kB: partitions cross file ends, the small tail joins the last.
    assert any(len(part.pieces) > 1 for part in plan)
    assert plan[-1].pieces[-1].name.endswith("google_sample_text.txt")
    assert all(part.size >= 700_000 for part in plan[:-1])


# --- drawn files ---------------------------------------------------------------------

WORDS = st.text(alphabet=st.sampled_from(list("abcxyz .,é漢\u00a0\t-")), min_size=1, max_size=30)
SENTENCE = WORDS.filter(lambda s: s.strip())
BLANK = st.sampled_from(["", " ", "\t", "  \u00a0", "\u3000"])


@st.composite
def text_files(draw):
    """(bytes, --sentences, separator) of a file in one of the text layouts."""
    layout = draw(st.sampled_from(["blank", "doc", "heading", "separator"]))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    docs = draw(st.lists(st.lists(SENTENCE, min_size=1, max_size=12), min_size=1, max_size=25))
    lines: list[str] = [draw(BLANK) for _ in range(draw(st.integers(0, 2)))]
    for i, doc in enumerate(docs):
        if layout == "blank":
            lines += doc + [draw(BLANK) for _ in range(draw(st.integers(1, 3)))]
        elif layout == "doc":
            lines += [f'<doc id="{i}" url="u" title="T{i}">', f"T{i}"]
            for sentence in doc:
                lines += [sentence] + [draw(BLANK) for _ in range(draw(st.integers(0, 1)))]
            lines += ["</doc>"] + [draw(BLANK) for _ in range(draw(st.integers(0, 1)))]
        elif layout == "heading":
            lines += [f" = Title {i} = ", ""]
            for k, sentence in enumerate(doc):
                if k and draw(st.booleans()):
                    lines += [" = = Section = = ", ""]
                lines += [sentence, ""]
        else:
            lines += ["*** CHAPTER ***"] + doc + [draw(BLANK) for _ in range(draw(st.integers(0, 2)))]
    text = newline.join(lines)
    if draw(st.booleans()):
        text += newline  # with or without a final newline
    if draw(st.booleans()):
        text = "\ufeff" + text
    sentences = "prose" if layout == "separator" else draw(st.sampled_from(["lines", "split"]))
    separator = r"^\*\*\* CHAPTER" if layout == "separator" else None
    return text.encode(), sentences, separator


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text_files(), st.integers(1, 400))
def test_drawn_files_cut_anywhere_read_the_same_documents(tmp_path, drawn, target):
    data, sentences, separator = drawn
    path = tmp_path / "corpus.txt"
    path.write_bytes(data)
    spec = CorpusSpec(paths=(str(path),), sentences=sentences, document_separator=separator)
    try:
        whole = list(iter_documents(spec))
    except BertprepError:  # nothing but blank lines: no text
        whole = []
    plan, documents, _ = planned_documents(spec, target)
    assert documents == whole
    check_tiles(plan, path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(alphabet=st.sampled_from(list("ab \n\"\\é")), max_size=40), min_size=1, max_size=30),
       st.integers(1, 200), st.sampled_from(["\n", "\r\n"]))
def test_drawn_jsonl_cut_at_records_reads_the_same_documents(tmp_path, texts, target, newline):
    import json

    path = tmp_path / "records.jsonl"
    path.write_text(newline.join(json.dumps({"text": t}) for t in texts) + newline, encoding="utf-8")
    spec = CorpusSpec(paths=(str(path),))
    whole = list(iter_documents(spec)) if any(t.strip() for t in texts) else []
    plan, documents, _ = planned_documents(spec, target)
    assert documents == whole
    check_tiles(plan, path)


# --- cuts, one by one ----------------------------------------------------------------


def test_a_cut_on_a_boundary_stays_there_and_one_past_it_moves_to_the_next(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"a\nb\n\nc\r\nd\r\n \r\ne")  # documents end at bytes 5 and 14; no final newline
    size = path.stat().st_size
    assert [boundaries.find_cut(path, at, size, "blank") for at in (1, 4, 5, 6, 13, 14, 15)] == \
        [5, 5, 5, 14, 14, 14, size]
    doc = tmp_path / "wiki_00"
    doc.write_bytes(b'<doc id="1" title="A">\nA\nx\n</doc>\n<doc id="2" title="B">\nB\ny\n</doc>\n')
    second = doc.read_bytes().index(b'<doc id="2"')
    size = doc.stat().st_size
    assert [boundaries.find_cut(doc, at, size, "doc") for at in (1, second, second + 1)] == [second, second, size]


def test_a_document_longer_than_a_partition_is_never_split(tmp_path):
    path = tmp_path / "long.txt"
    long_doc = [f"Sentence {i} of the long document." for i in range(400)]
    short = "Short one.\nAnd more.\n\nShort two.\n\n" * 40
    path.write_text(short + "\n".join(long_doc) + "\n\n" + short, encoding="utf-8")
    spec = CorpusSpec(paths=(str(path),))
    plan = assert_same_as_whole(spec, 1024)
    holding = [part for part in plan if long_doc in read_partition(part, spec)[0]]
    assert len(plan) > 3 and len(holding) == 1 and holding[0].size > len("\n".join(long_doc))


def test_a_doc_block_inside_a_blank_line_file_cut_there_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_text("Plain one.\nTwo.\n\n" * 20 + '<doc id="1" title="X">\n' + "inside.\n\nstill inside.\n\n" * 50
                    + "</doc>\n", encoding="utf-8")
    spec = CorpusSpec(paths=(str(path),))
    with pytest.raises(BertprepError, match=f"^{path}: a <doc> block that does not start the file is still open"):
        planned_documents(spec, 300)
    assert planned_documents(spec, 1 << 20)[1] == list(iter_documents(spec))  # one piece: read as a whole file


def test_the_planner_reads_only_around_the_cuts(tmp_path, monkeypatch):
    """The driver's work follows the number of partitions, not the corpus's size."""
    path = tmp_path / "big.txt"
    path.write_text("A sentence of some words here.\nAnother sentence.\n\n" * 160_000, encoding="utf-8")  # 8 MB
    read = []
    real_open = open

    class Counting(io.BufferedReader):
        def read(self, n=-1):
            data = super().read(n)
            read.append(len(data))
            return data

    monkeypatch.setattr(boundaries.storage, "open_input", lambda p: Counting(real_open(p, "rb", buffering=0)))
    plan = plan_partitions(CorpusSpec(paths=(str(path),)), 512 * 1024)
    assert len(plan) == 16  # 15 of 512 KiB and a tail of 136 kB, over a quarter of one
    # The head (layout, binary check), then a window or two per cut.
    assert sum(read) < 4 * 65536 + len(plan) * (2 * boundaries.WINDOW + boundaries.MAX_BOUNDARY_LINE)
    assert sum(read) < path.stat().st_size / 8


# --- other inputs --------------------------------------------------------------------


def test_parquet_row_groups_and_saved_dataset_rows_are_planned_in_ranges(tmp_path):
    datasets = pytest.importorskip("datasets")
    texts = [f"Record {i} first sentence.\nIts second sentence." for i in range(300)]
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": texts}), table, row_group_size=20)
    plan = assert_same_as_whole(CorpusSpec(paths=(str(table),)), 2000)
    groups = [(p.start, p.end) for part in plan for p in part.pieces]
    assert len(groups) > 3 and groups[0][0] == 0 and groups[-1][1] == 15
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:]))
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(saved))
    plan = assert_same_as_whole(CorpusSpec(paths=(str(saved),)), 2000)
    rows = [(p.start, p.end) for part in plan for p in part.pieces]
    assert len(rows) > 3 and rows[0][0] == 0 and rows[-1][1] == 300
    assert all(a[1] == b[0] for a, b in zip(rows, rows[1:]))


def test_inputs_without_a_seekable_boundary_are_planned_whole(tmp_path):
    packed = tmp_path / "corpus.txt.gz"
    packed.write_bytes(gzip.compress(("One.\nTwo.\n\n" * 2000).encode()))
    prose = tmp_path / "book.txt"
    prose.write_text("A wrapped para-\ngraph of prose.\n\nAnother one.\n" * 500, encoding="utf-8")
    for spec in (CorpusSpec(paths=(str(packed),)), CorpusSpec(paths=(str(prose),), sentences="prose")):
        plan = assert_same_as_whole(spec, 1024)
        assert [(p.start, p.end, p.layout) for part in plan for p in part.pieces] in ([(0, None, None)],
                                                                                       [(0, prose.stat().st_size, None)])


def test_read_statistics_merge_per_input_and_an_unusable_input_is_named(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"Good one.\nTwo.\n\n" * 100 + b"Bad \xff byte.\n\n" + b"Good again.\n\n" * 100)
    plan = assert_same_as_whole(CorpusSpec(paths=(str(path),)), 256)
    assert len(plan) > 3
    junk = tmp_path / "junk.txt"
    junk.write_bytes(b"\n" * 100 + b"\x80 \x00\x81\n\xff")
    _, _, counts = planned_documents(CorpusSpec(paths=(str(path), str(junk))), 256)
    with pytest.raises(BertprepError, match=rf"^{junk}: no usable text \(3 undecodable byte sequences\)$"):
        merge_read_stats(counts)


# --- the driver of a build -----------------------------------------------------------


def test_a_build_reads_and_hashes_its_inputs_only_in_its_workers(tmp_path, monkeypatch):
    """With a worker pool, the driver process plans (a few bytes per cut) and reads no
    input otherwise: its readers and hashing are disabled here, the workers' are not."""
    import hashlib

    from bertprep.corpus import hf_datasets
    from bertprep.corpus import readers
    from bertprep.builder import BuildConfig, build_shards
    from shard_fixtures import shard_bytes, write_corpus, write_vocab

    first = write_corpus(tmp_path / "a.txt", documents=150, seed=1)
    second = write_corpus(tmp_path / "b.txt", documents=150, seed=2)
    vocab = write_vocab(tmp_path / "vocab.txt")
    spec = CorpusSpec(paths=(str(first), str(second)))
    options = {"partition_bytes": 4096, "num_shards": 2, "engine": "tokenizers"}
    build_shards(spec, vocab, tmp_path / "one", BuildConfig(workers=1, cache_dir=str(tmp_path / "c1"), **options),
                 progress=False)

    def refuse(*args, **kwargs):
        raise AssertionError("the driver read an input")

    for module, name in ((readers, "iter_chunks"), (readers, "hash_files"), (hf_datasets, "hash_files")):
        monkeypatch.setattr(module, name, refuse)
    result = build_shards(spec, vocab, tmp_path / "two", BuildConfig(workers=2, cache_dir=str(tmp_path / "c2"), **options),
                          progress=False)
    assert shard_bytes(tmp_path / "two") == shard_bytes(tmp_path / "one")
    assert [i["sha256"] for i in result.manifest["inputs"]] == [hashlib.sha256(p.read_bytes()).hexdigest()
                                                                 for p in (first, second)]
    assert result.manifest["totals"]["partitions"] > 10 and result.read_stats.files == 2


def test_a_bad_record_far_into_a_jsonl_file_is_named_by_its_line(tmp_path):
    import json

    path = tmp_path / "records.jsonl"
    lines = [json.dumps({"text": f"Record {i}. It has two sentences."}) for i in range(500)]
    lines[433] = '{"text": "broken'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = CorpusSpec(paths=(str(path),))
    plan = plan_partitions(spec, 1024)
    assert len(plan) > 10 and plan[-1].pieces[0].start > 0
    with pytest.raises(BertprepError) as whole:
        list(iter_documents(spec))
    with pytest.raises(BertprepError) as planned:
        planned_documents(spec, 1024)
    assert str(planned.value) == str(whole.value) == f"{path}:434: invalid JSON: Unterminated string starting at column 10"


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs ../shared/data (the real corpus files)")
def test_an_object_store_input_is_cut_by_seeking_in_it():
    """The planner and the readers seek in a store object as in a file (fsspec's
    in-memory store stands in for S3 here; tests/test_object_store.py runs a real one)."""
    fsspec = pytest.importorskip("fsspec")
    store = fsspec.filesystem("memory")
    store.pipe("/plan-test/wiki_00", (SHARED_DATA / "enwiki_wikiextractor" / "wiki_00").read_bytes())
    try:
        spec = CorpusSpec(paths=("memory://plan-test/wiki_00",), sentences="split")
        plan = assert_same_as_whole(spec, 50_000)
        assert len(plan) > 10 and {p.path for part in plan for p in part.pieces} == {"memory://plan-test/wiki_00"}
    finally:
        store.rm("/plan-test", recursive=True)
