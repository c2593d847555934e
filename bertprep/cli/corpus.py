"""Commands of bertprep (registered in bertprep.cli): stdlib-corpus."""
from __future__ import annotations

import click

from bertprep.cli.kit import user_errors
from bertprep.cli.options import SIZE
from bertprep.corpus import format_size
from bertprep.corpus import write_stdlib_corpus


@click.command("stdlib-corpus")
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, writable=True),
    help="Text file to write: a sentence per line, a blank line between documents.",
)
@click.option("--max-bytes", type=SIZE, help="Stop at this size (a prefix of the full corpus), e.g. 5MB.")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
@user_errors
def stdlib_corpus(out, max_bytes, overwrite):
    """Write a demo corpus that needs no download: the docstrings of Python's standard
    library (parsed, never imported), split into sentences, a document per module or
    large class. Deterministic for a given Python version.

    \b
    Example:
      bertprep stdlib-corpus --out corpus.txt
      bertprep train-tokenizer corpus.txt --out tok/
    """
    stats = write_stdlib_corpus(out, max_bytes=max_bytes, overwrite=overwrite)
    click.echo(
        f"Wrote {stats['path']}: {format_size(stats['bytes'])}, {stats['documents']:,} documents, "
        f"{stats['sentences']:,} sentences from {stats['modules']:,} modules (Python {stats['python']})"
    )
