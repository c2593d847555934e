"""The SQuAD metric (Rajpurkar et al. 2016, 2018), on the official scripts' 0-100 scale.

An answer is normalized by lower-casing, removing every ASCII punctuation character
(`string.punctuation`), removing the words "a", "an" and "the", and collapsing runs of
whitespace (in that order). Exact match is equality of normalized strings; F1 is the
harmonic mean of precision and recall over the multiset of normalized words. Each
prediction scores the maximum over its gold answers.

v1.1 (`evaluate-v1.1.py`): every question has gold answers; a question without a
prediction scores 0 and still counts.
v2.0 (`evaluate-v2.0.py`): gold answers that normalize to nothing are dropped and an
unanswerable question's gold is ""; an empty prediction or gold has no words, so F1 is
1 when both are empty and 0 when only one is. Scores are also split by whether the
question has an answer (`HasAns_*`) or not (`NoAns_*`).
"""
from __future__ import annotations

import string
from collections import Counter

from bertmodel.errors import BertmodelError

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = frozenset(("a", "an", "the"))


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    # The official regex \b(a|an|the)\b replaces whole words only; after removing
    # punctuation, words are exactly the runs between non-word characters. Splitting on
    # whitespace is not enough: "\b" also separates a word from a non-word, non-space
    # character such as "€", so split words out with the same notion of boundary.
    return " ".join(_drop_articles(text).split())


def _drop_articles(text: str) -> str:
    out, word = [], []
    for ch in text + "\0":  # a final non-word character flushes the last word
        if ch.isalnum() or ch == "_":
            word.append(ch)
            continue
        if word:
            token = "".join(word)
            out.append(" " if token in _ARTICLES else token)
            word = []
        out.append(ch)
    return "".join(out[:-1])


def exact_match_score(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str, version_2: bool = False) -> float:
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if version_2 and (not predicted or not expected):
        # v2.0: "no answer" is the empty string, so both empty is a match. v1.1 scores
        # it 0 (no common word), as its script does.
        return float(predicted == expected)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def squad_metric(examples: list, predictions: dict[str, str], version_2: bool = False) -> dict:
    """{"exact_match", "f1", "total", "missing"} (+ for v2.0 "HasAns_exact", "HasAns_f1",
    "HasAns_total", "NoAns_exact", "NoAns_f1", "NoAns_total"), percentages 0-100, of
    `examples` (data/squad.py's SquadExample: read for its id, answers and source; the
    metrics never import the readers, which use them) against predictions by id.
    A question without a prediction scores 0 and is counted in `missing`."""
    if not examples:
        raise BertmodelError("squad_metric: no questions to score")
    exact, f1, has_answer = {}, {}, {}
    for example in examples:
        golds = [text for text, _ in example.answers]
        if version_2:
            golds = [g for g in golds if normalize_answer(g)] or [""]
        elif not golds:
            raise BertmodelError(f"{example.source or 'examples'}: question {example.id} has no answer: "
                                 "score unanswerable questions with the SQuAD v2.0 metric")
        has_answer[example.id] = bool(example.answers)  # the split is by the raw answers
        prediction = predictions.get(example.id)
        if prediction is None:
            exact[example.id] = f1[example.id] = 0.0
            continue
        exact[example.id] = max(exact_match_score(prediction, g) for g in golds)
        f1[example.id] = max(f1_score(prediction, g, version_2) for g in golds)
    ids = list(exact)
    result = {"exact_match": _percent(exact, ids), "f1": _percent(f1, ids), "total": len(ids),
              "missing": sum(1 for i in ids if i not in predictions)}
    if version_2:
        for name, wanted in (("HasAns", True), ("NoAns", False)):
            subset = [i for i in ids if has_answer[i] is wanted]
            if subset:
                result[f"{name}_exact"] = _percent(exact, subset)
                result[f"{name}_f1"] = _percent(f1, subset)
            result[f"{name}_total"] = len(subset)
    return result


def _percent(scores: dict[str, float], ids: list[str]) -> float:
    return 100.0 * sum(scores[i] for i in ids) / len(ids)
