"""`bertmodel evaluate` and `predict`: a fine-tuned run on labelled data (its metrics and
predictions) or on texts; parse options, call one library function (evaluation.py, or
inference/rank.py for embed and rerank runs), print the result."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import click

from bertmodel.cli.finetune import _opt, data_options, unpad_option
from bertmodel.cli.group import CONTEXT_SETTINGS, EXISTING, main
from bertprep.cli.kit import progress_option, user_errors

NO_ANSWER = "(no answer)"  # how predict shows SQuAD v2.0's empty answer on the command line


@main.command("evaluate", context_settings=CONTEXT_SETTINGS)
@click.argument("run", type=EXISTING)
@click.option("--data", type=EXISTING, help="Data to evaluate on [default: the run's validation data].")
@click.option("--out", type=click.Path(file_okay=False), help="Where predictions go [default: RUN].")
@_opt("--device", type=click.Choice(["auto", "cuda", "cpu"]), help="auto: CUDA when available.")
@_opt("--eval-batch-size", type=click.IntRange(min=1), help="Examples per forward pass.")
@unpad_option
@click.option("--overwrite", is_flag=True, help="Replace the prediction files an earlier evaluation left in --out.")
@click.option("--allow-unknown-tags", is_flag=True, help="Score data whose gold tags the model does not know: they "
              "count as missed entities and wrong words, and no loss is reported (tokens; refused without it).")
@click.option("--first-stage", default="bm25", show_default=True, help="A rerank run on a BEIR directory: the "
              "candidates it rescores, bm25 (bm25s) or an embed run's directory.")
@click.option("--top-k", type=click.IntRange(min=1), help="A rerank run on a BEIR directory: candidates per query "
              "from the first stage [default: the run's --top-k, else 100].")
@data_options(None, defaults=False)
@progress_option
@user_errors
def evaluate(run, data, out, device, unpad, overwrite, progress, allow_unknown_tags, first_stage, top_k, **options):
    """Print a fine-tuned model's metrics on labelled data as one JSON object, and write
    its predictions (predictions.jsonl; for QA predictions.json and nbest_predictions.json).
    An embed or rerank run, or any encoder on a BEIR directory (a pre-training run, a
    transformers or sentence-transformers directory: a starting model's baseline, read as
    an embedder), prints trec_eval's measures and writes its ranking (run.trec).

    Data options default to those the run was trained with; each applies to the tasks its
    help names. What was read, and what --max-seq-length cut (rows truncated, sentences
    split into windows), goes to stderr. Unlabelled data: `bertmodel predict RUN --file`.

    \b
    Example:
      bertmodel evaluate rte/ --data RTE/dev.tsv
      bertmodel evaluate all-MiniLM-L6-v2/ --data beir-squad/ --validation-split test
    """
    from bertmodel.inference.predict import evaluate_model
    from bertmodel.data.beir import is_beir_dir
    from bertmodel.inference.rank import evaluate_retrieval, retrieval_kind, run_validation
    from bertmodel.training.batched_forward import pass_progress

    kind = retrieval_kind(run)
    collection = data if data else (run_validation(run) if kind == "rerank" else None)
    # A BEIR directory is ranked: by a rerank run, or by anything else read as an embedder
    # (load_embedder refuses a fine-tuned classifier or the like, naming what it reads).
    if kind == "embed" or (collection and is_beir_dir(collection) and kind in ("rerank", None)):
        with pass_progress(progress, "eval"):
            metrics, paths = evaluate_retrieval(run, data, options.get("validation_split"),
                                                first_stage, top_k, out_dir=out, device=device or "auto",
                                                batch_size=options.get("eval_batch_size") or 64, overwrite=overwrite,
                                                log=functools.partial(click.echo, err=True),
                                                max_length=options.get("max_seq_length"))
        click.echo(json.dumps(metrics, sort_keys=True))
        click.echo(f"ranking: {', '.join(map(str, paths))}", err=True)
        return
    if data:
        options["validation"] = data
        options["dataset"] = None
    with pass_progress(progress, "eval"):
        metrics, paths = evaluate_model(run, options, out_dir=out, device=device, unpad=unpad, overwrite=overwrite,
                                        log=functools.partial(click.echo, err=True),
                                        allow_unknown_tags=allow_unknown_tags)
    click.echo(json.dumps(metrics, sort_keys=True))
    if not metrics:
        click.echo(f"no labels in {data or 'the validation data'}: predictions written, no metrics computed",
                   err=True)
    click.echo(f"predictions: {', '.join(map(str, paths))}", err=True)


@main.command("predict", context_settings=CONTEXT_SETTINGS)
@click.argument("run", type=EXISTING)
@click.argument("texts", nargs=-1)
@click.option("--pair", "pairs", multiple=True, help="Second text of each pair, in order (classify).")
@click.option("--file", "file", type=EXISTING, help="Records to predict: JSONL, CSV, TSV, Parquet or a save_to_disk "
              "dir. Classify: the run's text (and text-pair) columns, or text (and text_pair). QA: question, context "
              "and optionally id, or SQuAD JSON. Tokens: words as CoNLL lines or the run's tokens column (a tag per "
              "word), or a text column (its entities). Choice: the run's context, question and choice columns. "
              "Writes JSONL.")
@click.option("--out", type=click.Path(dir_okay=False), help="With --file: write the JSONL here [default: stdout].")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@click.option("--question", help="A question (QA models).")
@click.option("--context", help="The context to find its answer in (QA models).")
@_opt("--device", type=click.Choice(["auto", "cuda", "cpu"]), help="auto: CUDA when available.")
@unpad_option
@click.option("--max-seq-length", type=click.IntRange(min=8), help="Tokens read at once, up to the model's positions "
              "(ModernBERT: 8,192): longer texts are truncated (classify, choice) or read in windows (tokens, qa), "
              "with a warning [default: the run's].")
@progress_option
@user_errors
def predict(run, texts, pairs, file, out, overwrite, question, context, device, unpad, max_seq_length, progress):
    """Labels with probabilities for texts (a token classifier: each text's entities, a
    JSON line per text), or the answer to --question in --context; or a JSON line for
    each record of --file. A text longer than --max-seq-length (the run's by default) is
    truncated, or read in windows by a token classifier, and a warning says so.

    \b
    Example:
      bertmodel predict rte/ "The cat sat." --pair "A cat was sitting."
      bertmodel predict ner/ "Angela Merkel visited Paris."
      bertmodel predict qa/ --question "Who wrote it?" --context "It was written by Ada."
      bertmodel predict rte/ --file RTE/test.tsv --out rte-test.jsonl
    """
    from bertmodel.inference.predict import predict_answers, predict_file, predict_texts, write_predictions
    from bertmodel.training.batched_forward import pass_progress

    def warn(message: str) -> None:
        click.echo(f"warning: {message}", err=True)

    if file and (texts or pairs or question or context):
        raise click.UsageError("--file takes the place of texts, --pair, --question and --context")
    if out and not file:
        raise click.UsageError("--out goes with --file")
    if file:
        if out and Path(out).exists() and not overwrite:  # before the whole file is predicted
            raise click.ClickException(f"{out}: already exists; pass --overwrite to replace it")
        with pass_progress(progress, "predict"):
            records = predict_file(run, file, device=device, unpad=unpad, warn=warn, max_seq_length=max_seq_length)
        if out:
            write_predictions(out, records, overwrite=overwrite)
            click.echo(f"predictions: {out} ({len(records):,} records)", err=True)
        else:
            for r in records:
                click.echo(json.dumps(r, ensure_ascii=False))
        return
    if question or context:
        if not (question and context):
            raise click.UsageError("--question and --context go together")
        for r in predict_answers(run, [question], [context], device=device, unpad=unpad,
                                 max_seq_length=max_seq_length):
            click.echo(f"{r['answer'] or NO_ANSWER}\t{r['score']:.4f}")
        return
    if not texts:
        raise click.UsageError("give texts, --file, or --question with --context")
    if pairs and len(pairs) != len(texts):
        raise click.UsageError(f"{len(pairs)} --pair for {len(texts)} texts")
    for r in predict_texts(run, list(texts), list(pairs) or None, device=device, unpad=unpad, warn=warn,
                           max_seq_length=max_seq_length):
        if "entities" in r:  # a token classifier: the text's entities as one JSON line
            click.echo(json.dumps(r, ensure_ascii=False))
        elif "label" in r:
            click.echo(f"{r['label']}\t{r['probability']:.4f}\t{r['text']}")
        else:
            click.echo(f"{r['prediction']:.4f}\t{r['text']}")
