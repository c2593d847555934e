"""metrics/ranking.py against the reference, pytrec_eval (trec_eval's own C code): per query,
nDCG@10 = ndcg_cut.10, Recall@100 = recall.100, MAP = map, and MRR@10 = recip_rank of each
query's ranking cut to its top 10 in trec_eval's order (pytrec_eval's recip_rank is not
cut, so the cut is made before handing it the run). Checked on a real collection (the
SQuAD v1.1 head as BEIR) with real runs, on Hypothesis' graded qrels and tied runs, and on
the averaging rule (the qrels' queries, a query missing from the run scoring 0).

Tolerance: 1e-12 absolute. Both sides compute each value in float64 from the same
integers (ranks, grades, counts); a sum of at most ~100 terms taken in another order
differs by a few ulps (~1e-15), so 1e-12 only leaves room for rounding, not for a
different ranking or definition (the smallest such difference, one rank at depth 100 in
MAP over 100 relevant passages, is ~1e-6).
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
import pytrec_eval
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertmodel.data.beir import read_beir
from bertmodel.data.squad_beir import squad_to_beir
from bertmodel.metrics.ranking import METRICS, query_metrics, ranking_metrics, trec_order
from bertmodel.retrieval.search import exact_search, tie_ranks
from rerank_fixtures import SQUAD, needs_squad

TOL = 1e-12  # see the module docstring
TREC_MEASURES = {"ndcg_cut.10", "recip_rank", "recall.100", "map"}
NAMES = {"ndcg@10": "ndcg_cut_10", "recall@100": "recall_100", "map": "map"}


def reference(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """pytrec_eval's per-query values under our names, for the queries it scores (those of
    both the qrels and the run); mrr@10 from the run cut to its trec-order top 10."""
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES)
    full = evaluator.evaluate(run)
    cut = evaluator.evaluate({q: {d: scores[d] for d in trec_order(scores)[:10]} for q, scores in run.items()})
    assert set(cut) == set(full)
    return {q: {**{ours: full[q][theirs] for ours, theirs in NAMES.items()}, "mrr@10": cut[q]["recip_rank"]}
            for q in full}


def assert_matches_trec_eval(run, qrels) -> dict[str, dict[str, float]]:
    """Every qrels query's values equal pytrec_eval's (0 where the run lacks the query, as
    the docstring says), and the mean is over the qrels' queries. Returns our per-query
    values."""
    ours: dict[str, dict[str, float]] = {}
    means = ranking_metrics(run, qrels, per_query=ours)
    theirs = reference(run, qrels)
    # pytrec_eval scores exactly the queries in both; the rest of the qrels' count 0.
    assert set(theirs) == set(qrels) & set(run)
    assert set(ours) == set(qrels)
    for qid in qrels:
        expected = theirs.get(qid, dict.fromkeys(METRICS, 0.0))
        for name in METRICS:
            assert math.isclose(ours[qid][name], expected[name], rel_tol=0, abs_tol=TOL), \
                (qid, name, ours[qid][name], expected[name], run.get(qid), qrels[qid])
    for name in METRICS:
        assert math.isclose(means[name], sum(v[name] for v in ours.values()) / len(qrels), rel_tol=0, abs_tol=TOL)
    return ours


# --- a real collection with real runs --------------------------------------------------------

@pytest.fixture(scope="module")
def squad_beir(tmp_path_factory):
    if not SQUAD.is_file():
        pytest.skip(f"{SQUAD} not found")
    out = tmp_path_factory.mktemp("ranking") / "squad-beir"
    squad_to_beir(SQUAD, out)
    return out


@needs_squad
@pytest.mark.parametrize("split", ["test", "train"])
def test_bm25_run_on_squad_matches_pytrec_eval(squad_beir, split):
    from bertmodel.retrieval.bm25 import bm25_run

    data = read_beir(squad_beir, split)
    run = bm25_run(data, k=100)
    ours = assert_matches_trec_eval(run, data.qrels)
    # The run is a real one: neither all hits nor all misses at 10 (else the check is weak).
    mrr = [v["mrr@10"] for v in ours.values()]
    assert 0 < sum(m == 1.0 for m in mrr) < len(mrr) and any(0 < m < 1 for m in mrr)
    assert any(v["mrr@10"] == 0 and v["recall@100"] == 1 for v in ours.values())


@needs_squad
def test_seeded_dense_run_on_squad_matches_pytrec_eval(squad_beir):
    """Random (seeded) embeddings through exact_search: rankings unrelated to the text, so
    the relevant passage lands anywhere in and beyond the top 100."""
    data = read_beir(squad_beir, "dev")
    rng = np.random.default_rng(1234)
    passage_ids, query_ids = list(data.corpus), list(data.queries)
    passages = rng.standard_normal((len(passage_ids), 16)).astype(np.float32)
    queries = rng.standard_normal((len(query_ids), 16)).astype(np.float32)
    run = exact_search(queries, [passages[i:i + 100] for i in range(0, len(passages), 100)],
                       tie_ranks(passage_ids), k=100).run(query_ids, passage_ids)
    ours = assert_matches_trec_eval(run, data.qrels)
    recall = [v["recall@100"] for v in ours.values()]
    assert 0 < sum(recall) < len(recall)


# --- graded relevance and ties ------------------------------------------------------------------

# Ids whose string order is not their numeric order ("d10" < "d9"), with case and
# non-ASCII characters of 2-, 3- and 4-byte UTF-8 (trec_eval compares bytes; Python code
# points: the same order).
DOC_IDS = st.one_of(st.integers(0, 400).map(lambda n: f"d{n}"),
                    st.text(alphabet="aAbZz09é中😀", min_size=1, max_size=3))
# Few distinct scores so that ties are the rule, including 0.0 against -0.0 (equal as doubles).
# The free scores are float32 values: pytrec_eval hands trec_eval each score as a C float,
# so 1 + 1e-8 against 1 (or 1e-46 against 0) ties there and not here, where scores stay
# float64 as in trec_eval's own reader. A float32 value survives that cast exactly, so both
# sides rank the same numbers (our dense scores are float32 anyway).
SCORES = st.one_of(st.sampled_from([0.0, -0.0, 1.0, 0.5, -2.0, 3.25]),
                   st.floats(-10, 10, allow_nan=False, width=32))
GRADES = st.integers(0, 3)


@st.composite
def collections(draw):
    """(run, qrels): up to 4 judged queries, each run up to 130 passages (past both cuts),
    qrels judging passages both in and out of the run, with grades 0-3; sometimes a judged
    query is missing from the run or the run has a query nobody judged."""
    qrels, run = {}, {}
    for q in range(draw(st.integers(1, 4))):
        qid = f"q{q}"
        scores = draw(st.dictionaries(DOC_IDS, SCORES, max_size=130))
        retrieved = sorted(scores)
        judged_in_run = draw(st.lists(st.sampled_from(retrieved), unique=True, max_size=40)) if retrieved else []
        judged = {d: draw(GRADES) for d in judged_in_run}
        judged.update(draw(st.dictionaries(DOC_IDS.filter(lambda d: d not in scores), GRADES, max_size=10)))
        if not judged:
            judged = {draw(DOC_IDS): draw(GRADES)}
        qrels[qid] = judged
        if draw(st.integers(0, 4)):  # mostly in the run (perhaps empty); sometimes missing altogether
            run[qid] = scores
    if draw(st.booleans()):
        run["unjudged"] = draw(st.dictionaries(DOC_IDS, SCORES, min_size=1, max_size=5))
    return run, qrels


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(collections())
def test_graded_ties_match_pytrec_eval(case):
    run, qrels = case
    assert_matches_trec_eval(run, qrels)


@pytest.mark.parametrize("seed", range(6))
def test_long_tied_runs_match_pytrec_eval(seed):
    """Runs of 250 passages over three scores: the doc-id rule orders nearly every rank,
    both cuts (10 and 100) fall inside a tie, and grades 0-3 include judged passages
    beyond the run."""
    rng = random.Random(seed)
    ids = [f"d{n}" for n in rng.sample(range(1000), 300)]
    run, qrels = {}, {}
    for q in range(5):
        retrieved = rng.sample(ids, 250)
        run[f"q{q}"] = {d: rng.choice([1.0, 0.25, -3.0]) for d in retrieved}
        qrels[f"q{q}"] = {d: rng.choice([0, 0, 1, 2, 3]) for d in rng.sample(ids, 60)}
    ours = assert_matches_trec_eval(run, qrels)
    assert all(0 < v["recall@100"] < 1 for v in ours.values())


def test_tie_rule_is_score_then_id_descending():
    scores = {"d9": 1.0, "d10": 1.0, "a": 2.0, "b": -0.0, "c": 0.0, "é": 1.0}
    # 1.0 ties: "é" > "d9" > "d10" (code points, as trec_eval's strcmp on UTF-8 bytes).
    assert trec_order(scores) == ["a", "é", "d9", "d10", "c", "b"]
    # The order of the dict (the run's own order) plays no part.
    assert trec_order(dict(reversed(list(scores.items())))) == trec_order(scores)


# --- queries without relevant passages and the mean -------------------------------------------

def test_query_without_relevant_passage_scores_zero():
    run = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}
    qrels = {"q": {"a": 0, "b": 0, "z": 0}}  # judged, none relevant
    assert query_metrics(run["q"], qrels["q"]) == dict.fromkeys(METRICS, 0.0)
    assert_matches_trec_eval(run, qrels)


def test_mean_is_over_qrels_queries_missing_counting_zero():
    qrels = {"hit": {"a": 1}, "missing": {"a": 1}, "none-relevant": {"a": 0}, "empty-run": {"b": 2}}
    run = {"hit": {"a": 1.0, "b": 0.5}, "none-relevant": {"a": 1.0}, "empty-run": {},
           "unjudged": {"a": 9.0}}  # a run query no qrels judge: ignored
    per_query: dict = {}
    means = ranking_metrics(run, qrels, per_query=per_query)
    assert set(per_query) == set(qrels)
    assert per_query["hit"] == dict.fromkeys(METRICS, 1.0)
    for qid in ("missing", "none-relevant", "empty-run"):
        assert per_query[qid] == dict.fromkeys(METRICS, 0.0)
    # One perfect query of four: 0.25 on each measure (BEIR, averaging over the run's
    # judged queries only, would say 1/3).
    assert means == dict.fromkeys(METRICS, 0.25)
    assert_matches_trec_eval(run, qrels)


def test_no_judged_query_and_nan_scores_are_refused():
    with pytest.raises(ValueError, match="qrels judge no query"):
        ranking_metrics({"q": {"a": 1.0}}, {})
    with pytest.raises(ValueError, match="NaN"):
        ranking_metrics({"q": {"a": float("nan"), "b": 1.0}}, {"q": {"a": 1}})


# --- recall at the depth a run has ------------------------------------------------------------

@needs_squad
def test_a_run_of_20_candidates_reports_recall_at_20(squad_beir):
    """BM25's top 20 (what a reranker with --top-k 20 holds): recall is named recall@20 and
    is the share of each query's relevant passages among its 20, as pytrec_eval's
    recall.20 and a plain count say; a run of 100 or more keeps recall@100."""
    from bertmodel.retrieval.bm25 import bm25_run

    data = read_beir(squad_beir, "test")
    run = bm25_run(data, k=20)
    assert all(len(scores) == 20 for scores in run.values())
    per_query: dict = {}
    means = ranking_metrics(run, data.qrels, per_query=per_query, candidates=20)
    assert set(means) == {"ndcg@10", "mrr@10", "recall@20", "map"}
    theirs = pytrec_eval.RelevanceEvaluator(data.qrels, {"recall.20"}).evaluate(run)
    for qid, judged in data.qrels.items():
        relevant = {d for d, grade in judged.items() if grade >= 1}
        counted = len(relevant & set(run.get(qid, {}))) / len(relevant)
        assert per_query[qid]["recall@20"] == counted == theirs[qid]["recall_20"]
    recall = [v["recall@20"] for v in per_query.values()]
    assert 0 < sum(recall) < len(recall)  # BM25 misses some questions' paragraphs in its top 20
    assert means["recall@20"] == pytest.approx(sum(recall) / len(recall), abs=TOL)
    # Every candidate of a 20-deep run is within 100: recall.100 of it is the same number,
    # which is why naming it recall@100 would only claim a depth the run never had.
    assert ranking_metrics(run, data.qrels)["recall@100"] == means["recall@20"]
    assert set(ranking_metrics(bm25_run(data, k=150), data.qrels, candidates=150)) == set(METRICS)
