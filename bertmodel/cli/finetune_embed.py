"""`bertmodel finetune embed`: a bi-encoder (tasks/embed.py). Thin: options to a
FinetuneConfig, the library trains."""
from __future__ import annotations

import click

from bertmodel.cli.finetune import TaskCommand, _apply, _opt, _run, finetune, task_opt, training_options
from bertmodel.cli.group import CONTEXT_SETTINGS
from bertprep.cli.kit import user_errors

EMBED_OPTIONS = [
    _opt("--dataset", help="A Hugging Face dataset by name (instead of files)."),
    _opt("--dataset-config", help="The dataset's configuration."),
    _opt("--train-split", help="Split to train on (datasets, DatasetDict dirs, a BEIR directory's qrels)."),
    task_opt("--validation-split", "embed", "Split to evaluate on."),
    _opt("--query-column", help="Column holding the query [default: anchor, query or question]."),
    _opt("--positive-column", help="Column holding the positive passage [default: positive]."),
    _opt("--negative-column", help="Hard negatives: comma-separated columns or one list column [default: "
                                   "negatives, else negative, negative_1, negative_2, ...]."),
    _opt("--pooling", type=click.Choice(["mean", "cls"]), help="A text's vector: the mean of the last hidden states "
         "over its tokens, or the first token's [default: the source's (a sentence-transformers dir), else mean]."),
    _opt("--scale", type=click.FloatRange(min=0, min_open=True), help="Cosine scale in the loss (1 / temperature)."),
    _opt("--mini-batch-size", type=click.IntRange(min=1), help="GradCache: embed this many texts at a time, so the "
         "batch (the in-batch negatives) is bounded by time, not memory; the same gradient."),
    _opt("--matryoshka-dims", help="Also train these leading widths as embeddings of their own, e.g. 384,128,64."),
    _opt("--max-query-length", type=click.IntRange(min=3), help="Tokens kept of a query."),
    _opt("--max-passage-length", type=click.IntRange(min=3), help="Tokens kept of a passage [default: 256]."),
    _opt("--query-prefix", help="Text put before every query, e.g. 'query: ' (recorded in the export's prompts)."),
    _opt("--passage-prefix", help="Text put before every passage, e.g. 'passage: '."),
    _opt("--text-column", help="With an embedder as --teacher and a table as --train: the column of texts "
         "[default: text, passage, document, sentence, query, question or anchor; title + text joined as BEIR]."),
]


@finetune.command("embed", cls=TaskCommand, context_settings=CONTEXT_SETTINGS)
@training_options("embed")
@(lambda fn: _apply(fn, EMBED_OPTIONS))
@user_errors
def embed(**options):
    """Fine-tune a bi-encoder: a vector per text, trained with in-batch negatives.

    Data (--train): (query, positive[, negatives]) rows in JSONL/CSV/TSV/Parquet/a
    save_to_disk dir/--dataset, with sentence-transformers' column names (anchor or
    query, positive, negative / negative_1... / negatives); a BEIR directory (its train
    qrels give the positives); or a SQuAD file ((question, paragraph) pairs). Loss:
    InfoNCE over every passage of the batch (scale 20), hard negatives included, a
    duplicated text never a negative of its own query. --validation: a BEIR directory or
    pairs; metrics nDCG@10, MRR@10, Recall@100, MAP (trec_eval's). RUN/hf loads as
    SentenceTransformer("RUN/hf") and as transformers' AutoModel.

    Distillation (--teacher): from an embedder (a sentence-transformers dir or embed
    run), --train is texts (a text file with one per line, a table's --text-column, or a
    BEIR directory's corpus and queries) and the loss the MSE to the teacher's unit
    vectors (a learnt projection where the widths differ, exported as a Dense module);
    from a cross-encoder (a rerank run), --train is (query, positive, negative) rows and
    the loss MarginMSE. The teacher's vectors or scores are computed once and kept in
    RUN/teacher-targets.

    \b
    Example:
      bertmodel squad-to-beir squad-v1.1-train-head.json --out beir-squad/
      bertmodel finetune embed --model minilm/ --train beir-squad/ --validation beir-squad/ --out embed/
      bertmodel finetune embed --model small/ --teacher minilm/ --train sentences.txt --validation beir-squad/ --out distilled/
    """
    _run("embed", options)
