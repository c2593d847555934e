"""The model: one encoder per architecture (encoder.py: BERT; modernbert.py: the
ModernBERT-style one) and their heads (heads.py, modernbert_heads.py), all with
transformers' parameter names. `head_class(config, kind)` is how a task asks for its
head on whichever architecture its config is."""
from bertmodel.errors import BertmodelError
from bertmodel.model.config import (ARCHITECTURES, BertConfig, ModernBertConfig, config_from_dict,
                                    preset_config)
from bertmodel.model.encoder import BertModel
from bertmodel.model.heads import (IGNORE_INDEX, BertForMaskedLM, BertForMultipleChoice, BertForPreTraining,
                                   BertForQuestionAnswering, BertForSequenceClassification,
                                   BertForTokenClassification, BertWithHead, ClassificationOutput, HeadModel,
                                   MultipleChoiceOutput, PretrainingOutput, QuestionAnsweringOutput,
                                   TokenClassificationOutput)
from bertmodel.model.modernbert import ModernBertModel
from bertmodel.model.modernbert_heads import (ModernBertForMaskedLM, ModernBertForMultipleChoice,
                                              ModernBertForQuestionAnswering, ModernBertForSequenceClassification,
                                              ModernBertForTokenClassification)

# architecture -> what a task asks for -> the head model. "pretraining" (MLM + a pair
# head) exists for BERT only: ModernBERT is pre-trained with MLM alone and has no
# segment embeddings for a pair head to read.
HEADS: dict[str, dict[str, type]] = {
    "bert": {"pretraining": BertForPreTraining, "mlm": BertForMaskedLM, "classify": BertForSequenceClassification,
             "qa": BertForQuestionAnswering, "tokens": BertForTokenClassification, "choice": BertForMultipleChoice},
    "modernbert": {"mlm": ModernBertForMaskedLM, "classify": ModernBertForSequenceClassification,
                   "qa": ModernBertForQuestionAnswering, "tokens": ModernBertForTokenClassification,
                   "choice": ModernBertForMultipleChoice},
}
HEAD_MODELS = {cls.hf_architecture: cls for heads in HEADS.values() for cls in heads.values()}
KIND_OF = {cls.hf_architecture: kind for heads in HEADS.values() for kind, cls in heads.items()}


def head_class(config, kind: str) -> type:
    """The head model for task `kind` on the architecture of `config` (a config, or the
    architecture's name)."""
    architecture = getattr(config, "architecture", config)
    heads = HEADS[architecture]
    if kind not in heads:
        raise BertmodelError(f"the {architecture} architecture has no {kind} head")
    return heads[kind]


__all__ = ["BertModel", "ModernBertModel", "HeadModel", "BertWithHead", "BertForPreTraining", "BertForMaskedLM",
           "BertForSequenceClassification", "BertForQuestionAnswering", "BertForTokenClassification",
           "BertForMultipleChoice", "ModernBertForMaskedLM", "ModernBertForSequenceClassification",
           "ModernBertForQuestionAnswering", "ModernBertForTokenClassification", "ModernBertForMultipleChoice",
           "PretrainingOutput", "ClassificationOutput", "QuestionAnsweringOutput", "TokenClassificationOutput",
           "MultipleChoiceOutput", "HEADS", "HEAD_MODELS", "KIND_OF", "IGNORE_INDEX", "head_class", "BertConfig",
           "ModernBertConfig", "config_from_dict", "preset_config", "ARCHITECTURES"]
