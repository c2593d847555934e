"""Task-agnostic distillation's two models (MiniLMv2, Wang et al. 2021; relations.py has
the loss): the student, a plain encoder, and the module a training step calls, which
runs a frozen teacher beside it.

The student (`STUDENTS`): an encoder of the architecture trained (BERT, ModernBERT,
RoBERTa / XLM-R) under its head models' name (`bert.*`, `model.*`, `roberta.*`), so
checkpoints load as every head model's, and exported as the bare encoder class
(BertModel, ModernBertModel, RobertaModel, XLMRobertaModel) every finetune command takes.
With the hidden-state MSE (TinyBERT) and a teacher of another width, a learnt
`hidden_projection` (student width -> teacher width) is part of it: trained and
checkpointed with it, left out of the export.

What the loss never reaches is frozen at construction (requires_grad off): BERT's and
RoBERTa's pooler, ModernBERT's final norm and, without the hidden MSE, the last layer's
part after its Q/K/V projections (layer_states.unread_parameters). AdamW skips a
parameter without a gradient anyway, so the run is the same either way; frozen, DDP
(which requires a gradient for every trained parameter) runs it, and the clipped norm
is over what trains. Those parts keep their initial (or --init-from) weights, as in
MiniLMv2: fine-tuning trains them.

The teacher (`teacher_encoder`): the encoder of any model hf.load_pretrained reads (its
heads and pooler left out), frozen and in eval mode for good: `RelationDistillation.train`
never switches it back, so no dropout touches what the student learns.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from bertmodel.distill.relations import hidden_mse, relation_losses
from bertmodel.errors import BertmodelError
from bertmodel.hf import BARE_ENCODER, Pretrained
from bertmodel.model.encoder import BertModel
from bertmodel.model.heads import BertWithHead
from bertmodel.model.layer_states import layer_states, num_layers, unread_parameters
from bertmodel.model.linear import Linear
from bertmodel.model.modernbert import ModernBertModel
from bertmodel.model.modernbert_heads import ModernBertWithHead
from bertmodel.model.roberta import RobertaModel
from bertmodel.model.roberta_heads import RobertaWithHead, xlm_variant


class MiniLMOutput(NamedTuple):
    loss: torch.Tensor  # qq + kk + vv (+ weight x hidden_mse)
    query_kl: torch.Tensor  # KL of the Q-Q relations
    key_kl: torch.Tensor  # K-K
    value_kl: torch.Tensor  # V-V
    hidden_mse: torch.Tensor | None  # None without --hidden-distill-weight


class _Student:
    """What the students of every architecture share (the head model's class follows)."""

    hf_architecture = ""
    # layer_states computes padded (B, T) states: set_unpad leaves the encoder padded.
    reads_padding = True

    def __init__(self, config, hidden_width: int | None = None):
        """hidden_width: the teacher's width when the hidden MSE is on (a projection where
        it is not the student's), else None."""
        super().__init__(config)
        self.init_weights()
        self.hidden_projection = None
        if hidden_width is not None and hidden_width != config.hidden_size:
            self.hidden_projection = Linear(config.hidden_size, hidden_width)
            nn.init.normal_(self.hidden_projection.weight, mean=0.0, std=config.initializer_range)
            nn.init.zeros_(self.hidden_projection.bias)
        encoder = self.encoder
        for name in unread_parameters(encoder, output=hidden_width is not None):
            encoder.get_parameter(name).requires_grad_(False)

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """The last layer's states at the teacher's width."""
        return hidden if self.hidden_projection is None else self.hidden_projection(hidden)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, **unused) -> torch.Tensor:
        """The encoder's hidden states, as the exported encoder gives them."""
        return self.encoder(input_ids, token_type_ids, attention_mask)


class BertStudent(_Student, BertWithHead):
    hf_architecture = "BertModel"


class ModernBertStudent(_Student, ModernBertWithHead):
    hf_architecture = "ModernBertModel"

    def init_weights(self) -> None:
        if hasattr(self, "head"):
            del self.head  # the bare encoder: no prediction head
        super().init_weights()


class RobertaStudent(_Student, RobertaWithHead):
    hf_architecture = "RobertaModel"
    has_pooler = True  # RobertaModel's default: the export loads with nothing newly initialised


STUDENTS: dict[str, type] = {"bert": BertStudent, "modernbert": ModernBertStudent, "roberta": RobertaStudent,
                             "xlm-roberta": xlm_variant(RobertaStudent)}
# model_type -> the encoder class of a teacher (an ELECTRA discriminator is BERT's encoder)
TEACHER_ENCODERS = {"bert": BertModel, "electra": BertModel, "roberta": RobertaModel, "xlm-roberta": RobertaModel,
                    "modernbert": ModernBertModel}


def teacher_encoder(pre: Pretrained) -> nn.Module:
    """The encoder of `pre` with its weights, frozen, in eval mode, on the CPU."""
    kind = pre.config.model_type
    cls, prefix = TEACHER_ENCODERS[kind], BARE_ENCODER[kind][1]
    encoder = cls(pre.config) if cls is ModernBertModel else cls(pre.config, add_pooling_layer=False)
    pooler = prefix + "pooler."
    state = {k.removeprefix(prefix): v for k, v in pre.state_dict.items() if k.startswith(prefix)
             and not k.startswith(pooler)}
    missing, unexpected = encoder.load_state_dict(state, strict=False)
    if missing or unexpected:
        wrong = [f"missing {', '.join(missing[:3])}"] * bool(missing) + \
                [f"unexpected {', '.join(unexpected[:3])}"] * bool(unexpected)
        raise BertmodelError(f"{pre.source}: its weights do not fit its {kind} encoder ({'; '.join(wrong)})")
    return encoder.requires_grad_(False).eval()


class RelationDistillation(nn.Module):
    """The module the training steps call: the student's last layer learns the Q-Q, K-K
    and V-V relations of the teacher's layer `teacher_layer` (counted from 1), split into
    `relation_heads` heads; with `hidden_weight` > 0, plus that weight x the MSE of the
    student's last layer's output (projected) to the teacher layer's. For ModernBERT both
    outputs are those of the layer (transformers' hidden_states[i]), before the final
    norm, which belongs to no layer: a teacher's middle layer has none to compare with."""

    def __init__(self, student: nn.Module, teacher: nn.Module, teacher_layer: int, relation_heads: int,
                 hidden_weight: float = 0.0):
        super().__init__()
        self.student, self.teacher = student, teacher
        self.teacher_layer, self.relation_heads, self.hidden_weight = teacher_layer, relation_heads, hidden_weight

    def train(self, mode: bool = True) -> "RelationDistillation":
        super().train(mode)
        self.teacher.eval()
        return self

    def forward(self, input_ids, attention_mask, token_type_ids=None, **unused) -> MiniLMOutput:
        output = self.hidden_weight > 0
        with torch.no_grad():
            teacher = layer_states(self.teacher, self.teacher_layer, input_ids, token_type_ids, attention_mask,
                                   output)
        encoder = self.student.encoder
        student = layer_states(encoder, num_layers(encoder), input_ids, token_type_ids, attention_mask, output)
        relations = relation_losses(teacher, student, self.relation_heads, attention_mask)
        loss, mse = relations.total, None
        if output:
            mse = hidden_mse(self.student.project(student.hidden), teacher.hidden, attention_mask)
            loss = loss + self.hidden_weight * mse
        return MiniLMOutput(loss, relations.query, relations.key, relations.value, mse)
