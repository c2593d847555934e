"""The model: the shared BERT encoder (encoder.py) and one head per task (heads.py),
all with transformers' parameter names."""
from bertmodel.model.encoder import BertModel
from bertmodel.model.heads import (HEAD_MODELS, IGNORE_INDEX, BertForMaskedLM, BertForPreTraining,
                                   BertForQuestionAnswering, BertForSequenceClassification, BertWithHead,
                                   ClassificationOutput, PretrainingOutput, QuestionAnsweringOutput)

__all__ = ["BertModel", "BertWithHead", "BertForPreTraining", "BertForMaskedLM", "BertForSequenceClassification",
           "BertForQuestionAnswering", "PretrainingOutput", "ClassificationOutput", "QuestionAnsweringOutput",
           "HEAD_MODELS", "IGNORE_INDEX"]
