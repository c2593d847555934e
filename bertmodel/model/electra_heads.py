"""Fine-tuning heads on an ELECTRA discriminator, named and shaped as transformers' classes.

The discriminator is the BERT encoder (model/encoder.py) under transformers' name
`electra`, without a pooler and with `embeddings_project` where the embedding tables are
narrower than H (ElectraConfig.embedding_size). Its heads differ from BERT's:
  ElectraForSequenceClassification   classifier.{dense, out_proj}: first token -> dropout -> dense
                                      -> GELU -> dropout -> out_proj (num_labels; 1 = regression)
  ElectraForQuestionAnswering        qa_outputs (H -> 2: start/end per token)
  ElectraForTokenClassification      dropout + classifier (a label per token)
  ElectraForMultipleChoice           sequence_summary.summary (first token -> dropout -> dense
                                      -> activation -> dropout) + classifier (H -> 1 per choice)
(transformers' modeling_electra.py: ElectraClassificationHead, ElectraSequenceSummary; the
GELU of the classification head is fixed, not hidden_act, as there). The head dropout is
classifier_dropout, or hidden_dropout_prob where that is None; multiple choice's are the
summary_first/last_dropout fields. Forward signatures and outputs are those of the BERT
heads (model/heads.py), so every task feeds either. Heads that read only the first token
ask the encoder for that row alone (query_index), as BERT's do.
Shapes: B batch, T padded length, H hidden, C classes (or choices).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertmodel.model.config import ElectraConfig
from bertmodel.model.dropout import Dropout
from bertmodel.model.encoder import BertModel, init_weights
from bertmodel.model.heads import (ClassificationOutput, HeadModel, MultipleChoiceOutput, SpanScores, TokenScores,
                                   at_least_fp32, classification_loss)
from bertmodel.model.linear import Linear


def head_dropout(config: ElectraConfig) -> float:
    """transformers' `classifier_dropout if not None else hidden_dropout_prob`."""
    return config.hidden_dropout_prob if config.classifier_dropout is None else config.classifier_dropout


def _activation(name: str | None):
    """transformers' get_activation for the names ElectraConfig accepts ("gelu" is exact erf)."""
    return {"gelu": F.gelu, "tanh": torch.tanh}.get(name, lambda x: x)


class ElectraWithHead(HeadModel):
    """An ELECTRA head model: the encoder as `electra` (no pooler), BERT's init (which is
    transformers' for Electra too: normal(initializer_range), biases 0, LayerNorm 1/0)."""

    encoder_name = "electra"

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.config = config
        self.electra = BertModel(config, add_pooling_layer=False)

    def init_weights(self) -> None:
        words = self.electra.embeddings.word_embeddings
        self.apply(lambda m: init_weights(m, self.config, words))

    def first_token(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        """(B, H): the first token's state; the last layer computes that row alone."""
        first = torch.zeros(input_ids.shape[0], 1, dtype=torch.long, device=input_ids.device)
        return self.electra(input_ids, token_type_ids, attention_mask, first)[:, 0]


class ElectraClassificationHead(nn.Module):
    def __init__(self, config: ElectraConfig, num_labels: int):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.dropout = Dropout(head_dropout(config))
        self.out_proj = nn.Linear(config.hidden_size, num_labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H) first-token states -> (B, C)."""
        return self.out_proj(self.dropout(F.gelu(self.dense(self.dropout(x)))))


class ElectraSequenceSummary(nn.Module):
    """transformers' ElectraSequenceSummary for summary_type "first" (ElectraConfig refuses others)."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        H = config.hidden_size
        self.summary = Linear(H, H) if config.summary_use_proj else nn.Identity()
        self.activation = _activation(config.summary_activation)
        self.first_dropout = Dropout(config.summary_first_dropout)
        self.last_dropout = Dropout(config.summary_last_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, H) first-token states -> (N, H)."""
        return self.last_dropout(self.activation(self.summary(self.first_dropout(x))))


class ElectraForSequenceClassification(ElectraWithHead):
    hf_architecture = "ElectraForSequenceClassification"

    def __init__(self, config: ElectraConfig, num_labels: int):
        super().__init__(config)
        self.num_labels = num_labels
        self.classifier = ElectraClassificationHead(config, num_labels)
        self.init_weights()

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None) -> ClassificationOutput:
        logits = self.classifier(self.first_token(input_ids, token_type_ids, attention_mask))  # (B, C)
        return ClassificationOutput(classification_loss(logits, labels, self.num_labels), logits)


class ElectraForQuestionAnswering(SpanScores, ElectraWithHead):
    hf_architecture = "ElectraForQuestionAnswering"

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.init_weights()


class ElectraForTokenClassification(TokenScores, ElectraWithHead):
    hf_architecture = "ElectraForTokenClassification"

    def __init__(self, config: ElectraConfig, num_labels: int):
        super().__init__(config)
        self.num_labels = num_labels
        self.dropout = Dropout(head_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.init_weights()


class ElectraForMultipleChoice(ElectraWithHead):
    """Each choice encoded on its own; its first token -> sequence_summary -> classifier
    (H -> 1) scores it; a softmax over an example's choices picks one (inputs (B, C, T))."""

    hf_architecture = "ElectraForMultipleChoice"

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.sequence_summary = ElectraSequenceSummary(config)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.init_weights()

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None) -> MultipleChoiceOutput:
        B, C, T = input_ids.shape
        flat = lambda t: None if t is None else t.reshape(B * C, T)  # noqa: E731
        first = self.first_token(flat(input_ids), flat(token_type_ids), flat(attention_mask))  # (B * C, H)
        logits = self.classifier(self.sequence_summary(first)).view(B, C)
        loss = F.cross_entropy(at_least_fp32(logits), labels.long()) if labels is not None else None
        return MultipleChoiceOutput(loss, logits)
