"""Task heads on the RoBERTa encoder (model/roberta.py), named and shaped as transformers'
Roberta* classes (modeling_roberta.py), and as its XLMRoberta* ones under those names.

Each model is `roberta` (the encoder) plus one head:
  RobertaForMaskedLM                 roberta.* without pooler + lm_head.{dense, layer_norm, decoder, bias}:
                                     dense -> GELU -> LayerNorm -> decoder (tied to the word embeddings)
  RobertaForSequenceClassification   roberta.* without pooler + classifier.{dense, out_proj}: the first
                                     token -> dropout -> dense -> tanh -> dropout -> out_proj (num_labels;
                                     1 = regression); RobertaClassificationHead
  RobertaForQuestionAnswering        roberta.* without pooler + qa_outputs (H -> 2: start/end per token)
  RobertaForTokenClassification      roberta.* without pooler + dropout + classifier (a label per token)
  RobertaForMultipleChoice           roberta.* with its pooler (dense + tanh on the first token) +
                                     dropout + classifier (H -> 1 per choice), as BERT's
The classification and token heads' dropout is classifier_dropout, or hidden_dropout_prob
where that is None; multiple choice's is hidden_dropout_prob (as transformers'). There is
no pair head: RoBERTa is pre-trained with MLM alone. Forward signatures and outputs are
those of the BERT heads (model/heads.py), so every task feeds either; heads that read
only some positions ask the encoder for those rows alone (query_index), as BERT's do.
Shapes: B batch, T padded length, H hidden, P prediction slots, V vocabulary, C classes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertmodel.model.config import RobertaConfig
from bertmodel.model.dropout import Dropout
from bertmodel.model.encoder import init_weights
from bertmodel.model.heads import (ClassificationOutput, HeadModel, MultipleChoiceOutput, PretrainingOutput,
                                   SpanScores, TokenScores, at_least_fp32, classification_loss, mlm_output,
                                   slot_index)
from bertmodel.model.linear import Linear
from bertmodel.model.roberta import RobertaModel


def head_dropout(config: RobertaConfig) -> float:
    """transformers' `classifier_dropout if not None else hidden_dropout_prob`."""
    return config.hidden_dropout_prob if config.classifier_dropout is None else config.classifier_dropout


class RobertaWithHead(HeadModel):
    """A RoBERTa head model: the encoder as `roberta`, BERT's init (transformers' for
    RoBERTa too: normal(initializer_range), biases 0, LayerNorm 1/0, padding rows 0)."""

    encoder_name = "roberta"
    has_pooler = False  # only multiple choice (and the bare encoder) has it

    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.config = config
        self.roberta = RobertaModel(config, add_pooling_layer=self.has_pooler)

    def init_weights(self) -> None:
        lm_head = getattr(self, "lm_head", None)
        skip = (lm_head.decoder,) if lm_head is not None else ()
        self.apply(lambda m: init_weights(m, self.config, self.roberta.embeddings.word_embeddings, skip=skip))
        with torch.no_grad():  # transformers zeroes every padding_idx row, the position table's too
            self.roberta.embeddings.position_embeddings.weight[self.config.pad_token_id].zero_()
        if lm_head is not None:
            nn.init.zeros_(lm_head.bias)

    def first_token(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        """(B, 1, H): the first token's state; the last layer computes that row alone."""
        first = torch.zeros(input_ids.shape[0], 1, dtype=torch.long, device=input_ids.device)
        return self.roberta(input_ids, token_type_ids, attention_mask, first)


class RobertaLMHead(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        H = config.hidden_size
        self.dense = Linear(H, H)
        self.layer_norm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        # The decoder's weight is tied to the word embeddings and its bias is `bias`
        # (RobertaForMaskedLM._tied_weights_keys); both are set by the parent.
        self.decoder = Linear(H, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.layer_norm(F.gelu(self.dense(x))))


class RobertaForMaskedLM(RobertaWithHead):
    hf_architecture = "RobertaForMaskedLM"

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self.lm_head = RobertaLMHead(config)
        self.tie_weights()
        self.init_weights()

    def tie_weights(self) -> None:
        self.lm_head.decoder.weight = self.roberta.embeddings.word_embeddings.weight
        self.lm_head.decoder.bias = self.lm_head.bias

    def forward(self, input_ids, token_type_ids, attention_mask, masked_lm_positions,
                masked_lm_labels=None, next_sentence_label=None) -> PretrainingOutput:
        # The last layer runs at the P slots (+ the first token, which keeps the index
        # layout of BertForPreTraining; its row is not read). Pair labels are not read.
        hidden = self.roberta(input_ids, token_type_ids, attention_mask, slot_index(masked_lm_positions))
        return mlm_output(self.lm_head(hidden[:, 1:]), masked_lm_labels)


class RobertaClassificationHead(nn.Module):
    def __init__(self, config: RobertaConfig, num_labels: int):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.dropout = Dropout(head_dropout(config))
        self.out_proj = nn.Linear(config.hidden_size, num_labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H) first-token states -> (B, C)."""
        return self.out_proj(self.dropout(torch.tanh(self.dense(self.dropout(x)))))


class RobertaForSequenceClassification(RobertaWithHead):
    hf_architecture = "RobertaForSequenceClassification"

    def __init__(self, config: RobertaConfig, num_labels: int):
        super().__init__(config)
        self.num_labels = num_labels
        self.classifier = RobertaClassificationHead(config, num_labels)
        self.init_weights()

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None) -> ClassificationOutput:
        logits = self.classifier(self.first_token(input_ids, token_type_ids, attention_mask)[:, 0])  # (B, C)
        return ClassificationOutput(classification_loss(logits, labels, self.num_labels), logits)


class RobertaForQuestionAnswering(SpanScores, RobertaWithHead):
    hf_architecture = "RobertaForQuestionAnswering"

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.init_weights()


class RobertaForTokenClassification(TokenScores, RobertaWithHead):
    hf_architecture = "RobertaForTokenClassification"

    def __init__(self, config: RobertaConfig, num_labels: int):
        super().__init__(config)
        self.num_labels = num_labels
        self.dropout = Dropout(head_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.init_weights()


class RobertaForMultipleChoice(RobertaWithHead):
    """Each choice encoded on its own; its pooled first token -> dropout -> classifier
    (H -> 1) scores it; a softmax over an example's choices picks one (inputs (B, C, T))."""

    hf_architecture = "RobertaForMultipleChoice"
    has_pooler = True  # transformers' class reads RobertaModel's pooler_output

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.init_weights()

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None) -> MultipleChoiceOutput:
        B, C, T = input_ids.shape
        flat = lambda t: None if t is None else t.reshape(B * C, T)  # noqa: E731
        first = self.first_token(flat(input_ids), flat(token_type_ids), flat(attention_mask))  # (B * C, 1, H)
        logits = self.classifier(self.dropout(self.roberta.pooler(first))).view(B, C)
        loss = F.cross_entropy(at_least_fp32(logits), labels.long()) if labels is not None else None
        return MultipleChoiceOutput(loss, logits)


def xlm_variant(cls: type) -> type:
    """`cls` under transformers' XLM-R name (XLMRobertaForMaskedLM for RobertaForMaskedLM):
    the same network and parameter names, so an XLM-R model exports as what it was."""
    return type(f"XLM{cls.__name__}", (cls,), {"hf_architecture": f"XLM{cls.hf_architecture}",
                                               "__module__": cls.__module__,
                                               "__doc__": f"{cls.__name__} under XLM-R's class name."})


ROBERTA_HEADS = {"mlm": RobertaForMaskedLM, "classify": RobertaForSequenceClassification,
                 "qa": RobertaForQuestionAnswering, "tokens": RobertaForTokenClassification,
                 "choice": RobertaForMultipleChoice}
XLM_ROBERTA_HEADS = {kind: xlm_variant(cls) for kind, cls in ROBERTA_HEADS.items()}
