"""The degenerate-pairs check: which figures warn, and the cause each warning names."""
from __future__ import annotations

import pytest

from bertprep.instances import PairFigures, degenerate_pairs_warning


def figures(documents, sentences, tokens_per_document, random_fraction, mean_length, single=0.1, max_seq_length=128):
    rows = 10_000
    return PairFigures(
        documents=documents, sentences=sentences, corpus_tokens=round(documents * tokens_per_document),
        chunks=rows, single_sentence_chunks=round(single * rows), rows=rows,
        next_sentence_random=round(random_fraction * rows), mean_length=mean_length, max_seq_length=max_seq_length,
    )


# Measured on the shared Wikipedia articles (split, 128 and 512) and WikiText (split).
GOOD = [figures(131, 23_567, 4923, 0.541, 115.4, 0.082), figures(131, 23_567, 4923, 0.541, 379.9, 0.09, 512),
        figures(58, 6862, 3515, 0.515, 121.4, 0.021)]


@pytest.mark.parametrize("found", GOOD)
def test_real_layouts_do_not_warn(found):
    assert not found.degenerate()
    assert degenerate_pairs_warning(found, "split", None) is None


def test_the_wrapped_book_read_by_lines():
    # The figures of a Project Gutenberg collection read with --sentences lines.
    found = figures(21_718, 21_718 * 6, 52, 0.653, 57.0, single=0.306)
    assert degenerate_pairs_warning(found, "lines", None) == (
        "the NSP pairs degenerate: NSP random B 0.653 (about 0.5 expected), 30.6% single-sentence chunks, "
        "21,718 documents of 6.0 sentences (52 tokens) on average, mean row length 57.0 of 128; likely cause: "
        "documents are short (52 tokens on average, next to a target of 125); if each paragraph became a "
        "document (hard-wrapped books or articles read with --sentences lines), use --sentences prose "
        "(a document per file, or per --document-separator section)")


def test_a_high_random_fraction_alone_warns_and_long_sentences_are_named():
    # Wikipedia read a paragraph per "sentence": rows are full, but most chunks are one line.
    found = figures(131, 8345, 4923, 0.673, 123.0, single=0.337)
    assert found.mean_length > 0.9 * 128 and found.degenerate()
    assert degenerate_pairs_warning(found, "lines", None).endswith(
        "likely cause: sentences are long (mean 77 tokens) next to --max-seq-length 128, so most chunks are "
        "one sentence; if a line holds a whole paragraph, use --sentences split")


def test_short_rows_alone_warn():
    found = figures(500, 2000, 60, 0.55, 55.0)
    assert found.random_fraction < 0.625 and found.degenerate()


@pytest.mark.parametrize(
    "separator, cause",
    [
        ("^CHAPTER ", "documents are short (60 tokens on average, next to a target of 125): --document-separator "
                      "matches often; one that matches less often gives longer documents"),
        (None, "documents are short (60 tokens on average, next to a target of 125): the input files (or records) "
               "are short; if they are short texts by nature (posts, titles), a smaller --max-seq-length wastes less"),
    ],
)
def test_short_prose_documents_name_the_separator_or_the_files(separator, cause):
    found = figures(500, 2000, 60, 0.66, 55.0, single=0.32)
    assert degenerate_pairs_warning(found, "prose", separator).endswith(f"likely cause: {cause}")


def test_one_sentence_documents_and_empty_builds():
    found = figures(120, 120, 7, 1.0, 17.0, single=1.0)
    assert degenerate_pairs_warning(found, "split", None).endswith(
        "likely cause: every document is one sentence, so no pair can be is-next")
    empty = PairFigures(0, 0, 0, 0, 0, 0, 0, 0.0, 128)
    assert not empty.degenerate() and "single-sentence" not in empty.describe()


def test_sop_and_full_sentences_are_judged_by_length_only():
    # SOP's label is a coin and FULL-SENTENCES rows have none: a high labelled share is
    # not a sign of short documents there, short rows still are.
    from dataclasses import replace

    book = figures(21_718, 132_000, 52, 0.653, 100.0, 0.306)
    assert book.degenerate()  # as NSP pairs: the random fraction warns
    for pairs in ("sop", "none"):
        assert not replace(book, pairs=pairs).degenerate()
    short = replace(book, mean_length=57.0, pairs="sop")
    warning = degenerate_pairs_warning(short, "lines", None)
    assert warning.startswith("the SOP pairs degenerate: SOP swapped 0.653 (0.5 expected), 30.6% single-sentence chunks")
    assert "NSP" not in warning and "random B" not in warning
    one_sentence = replace(short, sentences=21_718)
    assert "every pair splits a sentence" in degenerate_pairs_warning(one_sentence, "split", None)
    rows = replace(one_sentence, pairs="none", next_sentence_random=0)
    warning = degenerate_pairs_warning(rows, "split", None)
    assert warning.startswith("the FULL-SENTENCES rows degenerate: 21,718 documents of 1.0 sentences")
    assert "single-sentence" not in warning and "every document is one sentence" not in warning
    assert warning.endswith("the last row of each partition is only partly filled")
    long_sentences = replace(rows, corpus_tokens=21_718 * 100)
    assert "so most rows are one sentence" in degenerate_pairs_warning(long_sentences, "split", None)
