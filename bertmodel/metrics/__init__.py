"""Scores of predictions against gold, nothing else (no models, no readers): classification
and regression (classification.py), the official SQuAD v1.1 / v2.0 metric
(squad_metric.py), entity precision/recall/F1 as CoNLL's conlleval (entities.py),
trec_eval's ranking measures (ranking.py) and a reranker's pair measures (pair_ranking.py)."""
