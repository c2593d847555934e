"""Task heads on the ModernBERT-style encoder, named and shaped as transformers' classes.

Each model is `model` (the encoder, model/modernbert.py) plus `head` (dense -> GELU ->
LayerNorm, transformers' ModernBertPredictionHead) and its output layer:
  ModernBertForMaskedLM                 head + decoder (tied to the token embeddings, with a bias)
  ModernBertForSequenceClassification   head + drop + classifier (num_labels; 1 = regression)
  ModernBertForQuestionAnswering        head + drop + classifier (H -> 2: start/end per token)
  ModernBertForTokenClassification      head + drop + classifier (a label per token)
  ModernBertForMultipleChoice           head + drop + classifier (H -> 1: a score per choice)
Classification and multiple choice pool the first token ("cls") or the mean of the real
tokens ("mean"), as config.classifier_pooling says. The forward signatures and outputs
are those of the BERT heads (model/heads.py), so every task feeds either; token_type_ids
are accepted and ignored. As there, the last layer computes only the rows a head reads
(the MLM slots: the sparse MLM head; the first token for "cls" pooling).
Shapes: B batch, T padded length, H hidden, P prediction slots, V vocabulary, C classes.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bertmodel.model.config import ModernBertConfig
from bertmodel.model.dropout import Dropout
from bertmodel.model.heads import (ClassificationOutput, HeadModel, MultipleChoiceOutput, PretrainingOutput,
                                   QuestionAnsweringOutput, TokenClassificationOutput, at_least_fp32,
                                   classification_loss, mlm_output, span_loss, token_loss)
from bertmodel.model.linear import Linear
from bertmodel.model.modernbert import (ModernBertAttention, ModernBertEmbeddings, ModernBertMLP, ModernBertModel)


class ModernBertPredictionHead(nn.Module):
    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(x)))


def _trunc_normal(weight: torch.Tensor, std: float, cutoff: float) -> None:
    nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-cutoff * std, b=cutoff * std)


class ModernBertWithHead(HeadModel):
    """A ModernBERT head model: the encoder as `model`, ModernBERT's init."""

    encoder_name = "model"
    shared_head = ("head",)  # dense + norm, the same in every head: transformers loads it across heads

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.config = config
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)

    def init_weights(self) -> None:
        """transformers' ModernBertPreTrainedModel._init_weights (after the Megatron /
        OLMo scheme): truncated normals at `initializer_cutoff_factor` standard deviations,
        0.02 for the input side (embeddings, Wqkv, Wi), 0.02 / sqrt(2L) for what writes
        into the residual stream (Wo, head.dense, the decoder), H^-0.5 for a classifier;
        biases 0, LayerNorms 1/0. The tied decoder is the embedding table and keeps its init."""
        c = self.config
        cut, std_in = c.initializer_cutoff_factor, c.initializer_range
        std_out = c.initializer_range / math.sqrt(2.0 * c.num_hidden_layers)
        for module in self.modules():
            if isinstance(module, ModernBertEmbeddings):
                _trunc_normal(module.tok_embeddings.weight, std_in, cut)
            elif isinstance(module, (ModernBertAttention, ModernBertMLP)):
                first = module.Wqkv if isinstance(module, ModernBertAttention) else module.Wi
                _trunc_normal(first.weight, std_in, cut)
                _trunc_normal(module.Wo.weight, std_out, cut)
            elif isinstance(module, ModernBertPredictionHead):
                _trunc_normal(module.dense.weight, std_out, cut)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
            if isinstance(module, (nn.Linear, nn.LayerNorm)) and module.bias is not None:
                nn.init.zeros_(module.bias)
        classifier = getattr(self, "classifier", None)
        if classifier is not None:
            _trunc_normal(classifier.weight, c.hidden_size ** -0.5, cut)

    def pooled(self, input_ids, attention_mask) -> torch.Tensor:
        """(B, H): the first token's state ("cls") or the mean over real tokens ("mean")."""
        if self.config.classifier_pooling == "cls":
            # The first real token: position 0, as every batch here is padded on the right.
            first = torch.zeros(input_ids.shape[0], 1, dtype=torch.long, device=input_ids.device)
            return self.model(input_ids, None, attention_mask, first)[:, 0]
        hidden = self.model(input_ids, None, attention_mask)  # (B, T, H)
        if attention_mask is None:
            return hidden.mean(1)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1)


class ModernBertForMaskedLM(ModernBertWithHead):
    """MLM (no pair head: ModernBERT trains MLM alone). Given masked_lm_positions only
    those rows reach the last layer, the head and the decoder (the sparse head); without
    them, logits at every position (B, T, V), as transformers returns them."""

    hf_architecture = "ModernBertForMaskedLM"

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.decoder = Linear(config.hidden_size, config.vocab_size, bias=config.decoder_bias)
        self.tie_weights()
        self.init_weights()

    def tie_weights(self) -> None:
        self.decoder.weight = self.model.embeddings.tok_embeddings.weight

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, masked_lm_positions=None,
                masked_lm_labels=None, next_sentence_label=None) -> PretrainingOutput:
        query = None if masked_lm_positions is None else masked_lm_positions.long()
        mlm_logits = self.decoder(self.head(self.model(input_ids, None, attention_mask, query)))  # (B, P or T, V)
        return mlm_output(mlm_logits, masked_lm_labels)


class ModernBertForSequenceClassification(ModernBertWithHead):
    hf_architecture = "ModernBertForSequenceClassification"

    def __init__(self, config: ModernBertConfig, num_labels: int):
        super().__init__(config)
        self.num_labels = num_labels
        self.drop = Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.init_weights()

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None) -> ClassificationOutput:
        logits = self.classifier(self.drop(self.head(self.pooled(input_ids, attention_mask))))  # (B, C)
        return ClassificationOutput(classification_loss(logits, labels, self.num_labels), logits)


class ModernBertForQuestionAnswering(ModernBertWithHead):
    hf_architecture = "ModernBertForQuestionAnswering"
    reads_padding = True  # start/end softmax over all T positions: never unpadded (model/unpad.py)

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.drop = Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, 2)
        self.init_weights()

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, start_positions=None,
                end_positions=None) -> QuestionAnsweringOutput:
        hidden = self.model(input_ids, None, attention_mask)  # (B, T, H)
        start_logits, end_logits = at_least_fp32(self.classifier(self.drop(self.head(hidden)))).unbind(-1)
        return QuestionAnsweringOutput(span_loss(start_logits, end_logits, start_positions, end_positions),
                                       start_logits, end_logits)


class ModernBertForTokenClassification(ModernBertWithHead):
    hf_architecture = "ModernBertForTokenClassification"

    def __init__(self, config: ModernBertConfig, num_labels: int):
        super().__init__(config)
        self.num_labels = num_labels
        self.drop = Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.init_weights()

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None) -> TokenClassificationOutput:
        logits = self.classifier(self.drop(self.head(self.model(input_ids, None, attention_mask))))  # (B, T, C)
        return TokenClassificationOutput(token_loss(logits, labels), logits)


class ModernBertForMultipleChoice(ModernBertWithHead):
    hf_architecture = "ModernBertForMultipleChoice"

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.drop = Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.init_weights()

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None) -> MultipleChoiceOutput:
        B, C, T = input_ids.shape
        mask = None if attention_mask is None else attention_mask.reshape(B * C, T)
        pooled = self.pooled(input_ids.reshape(B * C, T), mask)
        logits = self.classifier(self.drop(self.head(pooled))).view(B, C)
        loss = F.cross_entropy(at_least_fp32(logits), labels.long()) if labels is not None else None
        return MultipleChoiceOutput(loss, logits)

