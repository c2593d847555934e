"""QA windows: exact windows, labels, offsets and max-context flags on small text, the
span properties under Hypothesis, bad input, and the shared SQuAD files."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from bertmodel.data.qa_features import NOT_CONTEXT, prepare_qa_features
from bertmodel.data.squad import read_squad
from bertmodel.errors import BertmodelError
from qa_fixtures import example, tiny_tokenizer
from shared_data import SHARED_DATA

TOK = tiny_tokenizer()
CONTEXT = "The cat sat on the mat."  # the cat sat on the mat . = ids 5 6 7 8 5 9 93
CLS, SEP = TOK.special.cls, TOK.special.sep


def google_is_max_context(spans, current, position):
    """Google's run_squad.py `_check_is_max_context`, restated: spans are (start, length)."""
    best_score, best = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if start <= position <= end:
            score = min(position - start, end - position) + 0.01 * length
            if best_score is None or score > best_score:
                best_score, best = score, index
    return best == current


def test_three_windows_exact_ids_labels_offsets_and_max_context():
    # question "who sat ?" = 3 tokens; max_seq_length 10 leaves 4 context tokens per
    # window; doc_stride 2: windows start at tokens 0, 2, 4 (the last ends the context).
    ex = example(CONTEXT, "who sat?", "the mat")
    f = prepare_qa_features([ex], TOK, max_seq_length=10, doc_stride=2, max_query_length=64)
    assert len(f) == 3 and f.example_index.tolist() == [0, 0, 0]
    assert f.window_start.tolist() == [0, 2, 4] and f.context_position.tolist() == [5, 5, 5]
    q = [CLS, 10, 7, 95, SEP]
    assert f.window(0)["input_ids"].tolist() == q + [5, 6, 7, 8, SEP]
    assert f.window(1)["input_ids"].tolist() == q + [7, 8, 5, 9, SEP]
    assert f.window(2)["input_ids"].tolist() == q + [5, 9, 93, SEP]
    assert f.window(2)["token_type_ids"].tolist() == [0] * 5 + [1] * 4
    # "the mat" is tokens 4-5: outside window 0 ([CLS]), at 7-8 in window 1, 5-6 in window 2.
    assert f.start_positions.tolist() == [0, 7, 5] and f.end_positions.tolist() == [0, 8, 6]
    assert f.window(2)["offsets"].tolist() == [[NOT_CONTEXT] * 2] * 5 + [[15, 18], [19, 22], [22, 23], [-1, -1]]
    flags = [f.window(w)["token_is_max_context"].tolist() for w in range(3)]
    assert flags == [[0] * 5 + [1, 1, 1, 0, 0], [0] * 5 + [0, 1, 1, 0, 0], [0] * 5 + [0, 1, 1, 0]]


def test_padded_batch():
    f = prepare_qa_features([example(CONTEXT, "who sat?", "the mat")], TOK, max_seq_length=10, doc_stride=2)
    batch = f.padded([2, 0], pad_id=0, multiple_of=8)
    assert batch["input_ids"].shape == (2, 16)
    assert batch["attention_mask"].sum(axis=1).tolist() == [9, 10]
    assert batch["input_ids"][0, :10].tolist() == [CLS, 10, 7, 95, SEP, 5, 9, 93, SEP, 0]
    assert batch["token_type_ids"][1].tolist() == [0] * 5 + [1] * 5 + [0] * 6


def test_impossible_labels_cls_and_question_truncated():
    ex = example(CONTEXT, "who did sat on the mat?", None)
    f = prepare_qa_features([ex], TOK, max_seq_length=10, doc_stride=3, max_query_length=2)
    assert f.start_positions.tolist() == [0, 0] and f.end_positions.tolist() == [0, 0]
    assert f.window(0)["input_ids"].tolist()[:4] == [CLS, 10, 12, SEP]  # "who did", cut to 2


def test_eval_features_keep_examples_training_would_skip_and_have_no_labels():
    bad = example(CONTEXT, "who?", "mat", start=3)
    f = prepare_qa_features([bad], TOK, training=False)
    assert len(f) == 1 and f.start_positions is None and f.skipped == []


def test_misaligned_answer_start_is_reported_and_skipped():
    good = example(CONTEXT, "who?", "cat", qid="ok")
    bad = example(CONTEXT, "who?", "mat", start=3, qid="bad")
    f = prepare_qa_features([bad, good], TOK)
    assert f.example_index.tolist() == [1]
    assert [s.message() for s in f.skipped] == [
        "test.json: question bad: answer_start 3 does not point at the answer 'mat' (the context has ' ca' there)"]


def test_answer_of_only_uncovered_characters_is_skipped():
    ex = example("the cat  sat", "who?", " ", start=8)
    f = prepare_qa_features([ex], TOK)
    assert len(f) == 0 and f.skipped[0].reason == "no token covers the answer ' '"


def test_question_leaving_no_room_for_context_is_one_error():
    ex = example(CONTEXT, "who did sat on the mat?", "cat", qid="long-q")
    with pytest.raises(BertmodelError) as err:
        prepare_qa_features([ex], TOK, max_seq_length=8, max_query_length=64)
    assert str(err.value) == ("test.json: question long-q: the question has 7 tokens (cut to max_query_length 64), "
                              "so with max_seq_length 8 no context token fits in a window: lower max_query_length "
                              "or raise max_seq_length")


@pytest.mark.parametrize("kwargs,message", [
    ({"doc_stride": 0}, "doc_stride must be at least 1, got 0"),
    ({"max_seq_length": 3}, "max_seq_length must be at least 4 ([CLS] q [SEP] c [SEP]), got 3"),
    ({"max_query_length": 0}, "max_query_length must be at least 1, got 0"),
])
def test_bad_settings(kwargs, message):
    with pytest.raises(BertmodelError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        prepare_qa_features([example(CONTEXT, "who?", "cat")], TOK, **kwargs)


def test_shared_context_gets_windows_per_question():
    a = example(CONTEXT, "who?", "cat", qid="a")
    b = example(CONTEXT, "where did the cat sit?", "on the mat", qid="b")
    f = prepare_qa_features([a, b], TOK, max_seq_length=14, doc_stride=2)
    for w in range(len(f)):
        ctx = f.window(w)["offsets"][:, 0] >= 0
        assert f.window(w)["token_type_ids"][ctx].all()
    # every context token of each question has exactly one max-context window
    for e in (0, 1):
        seen = {}
        for w in np.flatnonzero(f.example_index == e):
            win = f.window(w)
            for j in np.flatnonzero(win["token_is_max_context"]):
                key = tuple(win["offsets"][j])
                seen[key] = seen.get(key, 0) + 1
        assert sorted(seen.values()) == [1] * 7


# --- properties ------------------------------------------------------------------------

TEXT = st.text(alphabet="abcéÉ ABC.,İß", min_size=1, max_size=120)


@st.composite
def qa_cases(draw):
    context = draw(TEXT)
    begin = draw(st.integers(0, len(context) - 1))
    end = draw(st.integers(begin + 1, len(context)))
    question = draw(st.text(alphabet="ab ?", min_size=0, max_size=12))
    max_query_length = draw(st.integers(1, 6))
    max_seq_length = draw(st.integers(max_query_length + 4, max_query_length + 30))
    doc_stride = draw(st.integers(1, 24))
    return context, begin, end, question, max_seq_length, doc_stride, max_query_length


def _context_tokens(context):
    encoding = TOK.tokenizer.encode(context, add_special_tokens=False)
    return [tuple(o) for o in encoding.offsets]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qa_cases())
def test_span_windows_and_max_context_properties(case):
    context, begin, end, question, max_seq_length, doc_stride, max_query_length = case
    ex = example(context, question, context[begin:end], start=begin)
    f = prepare_qa_features([ex], TOK, max_seq_length, doc_stride, max_query_length)
    tokens = _context_tokens(context)
    covered = [i for i in range(begin, end) if any(a <= i < b for a, b in tokens)]
    if not covered:
        assert len(f) == 0 and len(f.skipped) == 1
        return
    first_char, last_char = covered[0], covered[-1]
    # token span of the answer: tokens overlapping [begin, end)
    overlapping = [t for t, (a, b) in enumerate(tokens) if a < end and b > begin]
    spans = []
    for w in range(len(f)):
        win = f.window(w)
        assert len(win["input_ids"]) <= max_seq_length
        ctx = np.flatnonzero(win["offsets"][:, 0] != NOT_CONTEXT)
        start, length = int(f.window_start[w]), len(ctx)
        spans.append((start, length))
        # the window's context is the context's tokens start..start+length-1, in order
        assert [tuple(o) for o in win["offsets"][ctx]] == tokens[start:start + length]
        assert ctx.tolist() == list(range(int(f.context_position[w]), int(f.context_position[w]) + length))
        s, e = int(f.start_positions[w]), int(f.end_positions[w])
        inside = start <= overlapping[0] and overlapping[-1] < start + length
        if not inside:
            assert (s, e) == (0, 0)
            continue
        assert 0 < s <= e
        char_start, char_end = win["offsets"][s][0], win["offsets"][e][1]
        assert char_start <= first_char and last_char < char_end  # contains the answer
        assert win["offsets"][s][1] > begin and win["offsets"][e][0] < end  # and no more than needed
    # every context token lies in some window (an empty context still has one window)
    in_some = set()
    for start, length in spans:
        in_some.update(range(start, start + length))
    assert in_some == set(range(len(tokens)))
    # the answer is labelled somewhere whenever a window step leaves room for it
    max_doc = spans[0][1] if len(spans) > 1 else None
    if max_doc is not None and len(overlapping) <= max_doc - min(max_doc, doc_stride) + 1:
        assert (f.start_positions > 0).any()
    # max context: exactly one window per token, the one Google's rule picks
    for t in range(len(tokens)):
        chosen = [w for w, (start, length) in enumerate(spans) if start <= t < start + length
                  and f.window(w)["token_is_max_context"][int(f.context_position[w]) + t - start]]
        assert len(chosen) == 1
        assert google_is_max_context(spans, chosen[0], t)


# --- real data -------------------------------------------------------------------------

needs_shared = pytest.mark.skipif(not (SHARED_DATA / "squad").is_dir(), reason=f"{SHARED_DATA}/squad is absent")


@needs_shared
@pytest.mark.parametrize("vocab", ["bert-base-uncased-vocab.txt", "bert-base-cased-vocab.txt"])
def test_accents_and_case_offsets_give_the_original_text(vocab):
    from bertprep.tokenizer import load_tokenizer

    tok = load_tokenizer(SHARED_DATA / vocab)
    context = "Les Misérables opened at the Café Müller in İSTANBUL, ÅNGSTRÖM said; naïve Straße."
    answers = ["Misérables", "Café Müller", "İSTANBUL", "ÅNGSTRÖM", "naïve Straße"]
    examples = [example(context, "Where?", a, qid=str(i)) for i, a in enumerate(answers)]
    f = prepare_qa_features(examples, tok, max_seq_length=64)
    texts = [context[f.offsets[f.row_splits[w] + f.start_positions[w], 0]:
                     f.offsets[f.row_splits[w] + f.end_positions[w], 1]] for w in range(len(f))]
    assert texts == answers


@needs_shared
def test_squad_v2_head_windows_label_every_answer():
    from bertprep.tokenizer import load_tokenizer

    tok = load_tokenizer(SHARED_DATA / "bert-base-uncased-vocab.txt")
    examples = read_squad(SHARED_DATA / "squad" / "squad-v2.0-train-head.json")[:1500]
    f = prepare_qa_features(examples, tok)
    again = prepare_qa_features(examples, tok)
    assert np.array_equal(f.input_ids, again.input_ids) and np.array_equal(f.start_positions, again.start_positions)
    assert f.skipped == [] and len(f) >= len(examples)
    labelled = np.flatnonzero(f.start_positions > 0)
    answered = {int(f.example_index[w]) for w in labelled}
    answerable = {i for i, e in enumerate(examples) if not e.is_impossible}
    assert answered == answerable  # at 384/128 every answer fits in some window
    exact = 0
    for w in labelled:
        ex = examples[f.example_index[w]]
        a = f.row_splits[w]
        text = ex.context[f.offsets[a + f.start_positions[w], 0]:f.offsets[a + f.end_positions[w], 1]]
        assert ex.answers[0][0] in text
        exact += text == ex.answers[0][0]
    assert exact / len(labelled) > 0.99  # the rest are answers that cut a word ("six" of "sixth")
