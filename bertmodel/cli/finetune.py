"""`bertmodel finetune classify|qa|tokens|choice`: parse options, build a FinetuneConfig, call
one library function (finetune.py), print a summary. The options shared with `evaluate` and
`predict` (inference.py) live here too."""
from __future__ import annotations

import dataclasses
import functools

import click

from bertmodel.cli.group import CONTEXT_SETTINGS, EXISTING, TOKENIZER_HELP, finish_run, main
from bertmodel.finetune import FinetuneConfig
from bertmodel.model.config import ARCHITECTURES
from bertmodel.tasks.task_defaults import shown_default
from bertmodel.training.optim import OPTIMIZERS
from bertprep.cli.kit import OneLineErrors, progress_option, user_errors

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(FinetuneConfig)}
UNPAD_HELP = ("on: compute only the real tokens of each batch (packed); off: padded; auto: what measured faster on "
              "the device (packed for classification, token classification and multiple choice on the CPU, padded "
              "otherwise; QA is always padded).")


def _opt(name: str, defaults: bool = True, **kwargs):
    """An option whose default comes from FinetuneConfig (defaults are defined once);
    defaults=False: no default (evaluate falls back on the run's own options)."""
    field = name.lstrip("-").replace("-", "_")
    if defaults and field in _DEFAULTS and "default" not in kwargs and not kwargs.get("is_flag"):
        default = _DEFAULTS[field]
        if default is not dataclasses.MISSING and default is not None:
            kwargs["default"] = default
            kwargs.setdefault("show_default", True)
    return click.option(name, **kwargs)


def task_opt(name: str, task: str, help: str, **kwargs):
    """An option whose default depends on the command (tasks/task_defaults.py): resolved
    when omitted, so click sets none, and the help states `task`'s own."""
    field = name.lstrip("-").replace("-", "_")
    return click.option(name, help=f"{help} {shown_default(field, task)}", **kwargs)


# Each task's own data options: `finetune classify|qa` take their task's, evaluate both.
TASK_DATA_OPTIONS = {
    "classify": [
        ("--text-column", dict(help="Column holding the text [default: found by name, with its pair: "
                                    "sentence1/sentence2, question1/question2, premise/hypothesis, "
                                    "question/sentence, question/context, text/text_pair, sentence, text].")),
        ("--text-pair-column", dict(help="Column holding the second text of a pair.")),
        ("--label-column", dict(help="Column holding the label.")),
        ("--no-header", dict(is_flag=True, default=False, help="TSV/CSV without a header: columns are 0-based "
                                                               "indices.")),
    ],
    "qa": [
        ("--doc-stride", dict(type=click.IntRange(min=1), help="Step between context windows.")),
        ("--max-query-length", dict(type=click.IntRange(min=1), help="Question tokens kept.")),
        ("--version-2", dict(is_flag=True, default=None, help="SQuAD v2.0: questions may have no answer.")),
        ("--null-threshold", dict(type=float, help="v2: predict no answer when null score - best span > this.")),
        ("--n-best", dict(type=click.IntRange(min=1), help="Candidate answers kept per question.")),
        ("--max-answer-length", dict(type=click.IntRange(min=1), help="Longest answer in tokens.")),
    ],
    "tokens": [
        ("--tokens-column", dict(help="Column holding each sentence's words (a list; JSONL, Parquet, datasets).")),
        ("--tags-column", dict(help="Column holding each word's tag (a list of strings, or ids with the dataset's "
                                    "ClassLabel names) [default: tags, else ner_tags].")),
        ("--label-all-tokens", dict(is_flag=True, default=None, help="Label every WordPiece of a word, not only "
                                                                      "the first.")),
    ],
    "choice": [
        ("--context-column", dict(help="Column holding the text each choice is paired with.")),
        ("--question-column", dict(help="Column put before each choice in its segment [default: question, where "
                                        "the data has it].")),
        ("--choices-column", dict(help="Column holding the list of choices.")),
        ("--choice-columns", dict(help="One column per choice instead, comma-separated (e.g. "
                                       "hypothesis1,hypothesis2).")),
        ("--label-column", dict(help="Column holding the index of the right choice.")),
    ],
}


def data_options(task: str | None, defaults: bool = True):
    """Where the examples come from and how they are read. `task` (classify, qa, tokens,
    choice): the options of that task only (finetune TASK); None: every task's options,
    each help ending in its tasks (evaluate, which works on any). defaults=False: no
    defaults, so an option not given falls back on the run's own."""
    opt = functools.partial(_opt, defaults=defaults)
    length_help = {"classify": "Tokens per example.", "qa": "Tokens per window (question + context).",
                   "tokens": "Tokens per window (longer sentences are cut into windows; every word is predicted).",
                   "choice": "Tokens per choice (context + choice).",
                   None: "Tokens per example (classify, choice, rerank pairs), window (qa, tokens) or text (an "
                         "embedder's queries and passages)."}[task]
    decorators = [
        opt("--dataset", help="A Hugging Face dataset by name (instead of files)."),
        opt("--dataset-config", help="The dataset's configuration (e.g. glue's 'rte')."),
        opt("--train-split", help="Split to train on (datasets and DatasetDict dirs)."),
        opt("--validation-split", help="Split to evaluate on."),
        # Its default depends on the task (FinetuneConfig resolves None): shown, not set.
        task_opt("--max-seq-length", task, length_help, type=click.IntRange(min=8)) if task and defaults
        else opt("--max-seq-length", type=click.IntRange(min=8), help=length_help),
    ]
    chosen: dict[str, tuple[dict, list[str]]] = {}  # option -> (settings, the tasks that take it)
    for name in (task,) if task else TASK_DATA_OPTIONS:
        for option, settings in TASK_DATA_OPTIONS[name]:
            chosen.setdefault(option, (dict(settings), []))[1].append(name)  # TASK_DATA_OPTIONS stays as written
    for option, (settings, tasks) in chosen.items():
        if not task:  # "Column holding the text (classify)."
            settings["help"] = settings["help"].removesuffix(".") + f" ({', '.join(tasks)})."
        if settings.get("is_flag") and not defaults:
            settings["default"] = None  # absent: the run's own (False would override it)
        decorators.append(opt(option, **settings))
    return lambda fn: _apply(fn, decorators)


class ModelSource(click.ParamType):
    """An existing path, or random:PRESET (checked against the presets by the library)."""

    name = "path"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.startswith("random:"):
            return value
        return EXISTING.convert(value, param, ctx)


MODEL_SOURCE = ModelSource()

# --unpad, the same on finetune, evaluate and predict.
unpad_option = _opt("--unpad", type=click.Choice(["auto", "on", "off"]), help=UNPAD_HELP)


def training_options(task: str):
    """How to train; `task` adds its own (--num-labels: classify)."""
    return lambda fn: _apply(fn, [
        click.option("--model", required=True, type=MODEL_SOURCE, help="The model to start from: our run/checkpoint, "
                     "a transformers BERT, ModernBERT, RoBERTa or XLM-R dir (BertModel, BertForPreTraining, "
                     "ModernBertForMaskedLM, RobertaForMaskedLM, ...), or random:PRESET (a preset's shape, random weights; with --tokenizer)."),
        _opt("--architecture", type=click.Choice(list(ARCHITECTURES)), help="The architecture of --model "
             "random:PRESET; any other --model carries its own."),
        *([_opt("--classifier-pooling", type=click.Choice(["cls", "mean"]), help="ModernBERT: read the first "
                "token (cls) or the mean of the real tokens (mean) as the sequence's vector, as transformers' config "
                "field. Default: the model's own.")] if task in POOLED_TASKS else []),
        _opt("--init", type=click.Choice(["pretrained", "random"]), help="random: only --model's shape, every weight "
             "drawn afresh from --seed (the control for what pre-training bought)."),
        click.option("--train", type=EXISTING, help="Training file (or save_to_disk dir)."),
        click.option("--validation", type=EXISTING, help="Validation file, evaluated every epoch."),
        click.option("--out", required=True, type=click.Path(file_okay=False),
                     help="Run directory; rerunning the same command resumes there."),
        _opt("--epochs", type=click.FloatRange(min=0, min_open=True), help="Passes over the training data."),
        _opt("--max-train-examples", type=click.IntRange(min=1), help="Train on the first N examples only."),
        _opt("--max-eval-examples", type=click.IntRange(min=1), help="Evaluate on the first N validation examples "
             "only."),
        _opt("--batch-size", type=click.IntRange(min=1), help="Micro-batch per device."),
        _opt("--eval-batch-size", type=click.IntRange(min=1), help="Examples per forward pass in evaluation."),
        _opt("--grad-accum", type=click.IntRange(min=1), help="Micro-batches per optimizer step."),
        _opt("--lr", type=click.FloatRange(min=0, min_open=True), help="Peak learning rate."),
        _opt("--warmup-ratio", type=click.FloatRange(0, 1), help="Warmup as a fraction of the steps."),
        _opt("--schedule", type=click.Choice(["linear", "poly", "wsd"]), help="Decay after warmup: linear to 0, "
             "poly (power 0.5), or wsd: the peak held, then the last --decay-ratio of the steps decay to 0 "
             "(warmup-stable-decay, as ModernBERT)."),
        _opt("--decay-ratio", type=click.FloatRange(0, 1, min_open=True), help="With --schedule wsd: share of the "
             "steps spent decaying [default: 0.1]."),
        _opt("--decay-shape", type=click.Choice(["1-sqrt", "linear"]), help="With --schedule wsd: the decay's "
             "shape, peak x (1 - sqrt(progress)) (Hägele et al. 2024) or linear [default: 1-sqrt]."),
        _opt("--weight-decay", type=click.FloatRange(min=0), help="Decoupled weight decay (not on biases/LayerNorm) "
             "[default: 0.01; 1e-5 with stable-adamw, whose decay is fully decoupled]."),
        _opt("--optimizer", type=click.Choice(list(OPTIMIZERS)), help="AdamW (fused where available), LAMB, or "
             "StableAdamW (per-tensor update clipping, fully decoupled weight decay, as ModernBERT)."),
        _opt("--adam-betas", type=(click.FloatRange(0, 1, max_open=True), click.FloatRange(0, 1, max_open=True)),
             metavar="B1 B2", help="The optimizer's two betas, e.g. 0.9 0.98 (ModernBERT)."),
        _opt("--adam-eps", type=click.FloatRange(min=0, min_open=True), help="The optimizer's epsilon."),
        _opt("--max-steps", type=click.IntRange(min=1), help="Stop after N steps [default: epochs x steps per epoch]."),
        _opt("--stop-at", type=click.IntRange(min=1), help="Save and stop at this step; the schedule still runs to "
             "--max-steps (rerun to continue)."),
        _opt("--seed", type=int, help="Seed of the new head, dropout and data order (CPU runs repeat exactly)."),
        _opt("--device", type=click.Choice(["auto", "cuda", "cpu"]), help="auto: CUDA when available."),
        unpad_option,
        _opt("--eval-every", type=click.IntRange(min=0), help="Evaluate every N steps (0: every epoch)."),
        _opt("--save-every", type=click.IntRange(min=1), help="Checkpoint every N steps [default: every epoch]."),
        _opt("--keep-last", type=click.IntRange(min=1), help="Newest checkpoints to keep; the best model's "
             "checkpoint is kept as well."),
        _opt("--log-every", type=click.IntRange(min=1), help="Write metrics.jsonl every N steps."),
        task_opt("--metric-for-best", task, "Eval metric picking the model kept in RUN/hf."),
        *([_opt("--teacher", type=EXISTING, help=TEACHER_HELP[task])] if task in TEACHER_HELP else []),
        *([_opt("--kd-alpha", type=click.FloatRange(0, 1), help="With --teacher: the distillation loss's share of "
                "the loss (alpha x T^2 x KL + (1 - alpha) x the task's loss); 1: the teacher alone."),
           _opt("--kd-temperature", type=click.FloatRange(min=0, min_open=True), help="With --teacher: the softmax "
                "temperature T of both sides' logits in the distillation loss.")] if task in KD_TASKS else []),
        *([_opt("--num-labels", type=click.IntRange(min=1), help="Classes (1 = regression) [default: from the "
                "data].")] if task == "classify" else []),
        _opt("--tokenizer", type=EXISTING, help=f"{TOKENIZER_HELP}, when the model dir carries none."),
        click.option("--allow-changed-options", is_flag=True, help="On resume, continue with changed options (logged)."),
        click.option("--report-to", multiple=True, type=click.Choice(["none", "tensorboard", "wandb"]),
                     help="Also send metrics to TensorBoard or W&B; repeatable."),
        progress_option,
    ])


# The tasks a teacher distils into (distill/), and what --teacher is for each.
KD_TASKS = ("classify", "qa", "tokens", "choice")
TEACHER_HELP = {**{task: "Distil from this fine-tuned run or transformers directory (its labels must be this run's, "
                         "its tokenizer the model's): the loss adds its softened logits' KL (Hinton et al. 2015)."
                   for task in KD_TASKS},
                "embed": "Distil from this model: an embedder (a sentence-transformers dir or embed run: MSE to its "
                         "normalised vectors of --train's texts, computed once and cached) or a cross-encoder (a "
                         "rerank run: MarginMSE to its score margins on (query, positive, negative) rows)."}

# The tasks that score one vector per sequence (ModernBERT's classifier_pooling makes it);
# qa and tokens score every token.
POOLED_TASKS = ("classify", "choice")
# Why an option of some tasks does nothing in the others, said when it is given there.
NOT_HERE = {"--classifier-pooling": "it pools a sequence into one vector (ModernBERT), and {task} scores every token"}


class TaskCommand(click.Command):
    """A `finetune TASK` command: another task's option is named as such (click would
    offer a near spelling of one of this task's, as if it were a typo)."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            siblings = ctx.parent.command.commands if ctx.parent is not None else {}
            owners = [name for name, command in siblings.items() if command is not self
                      and any(exc.option_name in param.opts for param in command.params)]
            if not owners:
                raise
            why = NOT_HERE.get(exc.option_name)
            raise click.UsageError(f"{exc.option_name} is an option of finetune {' and '.join(owners)}, not of "
                                   f"{self.name}" + (f": {why.format(task=self.name)}" if why else ""), ctx) from None


def _apply(fn, decorators: list):
    """Options in the order listed (decorators apply bottom-up)."""
    for deco in reversed(decorators):
        fn = deco(fn)
    return fn


@main.group(cls=OneLineErrors, context_settings=CONTEXT_SETTINGS)
def finetune():
    """Fine-tune a BERT: sequence classification/regression, extractive QA, token
    classification (NER) or multiple choice.

    \b
    Example:
      bertmodel finetune classify --model bert/ --train train.tsv --validation dev.tsv --out run/
      bertmodel finetune qa --model bert/ --train train-v1.1.json --validation dev-v1.1.json --out qa-run/
      bertmodel finetune tokens --model bert/ --train conll2003/train.txt --validation conll2003/valid.txt --out ner/
      bertmodel finetune choice --model bert/ --train swag/train.csv --validation swag/val.csv --out swag/
    """


def _run(task: str, options: dict) -> None:
    from bertmodel.finetune import finetune as run_finetune

    options = {k: v for k, v in options.items() if v is not None}
    options["report_to"] = list(options.get("report_to", ()))
    last = run_finetune(FinetuneConfig(task=task, **options))
    keys = ("step", "loss", "accuracy", "eval_accuracy", "eval_macro_f1", "eval_mcc", "eval_pearson",
            "eval_spearman", "eval_exact_match", "eval_precision", "eval_recall", "eval_f1", "eval_ndcg@10",
            "eval_mrr@10", *sorted(k for k in last if k.startswith("eval_recall@")), "eval_map", "eval_auc")
    finish_run(options["out"], last, keys)


@finetune.command("classify", cls=TaskCommand, context_settings=CONTEXT_SETTINGS)
@training_options("classify")
@data_options("classify")
@click.option("--positive-label", help="Two classes: the label whose F1 is the 'f1' metric [default: label 1 of "
              "0/1 labels; the second in sorted order for text labels, as logged].")
@user_errors
def classify(**options):
    """Fine-tune [CLS] -> linear for classification (or regression with --num-labels 1).

    Data: TSV/CSV with a header (GLUE's layout), JSONL, Parquet, a save_to_disk dir or
    --dataset NAME. Pairs go in with --text-pair-column, in the tokenizer's own pair
    template ([CLS] A [SEP] B [SEP]; RoBERTa's <s> A </s></s> B </s>). RUN/hf is a
    transformers ...ForSequenceClassification dir of the model's family (the best model).

    \b
    Example:
      bertmodel finetune classify --model bert/ --train RTE/train.tsv --validation RTE/dev.tsv \\
          --text-column sentence1 --text-pair-column sentence2 --label-column label --out rte/
    """
    _run("classify", options)


@finetune.command("qa", cls=TaskCommand, context_settings=CONTEXT_SETTINGS)
@training_options("qa")
@data_options("qa")
@user_errors
def qa(**options):
    """Fine-tune start/end scores per token for extractive question answering.

    Data: SQuAD v1.1/v2.0 JSON, JSONL or a dataset in the squad column layout. Long
    contexts are cut into windows (--max-seq-length, --doc-stride); evaluation uses the
    official SQuAD metric. RUN/hf is a transformers BertForQuestionAnswering dir.

    \b
    Example:
      bertmodel finetune qa --model bert/ --train train-v1.1.json --validation dev-v1.1.json --out qa/
    """
    _run("qa", options)


@finetune.command("tokens", cls=TaskCommand, context_settings=CONTEXT_SETTINGS)
@training_options("tokens")
@data_options("tokens")
@user_errors
def tokens(**options):
    """Fine-tune a label per word (named-entity recognition, POS tagging, ...).

    Data: CoNLL text (a word per line, its tag in the last column, a blank line between
    sentences, -DOCSTART- skipped; IOB1 and BIOES tags are read as IOB2), or JSONL,
    Parquet, a save_to_disk dir or --dataset NAME with a list of words and a list of tags
    per row. The first WordPiece of each word carries its label (--label-all-tokens: every
    piece); sentences longer than --max-seq-length are cut into windows, so every word is
    predicted. Metrics: entity precision/recall/F1 as CoNLL's conlleval, overall and per
    type, and token accuracy. RUN/hf is a transformers BertForTokenClassification dir.

    \b
    Example:
      bertmodel finetune tokens --model bert/ --train conll2003/train.txt --validation conll2003/valid.txt \\
          --out ner/
    """
    _run("tokens", options)


@finetune.command("choice", cls=TaskCommand, context_settings=CONTEXT_SETTINGS)
@training_options("choice")
@data_options("choice")
@user_errors
def choice(**options):
    """Fine-tune multiple choice: a score per choice, the best one picked.

    Each choice is encoded as the pair (context, question + choice) in the tokenizer's
    template ([CLS] context [SEP] question choice [SEP] for BERT) and scored from its first
    token. Data: SWAG's CSV (sent1, sent2, ending0..3, label; known by its header),
    or CSV/JSONL/Parquet/a save_to_disk dir/--dataset with a context, an optional
    question, the choices (a list column, or --choice-columns) and the index of the right
    one. Any number of choices >= 2, the same in every row. Metric: accuracy. RUN/hf is a
    transformers BertForMultipleChoice dir.

    \b
    Example:
      bertmodel finetune choice --model bert/ --train e-CARE/train.jsonl --validation e-CARE/dev.jsonl \\
          --context-column premise --question-column ask-for --choice-columns hypothesis1,hypothesis2 --out ecare/
    """
    _run("choice", options)
