"""The teacher of a task distillation (`finetune classify|qa|tokens|choice --teacher`): a
model fine-tuned for the same task, read as evaluate and predict read one (a run's best
model, RUN/hf; a checkpoint; a transformers directory of any family we read), built as its own head
class with its weights, for kd_loss.TaskDistillation to run beside the student.

Refused in one line, before any step: a teacher that is not fine-tuned for the task (a
pre-training run, an MLM model, a bare encoder, another task's head: the line says what
it is and what is needed), one whose tokenizer is not the student's (its logits would be
of other tokens), and one whose labels are not the run's, in the same order (the loss
compares the two models' outputs class by class).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from bertmodel.data.labels import head_labels
from bertmodel.data.tokenizer_info import TokenizerInfo
from bertmodel.errors import BertmodelError
from bertmodel.hf import BARE_ARCHITECTURES, Pretrained, group_names, load_pretrained, load_weights, model_dir
from bertmodel.model import HEAD_MODELS, KIND_OF

# What each task distils from, in the words of the refusal.
NEEDS = {"classify": "a fine-tuned sequence classifier (a finetune classify run or a ...ForSequenceClassification "
                     "directory)",
         "qa": "a fine-tuned question-answering model (a finetune qa run or a ...ForQuestionAnswering directory)",
         "tokens": "a fine-tuned token classifier (a finetune tokens run or a ...ForTokenClassification directory)",
         "choice": "a fine-tuned multiple-choice model (a finetune choice run or a ...ForMultipleChoice directory)"}
WHAT = {"classify": "a sequence classifier", "qa": "a question-answering model", "tokens": "a token classifier",
        "choice": "a multiple-choice model"}
LABELLED = ("classify", "tokens")  # the heads whose outputs are named classes (num_labels)


@dataclass
class TaskTeacher:
    model: nn.Module  # the head model, on the CPU, in eval mode
    pretrained: Pretrained
    path: str  # as --teacher gave it
    labels: list[str] | None  # its classes in id order (classify, tokens)

    @property
    def source(self) -> Path:
        """The directory its weights were read from (a run's RUN/hf)."""
        return Path(self.pretrained.source)

    def describe(self) -> str:
        config = self.pretrained.config
        return (f"{self.source} ({self.pretrained.architecture}, {config.num_hidden_layers} layers, hidden "
                f"{config.hidden_size})")


def _listed(labels: list[str]) -> str:
    return "one regression output" if len(labels) == 1 else ", ".join(labels)


def _what(pre: Pretrained) -> str:
    """What a model without the wanted head is, in words."""
    arch = pre.architecture
    kind = KIND_OF.get(arch)
    if kind in WHAT:
        return f"{WHAT[kind]} ({arch})"
    if arch in BARE_ARCHITECTURES or arch.endswith("Model"):
        return f"a bare encoder ({arch}: no task head)"
    run = pre.step is not None or "objective" in pre.head  # our checkpoint, or a pre-training run's export
    return f"{'a pre-training run' if run else 'a pre-trained model'} ({arch}: no task head)"


def open_teacher(path, kind: str, tokenizer: TokenizerInfo) -> TaskTeacher:
    """The teacher at `path` for task `kind` ("classify", "qa", "tokens", "choice"), whose
    tokenizer must be `tokenizer` (the student's); check_labels compares its classes with
    the run's once the run has read them."""
    pre = load_pretrained(model_dir(path))  # a run's best model, as evaluate and predict read it
    if KIND_OF.get(pre.architecture) != kind:
        raise BertmodelError(f"--teacher {path}: is {_what(pre)}; finetune {kind} distils from {NEEDS[kind]}")
    if pre.tokenizer is None:
        raise BertmodelError(f"--teacher {path}: no tokenizer files stored with it, so it cannot be checked to read "
                             "the student's tokens")
    if diff := pre.tokenizer.same_as(tokenizer):
        raise BertmodelError(f"--teacher {path}: its tokenizer is not the student's ({diff}); the teacher reads the "
                             "student's batches, so both must share one tokenizer")
    labels = head_labels(pre.head)
    if kind in LABELLED and labels is None:
        raise BertmodelError(f"--teacher {path}: names no labels (config.json's id2label), so they cannot be checked "
                             "against this run's")
    model = HEAD_MODELS[pre.architecture](pre.config, *([len(labels)] if kind in LABELLED else []))
    fresh, _ = load_weights(model, pre)
    if fresh:
        raise BertmodelError(f"--teacher {path}: its weights lack {group_names(fresh)} of its {pre.architecture}")
    return TaskTeacher(model.eval(), pre, str(path), labels)


def check_labels(teacher: TaskTeacher, labels: list[str]) -> None:
    """The teacher's classes are the run's, in the same order."""
    if teacher.labels != list(labels):
        raise BertmodelError(f"--teacher {teacher.path}: its labels ({_listed(teacher.labels)}) are not this run's "
                             f"({_listed(list(labels))}); the loss compares the two models' outputs class by class, "
                             "so they must be the same, in the same order")
