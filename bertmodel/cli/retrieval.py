"""Retrieval commands: squad-to-beir (a BEIR directory from SQuAD-format data), embed (a
file's embeddings to Parquet) and search (a corpus searched with a few queries). Thin: the
work is data/squad_beir.py's, retrieval/texts.py's and inference/rank.py's."""
from __future__ import annotations

import click

from bertmodel.cli.group import CONTEXT_SETTINGS, main
from bertprep.cli.kit import progress_option, user_errors


@main.command("squad-to-beir", context_settings=CONTEXT_SETTINGS)
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="The BEIR directory to write.")
@click.option("--dev-fraction", type=float, default=0.1, show_default=True, help="Share of questions in dev.")
@click.option("--test-fraction", type=float, default=0.1, show_default=True, help="Share of questions in test.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the by-article split.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@progress_option
@user_errors
def squad_to_beir_command(source, out, dev_fraction, test_fraction, seed, overwrite, progress):
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
                            overwrite=overwrite, progress=progress)
    click.echo(f"{summary.out}: {summary.passages} passages; queries "
               + ", ".join(f"{s} {n}" for s, n in summary.queries.items())
               + f"; {summary.unanswerable} unanswerable left out")


@main.command("embed", context_settings=CONTEXT_SETTINGS)
@click.argument("run", type=click.Path(exists=True))
@click.option("--file", "file", required=True, type=click.Path(exists=True), help="Texts to embed: JSONL, CSV, TSV, "
              "Parquet or a save_to_disk dir (a BEIR corpus.jsonl: title + text).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The Parquet file to write (id, embedding).")
@click.option("--column", help="The text column [default: text, passage, document, sentence, query, question or "
              "anchor; title + text where both are there].")
@click.option("--kind", type=click.Choice(["passage", "query"]), default="passage", show_default=True,
              help="Read the texts as passages or queries (their prefix and length).")
@click.option("--split", help="The split of a save_to_disk DatasetDict.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="auto: CUDA when available.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True, help="Texts per forward pass.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@progress_option
@user_errors
def embed_command(run, file, out, column, kind, split, device, batch_size, overwrite, progress):
    """Write the embeddings of a file's texts to Parquet (an `id` column where the file
    has `_id` or `id`, and `embedding`, float32), for an index elsewhere. RUN: an embed
    run, a sentence-transformers dir or a transformers encoder dir.

    \b
    Example:
      bertmodel embed embed/ --file beir-squad/corpus.jsonl --out corpus.parquet
    """
    from bertmodel.retrieval.texts import embed_file
    from bertmodel.training.batched_forward import pass_progress

    with pass_progress(progress, "embed"):
        path, rows, dim = embed_file(run, file, out, column=column, kind=kind, device=device, batch_size=batch_size,
                                     overwrite=overwrite, split=split, log=lambda m: click.echo(m, err=True))
    click.echo(f"{path}: {rows:,} embeddings of dimension {dim}")


@main.command("search", context_settings=CONTEXT_SETTINGS)
@click.argument("run", type=click.Path(exists=True))
@click.option("--corpus", required=True, type=click.Path(exists=True), help="A BEIR directory, or a file of texts "
              "(JSONL, CSV, TSV, Parquet; its id column where it has one).")
@click.option("--query", "queries", multiple=True, required=True, help="A query (repeat for more).")
@click.option("--top-k", type=click.IntRange(min=1), default=10, show_default=True, help="Passages shown per query.")
@click.option("--column", help="The corpus file's text column [default: as `bertmodel embed`].")
@click.option("--candidates", type=click.IntRange(min=1), default=100, show_default=True,
              help="A rerank run: BM25 candidates per query it rescores.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="auto: CUDA when available.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True, help="Texts per forward pass.")
@progress_option
@user_errors
def search_command(run, corpus, queries, top_k, column, candidates, device, batch_size, progress):
    """Search a corpus with a few queries: a JSON line per hit (query, rank, id, score,
    text), best first. An embed run (or a sentence-transformers dir) searches exactly;
    a rerank run rescores BM25's top --candidates.

    \b
    Example:
      bertmodel search embed/ --corpus beir-squad/ --query "Who designed the Eiffel tower?"
    """
    import json

    from bertmodel.inference.rank import search
    from bertmodel.training.batched_forward import pass_progress

    with pass_progress(progress, "search"):
        hits = search(run, corpus, list(queries), top_k=top_k, column=column, device=device, batch_size=batch_size,
                      candidates=candidates)
    for hit in hits:
        click.echo(json.dumps(hit, ensure_ascii=False))
