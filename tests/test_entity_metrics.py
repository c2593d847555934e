"""The conlleval entity metric (bertmodel/metrics/entities.py): equal to seqeval's default
(conlleval-compatible) mode on drawn IOB tags, equal to exact span matching over
`entity_spans`, the scheme conversions, and hand-worked cases."""
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertmodel.metrics.entities import SCHEMES, detect_scheme, entity_metrics, entity_spans, to_iob2

seqeval_metrics = pytest.importorskip("seqeval.metrics", reason="seqeval is the reference (test extra)")
from seqeval.metrics.sequence_labeling import get_entities  # noqa: E402

TYPES = ("PER", "LOC", "MISC")
IOB_TAGS = ("O", *(f"{prefix}-{t}" for t in TYPES for prefix in "BI"))
BIOES_TAGS = ("O", *(f"{prefix}-{t}" for t in TYPES for prefix in "BIES"))


@st.composite
def gold_and_pred(draw, tags=IOB_TAGS):
    lengths = draw(st.lists(st.integers(0, 12), min_size=1, max_size=6))
    sentence = lambda n: st.lists(st.sampled_from(tags), min_size=n, max_size=n)  # noqa: E731
    gold = [draw(sentence(n)) for n in lengths]
    pred = [draw(sentence(n)) for n in lengths]
    return gold, pred


def quiet(fn, *args, **kwargs):
    # seqeval warns where a score is undefined (no predicted / no gold entity) and returns 0.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def span_matching(gold, pred):
    """(correct, gold, predicted) entity counts by exact (sentence, type, start, end) match."""
    gold_set = {(i, *span) for i, tags in enumerate(gold) for span in entity_spans(tags)}
    pred_set = {(i, *span) for i, tags in enumerate(pred) for span in entity_spans(tags)}
    return len(gold_set & pred_set), len(gold_set), len(pred_set)


@settings(max_examples=200, deadline=None)
@given(gold_and_pred())
def test_equals_seqeval_conlleval_mode(pair):
    gold, pred = pair
    ours = entity_metrics(gold, pred)
    assert ours["precision"] == pytest.approx(quiet(seqeval_metrics.precision_score, gold, pred), abs=1e-12)
    assert ours["recall"] == pytest.approx(quiet(seqeval_metrics.recall_score, gold, pred), abs=1e-12)
    assert ours["f1"] == pytest.approx(quiet(seqeval_metrics.f1_score, gold, pred), abs=1e-12)
    assert ours["entities"] == len(get_entities(gold))
    assert ours["predicted_entities"] == len(get_entities(pred))
    if sum(map(len, gold)):
        assert ours["accuracy"] == pytest.approx(seqeval_metrics.accuracy_score(gold, pred), abs=1e-12)
    else:  # seqeval divides by zero tokens; conlleval prints no accuracy, we give 0.0
        assert ours["accuracy"] == 0.0
    report = quiet(seqeval_metrics.classification_report, gold, pred, output_dict=True)
    # Beside the types the report holds micro/macro/weighted averages (macro is nan
    # without entities, where conlleval and we print no type at all).
    report_types = sorted(k for k in report if not k.endswith(" avg"))
    assert list(ours["per_type"]) == report_types
    for chunk_type, scores in ours["per_type"].items():
        theirs = report[chunk_type]
        assert scores["precision"] == pytest.approx(theirs["precision"], abs=1e-12)
        assert scores["recall"] == pytest.approx(theirs["recall"], abs=1e-12)
        assert scores["f1"] == pytest.approx(theirs["f1-score"], abs=1e-12)
        assert scores["support"] == theirs["support"]
        assert scores["predicted"] == sum(t == chunk_type for t, _, _ in get_entities(pred))


@settings(max_examples=200, deadline=None)
@given(gold_and_pred(tags=BIOES_TAGS))
def test_counting_loop_equals_exact_span_matching(pair):
    # entity_metrics runs conlleval's loop; on tags of the form O / prefix-type (E- and S-
    # included, read as conlleval reads them) that is exact span-and-type matching.
    gold, pred = pair
    ours = entity_metrics(gold, pred)
    correct, n_gold, n_pred = span_matching(gold, pred)
    assert (ours["entities"], ours["predicted_entities"]) == (n_gold, n_pred)
    assert ours["precision"] == (correct / n_pred if n_pred else 0.0)
    assert ours["recall"] == (correct / n_gold if n_gold else 0.0)


def iob2_to_bioes(tags):
    """The test's own inverse of to_iob2 for valid IOB2: last token E-, single token S-."""
    out = []
    for i, tag in enumerate(tags):
        continues = i + 1 < len(tags) and tags[i + 1] == f"I-{tag[2:]}"
        if tag == "O":
            out.append(tag)
        elif tag.startswith("B-"):
            out.append(tag if continues else f"S-{tag[2:]}")
        else:
            out.append(tag if continues else f"E-{tag[2:]}")
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(IOB_TAGS), max_size=12))
def test_conversions_keep_the_entities(tags):
    iob2 = to_iob2(tags, "IOB1")
    assert entity_spans(iob2) == entity_spans(tags)  # conlleval reads IOB1 directly
    assert to_iob2(iob2, "IOB2") == iob2 and detect_scheme([iob2]) == "IOB2"
    bioes = iob2_to_bioes(iob2)
    assert to_iob2(bioes, "BIOES") == iob2
    bilou = [{"E": "L", "S": "U"}.get(t[0], t[0]) + t[1:] for t in bioes]
    assert to_iob2(bilou, "BIOES") == iob2
    if any(t != "O" for t in tags):
        assert detect_scheme([bioes]) == detect_scheme([bilou]) == "BIOES"


# Hand-worked cases.

def test_iob1_and_iob2_spell_the_same_entities():
    # "John Smith | Mary went to Paris": IOB1 marks B only between two PER entities.
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "O", "I-LOC"]
    iob2 = ["B-PER", "I-PER", "B-PER", "O", "O", "B-LOC"]
    expected = [("PER", 0, 2), ("PER", 2, 3), ("LOC", 5, 6)]
    assert entity_spans(iob1) == entity_spans(iob2) == expected
    assert to_iob2(iob1, "IOB1") == iob2
    assert detect_scheme([iob1]) == "IOB1" and detect_scheme([iob2]) == "IOB2"
    scores = entity_metrics([iob2], [iob1])
    # Every entity matches; tags differ on tokens 0 and 5: accuracy 4/6.
    assert (scores["precision"], scores["recall"], scores["f1"]) == (1.0, 1.0, 1.0)
    assert scores["accuracy"] == 4 / 6
    assert entity_metrics([iob2], [to_iob2(iob1, "IOB1")])["accuracy"] == 1.0


def test_type_changes_split_entities():
    assert entity_spans(["B-PER", "I-PER", "B-LOC"]) == [("PER", 0, 2), ("LOC", 2, 3)]
    assert entity_spans(["I-PER", "I-PER", "I-LOC"]) == [("PER", 0, 2), ("LOC", 2, 3)]
    # I-X right after B-Y: the I- starts an entity of its own, two entities.
    assert entity_spans(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 3)]
    assert to_iob2(["B-PER", "I-LOC", "I-LOC"], "IOB2") == ["B-PER", "B-LOC", "I-LOC"]
    assert entity_spans(["B-PER", "B-PER", "I-PER"]) == [("PER", 0, 1), ("PER", 1, 3)]
    # Types may hold hyphens: the tag splits at its first one (conlleval's 2004 change).
    assert entity_spans(["B-MISC-X", "I-MISC-X"]) == [("MISC-X", 0, 2)]


def test_hand_worked_scores():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-PER"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG", "B-PER"]]
    # Gold: PER 0-2, LOC 3 | ORG 0, PER 2. Predicted: PER 0-2, ORG 3 | ORG 0-2, PER 2.
    # Correct: the two PER. Tokens right: 3 of 4, then 2 of 3.
    assert entity_metrics(gold, pred) == {
        "precision": 0.5, "recall": 0.5, "f1": 0.5, "accuracy": 5 / 7,
        "per_type": {
            "LOC": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 0},
            "ORG": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 2},
            "PER": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2, "predicted": 2},
        },
        "entities": 4, "predicted_entities": 4}


def test_entities_at_sentence_edges():
    # A whole-sentence entity cut one token short is wrong, not partly right.
    scores = entity_metrics([["B-LOC", "I-LOC", "I-LOC"]], [["B-LOC", "I-LOC", "O"]])
    assert (scores["precision"], scores["recall"], scores["f1"], scores["accuracy"]) == (0.0, 0.0, 0.0, 2 / 3)
    whole = entity_metrics([["B-LOC", "I-LOC", "I-LOC"]], [["B-LOC", "I-LOC", "I-LOC"]])
    assert (whole["precision"], whole["recall"], whole["entities"]) == (1.0, 1.0, 1)
    # An entity ending one sentence and one starting the next stay two (the blank line
    # between sentences is an O to conlleval), however the second is spelled.
    gold = [["O", "B-PER"], ["I-PER", "O"]]
    scores = entity_metrics(gold, [["O", "B-PER"], ["B-PER", "O"]])
    assert (scores["entities"], scores["precision"], scores["recall"], scores["accuracy"]) == (2, 1.0, 1.0, 3 / 4)
    assert entity_spans(["B-PER", "O", "B-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 2, 4)]


def test_no_entities_and_no_tokens_score_zero():
    none = entity_metrics([["O", "O"]], [["O", "O"]])
    assert (none["precision"], none["recall"], none["f1"], none["accuracy"]) == (0.0, 0.0, 0.0, 1.0)
    assert none["per_type"] == {} and none["entities"] == none["predicted_entities"] == 0
    empty = entity_metrics([], [])
    assert (empty["precision"], empty["f1"], empty["accuracy"], empty["per_type"]) == (0.0, 0.0, 0.0, {})


def test_bioes_and_bilou_conversion():
    bioes = ["S-PER", "B-LOC", "I-LOC", "E-LOC", "O", "B-ORG", "E-ORG", "S-ORG"]
    iob2 = ["B-PER", "B-LOC", "I-LOC", "I-LOC", "O", "B-ORG", "I-ORG", "B-ORG"]
    assert to_iob2(bioes, "BIOES") == iob2 and iob2_to_bioes(iob2) == bioes
    bilou = ["U-PER", "B-LOC", "I-LOC", "L-LOC", "O", "B-ORG", "L-ORG", "U-ORG"]
    assert to_iob2(bilou, "BIOES") == iob2
    assert detect_scheme([bioes]) == detect_scheme([["O"], bilou]) == "BIOES"
    # conlleval has no S- rule: it reads S-X S-X as one chunk, hence to_iob2 first.
    assert entity_spans(["S-PER", "S-PER"]) == [("PER", 0, 2)]
    assert entity_spans(to_iob2(["S-PER", "S-PER"], "BIOES")) == [("PER", 0, 1), ("PER", 1, 2)]


def test_detect_scheme():
    assert detect_scheme([["O", "B-PER", "I-PER"], ["B-LOC"]]) == "IOB2"
    assert detect_scheme([["O", "B-PER", "I-PER"], ["O", "I-LOC"]]) == "IOB1"
    assert detect_scheme([["B-PER", "I-LOC"]]) == "IOB1"  # I-LOC begins an entity
    assert detect_scheme([["B-PER", "E-PER"]]) == "BIOES"
    assert detect_scheme([]) == detect_scheme([["O"]]) == "IOB2"


def test_bare_tags_read_as_conlleval_reads_them():
    # No hyphen: all chunk tag, empty type. After O such a tag starts nothing; after a
    # typed tag it starts a chunk of type "" that runs until a typed tag starts one.
    assert entity_spans(["O", "PER", "PER"]) == []
    assert entity_spans(["B-LOC", "PER", "O", "I-LOC"]) == [("LOC", 0, 1), ("", 1, 3), ("LOC", 3, 4)]
    # ...and conlleval never counts that "" chunk correct (a new chunk replaces it before
    # it "ends"): identical gold and prediction score 2/3 (checked against conlleval.pl).
    tags = [["B-LOC", "PER", "O", "I-LOC"]]
    scores = entity_metrics(tags, tags)
    assert (scores["precision"], scores["recall"], scores["accuracy"]) == (2 / 3, 2 / 3, 1.0)
    assert scores["per_type"][""] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 1}


@pytest.mark.parametrize("tag", ["PER", "X-PER", "B-", "B_PER", "b-PER", "BI-PER", ""])
def test_a_bad_tag_is_named(tag):
    for scheme in SCHEMES:
        with pytest.raises(ValueError, match=repr(tag)):
            to_iob2(["O", tag], scheme)
    with pytest.raises(ValueError, match=repr(tag)):
        detect_scheme([["B-PER"], ["O", tag]])


def test_a_tag_the_scheme_does_not_write_is_refused():
    with pytest.raises(ValueError, match="'S-PER'"):
        to_iob2(["S-PER"], "IOB2")
    with pytest.raises(ValueError, match="unknown scheme 'IOBES'"):
        to_iob2(["O"], "IOBES")


def test_unequal_lengths_are_refused():
    with pytest.raises(ValueError, match="2 gold sentences but 1 predicted"):
        entity_metrics([["O"], ["O"]], [["O"]])
    with pytest.raises(ValueError, match="sentence 1: 2 gold tags but 1 predicted"):
        entity_metrics([["O"], ["O", "B-PER"]], [["O"], ["O"]])
