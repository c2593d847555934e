"""The model: one encoder per architecture (encoder.py: BERT; modernbert.py: the
ModernBERT-style one; roberta.py: BERT's with RoBERTa's embeddings) and their heads
(heads.py, modernbert_heads.py, roberta_heads.py; an ELECTRA discriminator is the BERT
encoder with electra_heads.py), all with transformers' parameter names. `head_class(config, kind)` is how a task asks for its head on whichever
model type its config is."""
from bertmodel.errors import BertmodelError
from bertmodel.model.config import (ARCHITECTURES, BertConfig, ElectraConfig, ModernBertConfig, RobertaConfig,
                                    XLMRobertaConfig, config_from_dict, preset_config)
from bertmodel.model.electra_heads import (ElectraForMultipleChoice, ElectraForQuestionAnswering,
                                           ElectraForSequenceClassification, ElectraForTokenClassification)
from bertmodel.model.encoder import BertModel
from bertmodel.model.heads import (IGNORE_INDEX, BertForMaskedLM, BertForMultipleChoice, BertForPreTraining,
                                   BertForQuestionAnswering, BertForSequenceClassification,
                                   BertForTokenClassification, BertWithHead, ClassificationOutput, HeadModel,
                                   MultipleChoiceOutput, PretrainingOutput, QuestionAnsweringOutput,
                                   TokenClassificationOutput)
from bertmodel.model.modernbert import ModernBertModel
from bertmodel.model.rtd import ElectraForMaskedLM
from bertmodel.model.roberta import RobertaModel
from bertmodel.model.roberta_heads import (ROBERTA_HEADS, XLM_ROBERTA_HEADS, RobertaForMaskedLM,
                                           RobertaForMultipleChoice, RobertaForQuestionAnswering,
                                           RobertaForSequenceClassification, RobertaForTokenClassification)
from bertmodel.model.modernbert_heads import (ModernBertForMaskedLM, ModernBertForMultipleChoice,
                                              ModernBertForQuestionAnswering, ModernBertForSequenceClassification,
                                              ModernBertForTokenClassification)

# model type -> what a task asks for -> the head model. "pretraining" (MLM + a pair
# head) exists for BERT only: ModernBERT is pre-trained with MLM alone and has no
# segment embeddings for a pair head to read. "electra" (the BERT architecture) has the
# fine-tuning heads of transformers' Electra classes, and "mlm" is an ELECTRA generator
# (ElectraForMaskedLM: fill-mask's model of an ELECTRA run; model/rtd.py). RoBERTa, like
# ModernBERT, is pre-trained with MLM alone; XLM-R is RoBERTa under its own class names.
HEADS: dict[str, dict[str, type]] = {
    "bert": {"pretraining": BertForPreTraining, "mlm": BertForMaskedLM, "classify": BertForSequenceClassification,
             "qa": BertForQuestionAnswering, "tokens": BertForTokenClassification, "choice": BertForMultipleChoice},
    "modernbert": {"mlm": ModernBertForMaskedLM, "classify": ModernBertForSequenceClassification,
                   "qa": ModernBertForQuestionAnswering, "tokens": ModernBertForTokenClassification,
                   "choice": ModernBertForMultipleChoice},
    "electra": {"mlm": ElectraForMaskedLM, "classify": ElectraForSequenceClassification,
                "qa": ElectraForQuestionAnswering, "tokens": ElectraForTokenClassification,
                "choice": ElectraForMultipleChoice},
    "roberta": ROBERTA_HEADS,
    "xlm-roberta": XLM_ROBERTA_HEADS,
}
HEAD_MODELS = {cls.hf_architecture: cls for heads in HEADS.values() for cls in heads.values()}
KIND_OF = {cls.hf_architecture: kind for heads in HEADS.values() for kind, cls in heads.items()}


def head_class(config, kind: str) -> type:
    """The head model for task `kind` on the model type of `config` (a config, or an
    architecture's name: "bert", "modernbert", "roberta")."""
    model_type = getattr(config, "model_type", config)
    heads = HEADS[model_type]
    if kind not in heads:
        raise BertmodelError(f"{model_type} models have no {kind} head")
    return heads[kind]


__all__ = ["BertModel", "ModernBertModel", "HeadModel", "BertWithHead", "BertForPreTraining", "BertForMaskedLM",
           "BertForSequenceClassification", "BertForQuestionAnswering", "BertForTokenClassification",
           "BertForMultipleChoice", "ModernBertForMaskedLM", "ModernBertForSequenceClassification",
           "ModernBertForQuestionAnswering", "ModernBertForTokenClassification", "ModernBertForMultipleChoice",
           "PretrainingOutput", "ClassificationOutput", "QuestionAnsweringOutput", "TokenClassificationOutput",
           "MultipleChoiceOutput", "HEADS", "HEAD_MODELS", "KIND_OF", "IGNORE_INDEX", "head_class", "BertConfig",
           "ModernBertConfig", "ElectraConfig", "ElectraForSequenceClassification",
           "ElectraForQuestionAnswering", "ElectraForTokenClassification", "ElectraForMultipleChoice",
           "config_from_dict", "preset_config", "ARCHITECTURES", "RobertaConfig", "XLMRobertaConfig", "RobertaModel",
           "RobertaForMaskedLM", "RobertaForSequenceClassification", "RobertaForQuestionAnswering",
           "RobertaForTokenClassification", "RobertaForMultipleChoice"]
