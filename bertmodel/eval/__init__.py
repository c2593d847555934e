"""Evaluation metrics of the fine-tuning tasks: classification/regression scores, the
official SQuAD v1.1 / v2.0 metric, and entity precision/recall/F1 as CoNLL's conlleval."""
