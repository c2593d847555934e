"""Classification and regression scores, in numpy, as plain Python floats.

Each follows the definition scikit-learn / scipy use, so the numbers equal theirs
(tests/test_classification_metrics.py checks on drawn inputs):
- `accuracy`: fraction of exact matches (sklearn `accuracy_score`);
- `macro_f1`: mean over classes of 2TP / (2TP + FP + FN), the classes being those seen
  in the labels or the predictions (sklearn `f1_score(average="macro")`, which uses
  the same set, so no class has a zero denominator);
- `binary_f1`: F1 of class 1, what GLUE reports as "f1" for MRPC and QQP
  (sklearn `f1_score`, default `pos_label=1`; 0.0 when class 1 is never predicted nor
  true, sklearn's `zero_division` result);
- `matthews_corrcoef`: the multi-class MCC from the confusion matrix C (Gorodkin 2004,
  sklearn's formula): (c·s − t·p) / sqrt((s² − p·p)(s² − t·t)) with t, p the true and
  predicted counts per class, c the correct ones, s the total; 0.0 when either factor
  under the root is 0 (one class predicted, or one class true), as sklearn returns;
- `pearson`: scipy `pearsonr`'s statistic; nan when either input is constant (scipy
  returns nan there, with a warning) or has fewer than 2 values;
- `spearman`: Pearson of the ranks, ties given their average rank (scipy `rankdata`
  "average", `spearmanr`); nan in the same cases.

nan means "undefined", not zero: `json_ready` turns it into None (JSON null) for
metrics.jsonl, since json.dumps would write the non-standard `NaN`.
"""
from __future__ import annotations

import math

import numpy as np


def _pair(predictions, labels) -> tuple[np.ndarray, np.ndarray]:
    predictions = np.asarray(predictions).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    if predictions.shape != labels.shape:
        raise ValueError(f"{len(predictions)} predictions but {len(labels)} labels")
    return predictions, labels


def confusion_matrix(predictions, labels) -> np.ndarray:
    """(K, K) int64 counts, rows = true class, columns = predicted class, over the K
    classes seen in either input (sorted)."""
    predictions, labels = _pair(predictions, labels)
    classes, index = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    true, pred = index[: len(labels)], index[len(labels):]
    k = len(classes)
    return np.bincount(true * k + pred, minlength=k * k).reshape(k, k).astype(np.int64)


def accuracy(predictions, labels) -> float:
    predictions, labels = _pair(predictions, labels)
    if len(labels) == 0:
        return math.nan
    return float(np.mean(predictions == labels))


def macro_f1(predictions, labels) -> float:
    c = confusion_matrix(predictions, labels)
    if c.size == 0:
        return math.nan
    tp = np.diag(c).astype(np.float64)
    denominator = c.sum(axis=0) + c.sum(axis=1)  # 2TP + FP + FN, > 0 for every seen class
    return float(np.mean(2 * tp / denominator))


def binary_f1(predictions, labels, positive=1) -> float:
    predictions, labels = _pair(predictions, labels)
    tp = int(np.count_nonzero((predictions == positive) & (labels == positive)))
    denominator = int(np.count_nonzero(predictions == positive) + np.count_nonzero(labels == positive))
    return 2 * tp / denominator if denominator else 0.0


def matthews_corrcoef(predictions, labels) -> float:
    c = confusion_matrix(predictions, labels).astype(np.float64)
    t, p = c.sum(axis=1), c.sum(axis=0)
    correct, total = np.trace(c), c.sum()
    cov_true_pred = correct * total - t @ p
    cov_pred = total * total - p @ p
    cov_true = total * total - t @ t
    if cov_pred * cov_true == 0:
        return 0.0
    return float(cov_true_pred / math.sqrt(cov_true * cov_pred))


def pearson(x, y) -> float:
    x, y = (a.astype(np.float64) for a in _pair(x, y))
    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    # As scipy: centre, scale by the largest magnitude (no overflow), then normalise. Scaled
    # once before centring too: the mean of subnormal values ([0, 5e-324]) rounds to one of
    # them, and the centred pair lost its shape (r 0.707 for a perfect correlation).
    x, y = x / np.max(np.abs(x)), y / np.max(np.abs(y))
    xm, ym = x - x.mean(), y - y.mean()
    xm /= np.max(np.abs(xm))
    ym /= np.max(np.abs(ym))
    r = float(np.dot(xm / np.linalg.norm(xm), ym / np.linalg.norm(ym)))
    return max(-1.0, min(1.0, r))


def average_ranks(x) -> np.ndarray:
    """1-based ranks of x, ties sharing the mean of the ranks they span (scipy
    `rankdata(method="average")`)."""
    x = np.asarray(x).reshape(-1)
    order = np.argsort(x, kind="mergesort")
    inverse = np.empty(len(x), np.int64)
    inverse[order] = np.arange(len(x))
    ordered = x[order]
    new_value = np.r_[True, ordered[1:] != ordered[:-1]]
    dense = np.cumsum(new_value)[inverse]  # 1-based id of each value's tie group
    bounds = np.r_[np.flatnonzero(new_value), len(x)]  # where each tie group starts
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def spearman(x, y) -> float:
    x, y = _pair(x, y)
    if len(x) < 2:
        return math.nan
    return pearson(average_ranks(x), average_ranks(y))


def classification_metrics(predictions, labels, num_labels: int | None = None, positive: int | None = 1
                           ) -> dict[str, float]:
    """accuracy, macro_f1, mcc; plus f1 (of class `positive`, by default 1: GLUE's
    MRPC/QQP score) when the task has two classes."""
    out = {"accuracy": accuracy(predictions, labels), "macro_f1": macro_f1(predictions, labels),
           "mcc": matthews_corrcoef(predictions, labels)}
    if num_labels == 2 and positive is not None:
        out["f1"] = binary_f1(predictions, labels, positive)
    return out


def regression_metrics(predictions, targets) -> dict[str, float]:
    """pearson, spearman and mse (the training loss's definition)."""
    predictions, targets = _pair(predictions, targets)
    diff = predictions.astype(np.float64) - targets.astype(np.float64)
    return {"pearson": pearson(predictions, targets), "spearman": spearman(predictions, targets),
            "mse": float(np.mean(diff * diff)) if len(diff) else math.nan}


def json_ready(metrics: dict) -> dict:
    """The same dict with nan/inf floats as None, for JSON (`metrics.jsonl`)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
