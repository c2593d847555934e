"""bertprep.corpus.spec on the real files in shared/data (skipped where they are absent).

The expected counts are checked independently below from line counts: WikiText-2 head
has 2,106 lines of which 558 are headings (58 top-level); each WikiExtractor file's
sentences in "lines" mode are its non-blank lines minus the <doc>/</doc> tags and titles.
"""
from __future__ import annotations


import pytest

from bertprep.corpus import CorpusSpec, ReadStats, iter_documents

from shared_data import SHARED_DATA as DATA  # noqa: E402  ../shared/data beside the checkout
WIKITEXT = DATA / "wikitext-2-raw-train-head.txt"
WIKIEXTRACTOR = DATA / "enwiki_wikiextractor"
GOOGLE = DATA / "google_sample_text.txt"


def read(path, sentences="lines"):
    if not path.exists():
        pytest.skip(f"shared data not found at {path}")
    stats = ReadStats()
    documents = list(iter_documents(CorpusSpec(paths=(str(path),), sentences=sentences), stats))
    return documents, stats


@pytest.mark.parametrize("mode, sentences", [("lines", 1548), ("split", 6862)])
def test_wikitext_articles(mode, sentences):
    documents, stats = read(WIKITEXT, mode)
    assert (stats.documents, stats.sentences, stats.bytes, stats.invalid_bytes) == (58, sentences, 993_577, 0)
    assert len(documents) == 58
    lines = WIKITEXT.read_text(encoding="utf-8").split("\n")
    headings = [line for line in lines if line.startswith(" = ")]
    assert (len(lines) - 1, len(headings)) == (2106, 558)  # so 1,548 paragraphs
    assert not any(s.startswith("=") for d in documents for s in d)
    assert documents[0][0].startswith("Senjō no Valkyria 3 : Unrecorded Chronicles")
    assert documents[1][0].startswith("The Tower Building of the Little Rock Arsenal , also known as U.S. Arsenal Building , is a building")
    assert documents[-1][0].startswith("Sir Robert Eric Mortimer Wheeler")


@pytest.mark.parametrize(
    "name, documents, lines_sentences, split_sentences",
    [("wiki_00", 38, 2615, 7794), ("wiki_01", 53, 2942, 7928), ("wiki_02", 40, 2785, 7845)],
)
def test_wikiextractor_files(name, documents, lines_sentences, split_sentences):
    path = WIKIEXTRACTOR / name
    found, stats = read(path)
    assert (stats.documents, stats.sentences) == (documents, lines_sentences)
    text = path.read_text(encoding="utf-8").split("\n")
    non_blank = [line for line in text if line.strip()]
    tags = [line for line in non_blank if line.startswith(("<doc ", "</doc>"))]
    assert len(non_blank) - len(tags) - documents == lines_sentences  # titles dropped
    assert not any(s.startswith(("<doc", "</doc")) for d in found for s in d)
    _, stats = read(path, "split")
    assert (stats.documents, stats.sentences) == (documents, split_sentences)


def test_wikiextractor_directory():
    documents, stats = read(WIKIEXTRACTOR)
    assert (stats.files, stats.documents, stats.sentences, stats.bytes) == (3, 131, 8342, 3_066_975)
    assert documents[0][0].startswith("Anarchism is a political philosophy")  # the title line "Anarchism" dropped
    assert documents[-1][0].startswith("In mathematics, the axiom of choice")
    assert stats.summary() == "3 files, 3.1 MB, 131 documents, 8,342 sentences"


def test_google_sample_text():
    documents, stats = read(GOOGLE)
    assert [len(d) for d in documents] == [3, 13, 15]
    assert documents[0][0] == "This text is included to make sure Unicode is handled properly: 力加勝北区ᴵᴺᵀᵃছজটডণত"
    _, stats = read(GOOGLE, "split")
    assert (stats.documents, stats.sentences) == (3, 33)
