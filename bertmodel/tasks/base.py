"""The task interface: the one thing that knows its objective.

The generic loop (training/loop.py) asks a task for:
  fresh_model(log) / model_for_checkpoint(resume)
                                         the encoder + head (BertWithHead), new or to resume
  train_set                              an object with `len()` and `collate(rows, max_len)`
                                         -> dict of numpy arrays (the model's keyword
                                         arguments, padded per batch)
  new_stats(device)                      per-interval sums: add(out, tensors), totals(),
                                         summarize(totals) -> dict, reset()
  flops(config, tensors)                 training FLOPs of one micro-batch (for MFU)
  evaluate(model, d, autocast, on_batch) {"eval_<metric>": value, ...} (may write predictions);
                                         on_batch(done, total) with 0 first and after each batch
                                         (progress; it may raise to abandon the evaluation)
  best_metric                            (name, greater_is_better) to keep the best model, or None
                                         (a name among metric_names(), checked before training)
  has_eval                               whether there is data to evaluate on
  inputs()                               what the run trains and evaluates on, recorded in every
                                         checkpoint and compared on resume (training/run_dir.py)
  state()                                what goes into a checkpoint's "task" entry (the
                                         transformers class, config.json head fields, task options)
and, where a task has them (pre-training):
  batch_schedule()                       the global batch per step (data/schedules.BatchSchedule,
                                         a batch-size warmup) or None
  step_metrics(step)                     what metrics.jsonl records of a step beyond the loss
                                         (a mask-rate schedule's rate)
and, where a task trains against another model (distillation's teacher):
  training_module(model, device)         the module the steps call instead of the model (the model
                                         and a frozen teacher: its output's loss is the distillation
                                         loss); checkpoints, evaluation and exports see the model alone
and exports through hf.export_hf with the task's architecture and head config.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from bertmodel.model.config import BertConfig
from bertmodel.data.shards import TokenizerInfo


class TrainSet(Protocol):
    def __len__(self) -> int: ...

    def collate(self, rows: np.ndarray, max_len: int | None = None) -> dict[str, np.ndarray]: ...


class Task(Protocol):
    name: str
    architecture: str
    tokenizer: TokenizerInfo
    train_set: TrainSet
    best_metric: tuple[str, bool] | None

    has_eval: bool

    def fresh_model(self, log) -> torch.nn.Module: ...

    def model_for_checkpoint(self, resume: dict) -> torch.nn.Module: ...

    def inputs(self) -> dict: ...

    def new_stats(self, device: torch.device): ...

    def flops(self, config: BertConfig, tensors: dict[str, torch.Tensor], extent: dict | None = None) -> float:
        """Training FLOPs of one micro-batch; extent (model/unpad.py's unpadded_extent:
        tokens and attention_pairs) when the model computes only its real tokens, else padded."""

    def evaluate(self, model, d, autocast, on_batch=None) -> dict: ...

    def state(self) -> dict: ...
