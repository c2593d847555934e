"""The label space of a classification or regression run, built from its training labels.

What run_glue.py does for data that is not a GLUE task, so a user coming from it finds
the same label ids:
- the label list is the sorted set of training labels: numeric order when every label
  is an integer (`0, 1, 2, 10`, also read from text as "0", "10"), lexicographic
  (code point) order otherwise (`entailment` < `not_entailment`); ids are positions in
  that list. A dataset that declares its classes (a `datasets` ClassLabel) keeps the
  declared order instead, as run_glue does for GLUE tasks;
- regression (one output, MSE) when `num_labels=1`, or when the labels are floats
  (a float-typed column, or text that parses as numbers but not all as integers,
  e.g. STS-B's "3.800"): run_glue decides regression by a float column dtype;
- `num_labels=N` (N > 1) with integer labels all in [0, N) keeps ids = the labels, so a
  class absent from the training file still has its slot.

The space is recorded as a dict (`to_dict`/`from_dict`) in the run's config, and its
`id2label`/`label2id` go into the exported config.json.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bertmodel.data.tables import LabelledTexts
from bertmodel.errors import BertmodelError

_INTEGER = re.compile(r"[+-]?\d+")
KINDS = ("int", "str", "regression")
SHOWN_LABELS = 20  # known labels listed in an "unknown label" error


@dataclass(frozen=True)
class LabelSpace:
    kind: str  # "int", "str" or "regression"
    labels: tuple = ()  # id -> label (int or str); () for regression

    def __post_init__(self):
        if self.kind not in KINDS:
            raise BertmodelError(f"label space: unknown kind {self.kind!r} (one of {', '.join(KINDS)})")
        if self.kind == "regression" and self.labels:
            raise BertmodelError("label space: a regression space has no label list")
        if self.kind != "regression" and len(self.labels) < 2:
            raise BertmodelError(f"label space: classification needs at least 2 labels, got {list(self.labels)}")
        if len(set(self.labels)) != len(self.labels):
            raise BertmodelError(f"label space: duplicate labels in {list(self.labels)}")

    @property
    def regression(self) -> bool:
        return self.kind == "regression"

    @property
    def num_labels(self) -> int:
        """Outputs of the head: 1 for regression, else the number of classes."""
        return 1 if self.regression else len(self.labels)

    @property
    def problem_type(self) -> str:
        """transformers' `config.problem_type` for this space."""
        return "regression" if self.regression else "single_label_classification"

    def id2label(self) -> dict[int, str]:
        """id -> label text, as transformers' config.json holds it ('LABEL_0' for regression)."""
        if self.regression:
            return {0: "LABEL_0"}
        return {i: str(label) for i, label in enumerate(self.labels)}

    def label2id(self) -> dict[str, int]:
        return {text: i for i, text in self.id2label().items()}

    def to_dict(self) -> dict:
        return {"kind": self.kind, "labels": list(self.labels)}

    @classmethod
    def from_dict(cls, data: dict) -> "LabelSpace":
        try:
            kind, labels = data["kind"], data.get("labels", [])
        except (KeyError, TypeError):
            raise BertmodelError(f"label space: expected {{'kind', 'labels'}}, got {data!r}") from None
        if kind == "int" and not all(isinstance(v, int) and not isinstance(v, bool) for v in labels):
            raise BertmodelError(f"label space: kind 'int' with non-integer labels {labels!r}")
        if kind == "str" and not all(isinstance(v, str) for v in labels):
            raise BertmodelError(f"label space: kind 'str' with non-string labels {labels!r}")
        return cls(kind=kind, labels=tuple(labels))

    @classmethod
    def from_labels(cls, data: LabelledTexts, num_labels: int | None = None) -> "LabelSpace":
        """The space of `data`'s (training) labels; `num_labels` as the user gave it."""
        if data.labels is None:
            raise BertmodelError(f"{data.source}: the training data has no labels")
        if num_labels is not None and num_labels < 1:
            raise BertmodelError(f"num_labels must be at least 1, got {num_labels}")
        if num_labels == 1:
            _floats(data)  # every label must be a number
            return cls("regression")
        if data.label_names is not None:
            if num_labels is not None and num_labels != len(data.label_names):
                raise BertmodelError(f"{data.source}: num_labels {num_labels}, but the dataset declares "
                                     f"{len(data.label_names)} classes: {', '.join(data.label_names)}")
            return cls("str", tuple(data.label_names))
        kind, values = _infer(data.labels, integral_floats=num_labels is not None)
        if kind == "regression":
            return cls("regression")
        distinct = sorted(set(values))
        if num_labels is None:
            if len(distinct) < 2:
                raise BertmodelError(f"{data.source}: every training label is {distinct[0]!r}; "
                                     "classification needs at least 2 labels (num_labels=1 for regression)")
            return cls(kind, tuple(distinct))
        if kind == "int" and all(0 <= v < num_labels for v in distinct):
            return cls("int", tuple(range(num_labels)))
        if len(distinct) != num_labels:
            raise BertmodelError(f"{data.source}: num_labels {num_labels}, but the training labels are "
                                 f"{len(distinct)}: {_show(distinct)}")
        return cls(kind, tuple(distinct))

    def encode(self, data: LabelledTexts) -> np.ndarray:
        """(N,) int64 label ids, or float32 targets for regression. A label outside the
        space is an error naming the file, the record, the label and the known ones."""
        if data.labels is None:
            raise BertmodelError(f"{data.source}: no labels to encode")
        if self.regression:
            return np.asarray(_floats(data), np.float32)
        index = {label: i for i, label in enumerate(self.labels)}
        ids = np.empty(len(data.labels), np.int64)
        for i, value in enumerate(data.labels):
            key = _as_int(value) if self.kind == "int" else _as_str(value)
            if key not in index:
                raise BertmodelError(f"{data.source}: {data.record(i)}: unknown label {value!r}; "
                                     f"the training labels are {_show(self.labels)}")
            ids[i] = index[key]
        return ids

    def decode(self, ids: Sequence[int]) -> list:
        """Label ids -> labels (for predictions)."""
        return [self.labels[int(i)] for i in ids]


def head_labels(head: dict) -> list[str] | None:
    """The classes of a trained head in id order, from its settings (hf.Pretrained.head:
    config.json's id2label, or our task record's), or None where it names none."""
    id2label = (head.get("hf_config") or {}).get("id2label") or head.get("id2label")
    if not id2label:
        return None
    return [str(id2label[k]) for k in sorted(id2label, key=int)]


def _infer(values: list, integral_floats: bool) -> tuple[str, list]:
    """('int' | 'str' | 'regression', values converted) for raw training labels."""
    if all(_is_int(v) for v in values):
        return "int", [int(v) for v in values]
    if all(isinstance(v, (float, np.floating)) or _is_int(v) for v in values):
        if integral_floats and all(float(v).is_integer() for v in values):
            return "int", [int(v) for v in values]
        return "regression", []
    if all(isinstance(v, str) for v in values):
        if all(_INTEGER.fullmatch(v) for v in values):
            return "int", [int(v) for v in values]
        numbers = [_parse_float(v) for v in values]
        if all(n is not None for n in numbers):
            if integral_floats and all(n.is_integer() for n in numbers):
                return "int", [int(n) for n in numbers]
            return "regression", []
        return "str", values
    # Mixed types (e.g. JSON with both 1 and "yes"): compare them as text.
    return "str", [_as_str(v) for v in values]


def _is_int(value) -> bool:
    # bool is an int in Python; JSON true/false labels count as 1/0.
    return isinstance(value, (int, np.integer, np.bool_))


def _as_int(value):
    if _is_int(value):
        return int(value)
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if _INTEGER.fullmatch(text):
            return int(text)
        number = _parse_float(text)
        if number is not None and number.is_integer():
            return int(number)
    return value  # not an integer: reported as unknown


def _as_str(value) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    return str(value)


def _parse_float(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _floats(data: LabelledTexts) -> list[float]:
    out = []
    for i, value in enumerate(data.labels):
        number = _parse_float(value) if isinstance(value, str) else (
            float(value) if isinstance(value, (int, float, np.integer, np.floating)) else None)
        if number is None or not math.isfinite(number):
            raise BertmodelError(f"{data.source}: {data.record(i)}: regression needs a number, "
                                 f"label is {value!r}")
        out.append(number)
    return out


def _show(labels) -> str:
    labels = list(labels)
    shown = ", ".join(repr(v) for v in labels[:SHOWN_LABELS])
    return shown + (f", … ({len(labels)} in all)" if len(labels) > SHOWN_LABELS else "")
