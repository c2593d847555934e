"""bertprep.corpus.spec on small self-written files: formats, boundaries, errors, fingerprints."""
from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import re

import pytest

from bertprep.corpus import spec as corpus
from bertprep.corpus import CorpusSpec, ReadStats, iter_documents, resolve_input_files
from bertprep.builder import input_fingerprints
from bertprep.errors import BertprepError

REFERENCE_TEXT = (
    "First sentence of doc one.\n"
    "  Second sentence, indented.  \n"
    "\n"
    "   \t \n"
    "\n"
    "Doc two only sentence.\n"
    " \n"
    "Doc three A.\n"
    "Doc three B.\n"
)
REFERENCE_DOCS = [
    ["First sentence of doc one.", "Second sentence, indented."],
    ["Doc two only sentence."],
    ["Doc three A.", "Doc three B."],
]


def read(*paths, stats=None, **spec):
    return list(iter_documents(CorpusSpec(paths=tuple(str(p) for p in paths), **spec), stats))


def error(*paths, **spec) -> str:
    with pytest.raises(BertprepError) as info:
        read(*paths, **spec)
    message = str(info.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- reference layout


def test_reference_layout_boundaries(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("\n\n" + REFERENCE_TEXT + "\n\n")
    stats = ReadStats()
    assert read(path, stats=stats) == REFERENCE_DOCS
    assert (stats.files, stats.documents, stats.sentences) == (1, 3, 5)
    assert stats.bytes == len(("\n\n" + REFERENCE_TEXT + "\n\n").encode())


def test_crlf_bom_and_no_final_newline(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"\xef\xbb\xbfOne.\r\nTwo.\r\n\r\nThree.")
    assert read(path) == [["One.", "Two."], ["Three."]]


def test_documents_never_span_files(tmp_path):
    (tmp_path / "a.txt").write_text("A one.\nA two.")  # no blank line, no newline at the end
    (tmp_path / "b.txt").write_text("B one.\n\nB two.\n")
    assert read(tmp_path / "a.txt", tmp_path / "b.txt") == [["A one.", "A two."], ["B one."], ["B two."]]


@pytest.mark.parametrize(
    "suffix, compress",
    [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)],
)
def test_compressed_text(tmp_path, suffix, compress):
    path = tmp_path / f"corpus.txt{suffix}"
    path.write_bytes(compress(REFERENCE_TEXT.encode()))
    stats = ReadStats()
    assert read(path, stats=stats) == REFERENCE_DOCS
    assert stats.bytes == len(REFERENCE_TEXT.encode())  # counted after decompression


def test_zstd_text(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    path = tmp_path / "corpus.zst"
    # two frames: read_across_frames must join them
    half = len(REFERENCE_TEXT) // 2
    compressor = zstandard.ZstdCompressor()
    path.write_bytes(
        compressor.compress(REFERENCE_TEXT[:half].encode()) + compressor.compress(REFERENCE_TEXT[half:].encode())
    )
    assert read(path) == REFERENCE_DOCS


def test_zstd_missing_module_is_one_line(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_zstandard(name, *args, **kwargs):
        if name == "zstandard":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_zstandard)
    path = tmp_path / "c.zst"
    path.write_bytes(b"whatever")
    assert error(path) == f"{path}: reading .zst needs the zstandard package (pip install 'bertprep[zstd]')"


def test_chunk_boundaries_do_not_matter(tmp_path, monkeypatch):
    """Multi-byte characters and lines cut by the 1 MiB chunking read the same."""
    text = "Ünïcödé 戦場 line.\nsecond line ✓.\n\n" * 50
    path = tmp_path / "a.txt"
    path.write_text(text, encoding="utf-8")
    expected = read(path)
    for chunk in (1, 2, 3, 7):
        monkeypatch.setattr(corpus.readers, "CHUNK_BYTES", chunk)
        stats = ReadStats()
        assert read(path, stats=stats) == expected
        assert stats.invalid_bytes == 0


# ---------------------------------------------------------------- WikiExtractor / WikiText


def test_wikiextractor_docs(tmp_path):
    path = tmp_path / "wiki_00"
    path.write_text(
        '<doc id="1" url="http://x?curid=1" title="AT&amp;T">\n'
        "AT&T\n"
        "\n"
        "AT&T is a company. It was founded in 1885.\n"
        "\n"
        "History.\n"
        "</doc>\n"
        '<doc id="2" url="http://x?curid=2" title="Alpha">\n'
        "Alpha\n"
        "Alpha is a letter.\n"
        "</doc>\n"
    )
    assert read(path) == [["AT&T is a company. It was founded in 1885.", "History."], ["Alpha is a letter."]]
    assert read(path, sentences="split") == [
        ["AT&T is a company.", "It was founded in 1885.", "History."],
        ["Alpha is a letter."],
    ]


WIKITEXT = (
    " = Alpha = \n"
    " \n"
    " Alpha is first . It has 3 @.@ 5 parts . \n"
    " \n"
    " = = History = = \n"
    " \n"
    " It began in 1 @,@ 000 BC . \n"
    " = = = Later = = = \n"
    " Then it ended . \n"
    " = Beta = \n"
    " Beta is second . \n"
)


def test_wikitext_articles_and_headings(tmp_path):
    path = tmp_path / "wiki.train.raw"
    path.write_text(WIKITEXT)
    assert read(path, sentences="split") == [
        ["Alpha is first .", "It has 3 @.@ 5 parts .", "It began in 1 @,@ 000 BC .", "Then it ended ."],
        ["Beta is second ."],
    ]
    # lines mode keeps a paragraph per line, with the same articles
    assert read(path) == [
        ["Alpha is first . It has 3 @.@ 5 parts .", "It began in 1 @,@ 000 BC .", "Then it ended ."],
        ["Beta is second ."],
    ]


def test_heading_lines_only_count_in_wikitext_files(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("Not a heading first.\n = Looks like one = \nEnd.\n")
    assert read(path) == [["Not a heading first.", "= Looks like one =", "End."]]


# ---------------------------------------------------------------- JSONL / Parquet / datasets


def test_jsonl_records_are_documents(tmp_path):
    path = tmp_path / "a.jsonl"
    records = [
        {"text": "Para one. Second sentence.\nPara two.", "id": 1},
        {"text": "", "id": 2},
        {"text": None, "id": 3},
        {"text": "  \n ", "id": 4},
        {"text": "Last record. Mr. Smith agreed.", "id": 5},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    assert read(path) == [["Para one. Second sentence.", "Para two."], ["Last record. Mr. Smith agreed."]]
    assert read(path, sentences="split") == [
        ["Para one.", "Second sentence.", "Para two."],
        ["Last record.", "Mr. Smith agreed."],
    ]


def test_jsonl_text_field_and_compression(tmp_path):
    path = tmp_path / "a.json.gz"
    path.write_bytes(gzip.compress(b'{"body": "Hello there.", "text": "ignored"}\n'))
    assert read(path, text_field="body") == [["Hello there."]]


def test_jsonl_bad_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "ok"}\n\n{"text": "broken"\n')
    assert error(path) == f"{path}:3: invalid JSON: Expecting ',' delimiter at column 18"


def test_jsonl_missing_field(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "ok"}\n{"body": "b", "id": 2}\n')
    assert error(path) == f"{path}:2: no 'text' field (fields: body, id); choose one with --text-field"
    assert error(path, text_field="content") == (
        f"{path}:1: no field 'content' (fields: text); choose one with --text-field"
    )


def test_jsonl_non_string_field_and_array(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": ["a", "b"]}\n')
    assert error(path) == f"{path}:1: field 'text' is list, expected a string"
    path.write_text('[{"text": "a"},\n{"text": "b"}]\n')
    assert error(path) == f"{path}:1: a JSON array; expected JSON Lines (one object per line)"
    path.write_text('"just a string"\n')
    assert error(path) == f"{path}:1: expected a JSON object, got str"


def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "a.parquet"
    table = pa.table({"id": [1, 2, 3], "text": ["One. Two.\nThree.", None, "Four."]})
    pq.write_table(table, path, row_group_size=2)
    stats = ReadStats()
    assert read(path, stats=stats, sentences="split") == [["One.", "Two.", "Three."], ["Four."]]
    assert stats.bytes == len("One. Two.\nThree.") + len("Four.")
    assert error(path, text_field="body") == (
        f"{path}: no field 'body' (fields: id, text); choose one with --text-field"
    )
    assert error(path, text_field="id") == f"{path}: column 'id' is int64, expected a string"
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    assert error(bad).startswith(f"{bad}: not a readable Parquet file (")


@pytest.fixture(scope="module")
def saved_datasets(tmp_path_factory):
    datasets = pytest.importorskip("datasets")
    root = tmp_path_factory.mktemp("datasets")
    single = datasets.Dataset.from_dict({"text": ["Doc one. Sentence two.", "Doc two."], "n": [1, 2]})
    single.save_to_disk(str(root / "single"))
    datasets.DatasetDict(
        {"train": single, "validation": datasets.Dataset.from_dict({"text": ["Held out."], "n": [3]})}
    ).save_to_disk(str(root / "dict"))
    return root


def test_save_to_disk_dir_as_input_and_as_dataset(saved_datasets):
    single = saved_datasets / "single"
    expected = [["Doc one.", "Sentence two."], ["Doc two."]]
    assert read(single, sentences="split") == expected
    assert list(iter_documents(CorpusSpec(dataset=str(single), sentences="split"))) == expected
    assert resolve_input_files(CorpusSpec(paths=(str(single),))) == [single]


def test_dataset_dict_splits(saved_datasets):
    dataset_dict = saved_datasets / "dict"
    assert read(dataset_dict) == [["Doc one. Sentence two."], ["Doc two."]]
    assert read(dataset_dict, split="validation") == [["Held out."]]
    assert error(dataset_dict, split="test") == (
        f"dataset {dataset_dict}: no split 'test' (splits: train, validation)"
    )
    assert error(dataset_dict, text_field="body") == (
        f"dataset {dataset_dict}: no field 'body' (fields: n, text); choose one with --text-field"
    )


def test_split_must_apply_to_some_input(saved_datasets, tmp_path):
    import datasets

    single = saved_datasets / "single"  # saved with no split name
    for spec in ({"paths": (str(single),)}, {"dataset": str(single)}):
        assert len(list(iter_documents(CorpusSpec(**spec)))) == 2
        with pytest.raises(BertprepError) as info:
            list(iter_documents(CorpusSpec(split="test", **spec)))
        assert str(info.value) == (
            f"dataset {single}: --split 'test' does not apply: the directory holds one Dataset, "
            "not a DatasetDict, and it has no split name; drop --split to read it"
        )
    named = tmp_path / "named"
    datasets.Dataset.from_dict({"text": ["Only doc."]}, split="validation").save_to_disk(str(named))
    assert read(named, split="validation") == [["Only doc."]]
    assert error(named, split="train") == (
        f"dataset {named}: --split 'train' does not apply: the directory holds one Dataset, "
        "not a DatasetDict, and its split is 'validation'; drop --split to read it"
    )
    text = tmp_path / "a.txt"
    text.write_text("Hello.\n\nWorld.\n")
    assert error(text, split="test") == (
        "--split 'test' does not apply: no input is a dataset "
        "(it chooses a split of a saved DatasetDict or of --dataset NAME)"
    )
    # Beside a DatasetDict, --split chooses its split and the single Dataset is read whole.
    both = list(iter_documents(CorpusSpec(paths=(str(single),), dataset=str(saved_datasets / "dict"), split="validation")))
    assert both == [["Doc one. Sentence two."], ["Doc two."], ["Held out."]]


def test_dataset_by_name_offline_is_one_line(monkeypatch):
    datasets = pytest.importorskip("datasets")
    import huggingface_hub

    # offline mode, so the test does not wait on network retries
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(BertprepError) as info:
        list(iter_documents(CorpusSpec(dataset="surely-not/a-dataset-bertprep-test")))
    assert str(info.value).startswith("dataset surely-not/a-dataset-bertprep-test: cannot load (")
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- inputs


def test_directory_walk_and_glob_order(tmp_path, saved_datasets):
    for name in ["b/z.txt", "b/a.txt.gz", "a.jsonl", "c/wiki_00", ".hidden.txt", ".git/x.txt", "notes.png", "b/x.md"]:
        path = tmp_path / "in" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x\n")
    found = resolve_input_files(CorpusSpec(paths=(str(tmp_path / "in"),)))
    assert [p.relative_to(tmp_path / "in").as_posix() for p in found] == ["a.jsonl", "b/a.txt.gz", "b/z.txt", "c/wiki_00"]
    globbed = resolve_input_files(CorpusSpec(paths=(str(tmp_path / "in" / "**" / "*.txt"), str(tmp_path / "in"))))
    assert [p.relative_to(tmp_path / "in").as_posix() for p in globbed] == [
        "b/z.txt", "a.jsonl", "b/a.txt.gz", "c/wiki_00",  # glob first (sorted), then the walk, no duplicates
    ]


def test_saved_dataset_inside_a_directory_is_one_input(tmp_path, saved_datasets):
    import shutil

    shutil.copytree(saved_datasets / "single", tmp_path / "in" / "ds")
    (tmp_path / "in" / "a.txt").write_text("Text file.\n")
    found = resolve_input_files(CorpusSpec(paths=(str(tmp_path / "in"),)))
    assert [p.name for p in found] == ["a.txt", "ds"]
    assert read(tmp_path / "in") == [["Text file."], ["Doc one. Sentence two."], ["Doc two."]]


def test_input_errors(tmp_path):
    assert error(tmp_path / "missing.txt") == f"{tmp_path / 'missing.txt'}: no such file or directory"
    (tmp_path / "empty").mkdir()
    assert error(tmp_path / "empty") == f"{tmp_path / 'empty'}: no text, JSONL or Parquet files in this directory"
    assert error(tmp_path / "*.nothing") == f"{tmp_path / '*.nothing'}: no files match"
    with pytest.raises(BertprepError, match="^no input given: name files or directories, or a --dataset$"):
        resolve_input_files(CorpusSpec())
    with pytest.raises(TypeError):
        CorpusSpec(paths="a.txt")
    with pytest.raises(BertprepError, match="sentences must be one of lines, split"):
        CorpusSpec(paths=("a",), sentences="words")


def test_empty_corpus(tmp_path):
    (tmp_path / "a.txt").write_text("\n \n\t\n")
    (tmp_path / "b.txt").write_text("")
    assert error(tmp_path / "a.txt", tmp_path / "b.txt") == f"{tmp_path / 'a.txt'}, {tmp_path / 'b.txt'}: no text found"


def test_unreadable_file(tmp_path):
    import os

    path = tmp_path / "secret.txt"
    path.write_text("x\n")
    path.chmod(0)
    if os.access(path, os.R_OK):
        pytest.skip("running as a user who can read anything (root)")
    assert error(path) == f"{path}: permission denied"


# ---------------------------------------------------------------- bad bytes


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("Fine \ufffd already here.\n")  # a real U+FFFD is not counted
    bad = tmp_path / "bad.txt"
    # \xff: one; \xe2\x82 (truncated 3-byte char): one; \xc3\xc3: two; lone \x80: one
    bad.write_bytes(b"Caf\xff is open.\nPrice 5\xe2\x82 today.\n\n\xc3\xc3 and \x80 end.\n" + b"More text here.\n" * 10)
    stats = ReadStats()
    documents = read(good, bad, stats=stats)
    assert documents[1][:2] == ["Caf\ufffd is open.", "Price 5\ufffd today."]
    assert documents[2][0] == "\ufffd\ufffd and \ufffd end."
    assert (stats.invalid_bytes, stats.files_with_invalid) == (5, [str(bad)])
    assert stats.summary() == (
        f"2 files, 229 bytes, 3 documents, 14 sentences; 5 invalid byte sequences replaced in {bad}"
    )


def test_summary_counts_in_the_singular(tmp_path):
    path = tmp_path / "one.txt"
    path.write_bytes(b"Caf\xe9 au lait.\n")
    stats = ReadStats()
    assert read(path, stats=stats) == [["Caf\ufffd au lait."]]
    assert stats.summary() == f"1 file, 14 bytes, 1 document, 1 sentence; 1 invalid byte sequence replaced in {path}"
    path.write_bytes(b"\x80\n")
    assert error(path) == f"{path}: no usable text (1 undecodable byte sequence)"


def test_invalid_utf8_across_chunks(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_bytes(b"ab\xe2\x82\xac\xffcd \xef\xbf\xbd.\n" * 20)  # euro sign, one bad byte, real U+FFFD
    monkeypatch.setattr(corpus.readers, "CHUNK_BYTES", 3)
    stats = ReadStats()
    assert read(path, stats=stats)[0][0] == "ab€\ufffdcd \ufffd."
    assert stats.invalid_bytes == 20


def test_binary_files_are_refused(tmp_path):
    binary = tmp_path / "image.txt"
    binary.write_bytes(bytes(range(256)) * 64)
    assert error(binary) == (
        f"{binary}: looks like a binary file, not UTF-8 text (8,256 of its first 16,384 characters are NUL or undecodable)"
    )
    gz_named_txt = tmp_path / "data.txt"
    gz_named_txt.write_bytes(gzip.compress(bytes(range(256)) * 64))
    assert error(gz_named_txt) == f"{gz_named_txt}: looks like a binary file, not UTF-8 text (it starts like gzip data (name it .gz))"
    utf16 = tmp_path / "u16.txt"
    utf16.write_text("Hello world, this is UTF-16.\n" * 10, encoding="utf-16")
    assert error(utf16) == f"{utf16}: looks like a binary file, not UTF-8 text (it starts like UTF-16 text (convert it to UTF-8))"


def test_a_file_of_only_bad_bytes_is_refused(tmp_path):
    path = tmp_path / "junk.txt"
    # Below the binary threshold, but nothing usable: lines of only U+FFFD are no sentences
    # (they tokenize to nothing) and no document boundaries either.
    path.write_bytes(b"Real.\n\x80\x80\nText.\n")
    assert read(path) == [["Real.", "Text."]]
    path.write_bytes(b"\n" * 100 + b"\x80 \x00\x81\n\xff")
    assert error(path) == f"{path}: no usable text (3 undecodable byte sequences)"


@pytest.mark.parametrize(
    "suffix, compress, kind",
    [(".gz", gzip.compress, "gzip"), (".bz2", bz2.compress, "bzip2"), (".xz", lzma.compress, "xz")],
)
def test_truncated_compressed_files(tmp_path, suffix, compress, kind):
    path = tmp_path / f"corpus.txt{suffix}"
    data = compress(("A sentence of text here.\n" * 2000).encode())
    path.write_bytes(data[: len(data) // 2])
    message = error(path)
    assert re.fullmatch(re.escape(f"{path}: truncated or corrupt {kind} data (") + r".+\)", message), message


def test_corrupt_gzip_header(tmp_path):
    path = tmp_path / "corpus.gz"
    path.write_bytes(b"this is not gzip at all\n")
    assert error(path) == f"{path}: truncated or corrupt gzip data (Not a gzipped file (b'th'))"


# ---------------------------------------------------------------- long lines and documents


def test_long_line_is_cut_at_whitespace(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus.readers, "MAX_LINE_CHARS", 10)
    path = tmp_path / "a.txt"
    path.write_text("short\naaa bbb ccc ddd eee\nxxxxxxxxxxxxxxxxxxxxxxxx\n")
    stats = ReadStats()
    assert read(path, stats=stats) == [["short", "aaa bbb", "ccc ddd", "eee", "xxxxxxxxxx", "xxxxxxxxxx", "xxxx"]]
    assert stats.long_lines == 2
    assert stats.summary().endswith("; 2 lines over 10 characters cut")
    # the same when the long lines arrive in pieces across read chunks
    for chunk in (1, 3, 4, 11):
        monkeypatch.setattr(corpus.readers, "CHUNK_BYTES", chunk)
        stats = ReadStats()
        assert read(path, stats=stats) == [["short", "aaa bbb", "ccc ddd", "eee", "xxxxxxxxxx", "xxxxxxxxxx", "xxxx"]]
        assert stats.long_lines == 2


def test_long_record_lines_are_cut_too(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus.readers, "MAX_LINE_CHARS", 10)
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"text": "aaa bbb ccc ddd eee"}) + "\n")
    stats = ReadStats()
    assert read(path, stats=stats) == [["aaa bbb", "ccc ddd", "eee"]]
    assert stats.long_lines == 1


def test_long_documents_are_cut(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "MAX_DOCUMENT_SENTENCES", 3)
    path = tmp_path / "a.txt"
    path.write_text("".join(f"S{i}.\n" for i in range(7)))
    stats = ReadStats()
    assert read(path, stats=stats) == [["S0.", "S1.", "S2."], ["S3.", "S4.", "S5."], ["S6."]]
    assert stats.long_documents == 2


# ---------------------------------------------------------------- fingerprints and summary


def test_input_fingerprints(tmp_path, saved_datasets):
    path = tmp_path / "a.txt"
    path.write_bytes(b"Hello.\n")
    spec = CorpusSpec(paths=(str(path), str(saved_datasets / "single")), dataset=str(saved_datasets / "dict"), split="validation")
    fingerprints = input_fingerprints(spec)
    assert fingerprints[0] == {"path": str(path), "bytes": 7, "sha256": hashlib.sha256(b"Hello.\n").hexdigest()}
    single = saved_datasets / "single"
    state = json.loads((single / "state.json").read_text())
    arrow = (single / state["_data_files"][0]["filename"]).read_bytes()
    assert fingerprints[1] == {
        "path": str(single), "dataset": str(single), "config": None, "split": "validation",
        "fingerprint": state["_fingerprint"], "bytes": len(arrow), "sha256": hashlib.sha256(arrow).hexdigest(),
    }
    held_out = saved_datasets / "dict" / "validation"
    state = json.loads((held_out / "state.json").read_text())
    arrow = (held_out / state["_data_files"][0]["filename"]).read_bytes()
    assert fingerprints[2] == {
        "dataset": str(saved_datasets / "dict"), "config": None, "split": "validation",
        "fingerprint": state["_fingerprint"], "bytes": len(arrow), "sha256": hashlib.sha256(arrow).hexdigest(),
    }
    with pytest.raises(BertprepError, match="no split 'test'"):
        input_fingerprints(CorpusSpec(dataset=str(saved_datasets / "dict"), split="test"))


def test_summary_format():
    stats = ReadStats(files=3, bytes=12_345_678, documents=4567, sentences=45678)
    assert stats.summary() == "3 files, 12.3 MB, 4,567 documents, 45,678 sentences"
    stats.invalid_bytes = 12
    stats.files_with_invalid = [f"f{i}.txt" for i in range(7)]
    assert stats.summary() == (
        "3 files, 12.3 MB, 4,567 documents, 45,678 sentences; "
        "12 invalid byte sequences replaced in f0.txt, f1.txt, f2.txt, f3.txt, f4.txt and 2 more"
    )
    assert ReadStats(files=1, bytes=999).summary() == "1 file, 999 bytes, 0 documents, 0 sentences"


def test_json_lines_under_a_name_without_suffix_are_records(tmp_path):
    """A JSONL dump named without a suffix (the shared Korean petitions_2019-04) is read as
    records, not as text whose keys and quotes would become the corpus; WikiExtractor's
    suffix-less wiki_00 (<doc ...> lines) and a .txt file that starts with an object stay text."""
    records = [{"title": "하나", "content": "첫 문장입니다. 둘째 문장입니다."}, {"title": "둘", "content": "셋째 문장."}]
    dump = tmp_path / "petitions_2019-04"
    dump.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    assert read(dump, text_field="content") == [["첫 문장입니다. 둘째 문장입니다."], ["셋째 문장."]]
    assert read(tmp_path, text_field="content") == read(dump, text_field="content")  # found in a directory too
    wiki = tmp_path / "wiki" / "wiki_00"
    wiki.parent.mkdir()
    wiki.write_text('<doc id="1" url="u" title="T">\nT\n\nA sentence.\n</doc>\n')
    from bertprep.corpus.readers import format_of

    assert format_of(wiki) == "text" and format_of(dump) == "jsonl"
    named = tmp_path / "notes.txt"
    named.write_text('{"a": 1}\nplain text after it.\n')
    assert read(named) == [['{"a": 1}', "plain text after it."]]
