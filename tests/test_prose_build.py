"""A wrapped book through train-tokenizer, build-shards and inspect: --sentences prose
gives chapter-sized documents and good pairs; the same book read a line per sentence
makes a document of every paragraph, and build-shards and inspect say so, once."""
from __future__ import annotations

import json
import random
import textwrap

import pytest
from click.testing import CliRunner

from bertprep.cli import main
from shard_fixtures import WORDS, write_vocab

SEPARATOR = r"^CHAPTER \d+\.$|^[*]{3} (START|END) OF"
CHAPTERS = 40
SPLIT_WORD = "fisherman"  # in the test vocabulary, never written whole in the book


def write_book(path, seed=0):
    """A Project Gutenberg-like file: header, chapters of paragraphs wrapped at 60
    columns with a blank line between, one "fisher-" / "man" line break per chapter."""
    rng = random.Random(seed)
    words = [w for w in WORDS if w != SPLIT_WORD]
    lines = ["The Project Gutenberg eBook of Test Tales", "",
             "*** START OF THE PROJECT GUTENBERG EBOOK TEST TALES ***", ""]
    for chapter in range(1, CHAPTERS + 1):
        lines += [f"CHAPTER {chapter}.", ""]
        for _ in range(rng.randint(20, 30)):
            sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 14))).capitalize() + "."
                         for _ in range(rng.randint(2, 5))]
            lines += textwrap.wrap(" ".join(sentences), 60) + [""]
        lines += ["The old fisher-", "man opened the shop.", ""]
    lines += ["*** END OF THE PROJECT GUTENBERG EBOOK TEST TALES ***", "", "Licence text."]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def book(tmp_path):
    return write_book(tmp_path / "book.txt")


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def build(tmp_path, book, out, *layout):
    return invoke("build-shards", book, *layout, "--tokenizer", write_vocab(tmp_path / "vocab.txt"),
                  "--out", tmp_path / out, "--quiet", "--workers", "1", "--cache-dir", tmp_path / "cache")


def test_prose_build_has_chapter_documents_and_no_warning(tmp_path, book):
    result = build(tmp_path, book, "prose", "--sentences", "prose", "--document-separator", SEPARATOR)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    # The vocabulary knows "fisherman": build-shards joins every one of those line breaks.
    assert f"; {CHAPTERS} words split at a line end re-joined" in result.stdout
    manifest = json.loads((tmp_path / "prose" / "manifest.json").read_text())
    assert manifest["corpus"]["sentences"] == "prose"
    assert manifest["corpus"]["document_separator"] == SEPARATOR
    assert manifest["totals"]["documents"] == CHAPTERS + 2  # the header and the licence too
    stats = manifest["statistics"]
    assert stats["next_sentence_random_fraction"] < 0.6
    assert stats["mean_length"] > 0.8 * 128
    report = invoke("inspect", tmp_path / "prose")
    assert report.exit_code == 0, report.output
    pairs = [line for line in report.stdout.splitlines() if line.startswith("pairs: ")]
    assert pairs == [f"pairs: NSP random B {stats['next_sentence_random_fraction']:.3f} (about 0.5 expected), "
                     f"{manifest['totals']['single_sentence_chunks'] / manifest['totals']['chunks']:.1%} "
                     f"single-sentence chunks, {CHAPTERS + 2} documents of "
                     f"{manifest['totals']['sentences'] / (CHAPTERS + 2):.1f} sentences "
                     f"({manifest['totals']['corpus_tokens'] / (CHAPTERS + 2):,.0f} tokens) on average, "
                     f"mean row length {stats['mean_length']:.1f} of 128"]
    assert "warning" not in report.stdout


def test_the_same_book_read_by_lines_warns_once_with_figures_and_the_fix(tmp_path, book):
    result = build(tmp_path, book, "lines")
    assert result.exit_code == 0, result.output
    [warning] = result.stderr.splitlines()
    manifest = json.loads((tmp_path / "lines" / "manifest.json").read_text())
    totals, stats = manifest["totals"], manifest["statistics"]
    paragraphs = book.read_text().count("\n\n")
    assert totals["documents"] > 10 * CHAPTERS and totals["documents"] <= paragraphs + 1
    assert stats["next_sentence_random_fraction"] >= 0.625 or stats["mean_length"] < 64
    assert warning.startswith(
        f"warning: the NSP pairs degenerate: NSP random B {stats['next_sentence_random_fraction']:.3f} "
        "(about 0.5 expected), ")
    assert f"{totals['documents']:,} documents of " in warning
    assert f"mean row length {stats['mean_length']:.1f} of 128; likely cause: documents are short (" in warning
    assert warning.endswith("if each paragraph became a document (hard-wrapped books or articles read with "
                            "--sentences lines), use --sentences prose (a document per file, or per "
                            "--document-separator section)")
    report = invoke("inspect", tmp_path / "lines")
    assert report.exit_code == 0, report.output
    cause = warning.split("; likely cause: ", 1)[1]
    assert f"warning: the NSP pairs degenerate; likely cause: {cause}" in report.stdout.splitlines()
    as_json = json.loads(invoke("inspect", tmp_path / "lines", "--json").stdout)["pairs"]
    assert as_json["degenerate"] is True and as_json["documents"] == totals["documents"]
    assert as_json["warning"] == warning.removeprefix("warning: ")


def test_train_tokenizer_reads_prose_without_a_vocabulary(tmp_path, book):
    result = invoke("train-tokenizer", book, "--sentences", "prose", "--document-separator", SEPARATOR,
                    "--out", tmp_path / "tok", "--vocab-size", "120", "--quiet")
    assert result.exit_code == 0, result.output
    # No vocabulary yet, and "fisherman" is nowhere else in the book: the hyphen stays.
    assert f"read 1 file, {book.stat().st_size / 1000:,.1f} kB, {CHAPTERS + 2} documents, " in result.stdout
    assert "re-joined" not in result.stdout


def test_one_prose_file_without_a_separator_is_one_document(tmp_path, book):
    result = build(tmp_path, book, "one", "--sentences", "prose")
    assert result.exit_code == 1
    assert result.output == (f"Error: {book}: NSP needs at least two documents, found 1 (in --sentences prose "
                             "a document is a file: give several, or cut them with --document-separator)\n")
