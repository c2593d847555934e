"""The `bertprep` command line: a thin layer over the library.

Each command parses options, builds a config, calls one library function and prints a
summary. Library errors (`BertprepError`) become one-line `ClickException`s here.
"""
from __future__ import annotations

import click

from bertprep import __version__
from bertprep.cli.kit import CONTEXT_SETTINGS, OneLineErrors


@click.group(cls=OneLineErrors, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "--version", prog_name="bertprep")
def main():
    """Turn a text corpus into BERT pre-training data: a WordPiece tokenizer, then
    Arrow shards of masked next-sentence-prediction pairs (or sentence-order pairs, or
    FULL-SENTENCES rows).

    \b
    Example:
      bertprep train-tokenizer corpus.txt --out tok/
      bertprep build-shards corpus.txt --tokenizer tok/ --out shards/
    """


def _register_commands() -> None:
    # Commands live in modules of their own, which never import this one (the group
    # imports its commands, not the reverse); this is the one place that lists them.
    from bertprep.cli import corpus as cli_corpus
    from bertprep.cli import shards as cli_shards
    from bertprep.cli import tokenizer as cli_tokenizer

    for command in (cli_tokenizer.train_tokenizer_command, cli_tokenizer.extend_tokenizer_command,
                    cli_tokenizer.encode_command,
                    cli_shards.build_shards_command, cli_shards.inspect_command, cli_corpus.stdlib_corpus):
        main.add_command(command)


_register_commands()
