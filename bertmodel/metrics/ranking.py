"""Ranking metrics as trec_eval computes them (the definitions BEIR and MTEB report
through pytrec_eval): nDCG@10 (`ndcg_cut.10`), MRR@10 (`recip_rank` of the ranking cut
at 10, as BEIR's MRR@k), Recall@100 (`recall.100`) and MAP (`map`).

Recall is named for the depth it is counted at: a run of k < 100 candidates per query
(a reranker's --top-k 20) reports recall@20, which is what trec_eval's recall.100 of
that run measures; "recall@100" of 20 candidates would claim a depth the run never had.

trec_eval's rules, followed here:
- A query's ranking is its run sorted by score, highest first, and ties by passage id in
  *descending* byte order (trec_eval's `comp_sim_docno`: strcmp(docno2, docno1)); the
  run's own order and its rank column play no part. UTF-8 byte order is code-point order,
  which is Python's string order.
- A passage is relevant when its judgement is >= 1 (relevance_level 1). nDCG's gain is
  the judgement itself (not 2^rel - 1), discounted by log2(rank + 1); the ideal ranking
  orders every judged passage of the query by judgement, retrieved or not; judgements of
  0 or below gain nothing.
- A query without any relevant passage scores 0 on every measure; MAP and recall divide
  by the number of relevant passages judged, retrieved or not.
- The mean is over the qrels' queries, a query absent from the run scoring 0 (trec_eval
  -c, which BEIR's pytrec_eval call does not pass: BEIR averages over the queries the run
  has). Run queries that the qrels do not judge are ignored, as trec_eval ignores them.
Scores are compared as float64 (trec_eval reads them as C doubles).
"""
from __future__ import annotations

import math

RECALL_DEPTH = 100


def recall_depth(candidates: int | None = None) -> int:
    """The depth recall is counted at for runs of at most `candidates` passages a query."""
    return RECALL_DEPTH if candidates is None else min(RECALL_DEPTH, int(candidates))


def metric_names(candidates: int | None = None) -> tuple[str, ...]:
    """The measures' names for runs of at most `candidates` passages a query (None: any)."""
    return ("ndcg@10", "mrr@10", f"recall@{recall_depth(candidates)}", "map")


METRICS = metric_names()  # a run of 100 or more per query


def trec_order(scores: dict[str, float]) -> list[str]:
    """Passage ids in trec_eval's ranking order: score descending, then id descending."""
    return sorted(scores, key=lambda docid: (float(scores[docid]), docid), reverse=True)


def query_metrics(scores: dict[str, float], judged: dict[str, int], candidates: int | None = None
                  ) -> dict[str, float]:
    """The four measures of one query: its run `scores` and its judgements `judged`;
    recall at recall_depth(candidates)."""
    if any(math.isnan(float(s)) for s in scores.values()):
        raise ValueError("a score is NaN: a ranking needs comparable scores")
    ranking = trec_order(scores)
    num_rel = sum(1 for rel in judged.values() if rel >= 1)
    depth = recall_depth(candidates)
    if num_rel == 0:
        return dict.fromkeys(metric_names(candidates), 0.0)
    relevance = [judged.get(docid, 0) for docid in ranking]
    # nDCG@10: trec_eval sums gain / log2(i + 2) over the first 10 ranks (i from 0).
    dcg = sum(rel / math.log2(i + 2) for i, rel in enumerate(relevance[:10]) if rel > 0)
    ideal = sorted((rel for rel in judged.values() if rel > 0), reverse=True)[:10]
    idcg = sum(rel / math.log2(i + 2) for i, rel in enumerate(ideal))
    first = next((i for i, rel in enumerate(relevance[:10]) if rel >= 1), None)
    precision_sum, found = 0.0, 0
    for i, rel in enumerate(relevance):
        if rel >= 1:
            found += 1
            precision_sum += found / (i + 1)
    return {"ndcg@10": dcg / idcg if idcg > 0 else 0.0,
            "mrr@10": 0.0 if first is None else 1.0 / (first + 1),
            f"recall@{depth}": sum(1 for rel in relevance[:depth] if rel >= 1) / num_rel,
            "map": precision_sum / num_rel}


def ranking_metrics(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]],
                    per_query: dict | None = None, candidates: int | None = None) -> dict[str, float]:
    """{"ndcg@10", "mrr@10", "recall@D", "map"}, each the mean over the queries of
    `qrels` ({query id: {passage id: relevance}}) of trec_eval's value for the ranking
    `run` ({query id: {passage id: score}}) gives; D is 100, or `candidates` where the
    run holds fewer a query (a reranker's top k). `per_query`, a dict, is filled with
    each query's values."""
    if not qrels:
        raise ValueError("qrels judge no query: nothing to average")
    names = metric_names(candidates)
    totals = dict.fromkeys(names, 0.0)
    for qid, judged in qrels.items():
        values = query_metrics(run.get(qid, {}), judged, candidates)
        for name in names:
            totals[name] += values[name]
        if per_query is not None:
            per_query[qid] = values
    return {name: totals[name] / len(qrels) for name in names}
