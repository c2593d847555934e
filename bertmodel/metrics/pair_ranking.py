"""How well a cross-encoder's scores order each query's judged candidates, and how well
they separate relevant pairs from the others: what `finetune rerank` reports on its
labelled validation pairs.

Per query (its candidates are the validation pairs with its text), as trec_eval defines
them over a run that holds exactly those candidates:
  mrr@10   1 / rank of the first relevant candidate within the top 10, else 0
           (recip_rank cut at 10);
  ndcg@10  DCG@10 / ideal DCG@10 with the relevance as the gain and log2(rank + 1) as the
           discount (trec_eval's ndcg_cut_10, linear gains), the ideal ordering taken over
           all of the query's candidates.
Relevant means a label of at least 0.5 (labels are 0/1 or graded in [0, 1]). A query
without a relevant candidate has nothing to rank and is left out of the means, as
sentence-transformers' CrossEncoderRerankingEvaluator leaves it out. Equal scores keep the
candidates' order in the data (a stable sort: a model that scores all alike earns what
the file's order earns, not more).
Over all pairs: accuracy of logit > 0 (probability > 0.5) against relevant, ROC AUC of
the scores against relevant (ties count a half; 0.5, no information, where every pair is
relevant or none is), and the mean binary cross-entropy.
"""
from __future__ import annotations

import numpy as np

RELEVANT = 0.5
CUTOFF = 10


def per_query_ranking(query_ids: np.ndarray, labels: np.ndarray, scores: np.ndarray,
                      cutoff: int = CUTOFF) -> dict[str, float]:
    """mrr@k and ndcg@k averaged over the queries that have a relevant candidate, and
    the number of those queries (`queries`)."""
    query_ids, labels, scores = np.asarray(query_ids), np.asarray(labels, np.float64), np.asarray(scores, np.float64)
    order = np.lexsort((-scores, query_ids))  # by query, then best score first; stable for ties
    bounds = np.flatnonzero(np.diff(query_ids[order])) + 1
    discounts = 1.0 / np.log2(np.arange(2, cutoff + 2))
    mrr, ndcg = [], []
    for rows in np.split(order, bounds) if len(order) else []:
        gains = labels[rows]
        if not (gains >= RELEVANT).any():
            continue
        top = gains[:cutoff]
        hits = np.flatnonzero(top >= RELEVANT)
        mrr.append(1.0 / (hits[0] + 1) if len(hits) else 0.0)
        ideal = np.sort(gains)[::-1][:cutoff]
        ndcg.append(float(top @ discounts[:len(top)]) / float(ideal @ discounts[:len(ideal)]))
    count = len(mrr)
    return {f"mrr@{cutoff}": float(np.mean(mrr)) if count else 0.0,
            f"ndcg@{cutoff}": float(np.mean(ndcg)) if count else 0.0, "queries": count}


def roc_auc(relevant: np.ndarray, scores: np.ndarray) -> float | None:
    """P(score of a relevant pair > score of an irrelevant one), ties a half (the
    Mann-Whitney U over average ranks); None when either class is absent."""
    relevant = np.asarray(relevant, bool)
    n_pos, n_neg = int(relevant.sum()), int((~relevant).sum())
    if not n_pos or not n_neg:
        return None
    scores = np.asarray(scores, np.float64)
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores), np.float64)
    sorted_scores = scores[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_scores)) + 1]
    ends = np.r_[starts[1:], len(scores)]
    for lo, hi in zip(starts, ends):  # average rank (1-based) of each run of equal scores
        ranks[order[lo:hi]] = (lo + hi + 1) / 2.0
    return float((ranks[relevant].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def pair_metrics(query_ids: np.ndarray, labels: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    """Everything the module docstring lists, over one set of labelled pairs."""
    labels = np.asarray(labels, np.float64)
    logits = np.asarray(logits, np.float64)
    relevant = labels >= RELEVANT
    # log(1 + exp(-|x|)) + max(x, 0) - x y: BCE with logits, stable for large |x|
    bce = np.logaddexp(0.0, -np.abs(logits)) + np.maximum(logits, 0.0) - logits * labels
    out = per_query_ranking(query_ids, labels, logits)
    out.pop("queries")
    auc = roc_auc(relevant, logits)
    out.update(accuracy=float(((logits > 0) == relevant).mean()) if len(labels) else 0.0,
               auc=0.5 if auc is None else auc, loss=float(bce.mean()) if len(labels) else 0.0)
    return out
