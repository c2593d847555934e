"""The `bertprep` command line: a thin layer over the library.

Each command parses options, builds a config, calls one library function and prints a
summary. Library errors (`BertprepError`) become one-line `ClickException`s here.
"""
from __future__ import annotations

import click

from bertprep import __version__

from bertprep.clikit import (  # noqa: F401  (command modules import these from here)
    CONTEXT_SETTINGS, OneLineErrors, describe_os_error, user_errors)


@click.group(cls=OneLineErrors, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "--version", prog_name="bertprep")
def main():
    """Turn a text corpus into BERT pre-training data: a WordPiece tokenizer, then
    Arrow shards of masked next-sentence-prediction pairs.

    \b
    Example:
      bertprep train-tokenizer corpus.txt --out tok/
      bertprep build-shards corpus.txt --tokenizer tok/ --out shards/
    """


def _register_commands() -> None:
    # Commands live in modules of their own; importing them here keeps this file the
    # one place that lists the command set.
    from bertprep import cli_tokenizer  # noqa: F401  train-tokenizer, encode
    from bertprep import cli_shards  # noqa: F401  build-shards, inspect
    from bertprep import cli_corpus  # noqa: F401  stdlib-corpus


_register_commands()
