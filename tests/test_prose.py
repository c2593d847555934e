"""--sentences prose: hard-wrapped text joined into paragraphs, line-end hyphens, files
and --document-separator sections as documents, on text written here; the shared
Wikipedia/WikiText files; and a property: nothing but line-break whitespace and removed
hyphens is lost or added."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertprep.corpus import CorpusSpec, ReadStats, iter_documents
from bertprep.errors import BertprepError
from bertprep.corpus import join_is_one_word, join_paragraph, vocabulary_lookup
from bertprep.tokenizer import load_tokenizer

from shared_data import SHARED_DATA

BOOK = """The Project Gutenberg eBook of Two Chapters

*** START OF THE PROJECT GUTENBERG EBOOK TWO CHAPTERS ***

CHAPTER I.

It was a well-
known fact that the docu-
ment had been lost. Mr. Smith
said so himself.

Nobody be-
lieved him. The end-
ing was sad, and the document
was never found.

CHAPTER II.

A second chapter, with
two lines.
*** END OF THE PROJECT GUTENBERG EBOOK TWO CHAPTERS ***
Licence text.
"""
SEPARATOR = r"^CHAPTER [IVX]+\.$|^[*]{3} (START|END) OF"
CHAPTER_ONE = [
    "It was a well-known fact that the document had been lost.",
    "Mr. Smith said so himself.",
    "Nobody be-lieved him.",  # "believed" is nowhere else in the document: kept
    "The ending was sad, and the document was never found.",
]


def read(*paths, known_word=None, stats=None, **spec):
    return list(iter_documents(CorpusSpec(paths=tuple(map(str, paths)), sentences="prose", **spec), stats, known_word))


def book(tmp_path, name="book.txt", text=BOOK) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- joining lines


def test_a_file_is_one_document_of_joined_paragraphs(tmp_path):
    stats = ReadStats()
    [document] = read(book(tmp_path), stats=stats)
    assert document[:3] == ["The Project Gutenberg eBook of Two Chapters",
                            "*** START OF THE PROJECT GUTENBERG EBOOK TWO CHAPTERS ***", "CHAPTER I."]
    assert document[3:7] == CHAPTER_ONE
    # No blank line before "*** END": it joins the paragraph it follows.
    assert document[-2:] == ["CHAPTER II.", "A second chapter, with two lines. *** END OF THE PROJECT "
                             "GUTENBERG EBOOK TWO CHAPTERS *** Licence text."]
    assert (stats.documents, stats.sentences, stats.hyphens_removed) == (1, 9, 2)
    assert stats.summary().endswith("1 document, 9 sentences; 2 words split at a line end re-joined")


def test_separator_makes_sections_and_drops_its_lines(tmp_path):
    documents = read(book(tmp_path), document_separator=SEPARATOR)
    assert documents == [
        ["The Project Gutenberg eBook of Two Chapters"],
        CHAPTER_ONE,
        ["A second chapter, with two lines."],
        ["Licence text."],
    ]


def test_separators_in_a_row_make_no_empty_documents(tmp_path):
    path = book(tmp_path, text="CHAPTER I.\n\nCHAPTER II.\n\n\nOnly text.\nCHAPTER III.\n")
    assert read(path, document_separator=SEPARATOR) == [["Only text."]]


def test_vocabulary_joins_what_the_document_cannot_tell(tmp_path):
    vocabulary = {"believed", "known", "well"}
    documents = read(book(tmp_path), document_separator=SEPARATOR, known_word=vocabulary.__contains__)
    assert documents[1] == [CHAPTER_ONE[0], CHAPTER_ONE[1], "Nobody believed him.", CHAPTER_ONE[3]]


def test_the_documents_own_hyphenated_spelling_wins(tmp_path):
    text = "A well-known man.\nHe was well-\nknown and to-\nday he is a docu-\nment.\n"
    [document] = read(book(tmp_path, text=text), known_word={"wellknown", "today"}.__contains__)
    assert document == ["A well-known man.", "He was well-known and today he is a document."]


@pytest.mark.parametrize(
    "lines, joined, removed",
    [
        (["the docu-", "ment"], "the document", 1),  # "ment" is a suffix, never a word
        (["a self-", "evident truth"], "a self-evident truth", 0),  # compound: hyphen kept, no space
        (["Anglo-", "Saxon times"], "Anglo-Saxon times", 0),  # next line upper-case: not a split word
        (["habits,--", "quite"], "habits,-- quite", 0),  # a dash, not a hyphen
        (["pages 10-", "12 of it"], "pages 10- 12 of it", 0),  # a digit before the hyphen
        (["one", "two", "three"], "one two three", 0),
        (["educa-", "tion and situa-", "tions"], "education and situations", 2),
    ],
)
def test_join_paragraph(lines, joined, removed):
    def is_one_word(left, right):
        return join_is_one_word(left, right, set(), None)

    assert join_paragraph(lines, is_one_word) == (joined, removed)


def test_vocabulary_lookup_normalizes_as_the_tokenizer():
    vocab = SHARED_DATA / "bert-base-uncased-vocab.txt"
    if not vocab.exists():
        pytest.skip(f"shared data not found at {vocab}")
    known = vocabulary_lookup(load_tokenizer(vocab))
    assert known("Document") and known("document") and known("Café")  # uncased: lower-cased, accents off
    assert not known("docu") and not known("wellknown") and not known("ment")  # "##ment" is a piece, not a word


# ---------------------------------------------------------------- inputs


def test_several_files_compressed_directories_and_globs(tmp_path):
    import zstandard

    texts = ["First file, first\nparagraph.\n\nSecond para-\ngraph.\n", "Second file.\n", "Third\nfile.\n"]
    (tmp_path / "plain").mkdir()
    plain = [book(tmp_path / "plain", f"{i}.txt", t) for i, t in enumerate(texts)]
    # "paragraph" is written whole in the same document, so "para-" + "graph" is one word.
    expected = [["First file, first paragraph.", "Second paragraph."], ["Second file."], ["Third file."]]
    assert read(*plain) == expected
    assert read(tmp_path / "plain") == expected
    assert read(str(tmp_path / "plain" / "*.txt")) == expected
    packed = tmp_path / "packed"
    packed.mkdir()
    for i, (text, (suffix, compress)) in enumerate(zip(texts, [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)])):
        (packed / f"{i}.txt{suffix}").write_bytes(compress(text.encode()))
    (packed / "3.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(texts[0].encode()))
    assert read(packed) == expected + expected[:1]


def test_chunk_boundaries_do_not_matter(tmp_path, monkeypatch):
    path = book(tmp_path, text=BOOK * 20)
    whole = read(path, document_separator=SEPARATOR)
    monkeypatch.setattr("bertprep.corpus.readers.CHUNK_BYTES", 7)
    assert read(path, document_separator=SEPARATOR) == whole
    assert len(whole) == 1 + 20 * 3  # header, then (chapter I, chapter II, licence) per copy


def test_jsonl_records_are_wrapped_documents(tmp_path):
    path = tmp_path / "books.jsonl"
    records = [{"text": "A wrapped\nrecord.\n\nIts second para-\ngraph, and paragraph."},
               {"text": "CHAPTER I.\nOne.\nCHAPTER II.\nTwo."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert read(path, document_separator=SEPARATOR) == [
        ["A wrapped record.", "Its second paragraph, and paragraph."], ["One."], ["Two."]]


def test_long_documents_are_cut_without_losing_text(tmp_path, monkeypatch):
    monkeypatch.setattr("bertprep.corpus.spec.MAX_DOCUMENT_CHARS", 100)
    lines = [f"Line {i} of a long docu-\nment." for i in range(30)]
    path = book(tmp_path, text="\n".join(lines) + "\n")
    stats = ReadStats()
    documents = read(path, stats=stats)
    assert len(documents) > 2 and stats.long_documents == len(documents) - 1
    assert " ".join(s for d in documents for s in d) == " ".join(f"Line {i} of a long document." for i in range(30))


def test_bad_separators_are_one_line_errors():
    with pytest.raises(BertprepError, match=r"^--document-separator: '\(' is not a valid regular expression"):
        CorpusSpec(paths=("a.txt",), document_separator="(")
    with pytest.raises(BertprepError, match="matches an empty line"):
        CorpusSpec(paths=("a.txt",), document_separator="x*")


# ---------------------------------------------------------------- shared real data


def _shared(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared data not found at {path}")
    return path


@pytest.mark.parametrize("name", ["enwiki_wikiextractor", "wikitext-2-raw-train-head.txt"])
def test_unwrapped_wikipedia_reads_as_split(name):
    """WikiExtractor <doc>s and WikiText articles hold a paragraph per line: prose must not
    glue those paragraphs together, so it reads them exactly as --sentences split."""
    path = _shared(SHARED_DATA / name)
    split = list(iter_documents(CorpusSpec(paths=(str(path),), sentences="split")))
    assert read(path) == split
    assert len(split) in (131, 58)


def test_google_sample_as_prose_keeps_every_character():
    """Google's sample text has a sentence per line, a blank line between documents: read
    as prose, the file is one document whose sentences hold every non-space character."""
    path = _shared(SHARED_DATA / "google_sample_text.txt")
    [document] = read(path)
    text = path.read_text(encoding="utf-8")
    assert _non_space("".join(document)) == _non_space(text)
    assert len(document) > text.count("\n\n")  # paragraphs were split into sentences again


# ---------------------------------------------------------------- the property


def _non_space(text: str) -> str:
    return "".join(ch for ch in text if not ch.isspace())


def _only_line_end_hyphens_removed(original: str, output: str) -> bool:
    """Walk the original's non-space characters against the output's: a character may be
    skipped only if it is a hyphen that ends a line (before the next line's text)."""
    out = _non_space(output)
    j = 0
    lines = original.split("\n")
    for number, line in enumerate(lines):
        stripped = _non_space(line)
        for k, ch in enumerate(stripped):
            if j < len(out) and out[j] == ch:
                j += 1
            elif not (ch == "-" and k == len(stripped) - 1 and line.rstrip().endswith("-") and number + 1 < len(lines)):
                return False
    return j == len(out)


LINE = st.text(alphabet=st.sampled_from(list("abcdeXYZé019 .!?,-\"'()\t")), max_size=30)
TEXT = st.lists(st.one_of(LINE, st.just(""), st.just("   "), st.just("docu-"), st.just("ment of it.")), max_size=40)


@settings(max_examples=150, deadline=None)
@given(lines=TEXT, always_a_word=st.booleans())
def test_property_nothing_but_line_breaks_and_hyphens_is_lost(lines, always_a_word):
    text = "\n".join(lines)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory, "prose.txt")
        path.write_text(text, encoding="utf-8")
        stats = ReadStats()
        try:
            documents = read(path, stats=stats, known_word=(lambda word: True) if always_a_word else None)
        except BertprepError:  # "no text found": nothing but whitespace
            assert not _non_space(text)
            return
    output = "".join(s for d in documents for s in d)
    assert _only_line_end_hyphens_removed(text, output)
    assert len(_non_space(text)) - len(_non_space(output)) == stats.hyphens_removed
