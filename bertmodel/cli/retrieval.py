"""Retrieval commands: squad-to-beir (a BEIR directory from SQuAD-format data). Thin: the
work is data/squad_beir.py's."""
from __future__ import annotations

import click

from bertmodel.cli.group import CONTEXT_SETTINGS, main
from bertprep.cli.kit import user_errors


@main.command("squad-to-beir", context_settings=CONTEXT_SETTINGS)
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="The BEIR directory to write.")
@click.option("--dev-fraction", type=float, default=0.1, show_default=True, help="Share of questions in dev.")
@click.option("--test-fraction", type=float, default=0.1, show_default=True, help="Share of questions in test.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the by-article split.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@user_errors
def squad_to_beir_command(source, out, dev_fraction, test_fraction, seed, overwrite):
    """Write a BEIR directory (corpus.jsonl, queries.jsonl, qrels/{train,dev,test}.tsv) from a
    SQuAD-format file: each paragraph a passage, each answerable question a query whose
    relevant passage is its paragraph; split by article, so the other paragraphs of a
    query's article stay in the corpus as natural hard negatives.

    \b
    Example:
      bertmodel squad-to-beir squad-v1.1-train-head.json --out beir-squad/
    """
    from bertmodel.data.squad_beir import squad_to_beir
    summary = squad_to_beir(source, out, dev_fraction=dev_fraction, test_fraction=test_fraction, seed=seed,
                            overwrite=overwrite)
    click.echo(f"{summary.out}: {summary.passages} passages; queries "
               + ", ".join(f"{s} {n}" for s, n in summary.queries.items())
               + f"; {summary.unanswerable} unanswerable left out")
