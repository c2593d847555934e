"""The defaults that differ between the `finetune TASK` commands. Each is resolved when
the option is omitted (by FinetuneConfig or by the task, never by click, whose one
default would be every command's), and each command's help states its own row, so
`finetune embed --help` names ndcg@10 where `finetune classify --help` names accuracy.

A row is (the value, what the data can make of it instead, or None)."""
from __future__ import annotations

TASK_DEFAULTS: dict[str, dict[str, tuple[object, str | None]]] = {
    # The metric that picks the model kept in RUN/hf (tasks/*.py: best_metric).
    "metric_for_best": {
        "classify": ("accuracy", "pearson for regression"),
        "qa": ("f1", None),
        "tokens": ("f1", "accuracy for tags without entities"),
        "choice": ("accuracy", None),
        "embed": ("ndcg@10", None),
        "rerank": ("ndcg@10", None),
    },
    # Tokens per example, window or pair (FinetuneConfig); embed sizes its inputs by
    # --max-query-length and --max-passage-length instead.
    "max_seq_length": {
        "classify": (128, None),
        "qa": (384, None),
        "tokens": (128, None),
        "choice": (128, None),
        "rerank": (128, None),
    },
    # The split evaluated on: a dataset's "validation"; a BEIR directory names its splits
    # dev and test (data/beir.py: beir_split).
    "validation_split": {
        "embed": ("validation", "a BEIR directory's dev, else test"),
        "rerank": ("validation", "a BEIR directory's dev, else test"),
    },
}


# Options a command names without its task's prefix: `finetune rerank --loss` sets
# FinetuneConfig.rerank_loss (the config holds every task's options, so the field says
# whose it is). The CLI and eval-suite files read the same names through this table.
COMMAND_FIELDS: dict[str, dict[str, str]] = {
    "rerank": {"loss": "rerank_loss", "top_k": "rerank_top_k"},
}


def config_field(task: str, option: str) -> str:
    """The FinetuneConfig field `finetune TASK --OPTION` sets."""
    return COMMAND_FIELDS.get(task, {}).get(option, option)


def task_default(option: str, task: str):
    """The value `task` uses for `option` (a FinetuneConfig field) when it is omitted."""
    return TASK_DEFAULTS[option][task][0]


def shown_default(option: str, task: str) -> str:
    """`task`'s default of `option` as its help shows it: "[default: 128]",
    "[default: accuracy; pearson for regression]"."""
    value, otherwise = TASK_DEFAULTS[option][task]
    return f"[default: {value}" + (f"; {otherwise}]" if otherwise else "]")
