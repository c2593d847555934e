"""The SQuAD v1.1 / v2.0 metric: exact values on hand-scored answers, and normalisation and
F1 checked against the official scripts' definitions restated here with `re`."""
import re
import string
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from bertmodel.errors import BertmodelError
from bertmodel.metrics.squad_metric import exact_match_score, f1_score, normalize_answer, squad_metric
from qa_fixtures import example

CONTEXT = "The cat sat on the mat in 1858."


def official_normalize(s):
    """evaluate-v1.1.py / evaluate-v2.0.py `normalize_answer`, restated from their text:
    lower, remove string.punctuation, replace \\b(a|an|the)\\b by a space, join split()."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s, flags=re.UNICODE)
    return " ".join(s.split())


def official_f1(prediction, gold, version_2):
    p, g = official_normalize(prediction).split(), official_normalize(gold).split()
    if version_2 and (len(p) == 0 or len(g) == 0):
        return int(p == g)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


ANSWER_TEXT = st.text(alphabet=st.sampled_from(list("aAnNtThHeE _-.,'!€\u00a0\u2003é\u0130\u00df\u0301xyz9"))
                      | st.characters(), max_size=40)
WORDY = st.lists(st.sampled_from(["a", "an", "the", "The", "A", "an.", "theatre", "x", "-", "'", "€a",
                                  "a€", "ä", "_the", "the_", "The\u00a0", "\t", "ÀN", "an\u0301"]),
                 max_size=8).map(" ".join)


@settings(max_examples=500, deadline=None)
@given(st.one_of(ANSWER_TEXT, WORDY))
def test_normalisation_equals_the_official_definition(text):
    assert normalize_answer(text) == official_normalize(text)


@settings(max_examples=300, deadline=None)
@given(WORDY, WORDY, st.booleans())
def test_f1_equals_the_official_definition(prediction, gold, version_2):
    assert f1_score(prediction, gold, version_2) == pytest.approx(official_f1(prediction, gold, version_2), abs=1e-12)
    assert exact_match_score(prediction, gold) == float(official_normalize(prediction) == official_normalize(gold))


def test_exact_values():
    assert normalize_answer("The  Cat, sat; on a-mat!") == "cat sat on amat"
    assert f1_score("the mat sat", "on the mat") == 0.5  # "mat sat" vs "on mat": 1 common word
    assert f1_score("the", "an") == 0.0 and f1_score("the", "an", version_2=True) == 1.0
    assert exact_match_score("The", "a") == 1.0


def _examples():
    return [
        example(CONTEXT, "Who?", "The cat", qid="e1"),
        example(CONTEXT, "Where?", "on the mat", qid="e2"),
        example(CONTEXT, "When?", "1858", qid="e3"),
    ]


def test_v1_scores_with_a_missing_prediction():
    examples = _examples()
    examples[0].answers.append(("a cat", 0))  # max over golds
    predictions = {"e1": "cat.", "e2": "the mat sat"}
    result = squad_metric(examples, predictions)
    assert result == {"exact_match": pytest.approx(100 / 3), "f1": pytest.approx(50.0), "total": 3, "missing": 1}


def test_v2_split_by_answerable():
    examples = _examples()[:2] + [example(CONTEXT, "Why?", None, qid="n1"),
                                  example(CONTEXT, "How?", None, qid="n2")]
    predictions = {"e1": "cat.", "e2": "the mat sat", "n1": "", "n2": "cat"}
    assert squad_metric(examples, predictions, version_2=True) == {
        "exact_match": 50.0, "f1": 62.5, "total": 4, "missing": 0,
        "HasAns_exact": 50.0, "HasAns_f1": 75.0, "HasAns_total": 2,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2}


def test_v1_refuses_unanswerable_questions():
    with pytest.raises(BertmodelError, match="test.json: question n1 has no answer: score unanswerable questions "
                                             "with the SQuAD v2.0 metric"):
        squad_metric([example(CONTEXT, "Why?", None, qid="n1")], {"n1": ""})
