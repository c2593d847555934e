"""`bertmodel finetune rerank`: a cross-encoder (tasks/rerank.py). Thin: options to a
FinetuneConfig, the library trains."""
from __future__ import annotations

import click

from bertmodel.cli.finetune import _DEFAULTS, TaskCommand, _apply, _opt, _run, finetune, task_opt, training_options
from bertmodel.cli.group import CONTEXT_SETTINGS
from bertmodel.tasks.task_defaults import config_field
from bertprep.cli.kit import user_errors

# --loss is FinetuneConfig.rerank_loss, --top-k rerank_top_k (tasks/task_defaults.py).
LOSS_FIELD, TOP_K_FIELD = config_field("rerank", "loss"), config_field("rerank", "top_k")

RERANK_OPTIONS = [
    _opt("--dataset", help="A Hugging Face dataset by name (instead of files)."),
    _opt("--dataset-config", help="The dataset's configuration."),
    _opt("--train-split", help="Split to train on (datasets and DatasetDict dirs)."),
    task_opt("--validation-split", "rerank", "Split to evaluate on."),
    _opt("--loss", type=click.Choice(["bce", "listwise"]), default=_DEFAULTS[LOSS_FIELD], show_default=True,
         help="bce: binary cross-entropy of each labelled pair's logit; listwise: softmax cross-entropy over a "
              "query's positive and its hard negatives."),
    _opt("--top-k", type=click.IntRange(min=1), default=_DEFAULTS[TOP_K_FIELD], show_default=True, help="With a BEIR directory as --validation: "
         "BM25's top k of each query reranked at every evaluation, scored with trec_eval's measures."),
    task_opt("--max-seq-length", "rerank", "Tokens per pair (query + passage).", type=click.IntRange(min=8)),
    _opt("--classifier-pooling", type=click.Choice(["cls", "mean"]), help="ModernBERT: read the first token (cls) "
         "or the mean of the real tokens (mean) as the pair's vector, as transformers' config field. Default: the "
         "model's own."),
    _opt("--query-column", help="Column holding the query [default: query, question or anchor]."),
    _opt("--passage-column", help="Labelled pairs: column holding the passage [default: passage, document, text, "
                                  "context or response]."),
    _opt("--label-column", help="Labelled pairs: column holding the relevance, 1, 0 or a float in [0, 1]."),
    _opt("--positive-column", help="(query, positive, negatives) rows: column holding the positive passage "
                                   "[default: positive]."),
    _opt("--negative-column", help="(query, positive, negatives) rows: the hard negatives, comma-separated columns "
                                   "or one list column [default: negatives, else negative, negative_1, ...]."),
]


@finetune.command("rerank", cls=TaskCommand, context_settings=CONTEXT_SETTINGS)
@training_options("rerank")
@(lambda fn: _apply(fn, RERANK_OPTIONS))
@user_errors
def rerank(**options):
    """Fine-tune a cross-encoder: one relevance logit per (query, passage) pair.

    Data (--train, --validation): JSONL/CSV/TSV/Parquet/a save_to_disk dir/--dataset, in
    either layout. Labelled pairs: query (or question, anchor), passage (or document,
    text, context, response) and label (1 relevant, 0 not, or a float in [0, 1]).
    (query, positive, negatives) rows, sentence-transformers' names: positive, and
    negatives (a list) or negative / negative_1, negative_2, ... Loss: bce trains on
    labelled pairs; listwise on rows, or on labelled pairs grouped by query (each
    positive against all of its query's negatives). Validation: labelled pairs (rows
    count their positive 1, negatives 0); metrics nDCG@10 and MRR@10 over each query's
    candidates, accuracy, ROC AUC and BCE over the pairs. RUN/hf loads as
    CrossEncoder("RUN/hf") (its scores are the logits) and as transformers'
    AutoModelForSequenceClassification (num_labels 1). --validation may also be a BEIR
    directory: BM25's top --top-k of each of its queries reranked at every evaluation,
    nDCG@10, MRR@10, Recall@100 (recall@K at --top-k K under 100) and MAP as trec_eval
    computes them.

    \b
    Example:
      bertmodel finetune rerank --model minilm/ --train pairs.jsonl --validation dev.jsonl --out rerank/
      bertmodel finetune rerank --model minilm/ --train pairs.jsonl --validation beir-squad/ --out rerank/
      bertmodel finetune rerank --model minilm/ --loss listwise --train triples.jsonl --out rerank-lw/
    """
    options[LOSS_FIELD] = options.pop("loss")
    options[TOP_K_FIELD] = options.pop("top_k")
    _run("rerank", options)
