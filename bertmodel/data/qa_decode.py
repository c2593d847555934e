"""From start/end logits per window to answer texts: Google's `run_squad.py`
post-processing (`write_predictions`), with answer texts cut from the original context
by character offsets (as run_qa.py does) instead of Google's de-tokenize-and-align
heuristic.

Per example, over all its windows:
- candidates are the `n_best` highest start logits x the `n_best` highest end logits of
  each window (ties: lower position first), kept when both are context tokens, the start
  token is in its max-context window, end >= start and the span has at most
  `max_answer_length` tokens;
- they are ranked by start + end logit (ties: window, then start rank, then end rank, as
  Google's stable sort leaves them), and the first `n_best` distinct texts are the n-best
  list, whose probabilities are a softmax over their scores;
- SQuAD v2.0: the null score is the smallest [CLS] start + end logit over the windows;
  the null answer "" joins the candidates with it, and the prediction is "" when
  `null score - best non-null score > null_threshold`.
An example with no valid span predicts "" (Google writes the nonce text "empty").
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from bertmodel.data.qa_features import QAFeatures
from bertmodel.data.squad import SquadExample
from bertmodel.errors import BertmodelError
from bertprep.tokenizer import span_end


def decode_predictions(examples: list[SquadExample], features: QAFeatures, start_logits, end_logits,
                       n_best: int = 20, max_answer_length: int = 30, version_2: bool = False,
                       null_threshold: float = 0.0) -> tuple[dict[str, str], dict[str, list[dict]]]:
    """(predictions {id: text}, nbest {id: [{text, probability, start_logit, end_logit}]})
    for every example that has a window in `features`, in example order.
    `start_logits`/`end_logits` hold one row per window: a (W, T) array padded to at least
    the longest window, or a list of W 1-D arrays each as long as its window."""
    if n_best < 1 or max_answer_length < 1:
        raise BertmodelError(f"n_best and max_answer_length must be at least 1, got {n_best} and {max_answer_length}")
    lengths = features.lengths
    starts = _rows(start_logits, lengths, "start_logits")
    ends = _rows(end_logits, lengths, "end_logits")
    windows_of: dict[int, list[int]] = {}
    for w, e in enumerate(features.example_index.tolist()):
        windows_of.setdefault(e, []).append(w)
    predictions: dict[str, str] = {}
    nbest_all: dict[str, list[dict]] = {}
    for e in sorted(windows_of):
        example = examples[e]
        candidates, null = [], None
        for w in windows_of[e]:
            s_logits, e_logits = starts[w], ends[w]
            candidates.extend(_window_candidates(features, w, s_logits, e_logits, n_best, max_answer_length))
            score = float(s_logits[0]) + float(e_logits[0])
            if version_2 and (null is None or score < null[0]):
                null = (score, float(s_logits[0]), float(e_logits[0]))
        if null is not None:
            candidates.append((null[0], None, 0, 0, null[1], null[2]))
        candidates.sort(key=lambda c: -c[0])  # stable: ties keep the order of discovery
        nbest = _distinct_texts(example.context, features, candidates, n_best)
        if version_2 and null is not None and all(entry["text"] for entry in nbest):
            nbest.append({"text": "", "start_logit": null[1], "end_logit": null[2]})
        if not nbest:
            nbest.append({"text": "", "start_logit": 0.0, "end_logit": 0.0})
        _add_probabilities(nbest)
        best = next((entry for entry in nbest if entry["text"]), None)
        if best is None:
            predictions[example.id] = ""
        elif version_2:
            diff = null[0] - best["start_logit"] - best["end_logit"]
            predictions[example.id] = "" if diff > null_threshold else best["text"]
        else:
            predictions[example.id] = best["text"]
        nbest_all[example.id] = nbest
    return predictions, nbest_all


def _rows(logits, lengths: np.ndarray, name: str) -> list[np.ndarray]:
    if len(logits) != len(lengths):
        raise BertmodelError(f"{name} has {len(logits)} rows but the features have {len(lengths)} windows")
    rows = []
    for w, row in enumerate(logits):
        row = np.asarray(row, dtype=np.float64)
        if row.ndim != 1 or len(row) < lengths[w]:
            raise BertmodelError(f"{name} row {w} has shape {row.shape}; window {w} has {lengths[w]} tokens")
        rows.append(row[:lengths[w]])
    return rows


def _window_candidates(features: QAFeatures, w: int, s_logits, e_logits, n_best: int, max_length: int):
    """(score, window, start, end, start_logit, end_logit) for the valid pairs of the
    window's top-n_best starts and ends, in Google's loop order (start rank, end rank)."""
    window = features.window(w)
    is_context = window["offsets"][:, 0] >= 0
    top_start = np.argsort(-s_logits, kind="stable")[:n_best]
    top_end = np.argsort(-e_logits, kind="stable")[:n_best]
    s, e = np.meshgrid(top_start, top_end, indexing="ij")  # (n, n): start rank major
    ok = is_context[s] & is_context[e] & window["token_is_max_context"][s] & (e >= s) & (e - s + 1 <= max_length)
    s, e = s[ok], e[ok]
    scores = s_logits[s] + e_logits[e]
    return [(float(score), w, int(a), int(b), float(s_logits[a]), float(e_logits[b]))
            for score, a, b in zip(scores, s, e)]


def _distinct_texts(context: str, features: QAFeatures, candidates, n_best: int) -> list[dict]:
    nbest, seen = [], set()
    for score, w, a, b, start_logit, end_logit in candidates:
        if len(nbest) >= n_best:
            break
        if w is None:
            text = ""
        else:
            offsets = features.window(w)["offsets"]
            # Past the marks accent stripping deleted: the answer keeps its last letter's.
            text = context[int(offsets[a, 0]):span_end(context, int(offsets[b, 1]))]
        if text in seen:
            continue
        seen.add(text)
        nbest.append({"text": text, "start_logit": start_logit, "end_logit": end_logit})
    return nbest


def _add_probabilities(nbest: list[dict]) -> None:
    """Softmax over the entries' scores, shifted by the maximum for stability."""
    scores = [entry["start_logit"] + entry["end_logit"] for entry in nbest]
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    for entry, value in zip(nbest, exps):
        entry["probability"] = value / total
    # The official files list the keys in this order.
    for i, entry in enumerate(nbest):
        nbest[i] = {key: entry[key] for key in ("text", "probability", "start_logit", "end_logit")}


def write_predictions(path: str | Path, predictions: dict[str, str]) -> None:
    """predictions.json as the official evaluation scripts read it: {id: text}."""
    _write_json(path, predictions)


def write_nbest_predictions(path: str | Path, nbest: dict[str, list[dict]]) -> None:
    """nbest_predictions.json as Google's run_squad.py writes it:
    {id: [{text, probability, start_logit, end_logit}, ...]}."""
    _write_json(path, nbest)


def _write_json(path, obj) -> None:
    from bertprep.storage import write_bytes_atomic

    text = json.dumps(obj, indent=4, ensure_ascii=False) + "\n"
    try:
        write_bytes_atomic(Path(path), text.encode("utf-8"))
    except OSError as exc:
        raise BertmodelError(f"{path}: cannot write ({exc.strerror})") from None
