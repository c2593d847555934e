"""`finetune classify|qa|tokens|choice`, `evaluate` and `predict`: a fine-tuning task
(tasks/classification.py, tasks/qa.py, tasks/tokens.py, tasks/choice.py) on the generic
trainer (training/run.py).

FinetuneConfig extends the loop's options with the data, the starting model and the
task's settings; its defaults are the BERT paper's (lr 2e-5, batch 32, 3 epochs, warmup
10%, weight decay 0.01, max length 128, or 384 for QA). The number of steps follows from
the epochs; evaluation (and a checkpoint) comes once per epoch unless asked otherwise,
and RUN/hf holds the best model by --metric-for-best (RUN/best.json says which step).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from bertmodel.errors import BertmodelError
from bertmodel.model.config import ARCHITECTURES
from bertmodel.tasks.task_defaults import task_default
from bertmodel.training.options import MEANINGFUL, LoopConfig
from bertmodel.training.run import run_training

DATA_OPTIONS = ("train", "validation", "dataset", "dataset_config", "train_split", "validation_split",
                "text_column", "text_pair_column", "label_column", "no_header", "num_labels", "max_seq_length",
                "doc_stride", "max_query_length", "version_2", "null_threshold", "n_best", "max_answer_length",
                "positive_label", "tokens_column", "tags_column", "label_all_tokens", "context_column",
                "question_column", "choices_column", "choice_columns", "max_train_examples", "max_eval_examples",
                "rerank_loss", "rerank_top_k", "query_column", "passage_column", "positive_column", "negative_column",
                "max_passage_length", "query_prefix", "passage_prefix")

# `finetune TASK` -> the task a run directory records (tasks' `name`)
TASK_NAMES = {"classify": "classification", "qa": "qa", "tokens": "token_classification",
              "choice": "multiple_choice", "rerank": "rerank", "embed": "embed"}


@dataclass(kw_only=True)
class FinetuneConfig(LoopConfig):
    task: str
    """"classify" (sequence classification or regression), "qa" (extractive QA), "tokens" (a label
    per word, e.g. NER), "choice" (multiple choice) or "rerank" (a cross-encoder: one logit per pair)."""
    model: str
    """The BERT to start from: one of our runs/checkpoints or a transformers directory of any BERT head."""
    architecture: str | None = None
    """The architecture of --model random:PRESET ("bert", the default, "modernbert" or "roberta"); any
    other model carries its own (given, it must be that one)."""
    classifier_pooling: str | None = None
    """ModernBERT, classify and choice only (qa and tokens score every token): the sequence's vector,
    "cls" (the first token) or "mean" (of the real tokens), as transformers' config field; None: the
    model's own (cls for a fresh one)."""
    teacher: str | None = None
    """Knowledge distillation from this model (distill/): classify, qa, tokens and choice learn a fine-tuned
    run's or transformers directory's logits (its labels must be this run's); embed learns an embedder's
    vectors (MSE) or a cross-encoder's (a rerank run's) score margins (MarginMSE)."""
    kd_alpha: float = 0.5
    """With --teacher (classify, qa, tokens, choice): the distillation loss's share, loss = alpha x T^2 x
    KL(teacher/T || student/T) + (1 - alpha) x the task's loss (Hinton et al. 2015); 1: the teacher alone."""
    kd_temperature: float = 2.0
    """With --teacher (classify, qa, tokens, choice): T, the softmax temperature both sides' logits are
    divided by in the distillation loss."""
    init: str = "pretrained"
    """"pretrained": the model's weights; "random": only its shape (or --model random:PRESET's),
    every weight drawn afresh from the seed, the control that shows what pre-training bought."""
    train: str | None = None
    """Training data: TSV/CSV/JSONL/Parquet/save_to_disk dir (classify, choice; SWAG's CSV), SQuAD JSON
    or JSONL (qa), CoNLL text or JSONL/Parquet/save_to_disk with token and tag lists (tokens)."""
    validation: str | None = None
    dataset: str | None = None
    """A Hugging Face dataset by name instead of files (with train_split / validation_split)."""
    dataset_config: str | None = None
    train_split: str | None = "train"
    validation_split: str | None = "validation"
    text_column: str | None = None
    """classify: the column holding the text; None: found by name with its pair, the first of
    sentence1/sentence2, question1/question2, premise/hypothesis, question/sentence,
    question/context, text/text_pair, sentence, text (data/tables.TEXT_LAYOUTS; run_glue's names)."""
    text_pair_column: str | None = None
    """classify: the column holding the second text of a pair (None: single texts, or the pair found
    with the text column)."""
    run_columns: bool = False
    """evaluate and predict: text_column and text_pair_column are the trained run's own, read where the
    data has that text column; other data is read by the usual names. Not a finetune option."""
    label_column: str = "label"
    no_header: bool = False
    """TSV/CSV without a header line: columns are then 0-based indices (e.g. CoLA: text 3, label 1)."""
    num_labels: int | None = None
    """1 = regression (MSE); default: the distinct labels of the training data."""
    tokens_column: str = "tokens"
    """tokens: the column holding each sentence's words (a list)."""
    tags_column: str | None = None
    """tokens: the column holding each word's tag (a list); default "tags", else "ner_tags"."""
    label_all_tokens: bool = False
    """tokens: every WordPiece of a word carries its label (default: only the first, as BERT)."""
    context_column: str = "context"
    """choice: the text every choice is paired with."""
    question_column: str | None = None
    """choice: text put before each choice in its segment; default "question" where the data has it."""
    choices_column: str = "choices"
    """choice: a column holding the list of choices."""
    choice_columns: str | None = None
    """choice: one column per choice instead, comma-separated (e.g. "ending0,ending1,ending2,ending3")."""
    rerank_loss: str = "bce"
    """rerank: "bce" (labelled (query, passage) pairs: binary cross-entropy of the one logit against a
    label 0/1 or a float in [0, 1]) or "listwise" (softmax cross-entropy over a query's positive and
    its hard negatives, from (query, positive, negative...) rows)."""
    rerank_top_k: int = 100
    """rerank with a BEIR directory as --validation: BM25's top k of each query reranked at every
    evaluation (trec_eval's measures of the reranked ranking)."""
    query_column: str | None = None
    """rerank: the query's column; None: found by name (query, question, anchor)."""
    passage_column: str | None = None
    """rerank, bce: the passage's column; None: found by name (passage, document, text, context)."""
    positive_column: str | None = None
    """rerank, listwise: the positive passage's column; None: "positive"."""
    negative_column: str | None = None
    """rerank, listwise: the hard negatives, comma-separated columns or one list column; None:
    "negatives" (a list), else negative, negative_1, negative_2, ... (as sentence-transformers names them)."""
    pooling: str | None = None
    """embed: the text's vector, "mean" of the last hidden states over the real tokens or "cls" (the
    first token's); None: the source's own (a sentence-transformers directory's), else mean."""
    scale: float = 20.0
    """embed: the cosine similarities' scale in the in-batch-negatives loss (1 / temperature;
    sentence-transformers' MultipleNegativesRankingLoss default)."""
    mini_batch_size: int | None = None
    """embed: GradCache: embed the batch this many texts at a time, so --batch-size (the in-batch
    negatives) is bounded by time, not memory; the gradient is the uncached one."""
    matryoshka_dims: tuple[int, ...] | str | None = None
    """embed: also train the first d dimensions of the embedding as an embedding of its own, for each d
    (e.g. "768,256,64"; the losses summed, as sentence-transformers' MatryoshkaLoss)."""
    max_passage_length: int | None = None
    """embed: tokens kept of a passage (default 256); queries keep --max-query-length (64)."""
    query_prefix: str | None = None
    """embed: text put before every query (e.g. "query: "); None: the source's prompt, else none."""
    passage_prefix: str | None = None
    """embed: text put before every passage (e.g. "passage: "); None: the source's prompt, else none."""
    max_seq_length: int | None = None
    """Tokens per example, window or pair; None: the task's (tasks/task_defaults.py: 128, 384 for qa)."""
    max_train_examples: int | None = None
    """Train on the first N examples only (quick runs, learning curves, suites on a CPU)."""
    max_eval_examples: int | None = None
    """Evaluate on the first N validation examples only."""
    doc_stride: int = 128
    max_query_length: int = 64
    version_2: bool = False
    """SQuAD v2.0: questions may have no answer (null score vs best span)."""
    null_threshold: float = 0.0
    n_best: int = 20
    max_answer_length: int = 30
    epochs: float = 3.0
    metric_for_best: str | None = None
    """Metric that picks the model kept in RUN/hf; None: the task's (tasks/task_defaults.py: accuracy,
    pearson for regression, f1 for qa and for tokens' entities, ndcg@10 for embed and rerank)."""
    positive_label: str | None = None
    """The class binary F1 (the "f1" metric of two-class data) is computed for; default: id 1
    (label 1 of 0/1 data, the second label in sorted order for text labels)."""
    tokenizer: str | None = None
    """The tokenizer, when the model directory carries none."""
    eval_batch_size: int = 64
    # The BERT paper's fine-tuning defaults (Devlin et al. 2019, appendix A.3).
    lr: float = 2e-5
    batch_size: int = 32
    warmup_ratio: float = 0.1
    weight_decay: float | None = None
    """0.01 (the BERT paper's), or 1e-5 with stable-adamw (fully decoupled decay; see LoopConfig)."""
    max_steps: int | None = None
    """Default: epochs x steps per epoch."""
    save_every: int | None = None
    """Default: once per epoch."""
    keep_last: int = 1
    """Newest checkpoints kept; the best model's checkpoint is kept as well while it is the best
    (checkpoint.prune), so by default a run holds its latest and its best."""
    eval_every: int = 0
    """0: once per epoch (and at the end)."""

    def __post_init__(self):
        super().__post_init__()
        if self.task not in TASK_NAMES:
            raise BertmodelError(f"unknown fine-tuning task {self.task!r}; choose {', '.join(TASK_NAMES)}")
        if self.model.startswith("random:"):
            self.init = "random"
        if self.architecture not in (None, *ARCHITECTURES):
            raise BertmodelError(f"architecture must be {', '.join(ARCHITECTURES)}, got {self.architecture!r}")
        if self.classifier_pooling not in (None, "cls", "mean"):
            raise BertmodelError(f"classifier pooling must be cls or mean, got {self.classifier_pooling!r}")
        if self.classifier_pooling is not None and self.task not in ("classify", "choice", "rerank"):
            # qa and tokens score every token: the option would change nothing but config.json
            raise BertmodelError(f"classifier pooling applies to classify, choice and rerank, not to {self.task}, which "
                                 "scores every token")
        if self.rerank_loss not in ("bce", "listwise"):
            raise BertmodelError(f"rerank loss must be bce or listwise, got {self.rerank_loss!r}")
        if self.init not in ("pretrained", "random"):
            raise BertmodelError(f"init must be pretrained or random, got {self.init!r}")
        self._check_distillation_options()
        if self.task == "embed":
            self._check_embed_options()
        if self.max_seq_length is None:
            self.max_seq_length = task_default("max_seq_length", self.task)
        if self.epochs <= 0:
            raise BertmodelError(f"epochs must be positive, got {self.epochs}")
        if self.text_pair_column == "":
            self.text_pair_column = None
        if self.no_header:  # header-less files name their columns by index
            for name in ("text_column", "text_pair_column", "label_column"):
                value = getattr(self, name)
                if isinstance(value, str) and value.isdigit():
                    setattr(self, name, int(value))

    def _check_distillation_options(self) -> None:
        if not 0 <= self.kd_alpha <= 1:
            raise BertmodelError(f"kd-alpha must be between 0 and 1, got {self.kd_alpha}")
        if not self.kd_temperature > 0:
            raise BertmodelError(f"kd-temperature must be positive, got {self.kd_temperature}")
        if self.teacher is not None and self.task == "rerank":
            raise BertmodelError("--teacher distils into classify, qa, tokens, choice and embed runs, not rerank")

    def _check_embed_options(self) -> None:
        if self.pooling not in (None, "mean", "cls"):
            raise BertmodelError(f"pooling must be mean or cls, got {self.pooling!r}")
        if not self.scale > 0:
            raise BertmodelError(f"scale must be positive, got {self.scale}")
        if self.mini_batch_size is not None and self.mini_batch_size < 1:
            raise BertmodelError(f"mini batch size must be at least 1, got {self.mini_batch_size}")
        dims = self.matryoshka_dims
        if isinstance(dims, str):
            try:
                dims = tuple(int(x) for x in dims.split(",") if x.strip())
            except ValueError:
                raise BertmodelError(f"--matryoshka-dims {self.matryoshka_dims!r}: give widths as integers, e.g. "
                                     "768,256,64") from None
        if dims is not None:
            dims = tuple(int(x) for x in dims)
            if not dims or min(dims) < 1 or len(set(dims)) != len(dims):
                raise BertmodelError(f"--matryoshka-dims {self.matryoshka_dims!r}: give distinct positive widths, "
                                     "e.g. 768,256,64")
        self.matryoshka_dims = dims or None
        self.max_passage_length = self.max_passage_length or 256
        if min(self.max_passage_length, self.max_query_length) < 3:
            raise BertmodelError("--max-query-length and --max-passage-length must leave room for [CLS], a token "
                                 "and [SEP] (at least 3)")
        self.max_seq_length = max(self.max_passage_length, self.max_query_length)

    @property
    def task_name(self) -> str:
        """The task a run directory records (tasks' `name`)."""
        return TASK_NAMES[self.task]

    def read_paths(self) -> list[tuple[str, str | None]]:
        """What the run reads, which --out may not be or contain."""
        model = None if self.model.startswith("random:") else self.model
        return [("--model", model), ("--train", self.train), ("--validation", self.validation),
                ("--tokenizer", self.tokenizer), ("--teacher", self.teacher)]

    def meaningful_options(self) -> tuple[str, ...]:
        return MEANINGFUL + ("model", "architecture", "classifier_pooling", "init", "max_seq_length", "epochs", "doc_stride", "max_query_length",
                             "metric_for_best", "positive_label", "label_all_tokens", "max_train_examples", "rerank_loss", "rerank_top_k",
                             "pooling", "scale", "mini_batch_size", "matryoshka_dims", "max_passage_length",
                             "query_prefix", "passage_prefix", "teacher", "kd_alpha", "kd_temperature",
                             "max_eval_examples")

    def first(self, examples, which: str):
        """`examples` (anything sliceable) cut to --max-train-examples / --max-eval-examples."""
        limit = self.max_train_examples if which == "train" else self.max_eval_examples
        if limit is None or examples is None:
            return examples
        return examples.head(limit) if hasattr(examples, "head") else examples[:limit]

    def data_options(self) -> dict:
        return {name: getattr(self, name) for name in DATA_OPTIONS}

    def fit_schedule(self, rows: int, world: int) -> None:
        """Steps from epochs, and per-epoch evaluation/checkpoints, once the data is known."""
        per_epoch = max(1, math.ceil(rows / (self.batch_size * self.grad_accum * world)))
        if self.max_steps is None:
            self.max_steps = max(1, math.ceil(per_epoch * self.epochs))
        if not self.eval_every:
            self.eval_every = per_epoch
        if self.save_every is None:
            self.save_every = per_epoch


def make_task(cfg: FinetuneConfig, d, log):
    if cfg.task == "qa":
        from bertmodel.tasks.qa import QATask

        task = QATask(cfg, d, log)
    elif cfg.task == "tokens":
        from bertmodel.tasks.tokens import TokenClassificationTask

        task = TokenClassificationTask(cfg, d, log)
    elif cfg.task == "rerank":
        from bertmodel.tasks.rerank import RerankTask

        task = RerankTask(cfg, d, log)
    elif cfg.task == "embed" and cfg.teacher:
        from bertmodel.tasks.embed_distill import EmbedDistillTask

        task = EmbedDistillTask(cfg, d, log)
    elif cfg.task == "embed":
        from bertmodel.tasks.embed import EmbedTask

        task = EmbedTask(cfg, d, log)
    elif cfg.task == "choice":
        from bertmodel.tasks.choice import MultipleChoiceTask

        task = MultipleChoiceTask(cfg, d, log)
    else:
        from bertmodel.tasks.classification import ClassificationTask

        task = ClassificationTask(cfg, d, log)
    cfg.fit_schedule(len(task.train_set), d.world)
    return task


def finetune(cfg: FinetuneConfig, log=None) -> dict:
    """Fine-tune (or resume) into cfg.out. Returns the last logged metrics."""
    from tqdm import tqdm

    return run_training(cfg, lambda d, log: make_task(cfg, d, log), log or tqdm.write)
