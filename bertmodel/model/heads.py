"""Task heads on the shared encoder, named and shaped as transformers' classes.

Each model here is `bert` (the encoder, model/encoder.py) plus one head, with exactly
the parameter names of the transformers class it exports as, so a state dict moves
between them with no renaming:
  BertForPreTraining              bert.* + cls.predictions.* (MLM, tied) + cls.seq_relationship
  BertForMaskedLM                 bert.* without pooler + cls.predictions.*
  BertForSequenceClassification   bert.* + dropout + classifier (num_labels; 1 = regression)
  BertForQuestionAnswering        bert.* without pooler + qa_outputs (start/end per token)
  BertForTokenClassification      bert.* without pooler + dropout + classifier (a label per token)
  BertForMultipleChoice           bert.* + dropout + classifier (H -> 1: a score per choice)
Heads that read only some positions ask the encoder for just those rows (query_index):
MLM reads [CLS] and the prediction slots, classification only [CLS], so the last layer
runs at those positions alone (multiple choice: the [CLS] of each choice). QA and token
classification read every token.
Shapes: B batch, T padded sequence length, H hidden, P prediction slots, V vocabulary,
C classes (or choices).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertmodel.model.config import BertConfig
from bertmodel.model.dropout import Dropout
from bertmodel.model.encoder import BertModel, init_weights
from bertmodel.model.linear import Linear

IGNORE_INDEX = -100  # label of padded prediction slots (the transformers / PyTorch convention)


class PretrainingOutput(NamedTuple):
    loss: torch.Tensor | None  # mlm_loss (+ nsp_loss, as transformers sums them)
    mlm_loss: torch.Tensor | None  # mean over real (non -100) prediction slots
    nsp_loss: torch.Tensor | None  # None for MLM-only
    mlm_logits: torch.Tensor  # (B, P, V), only at masked_lm_positions
    nsp_logits: torch.Tensor | None  # (B, 2); class 0 = B follows A (or: in order)


class ClassificationOutput(NamedTuple):
    loss: torch.Tensor | None  # cross-entropy, or MSE for regression (num_labels 1)
    logits: torch.Tensor  # (B, C)


class QuestionAnsweringOutput(NamedTuple):
    loss: torch.Tensor | None  # (CE(start) + CE(end)) / 2, as transformers computes it
    start_logits: torch.Tensor  # (B, T)
    end_logits: torch.Tensor  # (B, T)


class TokenClassificationOutput(NamedTuple):
    loss: torch.Tensor | None  # cross-entropy over the labelled tokens (label -100: not scored)
    logits: torch.Tensor  # (B, T, C)


class MultipleChoiceOutput(NamedTuple):
    loss: torch.Tensor | None  # cross-entropy over each example's choices
    logits: torch.Tensor  # (B, C): one score per choice


class PredictionHeadTransform(nn.Module):
    """dense -> GELU -> LayerNorm, H -> H; or H -> `width` (an ELECTRA generator's
    generator_predictions, back to its embedding tables' width for the tied decoder)."""

    def __init__(self, config: BertConfig, width: int | None = None):
        super().__init__()
        width = width or config.hidden_size
        self.dense = Linear(config.hidden_size, width)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class LMPredictionHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = PredictionHeadTransform(config)
        # The decoder's weight is tied to the word embeddings and its bias is `bias`
        # (BertForPreTraining._tied_weights_keys); both are set by the parent.
        self.decoder = Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(x))


class PreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = LMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class OnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = LMPredictionHead(config)


class HeadModel(nn.Module):
    """What every head model of either architecture shares: the encoder under its
    transformers name (`encoder_name`: "bert" or "model"), parameter counts and the
    optimizer grouping."""

    hf_architecture = ""
    encoder_name = "bert"
    shared_head: tuple[str, ...] = ()  # head modules every head of the architecture has (loaded across heads)

    @property
    def encoder(self) -> nn.Module:
        return getattr(self, self.encoder_name)

    def tie_weights(self) -> None:
        """Heads with a decoder tie it to the word embeddings; others have nothing to tie."""

    def num_params(self, embeddings: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())  # parameters() yields tied tensors once
        if not embeddings:
            n -= sum(table.weight.numel() for table in self.encoder.embedding_tables())
        return n

    def param_groups(self, weight_decay: float) -> list[dict]:
        """Optimizer groups, BERT's convention (google-research/bert optimization.py,
        exclude_from_weight_decay=["LayerNorm", "bias"]): decay every matrix, including
        the embedding tables; no decay on biases and LayerNorm, i.e. on every 1-D tensor."""
        decay, no_decay = [], []
        for _, p in self.named_parameters():  # tied parameters appear once
            if p.requires_grad:
                (decay if p.dim() >= 2 else no_decay).append(p)
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]


class BertWithHead(HeadModel):
    """A BERT head model: the encoder as `bert`, BERT's init."""

    has_pooler = True

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=self.has_pooler)

    def init_weights(self) -> None:
        decoder = getattr(getattr(getattr(self, "cls", None), "predictions", None), "decoder", None)
        words = self.bert.embeddings.word_embeddings
        self.apply(lambda m: init_weights(m, self.config, words, skip=(decoder,) if decoder is not None else ()))
        if decoder is not None:
            nn.init.zeros_(self.cls.predictions.bias)  # the MLM output bias starts at 0



def at_least_fp32(logits: torch.Tensor) -> torch.Tensor:
    """Logits as the losses take them: half types (autocast's) upcast to fp32; fp32 and
    float64 as they are (`.float()` would round a float64 model's logits to fp32)."""
    return logits if logits.dtype in (torch.float32, torch.float64) else logits.float()


def _mlm_loss(mlm_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(at_least_fp32(mlm_logits.flatten(0, 1)), labels.flatten().long(), ignore_index=IGNORE_INDEX)


def mlm_output(mlm_logits: torch.Tensor, labels: torch.Tensor | None) -> PretrainingOutput:
    """An MLM-only model's output (no pair head): the logits at the slots, and their loss
    where there are labels."""
    mlm_loss = _mlm_loss(mlm_logits, labels) if labels is not None else None
    return PretrainingOutput(mlm_loss, mlm_loss, None, mlm_logits, None)


def classification_loss(logits: torch.Tensor, labels: torch.Tensor | None, num_labels: int) -> torch.Tensor | None:
    """Cross-entropy over C classes, or MSE for regression (num_labels 1), as transformers."""
    if labels is None:
        return None
    if num_labels == 1:
        predictions = at_least_fp32(logits.squeeze(-1))
        return F.mse_loss(predictions, labels.to(predictions.dtype))
    return F.cross_entropy(at_least_fp32(logits), labels.long())


def span_loss(start_logits, end_logits, start_positions, end_positions) -> torch.Tensor | None:
    """(CE(start) + CE(end)) / 2 over the T positions; as transformers, a position
    outside the sequence is clamped to T and ignored."""
    if start_positions is None or end_positions is None:
        return None
    T = start_logits.shape[1]
    start, end = start_positions.long().clamp(0, T), end_positions.long().clamp(0, T)
    return (F.cross_entropy(start_logits, start, ignore_index=T) + F.cross_entropy(end_logits, end, ignore_index=T)) / 2


def token_loss(logits: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor | None:
    """Cross-entropy over the labelled tokens (label -100: not scored)."""
    if labels is None:
        return None
    return F.cross_entropy(at_least_fp32(logits.flatten(0, 1)), labels.flatten().long(), ignore_index=IGNORE_INDEX)


class SpanScores:
    """The forward of every architecture's QuestionAnswering head that reads the encoder's
    states directly (BERT's, ELECTRA's, RoBERTa's; the class sets up `qa_outputs`)."""

    reads_padding = True  # start/end softmax over all T positions: never unpadded (model/unpad.py)

    def forward(self, input_ids, token_type_ids, attention_mask, start_positions=None,
                end_positions=None) -> QuestionAnsweringOutput:
        hidden = self.encoder(input_ids, token_type_ids, attention_mask)  # (B, T, H)
        start_logits, end_logits = at_least_fp32(self.qa_outputs(hidden)).unbind(-1)  # (B, T) each
        return QuestionAnsweringOutput(span_loss(start_logits, end_logits, start_positions, end_positions),
                                       start_logits, end_logits)


class TokenScores:
    """The forward of every architecture's TokenClassification head that reads the
    encoder's states directly (BERT's, ELECTRA's, RoBERTa's; the class sets up `dropout`
    and `classifier`). Tokens labelled -100 do not count in the loss."""

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None) -> TokenClassificationOutput:
        # Unpadded, padding rows come back as zeros: their logits are the bias, and their
        # labels are -100, so neither the loss nor a prediction reads them.
        logits = self.classifier(self.dropout(self.encoder(input_ids, token_type_ids, attention_mask)))
        return TokenClassificationOutput(token_loss(logits, labels), logits)


def slot_index(masked_lm_positions: torch.Tensor) -> torch.Tensor:
    """(B, 1 + P): [CLS] then the prediction slots, the rows the last layer computes."""
    B = masked_lm_positions.shape[0]
    return torch.cat([masked_lm_positions.new_zeros(B, 1), masked_lm_positions], 1).long()


class BertForPreTraining(BertWithHead):
    """MLM + a sentence-pair head (NSP, or SOP with the same weights)."""

    hf_architecture = "BertForPreTraining"

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.cls = PreTrainingHeads(config)
        self.tie_weights()
        self.init_weights()

    def tie_weights(self) -> None:
        predictions = self.cls.predictions
        predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight
        predictions.decoder.bias = predictions.bias

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T) token ids, masking applied
        token_type_ids: torch.Tensor,  # (B, T) 0/1
        attention_mask: torch.Tensor | None,  # (B, T) 1 = real token, 0 = padding
        masked_lm_positions: torch.Tensor,  # (B, P) positions to predict, padded slots any valid index
        masked_lm_labels: torch.Tensor | None = None,  # (B, P) original ids, -100 in padded slots
        next_sentence_label: torch.Tensor | None = None,  # (B,) 0 = B follows A, 1 = random
    ) -> PretrainingOutput:
        # Only [CLS] (for NSP) and the P prediction slots are ever read from the last
        # layer, so it runs at those 1 + P positions alone: same values there, ~(T-1-P)/T
        # of the last layer's work saved (the last-layer pruning of MLPerf BERT entries).
        hidden = self.bert(input_ids, token_type_ids, attention_mask, slot_index(masked_lm_positions))
        nsp_logits = self.cls.seq_relationship(self.bert.pooler(hidden))  # [CLS] -> (B, 2)
        mlm_logits = self.cls.predictions(hidden[:, 1:])  # (B, P, H) -> (B, P, V)
        mlm_loss = nsp_loss = loss = None
        if masked_lm_labels is not None:
            mlm_loss = loss = _mlm_loss(mlm_logits, masked_lm_labels)
        if next_sentence_label is not None:
            nsp_loss = F.cross_entropy(at_least_fp32(nsp_logits), next_sentence_label.long())
            loss = nsp_loss if loss is None else loss + nsp_loss
        return PretrainingOutput(loss, mlm_loss, nsp_loss, mlm_logits, nsp_logits)


class BertForMaskedLM(BertWithHead):
    """MLM only (RoBERTa's recipe): no pooler, no pair head, as transformers' class."""

    hf_architecture = "BertForMaskedLM"
    has_pooler = False

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.cls = OnlyMLMHead(config)
        self.tie_weights()
        self.init_weights()

    tie_weights = BertForPreTraining.tie_weights

    def forward(self, input_ids, token_type_ids, attention_mask, masked_lm_positions,
                masked_lm_labels=None, next_sentence_label=None) -> PretrainingOutput:
        # The last layer runs at the P slots (+ [CLS], which keeps the index layout of
        # BertForPreTraining; its row is simply not read).
        hidden = self.bert(input_ids, token_type_ids, attention_mask, slot_index(masked_lm_positions))
        mlm_logits = self.cls.predictions(hidden[:, 1:])
        return mlm_output(mlm_logits, masked_lm_labels)


class BertForSequenceClassification(BertWithHead):
    """[CLS] -> pooler -> dropout -> linear; num_labels 1 is regression (MSE)."""

    hf_architecture = "BertForSequenceClassification"

    def __init__(self, config: BertConfig, num_labels: int):
        super().__init__(config)
        self.num_labels = num_labels
        self.dropout = Dropout(config.hidden_dropout_prob)  # transformers: classifier_dropout or this
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.init_weights()

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None) -> ClassificationOutput:
        B = input_ids.shape[0]
        # Only [CLS] is read, so the last layer computes that one row (B, 1, H).
        cls_index = torch.zeros(B, 1, dtype=torch.long, device=input_ids.device)
        hidden = self.bert(input_ids, token_type_ids, attention_mask, cls_index)
        logits = self.classifier(self.dropout(self.bert.pooler(hidden)))  # (B, C)
        return ClassificationOutput(classification_loss(logits, labels, self.num_labels), logits)


class BertForQuestionAnswering(SpanScores, BertWithHead):
    """Start and end scores per token (qa_outputs: H -> 2), no pooler, as transformers."""

    hf_architecture = "BertForQuestionAnswering"
    has_pooler = False

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.init_weights()


class BertForTokenClassification(TokenScores, BertWithHead):
    """A label per token: hidden -> dropout -> linear, no pooler (transformers' class).
    Tokens labelled -100 (padding, [CLS]/[SEP], the later pieces of a word unless every
    piece is labelled) do not count in the loss."""

    hf_architecture = "BertForTokenClassification"
    has_pooler = False

    def __init__(self, config: BertConfig, num_labels: int):
        super().__init__(config)
        self.num_labels = num_labels
        self.dropout = Dropout(config.hidden_dropout_prob)  # transformers: classifier_dropout or this
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.init_weights()


class BertForMultipleChoice(BertWithHead):
    """Each choice encoded on its own ([CLS] context [SEP] choice [SEP]); the pooled [CLS]
    -> dropout -> linear (H -> 1) scores it, and a softmax over an example's choices
    picks one (transformers' class: inputs (B, C, T), logits (B, C))."""

    hf_architecture = "BertForMultipleChoice"

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.init_weights()

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None) -> MultipleChoiceOutput:
        B, C, T = input_ids.shape
        flat = lambda t: None if t is None else t.reshape(B * C, T)  # noqa: E731
        # Only [CLS] of each choice is read: the last layer computes that row alone.
        cls_index = torch.zeros(B * C, 1, dtype=torch.long, device=input_ids.device)
        hidden = self.bert(flat(input_ids), flat(token_type_ids), flat(attention_mask), cls_index)
        logits = self.classifier(self.dropout(self.bert.pooler(hidden))).view(B, C)
        loss = F.cross_entropy(at_least_fp32(logits), labels.long()) if labels is not None else None
        return MultipleChoiceOutput(loss, logits)

