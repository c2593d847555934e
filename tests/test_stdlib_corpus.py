"""The demo corpus from the standard library's docstrings, and its CLI command."""
from __future__ import annotations

import sys
import textwrap

import pytest
from click.testing import CliRunner

from bertprep.corpus import CorpusSpec, ReadStats, format_size, iter_documents
from bertprep.errors import BertprepError
from bertprep.corpus import (MIN_SENTENCES, docstring_sentences, iter_stdlib_modules, module_documents, stdlib_dir,
                             write_stdlib_corpus)


def test_docstring_cleaning():
    docstring = textwrap.dedent(
        """\
        Return the frobnicated value of an object.

        The object is first normalized. Then it is frobnicated twice, e.g. by
        the default frobnicator, and returned.

        Example::

            x = frob(y)
            assert x == 2

        >>> frob(3)
        6
        Output lines after a doctest belong to it.

        :param obj: the object to frobnicate, which is a long description.
        Short one.
        ----------
        Raises ValueError when the object cannot be frobnicated at all.
        """
    )
    assert docstring_sentences(docstring) == [
        "Return the frobnicated value of an object.",
        "The object is first normalized.",
        "Then it is frobnicated twice, e.g. by the default frobnicator, and returned.",
        "Raises ValueError when the object cannot be frobnicated at all.",
    ]


def test_module_documents(tmp_path):
    module = tmp_path / "mod.py"
    module.write_text(
        textwrap.dedent(
            '''\
            """The module is about widgets. Widgets are useful things."""

            def make():
                """Make a new widget for the caller."""

            class Small:
                """A small class with one sentence only."""

            class Big:
                """The big class holds many widgets. It keeps them in order."""

                def add(self, widget):
                    """Add a widget to the big class."""

                def remove(self, widget):
                    """Add a widget to the big class."""

            if sys.platform == "win32":
                def make():
                    """Make a new widget for the caller."""
            '''
        )
    )
    assert module_documents(module) == [
        [
            "The module is about widgets.",
            "Widgets are useful things.",
            "Make a new widget for the caller.",
            "A small class with one sentence only.",
        ],
        ["The big class holds many widgets.", "It keeps them in order.", "Add a widget to the big class."],
    ]
    (tmp_path / "bad.py").write_text("def broken(:\n")
    assert module_documents(tmp_path / "bad.py") == []


def test_module_walk_skips_tests_and_idle():
    relative = [p.relative_to(stdlib_dir()).as_posix() for p in iter_stdlib_modules()]
    assert relative == sorted(relative, key=lambda r: r.split("/"))
    assert "os.py" in relative and "json/decoder.py" in relative
    assert not any(part in ("test", "tests", "idlelib") for r in relative for part in r.split("/")[:-1])
    assert not any(r.split("/")[-1].startswith("test_") for r in relative)


def test_write_small_corpus(tmp_path):
    small = tmp_path / "small.txt"
    figures = write_stdlib_corpus(small, max_bytes=50_000)
    text = small.read_text(encoding="utf-8")
    assert figures["bytes"] == len(text.encode()) <= 50_000
    assert figures["bytes"] > 45_000  # filled up to the limit, cut at a sentence
    assert not text.startswith("\n") and text.endswith("\n") and "\n\n\n" not in text
    assert ">>>" not in text
    stats = ReadStats()
    documents = list(iter_documents(CorpusSpec(paths=(str(small),)), stats))
    assert (stats.documents, stats.sentences) == (figures["documents"], figures["sentences"])
    assert min(len(d) for d in documents) >= MIN_SENTENCES
    assert figures["python"] == sys.version.split()[0]

    again = tmp_path / "again.txt"
    write_stdlib_corpus(again, max_bytes=50_000)
    assert again.read_bytes() == small.read_bytes()  # deterministic

    bigger = tmp_path / "bigger.txt"
    write_stdlib_corpus(bigger, max_bytes=120_000)
    small_lines = text.split("\n")[:-1]
    assert bigger.read_text(encoding="utf-8").split("\n")[: len(small_lines)] == small_lines  # a prefix
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_write_refuses_and_errors(tmp_path):
    out = tmp_path / "c.txt"
    out.write_text("keep me\n")
    with pytest.raises(BertprepError, match=r"c\.txt: already exists \(use --overwrite to replace it\)$"):
        write_stdlib_corpus(out, max_bytes=10_000, overwrite=False)
    assert out.read_text() == "keep me\n"
    with pytest.raises(BertprepError, match="^max-bytes 100 is too small for even one document$"):
        write_stdlib_corpus(out, max_bytes=100)
    assert out.read_text() == "keep me\n"


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7), reason="figures measured on Python 3.11.7's stdlib")
def test_full_corpus_figures(tmp_path):
    """About 5 s: the whole stdlib."""
    figures = write_stdlib_corpus(tmp_path / "all.txt")
    assert (figures["bytes"], figures["documents"], figures["sentences"], figures["modules"]) == (
        1_280_356, 990, 15_392, 356,
    )


def test_cli(tmp_path):
    from bertprep.cli import main

    out = tmp_path / "corpus.txt"
    runner = CliRunner()
    result = runner.invoke(main, ["stdlib-corpus", "--out", str(out), "--max-bytes", "20KB"])
    assert result.exit_code == 0, result.output
    figures = write_stdlib_corpus(tmp_path / "same.txt", max_bytes=20_000)
    assert result.output == (
        f"Wrote {out}: {format_size(figures['bytes'])}, {figures['documents']:,} documents, {figures['sentences']:,} sentences "
        f"from {figures['modules']:,} modules (Python {figures['python']})\n"
    )
    result = runner.invoke(main, ["stdlib-corpus", "--out", str(out)])
    assert (result.exit_code, result.output) == (1, f"Error: {out}: already exists (use --overwrite to replace it)\n")
    result = runner.invoke(main, ["stdlib-corpus", "--out", str(out), "--max-bytes", "10KiB", "--overwrite"])
    assert result.exit_code == 0 and out.stat().st_size <= 10_240
    result = runner.invoke(main, ["stdlib-corpus", "--out", str(out), "--max-bytes", "lots"])
    assert result.exit_code == 2 and "Invalid value for '--max-bytes': 'lots' is not a size" in result.output
