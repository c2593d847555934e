"""Evaluation metrics of the fine-tuning tasks: classification/regression scores and the
official SQuAD v1.1 / v2.0 metric."""
