"""QA post-processing: n-best spans from logits (max-context, length and null rules),
answer texts from the original context, and the official output files."""
import json

import numpy as np
import pytest

from bertmodel.data.qa_decode import decode_predictions, write_nbest_predictions, write_predictions
from bertmodel.data.qa_features import prepare_qa_features
from bertmodel.data.squad import read_squad
from bertmodel.errors import BertmodelError
from qa_fixtures import example, tiny_tokenizer
from shared_data import SHARED_DATA

TOK = tiny_tokenizer()
CONTEXT = "The cat sat on the mat."
# "who sat?" + max_seq_length 10 + doc_stride 2: windows over context tokens 0-3, 2-5,
# 4-6; the context starts at position 5 of each window. Token 4 ("the") has its most
# context in window 1, token 5 ("mat") in window 2.
EXAMPLES = [example(CONTEXT, "who sat?", "the mat")]
FEATURES = prepare_qa_features(EXAMPLES, TOK, max_seq_length=10, doc_stride=2, training=False)


def _logits():
    start = [np.full(n, -10.0) for n in FEATURES.lengths]
    end = [np.full(n, -10.0) for n in FEATURES.lengths]
    start[1][7], end[1][8] = 5.0, 4.0  # "the mat" in window 1
    start[1][8] = 30.0  # "mat" in window 1: its max-context window is 2, so never a start here
    start[2][6], end[2][6] = 2.5, 1.0  # "mat" in window 2
    start[2][5], end[2][5] = 10.0, 10.0  # "the" in window 2: not its max-context window
    for w, cls in enumerate([6.0, 5.0, 7.0]):
        start[w][0] = end[w][0] = cls
    return start, end


def test_best_span_uses_max_context_starts_only():
    start, end = _logits()
    predictions, nbest = decode_predictions(EXAMPLES, FEATURES, start, end, n_best=3)
    assert predictions == {"q1": "the mat"}
    texts = [(e["text"], e["start_logit"], e["end_logit"]) for e in nbest["q1"]]
    # window 2's "the" (score 20) and window 1's "mat" (34) are dropped: a start token
    # is scored only in its max-context window
    assert texts[:2] == [("the mat", 5.0, 4.0), ("mat", 2.5, 1.0)]
    assert not [t for t in texts if t[1] in (10.0, 30.0)]
    assert abs(sum(e["probability"] for e in nbest["q1"]) - 1.0) < 1e-12
    assert list(nbest["q1"][0]) == ["text", "probability", "start_logit", "end_logit"]


def test_max_answer_length_and_padded_logits_agree():
    start, end = _logits()
    width = int(FEATURES.lengths.max()) + 3
    padded_start = np.stack([np.pad(r, (0, width - len(r)), constant_values=99.0) for r in start])
    padded_end = np.stack([np.pad(r, (0, width - len(r)), constant_values=99.0) for r in end])
    listed = decode_predictions(EXAMPLES, FEATURES, start, end, max_answer_length=1)
    padded = decode_predictions(EXAMPLES, FEATURES, padded_start, padded_end, max_answer_length=1)
    assert listed == padded  # padding past a window's end is never read
    assert listed[0] == {"q1": "mat"}
    assert all(len(e["text"].split()) <= 1 for e in listed[1]["q1"])


def test_version_2_null_score_against_threshold():
    start, end = _logits()
    # null score = min over windows of [CLS] start + end = 10 (window 1); best span 9.
    predictions, nbest = decode_predictions(EXAMPLES, FEATURES, start, end, version_2=True)
    assert predictions == {"q1": ""}
    assert {"text": "", "start_logit": 5.0, "end_logit": 5.0}.items() <= \
        next(e for e in nbest["q1"] if e["text"] == "").items()
    predictions, _ = decode_predictions(EXAMPLES, FEATURES, start, end, version_2=True, null_threshold=1.0)
    assert predictions == {"q1": "the mat"}  # 10 - 9 = 1 is not above the threshold


def test_texts_distinct_and_no_valid_span_gives_empty():
    start, end = _logits()
    _, nbest = decode_predictions(EXAMPLES, FEATURES, start, end)
    texts = [e["text"] for e in nbest["q1"]]
    # 17 valid spans: starts at context tokens 0-2 in window 0 (ends up to token 3), 3-4 in
    # window 1 (ends up to 5), 5-6 in window 2 (ends up to 6): 9 + 5 + 3, all distinct texts
    assert len(texts) == len(set(texts)) == 17
    # every end before every start: nothing valid
    start = [np.where(np.arange(n) >= n - 2, 5.0, -5.0) for n in FEATURES.lengths]
    end = [np.where(np.arange(n) < 6, 5.0, -5.0) for n in FEATURES.lengths]
    predictions, nbest = decode_predictions(EXAMPLES, FEATURES, start, end, n_best=2)
    assert predictions == {"q1": ""} and [e["text"] for e in nbest["q1"]] == [""]


def test_logit_rows_must_match_windows():
    start, end = _logits()
    with pytest.raises(BertmodelError, match="start_logits has 2 rows but the features have 3 windows"):
        decode_predictions(EXAMPLES, FEATURES, start[:2], end)
    with pytest.raises(BertmodelError, match=r"end_logits row 0 has shape \(4,\); window 0 has 10 tokens"):
        decode_predictions(EXAMPLES, FEATURES, start, [e[:4] for e in end])


def test_writers_write_official_json_atomically(tmp_path):
    start, end = _logits()
    predictions, nbest = decode_predictions(EXAMPLES, FEATURES, start, end, n_best=5)
    write_predictions(tmp_path / "predictions.json", predictions)
    write_nbest_predictions(tmp_path / "nbest_predictions.json", nbest)
    assert json.loads((tmp_path / "predictions.json").read_text()) == {"q1": "the mat"}
    assert json.loads((tmp_path / "nbest_predictions.json").read_text()) == nbest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nbest_predictions.json", "predictions.json"]
    with pytest.raises(BertmodelError, match=r"predictions\.json: cannot write"):
        write_predictions(tmp_path / "missing-dir" / "predictions.json", predictions)


def test_accented_answer_comes_back_verbatim():
    context = "Les Misérables opened at the CAFÉ Müller."
    examples = [example(context, "where?", "CAFÉ Müller")]
    tok = tiny_tokenizer()
    train = prepare_qa_features(examples, tok, max_seq_length=64)
    features = prepare_qa_features(examples, tok, max_seq_length=64, training=False)
    start = [np.zeros(n) for n in features.lengths]
    end = [np.zeros(n) for n in features.lengths]
    start[0][train.start_positions[0]] = end[0][train.end_positions[0]] = 10.0
    assert decode_predictions(examples, features, start, end)[0] == {"q1": "CAFÉ Müller"}


@pytest.mark.skipif(not (SHARED_DATA / "squad").is_dir(), reason=f"{SHARED_DATA}/squad is absent")
def test_oracle_logits_recover_the_labelled_spans_on_shared_squad():
    from bertprep.tokenizer import load_tokenizer

    tok = load_tokenizer(SHARED_DATA / "bert-base-uncased-vocab.txt")
    examples = read_squad(SHARED_DATA / "squad" / "squad-v1.1-train-head.json")[:400]
    train = prepare_qa_features(examples, tok, max_seq_length=128, doc_stride=48)
    features = prepare_qa_features(examples, tok, max_seq_length=128, doc_stride=48, training=False)
    assert np.array_equal(train.input_ids, features.input_ids)
    rng = np.random.default_rng(0)
    start = [rng.normal(size=n) for n in features.lengths]
    end = [rng.normal(size=n) for n in features.lengths]
    expected = {}
    for w in np.flatnonzero(train.start_positions > 0):
        s, e = train.start_positions[w], train.end_positions[w]
        start[w][s] += 30.0
        end[w][e] += 30.0
        a = train.row_splits[w]
        ex = examples[train.example_index[w]]
        expected[ex.id] = ex.context[train.offsets[a + s, 0]:train.offsets[a + e, 1]]
    predictions, _ = decode_predictions(examples, features, start, end)
    assert len(expected) == 400 and predictions == expected
