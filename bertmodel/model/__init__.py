"""The model: the shared BERT encoder (encoder.py) and one head per task (heads.py),
all with transformers' parameter names."""
from bertmodel.model.encoder import BertModel
from bertmodel.model.heads import (HEAD_MODELS, IGNORE_INDEX, BertForMaskedLM, BertForMultipleChoice,
                                   BertForPreTraining, BertForQuestionAnswering, BertForSequenceClassification,
                                   BertForTokenClassification, BertWithHead, ClassificationOutput,
                                   MultipleChoiceOutput, PretrainingOutput, QuestionAnsweringOutput,
                                   TokenClassificationOutput)

__all__ = ["BertModel", "BertWithHead", "BertForPreTraining", "BertForMaskedLM", "BertForSequenceClassification",
           "BertForQuestionAnswering", "BertForTokenClassification", "BertForMultipleChoice", "PretrainingOutput",
           "ClassificationOutput", "QuestionAnsweringOutput", "TokenClassificationOutput", "MultipleChoiceOutput",
           "HEAD_MODELS", "IGNORE_INDEX"]
