"""Fine-tuning metrics equal scikit-learn's and scipy's on drawn inputs, and the
degenerate cases give what those libraries give."""
import json
import math
import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bertmodel.metrics import classification as m

sklearn_metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn is the reference (test extra)")
stats = pytest.importorskip("scipy.stats", reason="scipy is the reference (test extra)")


@st.composite
def label_pairs(draw, max_classes=5):
    n = draw(st.integers(1, 60))
    k = draw(st.integers(1, max_classes))
    labels = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    predictions = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    return np.array(predictions), np.array(labels)


@st.composite
def value_pairs(draw):
    n = draw(st.integers(2, 50))
    # Few distinct values (many ties) as often as continuous ones.
    values = st.one_of(st.integers(-3, 3).map(float),
                       st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False))
    x = draw(st.lists(values, min_size=n, max_size=n))
    y = draw(st.lists(values, min_size=n, max_size=n))
    return np.array(x), np.array(y)


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@settings(max_examples=150, deadline=None)
@given(label_pairs())
def test_classification_scores_equal_sklearn(pair):
    predictions, labels = pair
    assert m.accuracy(predictions, labels) == pytest.approx(sklearn_metrics.accuracy_score(labels, predictions), abs=1e-12)
    assert m.macro_f1(predictions, labels) == pytest.approx(
        quiet(sklearn_metrics.f1_score, labels, predictions, average="macro"), abs=1e-12)
    assert m.matthews_corrcoef(predictions, labels) == pytest.approx(
        quiet(sklearn_metrics.matthews_corrcoef, labels, predictions), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(label_pairs(max_classes=2))
def test_binary_f1_equals_sklearn(pair):
    predictions, labels = pair
    expected = quiet(sklearn_metrics.f1_score, labels, predictions, pos_label=1, zero_division=0.0,
                     labels=[0, 1], average="binary")
    assert m.binary_f1(predictions, labels) == pytest.approx(expected, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(value_pairs())
@example((np.array([0.0, 1.0]), np.array([0.0, 5e-324])))  # subnormal targets: centring lost their shape
def test_correlations_equal_scipy(pair):
    x, y = pair
    expected_p = quiet(stats.pearsonr, x, y).statistic
    expected_s = quiet(stats.spearmanr, x, y).statistic
    for ours, theirs in ((m.pearson(x, y), expected_p), (m.spearman(x, y), expected_s)):
        if math.isnan(theirs):
            assert math.isnan(ours)
        else:
            assert ours == pytest.approx(theirs, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-4, 4), min_size=1, max_size=40))
def test_average_ranks_equal_scipy(values):
    np.testing.assert_array_equal(m.average_ranks(values), stats.rankdata(values, method="average"))


def test_hand_computed_values():
    # 3 classes; confusion rows = true: [[2,1,0],[0,1,1],[1,0,2]]
    labels = [0, 0, 0, 1, 1, 2, 2, 2]
    predictions = [0, 0, 1, 1, 2, 0, 2, 2]
    assert m.accuracy(predictions, labels) == 5 / 8
    # F1 per class: 2*2/(2*2+1+1)=4/6, 2*1/(2+1+1)=2/4, 2*2/(4+1+1)=4/6
    assert m.macro_f1(predictions, labels) == pytest.approx((4 / 6 + 2 / 4 + 4 / 6) / 3)
    # t=(3,2,3), p=(3,2,3), c=5, s=8: (5*8-22)/(64-22) = 18/42
    assert m.matthews_corrcoef(predictions, labels) == pytest.approx(18 / 42)
    assert m.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(m.pearson([1, 2.5, 2.5, 4], [1, 2, 3, 4]))


def test_degenerate_cases():
    # One class predicted everywhere: MCC 0 (sklearn), accuracy and F1 still defined.
    labels = [0, 1, 1, 0, 1]
    assert m.matthews_corrcoef([1] * 5, labels) == 0.0
    assert m.matthews_corrcoef([1] * 5, labels) == sklearn_metrics.matthews_corrcoef(labels, [1] * 5)
    assert m.accuracy([1] * 5, labels) == 0.6
    # Perfect and perfectly wrong binary predictions.
    assert m.matthews_corrcoef(labels, labels) == 1.0
    assert m.matthews_corrcoef([1 - v for v in labels], labels) == -1.0
    # Class 1 never true nor predicted: binary F1 0.0 (sklearn's zero_division).
    assert m.binary_f1([0, 0], [0, 0]) == 0.0
    # Constant predictions: Pearson and Spearman undefined -> nan, as scipy.
    assert math.isnan(m.pearson([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]))
    assert math.isnan(m.spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]))
    assert math.isnan(quiet(stats.pearsonr, [2.0, 2.0, 2.0], [1.0, 2.0, 3.0]).statistic)
    assert math.isnan(m.pearson([1.0], [2.0]))


def test_metric_dicts_and_json():
    out = m.classification_metrics([0, 1, 1, 0], [0, 1, 0, 0], num_labels=2)
    assert set(out) == {"accuracy", "macro_f1", "mcc", "f1"}
    assert all(type(v) is float for v in out.values())
    assert out["f1"] == pytest.approx(2 / 3)
    assert set(m.classification_metrics([0, 1, 2], [0, 1, 2], num_labels=3)) == {"accuracy", "macro_f1", "mcc"}
    reg = m.regression_metrics(np.array([1.0, 1.0, 1.0], np.float32), np.array([0.0, 1.0, 2.0]))
    assert math.isnan(reg["pearson"]) and reg["mse"] == pytest.approx(2 / 3)
    assert json.loads(json.dumps(m.json_ready(reg))) == {"pearson": None, "spearman": None, "mse": reg["mse"]}


def test_length_mismatch_is_refused():
    with pytest.raises(ValueError, match="3 predictions but 2 labels"):
        m.accuracy([0, 1, 1], [0, 1])
