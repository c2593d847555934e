"""Sequence classification and regression: [CLS] -> pooler -> dropout -> linear
(transformers' BertForSequenceClassification), on labelled text or text pairs.

The label set and its order come from the training data (data/labels.py) and travel in
the checkpoint and in config.json (id2label/label2id). Batches are padded to their
longest row; the last layer computes only [CLS]. Metrics each evaluation: accuracy,
macro-F1 and Matthews correlation (plus binary F1 for two classes), or Pearson/Spearman
for regression, over the whole validation set.
"""
from __future__ import annotations

import numpy as np
import torch

from bertmodel.model import HeadModel
from bertmodel.model.config import BertConfig, config_from_dict
from bertmodel.data.classification import encode_examples, pad_batch
from bertmodel.data.labels import LabelSpace
from bertmodel.data.tables import LabelledTexts, read_hub_dataset, read_table
from bertmodel.errors import BertmodelError
from bertmodel.metrics.classification import classification_metrics, json_ready, regression_metrics
from bertmodel.training.metrics import encoder_flops
from bertmodel.training.batched_forward import forward_all
from bertmodel.tasks.finetuning import (FinetuningTask, IntervalStats, best_metric, split_identity, start_from)
from bertmodel.tasks.task_defaults import task_default


def read_split(cfg, which: str, labels_required: bool = True) -> LabelledTexts | None:
    """The train or validation split the options name (a file, a save_to_disk dir or a
    hub dataset), or None when none is given."""
    path = getattr(cfg, which)
    columns = dict(text_column=cfg.text_column, text_pair_column=cfg.text_pair_column,
                   label_column=cfg.label_column, labels_required=labels_required, fallback=cfg.run_columns)
    split = getattr(cfg, f"{which}_split")
    if path:
        return cfg.first(read_table(path, split=split, header=not cfg.no_header, **columns), which)
    if cfg.dataset:
        return cfg.first(read_hub_dataset(cfg.dataset, config=cfg.dataset_config, split=split, **columns), which)
    return None


class EncodedSet:
    """Encoded rows + the padding policy: what the loader collates from."""

    def __init__(self, encoded, pad_id: int, multiple: int):
        self.encoded, self.pad_id, self.multiple = encoded, pad_id, multiple

    def __len__(self) -> int:
        return len(self.encoded)

    def collate(self, rows, max_len: int | None = None) -> dict[str, np.ndarray]:
        return pad_batch(self.encoded, rows, self.pad_id, self.multiple)


class ClassificationStats(IntervalStats):
    """Loss and accuracy (loss only for regression) per logging interval."""

    def __init__(self, device: torch.device, regression: bool):
        super().__init__(device)
        self.regression = regression

    @torch.no_grad()
    def add(self, out, tensors: dict) -> None:
        correct = (torch.zeros((), device=self.sums.device) if self.regression
                   else (out.logits.argmax(-1) == tensors["labels"]).sum())
        self.add_counts(out.loss, correct, tensors["labels"].numel())

    def summarize(self, totals: torch.Tensor) -> dict:
        loss, accuracy = self.means(totals)
        return {"loss": loss} if self.regression else {"loss": loss, "accuracy": accuracy}


class ClassificationTask(FinetuningTask):
    name = "classification"
    head_kind = "classify"  # BertForSequenceClassification, or its ModernBERT twin (model.HEADS)

    def __init__(self, cfg, d, log, label_space: LabelSpace | None = None):
        """label_space given (a trained model's): evaluation only, no training data read."""
        super().__init__(cfg, d, log)
        train = None
        notes = []  # which text columns were found by name: said once all the data has been read
        if label_space is None:
            train = read_split(cfg, "train")
            if train is None:
                raise BertmodelError("give the training data: --train FILE or --dataset NAME")
            notes.append(self._read_columns(train))
            label_space = LabelSpace.from_labels(train, cfg.num_labels)
            encoded = encode_examples(self.tok, train, label_space, cfg.max_seq_length)
            self.train_set = EncodedSet(encoded, self.pad, self.multiple)
        self.labels = label_space
        self.check_teacher_labels()
        validation = read_split(cfg, "validation", labels_required=train is not None)
        if train is None and validation is not None:
            notes.append(self._read_columns(validation))
        self.validation_texts = validation
        self.validation = None
        if validation is not None:
            self.validation = EncodedSet(encode_examples(self.tok, validation, self.labels if validation.labels
                                                         is not None else None, cfg.max_seq_length),
                                         self.pad, self.multiple)
        seen = (f"{len(validation):,} examples from {validation.source} ({self.validation.encoded.fit_note()})"
                if validation is not None else "")
        for note in filter(None, notes):
            log(note)
        if train is not None:
            kinds = "regression" if label_space.regression else f"{label_space.num_labels} labels"
            log(f"train: {len(train):,} examples from {train.source} ({kinds}; {encoded.fit_note()})"
                + (f"; validation: {seen}" if seen else ""))
        elif seen:
            log(f"validation: {seen}")
        self.positive = self._positive_label(cfg.positive_label)
        if self.positive is not None and train is not None:
            log(f"f1 is the F1 of the positive label {self.labels.labels[self.positive]!r} (id {self.positive}); "
                "--positive-label chooses the other")
        self.best_metric = best_metric(cfg.metric_for_best, "pearson" if self.labels.regression
                                       else task_default("metric_for_best", "classify"),
                                       self.metric_names())

    def _read_columns(self, data: LabelledTexts) -> str | None:
        """Make the text columns read the run's options (the validation data is read in the
        same ones, and checkpoints and the export record them: a resume compares them);
        the line that says which were found by name, if they were."""
        self.cfg.text_column, self.cfg.text_pair_column = data.columns.text, data.columns.pair
        return f"{data.source}: read {data.columns.describe()}" if data.columns.found else None

    def _positive_label(self, chosen) -> int | None:
        """The class binary F1 is computed for: --positive-label, else id 1 (the label 1 of
        0/1 data, as GLUE's MRPC/QQP F1; the second in sorted order for text labels).
        None where there is no binary F1."""
        labels = self.labels
        if labels.regression or labels.num_labels != 2:
            if chosen is not None:
                raise BertmodelError(f"--positive-label {chosen}: binary F1 needs two classes; this run has "
                                     + ("regression targets" if labels.regression else f"{labels.num_labels} classes"))
            return None
        if chosen is None:
            return 1
        names = [str(label) for label in labels.labels]
        if str(chosen) not in names:
            raise BertmodelError(f"--positive-label {chosen}: not a label of this run (its labels are "
                                 f"{', '.join(names)})")
        return names.index(str(chosen))

    def metric_names(self) -> list[str]:
        """The eval_* metrics each evaluation reports (without the prefix)."""
        if self.labels.regression:
            return ["pearson", "spearman", "mse"]
        return ["accuracy", "macro_f1", "mcc", *(["f1"] if self.positive is not None else []), "loss"]

    @property
    def has_eval(self) -> bool:
        return self.validation is not None

    # -- the model -------------------------------------------------------------------
    def head_labels(self) -> list[str]:
        return list(self.labels.id2label().values())

    def fresh_model(self, log) -> HeadModel:
        return start_from(self.model_class, self.pre, log, init=self.cfg.init, labels=self.head_labels(),
                          num_labels=self.labels.num_labels)

    def model_for_checkpoint(self, resume: dict) -> HeadModel:
        model = self.model_class(config_from_dict(resume["config"]), self.labels.num_labels)
        model.load_state_dict(resume["model"])
        return model

    # -- per step ----------------------------------------------------------------------
    def new_stats(self, device: torch.device) -> ClassificationStats:
        return self.distilling(ClassificationStats(device, self.labels.regression))

    @staticmethod
    def logit_pairs(out, taught, batch) -> list:
        """Distillation compares each sequence's class logits (a regression's one output: MSE)."""
        return [(out.logits, taught.logits)]

    def flops(self, config: BertConfig, tensors: dict, extent: dict | None = None) -> float:
        B, T = tensors["input_ids"].shape
        head = 6 * B * (config.hidden_size ** 2 + config.hidden_size * self.labels.num_labels)
        return encoder_flops(config, B, T, last_layer_rows=1, **(extent or {})) + head

    def predict(self, model, data: EncodedSet, device, autocast, batch_size: int, on_batch=None) -> np.ndarray:
        """Logits (N, C) for every row of `data`, in order (on_batch: see forward_all)."""
        parts = [out.logits.float().cpu().numpy()
                 for _, out in forward_all(model, len(data), lambda rows: _no_labels(data.collate(rows)),
                                           batch_size, device, autocast, on_batch)]
        return np.concatenate(parts) if parts else np.zeros((0, self.labels.num_labels), np.float32)

    def scores(self, logits: np.ndarray, labels: np.ndarray) -> dict:
        if self.labels.regression:
            return json_ready(regression_metrics(logits[:, 0], labels))
        loss = float(torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels).long()))
        return json_ready({**classification_metrics(logits.argmax(-1), labels, self.labels.num_labels,
                                                    positive=self.positive),
                           "loss": loss})

    def evaluate(self, model, d, autocast, logits: np.ndarray | None = None, on_batch=None) -> dict:
        """The task's metrics over the whole validation set (every rank computes them
        alike, so the best-model decision agrees across ranks)."""
        if logits is None:
            logits = self.predict(model, self.validation, d.device, autocast, self.cfg.eval_batch_size, on_batch)
        return {f"eval_{k}": v for k, v in self.scores(logits, self.validation.encoded.labels).items()}

    def prediction_records(self, logits: np.ndarray) -> list[dict]:
        """One record per validation row: the text(s), the predicted label, its probability
        (or the predicted value, for regression) and the gold label when known."""
        data = self.validation_texts
        records = []
        if self.labels.regression:
            values = logits[:, 0].tolist()
        else:
            probs = torch.softmax(torch.from_numpy(logits).double(), -1).numpy()
            ids = probs.argmax(-1)
            names = self.labels.decode(ids.tolist())
        for i in range(len(data)):
            record = {"text": data.texts[i]}
            if data.pairs is not None:
                record["text_pair"] = data.pairs[i]
            if self.labels.regression:
                record["prediction"] = values[i]
            else:
                record["label"], record["probability"] = names[i], float(probs[i, ids[i]])
            if data.labels is not None:
                record["gold"] = data.labels[i]
            records.append(record)
        return records

    def inputs(self) -> dict:
        """What this run trains and evaluates on (compared on resume: training/run_dir.py)."""
        cfg = self.cfg
        return {"train": split_identity(cfg, "train"), "validation": split_identity(cfg, "validation"),
                "columns": {"text": cfg.text_column, "text_pair": cfg.text_pair_column, "label": cfg.label_column,
                            "no_header": cfg.no_header},
                "labels": self.labels.to_dict(), **self.teacher_input()}

    def state(self) -> dict:
        labels = self.labels
        return {"name": self.name, "architecture": self.architecture, "label_space": labels.to_dict(),
                "hf_config": {"num_labels": labels.num_labels, "id2label": labels.id2label(),
                              "label2id": labels.label2id(), "problem_type": labels.problem_type},
                "options": self.cfg.data_options()}


def _no_labels(batch: dict) -> dict:
    batch.pop("labels", None)
    return batch
