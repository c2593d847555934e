"""Extractive question answering (SQuAD v1.1 / v2.0): the question is segment A, a
window of the context segment B, and qa_outputs scores each token as the answer's start
and end (transformers' BertForQuestionAnswering).

Windows, labels and max-context bookkeeping: data/qa_features.py; decoding n-best
spans back to the exact characters of the context: data/qa_decode.py; the official
metric: metrics/squad_metric.py. Every evaluation decodes the whole validation set.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bertmodel.model import HeadModel
from bertmodel.model.config import BertConfig, config_from_dict
from bertmodel.data.classification import as_tokenizer
from bertmodel.data.qa_decode import decode_predictions, write_nbest_predictions, write_predictions
from bertmodel.data.qa_features import QAFeatures, prepare_qa_features
from bertmodel.data.squad import read_squad
from bertmodel.errors import BertmodelError
from bertmodel.metrics.squad_metric import squad_metric
from bertmodel.training.metrics import encoder_flops
from bertmodel.training.batched_forward import forward_all
from bertmodel.tasks.finetuning import (FinetuningTask, IntervalStats, best_metric, split_identity, start_from)
from bertmodel.tasks.task_defaults import task_default


def read_examples(cfg, which: str):
    path = getattr(cfg, which)
    split = getattr(cfg, f"{which}_split")
    if path:  # a split names a part of a save_to_disk DatasetDict, never of a file
        return cfg.first(read_squad(path, split=split if Path(path).is_dir() else None), which)
    if cfg.dataset:
        return cfg.first(read_squad(cfg.dataset, config=cfg.dataset_config, split=split), which)
    return None


def refuse_unanswerable(examples) -> None:
    """SQuAD v1.1 (no --version-2) has no questions without an answer: such data is v2.0."""
    if impossible := [e for e in examples if e.is_impossible]:
        raise BertmodelError(f"{impossible[0].source}: question {impossible[0].id} has no answer (SQuAD v2.0 "
                             f"data, {len(impossible):,} such questions); pass --version-2")


class WindowSet:
    """QA windows + the padding policy: what the loader collates from."""

    def __init__(self, features: QAFeatures, pad_id: int, multiple: int):
        self.features, self.pad_id, self.multiple = features, pad_id, multiple

    def __len__(self) -> int:
        return len(self.features)

    def collate(self, rows, max_len: int | None = None) -> dict[str, np.ndarray]:
        batch = self.features.padded(rows, self.pad_id, self.multiple)
        if self.features.start_positions is not None:
            batch["start_positions"] = self.features.start_positions[rows].astype(np.int64)
            batch["end_positions"] = self.features.end_positions[rows].astype(np.int64)
        return batch


class QAStats(IntervalStats):
    """Loss and exact start/end hits (span_acc) per logging interval."""

    @torch.no_grad()
    def add(self, out, tensors: dict) -> None:
        hit = ((out.start_logits.argmax(-1) == tensors["start_positions"])
               & (out.end_logits.argmax(-1) == tensors["end_positions"])).sum()
        self.add_counts(out.loss, hit, tensors["start_positions"].numel())

    def summarize(self, totals: torch.Tensor) -> dict:
        loss, span_acc = self.means(totals)
        return {"loss": loss, "span_acc": span_acc}


class QATask(FinetuningTask):
    name = "qa"
    head_kind = "qa"  # BertForQuestionAnswering, or its ModernBERT twin (model.HEADS)

    def __init__(self, cfg, d, log, evaluation_only: bool = False):
        """evaluation_only: no training data read (for `bertmodel evaluate`)."""
        super().__init__(cfg, d, log)
        pad, multiple = self.pad, self.multiple
        self.loaded = as_tokenizer(self.tok)  # loaded once: a SentencePiece model takes seconds to convert
        self.validation = read_examples(cfg, "validation")
        if self.validation is not None and not cfg.version_2:
            # Before any work: the v1.1 metric has no score for them (evaluate, or the
            # first evaluation of a fine-tuning run, would fail there).
            refuse_unanswerable(self.validation)
        self.validation_windows = None
        if self.validation is not None:
            self.validation_windows = WindowSet(self._features(self.validation, training=False), pad, multiple)
        self.best_metric = best_metric(cfg.metric_for_best, task_default("metric_for_best", "qa"),
                                       self.metric_names())
        if evaluation_only:
            if self.validation is not None:
                features = self.validation_windows.features
                log(f"validation: {len(self.validation):,} questions, {self._fit_note(features)}")
                self._report_cut_questions(log, "validation", features)
            return
        train = read_examples(cfg, "train")
        if train is None:
            raise BertmodelError("give the training data: --train FILE or --dataset NAME")
        if not cfg.version_2:
            refuse_unanswerable(train)
        features = self._features(train, training=True)
        for skipped in features.skipped[:5]:
            log(f"warning: {skipped.message()}; skipped")
        self.skipped = len(features.skipped)
        if len(features) == 0:
            wrong_start = sum(s.reason.startswith("answer_start") for s in features.skipped)
            raise BertmodelError(f"{train[0].source}: no usable training examples: all {len(train):,} questions "
                                 f"were skipped ({wrong_start:,} whose answer_start does not point at the answer "
                                 f"text, {len(features.skipped) - wrong_start:,} whose answer no token covers); "
                                 "answer_start must be the answer's character offset in its context")
        self._report_cut_questions(log, "train", features)
        if self.validation_windows is not None:
            self._report_cut_questions(log, "validation", self.validation_windows.features)
        self.train_set = WindowSet(features, pad, multiple)
        log(f"train: {len(train):,} questions, {self._fit_note(features)}"
            + (f" ({self.skipped:,} skipped: answer_start does not point at the answer)" if self.skipped else "")
            + (f"; validation: {len(self.validation):,} questions, {self._fit_note(self.validation_windows.features)}"
               if self.validation is not None else ""))

    def _fit_note(self, features: QAFeatures) -> str:
        """What fitting the contexts to max_seq_length did, as training and evaluation report it."""
        return f"{len(features):,} windows of up to {self.cfg.max_seq_length} tokens"

    def _report_cut_questions(self, log, name: str, features: QAFeatures) -> None:
        if features.questions_cut:
            log(f"warning: {name}: {features.questions_cut:,} questions longer than --max-query-length "
                f"{self.cfg.max_query_length} tokens were cut to it")

    def metric_names(self) -> list[str]:
        """The eval_* metrics each evaluation reports (the official script's, 0-100): v2.0's
        HasAns_* / NoAns_* only where the validation data has such questions."""
        names = ["exact_match", "f1"]
        if self.cfg.version_2 and self.validation is not None:
            for group, wanted in (("HasAns", True), ("NoAns", False)):  # split as squad_metric splits them
                if any(bool(e.answers) is wanted for e in self.validation):
                    names += [f"{group}_exact", f"{group}_f1"]
        return names

    def _features(self, examples, training: bool) -> QAFeatures:
        cfg = self.cfg
        return prepare_qa_features(examples, self.loaded, max_seq_length=cfg.max_seq_length, doc_stride=cfg.doc_stride,
                                   max_query_length=cfg.max_query_length, training=training)

    @property
    def has_eval(self) -> bool:
        return self.validation is not None

    def fresh_model(self, log) -> HeadModel:
        return start_from(self.model_class, self.pre, log, init=self.cfg.init)

    def model_for_checkpoint(self, resume: dict) -> HeadModel:
        model = self.model_class(config_from_dict(resume["config"]))
        model.load_state_dict(resume["model"])
        return model

    def new_stats(self, device: torch.device) -> QAStats:
        return self.distilling(QAStats(device))

    @staticmethod
    def logit_pairs(out, taught, batch) -> list:
        """Distillation compares the start and the end distributions over each window's
        positions (padding included, as the task's loss reads them), averaged as that loss
        averages its two terms."""
        return [(out.start_logits, taught.start_logits), (out.end_logits, taught.end_logits)]

    def flops(self, config: BertConfig, tensors: dict, extent: dict | None = None) -> float:
        B, T = tensors["input_ids"].shape
        # The span head scores every position, padding included (why QA is never unpadded).
        return encoder_flops(config, B, T, **(extent or {})) + 6 * B * T * config.hidden_size * 2

    def predict(self, model, examples, windows: WindowSet, device, autocast, batch_size: int, on_batch=None):
        """(predictions {id: text}, nbest {id: [...]}) for `examples` from their windows
        (on_batch: see forward_all)."""
        starts, ends = [], []
        lengths = windows.features.lengths
        for rows, out in forward_all(model, len(windows), windows.collate, batch_size, device, autocast, on_batch):
            s, e = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
            for i, row in enumerate(rows):
                starts.append(s[i, :lengths[row]])
                ends.append(e[i, :lengths[row]])
        cfg = self.cfg
        return decode_predictions(examples, windows.features, starts, ends, n_best=cfg.n_best,
                                  max_answer_length=cfg.max_answer_length, version_2=cfg.version_2,
                                  null_threshold=cfg.null_threshold)

    def evaluate(self, model, d, autocast, on_batch=None) -> dict:
        predictions, nbest = self.predict(model, self.validation, self.validation_windows, d.device, autocast,
                                          self.cfg.eval_batch_size, on_batch)
        self.last_predictions = (predictions, nbest)  # for `bertmodel evaluate` to write
        scores = squad_metric(self.validation, predictions, version_2=self.cfg.version_2)
        return {f"eval_{k}": v for k, v in scores.items() if isinstance(v, float)}

    def inputs(self) -> dict:
        """What this run trains and evaluates on (compared on resume: training/run_dir.py)."""
        return {"train": split_identity(self.cfg, "train"), "validation": split_identity(self.cfg, "validation"),
                "version_2": self.cfg.version_2, **self.teacher_input()}

    def state(self) -> dict:
        return {"name": self.name, "architecture": self.architecture, "hf_config": {},
                "options": self.cfg.data_options()}


def write_qa_outputs(paths: list[Path], predictions: dict, nbest: dict) -> None:
    """The official predictions.json and nbest_predictions.json, at `paths` (in that order)."""
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    write_predictions(paths[0], predictions)
    write_nbest_predictions(paths[1], nbest)
