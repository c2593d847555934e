"""Multiple choice (SWAG, COPA, e-CARE): each choice encoded on its own with the context,
scored from its [CLS] (pooler -> dropout -> linear H -> 1), a softmax over an example's
choices (transformers' BertForMultipleChoice, run_swag.py's data layout).

Batches are (B, C, T), padded to the batch's longest choice; the last layer computes
only each choice's [CLS]. Metrics each evaluation: accuracy and cross-entropy over the
whole validation set.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from bertmodel.data.choice import ChoiceExamples, EncodedChoices, encode_choices, pad_choices, read_choices
from bertmodel.data.classification import truncation_warning
from bertmodel.data.tables import Table, open_hub_table, open_table
from bertmodel.errors import BertmodelError
from bertmodel.model import HeadModel
from bertmodel.model.config import BertConfig, config_from_dict
from bertmodel.training.metrics import encoder_flops
from bertmodel.training.batched_forward import forward_all
from bertmodel.tasks.finetuning import (FinetuningTask, IntervalStats, best_metric, split_identity, start_from)
from bertmodel.tasks.task_defaults import task_default


def read_table_choices(cfg, table: Table, labels_required: bool = True, blank_ok: bool = False) -> ChoiceExamples:
    """A table's examples in the columns the options name."""
    return read_choices(table, cfg.context_column, cfg.question_column, cfg.choices_column, cfg.choice_columns,
                        cfg.label_column, labels_required=labels_required, blank_ok=blank_ok)


def read_split(cfg, which: str, labels_required: bool = True) -> ChoiceExamples | None:
    """The train or validation split the options name (a file, a save_to_disk dir or a
    hub dataset), or None when none is given."""
    path, split = getattr(cfg, which), getattr(cfg, f"{which}_split")
    if path:
        table = open_table(path, split=split, header=not cfg.no_header)
    elif cfg.dataset:
        table = open_hub_table(cfg.dataset, config=cfg.dataset_config, split=split)
    else:
        return None
    return cfg.first(read_table_choices(cfg, table, labels_required), which)


class ChoiceSet:
    """Encoded examples + the padding policy: what the loader collates from."""

    def __init__(self, encoded: EncodedChoices, pad_id: int, multiple: int):
        self.encoded, self.pad_id, self.multiple = encoded, pad_id, multiple

    def __len__(self) -> int:
        return len(self.encoded)

    def collate(self, rows, max_len: int | None = None) -> dict[str, np.ndarray]:
        return pad_choices(self.encoded, rows, self.pad_id, self.multiple)


class MultipleChoiceStats(IntervalStats):
    """Loss and accuracy per logging interval."""

    @torch.no_grad()
    def add(self, out, tensors: dict) -> None:
        correct = (out.logits.argmax(-1) == tensors["labels"]).sum()
        self.add_counts(out.loss, correct, tensors["labels"].numel())

    def summarize(self, totals: torch.Tensor) -> dict:
        loss, accuracy = self.means(totals)
        return {"loss": loss, "accuracy": accuracy}


class MultipleChoiceTask(FinetuningTask):
    name = "multiple_choice"
    head_kind = "choice"  # BertForMultipleChoice, or its ModernBERT twin (model.HEADS)

    def __init__(self, cfg, d, log, evaluation_only: bool = False):
        """evaluation_only: a trained model's evaluation or prediction, no training data read."""
        super().__init__(cfg, d, log)
        train = None
        if not evaluation_only:
            train = read_split(cfg, "train")
            if train is None:
                raise BertmodelError("give the training data: --train FILE or --dataset NAME")
            self.train_set = ChoiceSet(self.encode(train), self.pad, self.multiple)
        self.train_examples = train
        validation = read_split(cfg, "validation", labels_required=train is not None)
        self.validation_texts = validation
        self.validation = None if validation is None else ChoiceSet(self.encode(validation), self.pad,
                                                                    self.multiple)
        seen = (f"{len(validation):,} examples from {validation.source} ({validation.num_choices} choices; "
                f"{self.validation.encoded.fit_note()})" if validation is not None else "")
        if train is not None:
            log(f"train: {len(train):,} examples from {train.source} ({train.num_choices} choices; "
                f"{self.train_set.encoded.fit_note()})" + (f"; validation: {seen}" if seen else ""))
        elif seen:
            log(f"validation: {seen}")
        self.best_metric = best_metric(cfg.metric_for_best, task_default("metric_for_best", "choice"),
                                       self.metric_names())

    def encode(self, examples: ChoiceExamples) -> EncodedChoices:
        return encode_choices(self.tok, examples, self.cfg.max_seq_length)

    def metric_names(self) -> list[str]:
        """The eval_* metrics each evaluation reports (without the prefix)."""
        return ["accuracy", "loss"]

    @property
    def has_eval(self) -> bool:
        return self.validation is not None

    # -- the model -------------------------------------------------------------------
    def fresh_model(self, log) -> HeadModel:
        return start_from(self.model_class, self.pre, log, init=self.cfg.init)

    def model_for_checkpoint(self, resume: dict) -> HeadModel:
        model = self.model_class(config_from_dict(resume["config"]))
        model.load_state_dict(resume["model"])
        return model

    # -- per step ----------------------------------------------------------------------
    def new_stats(self, device: torch.device) -> MultipleChoiceStats:
        return self.distilling(MultipleChoiceStats(device))

    @staticmethod
    def logit_pairs(out, taught, batch) -> list:
        """Distillation compares each example's scores over its choices."""
        return [(out.logits, taught.logits)]

    def flops(self, config: BertConfig, tensors: dict, extent: dict | None = None) -> float:
        """The encoder over B * C sequences (the last layer at [CLS] only), then pooler and
        the H -> 1 scorer on each [CLS]; extent counts the B * C rows' real tokens."""
        B, C, T = tensors["input_ids"].shape
        H = config.hidden_size
        head = 6 * B * C * (H * H + H)
        return encoder_flops(config, B * C, T, last_layer_rows=1, **(extent or {})) + head

    def predict(self, model, data: ChoiceSet, device, autocast, batch_size: int, on_batch=None) -> np.ndarray:
        """Scores (N, C) for every example of `data`, in order (on_batch: see forward_all)."""
        parts = [out.logits.float().cpu().numpy()
                 for _, out in forward_all(model, len(data), lambda rows: _no_labels(data.collate(rows)),
                                           batch_size, device, autocast, on_batch)]
        return np.concatenate(parts) if parts else np.zeros((0, data.encoded.num_choices), np.float32)

    @staticmethod
    def scores(logits: np.ndarray, labels: np.ndarray) -> dict:
        loss = torch.nn.functional.cross_entropy(torch.from_numpy(logits).double(), torch.from_numpy(labels).long())
        return {"accuracy": float((logits.argmax(-1) == labels).mean()), "loss": float(loss)}

    def evaluate(self, model, d, autocast, logits: np.ndarray | None = None, on_batch=None) -> dict:
        """Accuracy and loss over the whole validation set (every rank computes them alike,
        so the best-model decision agrees across ranks)."""
        if logits is None:
            logits = self.predict(model, self.validation, d.device, autocast, self.cfg.eval_batch_size, on_batch)
        return {f"eval_{k}": v for k, v in self.scores(logits, self.validation.encoded.labels).items()}

    def prediction_records(self, logits: np.ndarray) -> list[dict]:
        """One record per validation example (records())."""
        return records(self.validation_texts, logits)

    def predict_table(self, model, d, table: Table, warn=None) -> list[dict]:
        """records() for every row of `table`, read in the run's columns; labels, where the
        table has them, become "gold"; `warn` hears of choices truncated."""
        examples = read_table_choices(self.cfg, table, labels_required=False, blank_ok=True)
        data = ChoiceSet(self.encode(examples), self.pad, self.multiple)
        if warn is not None and data.encoded.truncated:
            warn(truncation_warning(len(examples), "example", data.encoded.fit_note(), self.cfg.max_seq_length,
                                    self.pre.config.max_sequence_length))
        return records(examples, self.predict(model, data, d.device, contextlib.nullcontext(),
                                              self.cfg.eval_batch_size))

    def inputs(self) -> dict:
        """What this run trains and evaluates on (compared on resume: training/run_dir.py)."""
        cfg = self.cfg
        examples = self.train_examples or self.validation_texts
        return {"train": split_identity(cfg, "train"), "validation": split_identity(cfg, "validation"),
                "columns": {"context": cfg.context_column, "question": cfg.question_column,
                            "choices": cfg.choices_column, "choice_columns": cfg.choice_columns,
                            "label": cfg.label_column},
                "choices": examples.num_choices if examples is not None else None, **self.teacher_input()}

    def state(self) -> dict:
        return {"name": self.name, "architecture": self.architecture, "hf_config": {},
                "options": self.cfg.data_options()}


def records(examples: ChoiceExamples, logits: np.ndarray) -> list[dict]:
    """One record per example: its context, question (where there is one) and choices, the
    predicted choice's index ("label") and probability, every choice's probability, and
    the right index ("gold") when known."""
    probs = torch.softmax(torch.from_numpy(logits).double(), -1).numpy()
    picked = probs.argmax(-1)
    out = []
    for i in range(len(examples)):
        record = {"context": examples.contexts[i]}
        if examples.questions is not None:
            record["question"] = examples.questions[i]
        record.update(choices=examples.choices[i], label=int(picked[i]), probability=float(probs[i, picked[i]]),
                      probabilities=[float(p) for p in probs[i]])
        if examples.labels is not None:
            record["gold"] = int(examples.labels[i])
        out.append(record)
    return out


def _no_labels(batch: dict) -> dict:
    batch.pop("labels", None)
    return batch
