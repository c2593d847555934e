"""ELECTRA's replaced-token detection (Clark et al. 2020, "ELECTRA: Pre-training Text
Encoders as Discriminators Rather Than Generators", arXiv 2003.10555), for both
architectures.

A small generator (an MLM model) fills the masked positions with tokens sampled from its
own softmax (Gumbel-max, not back-propagated through); a discriminator of the full size
reads the corrupted sequence and tells, at every real token, original from replaced:
  loss = generator MLM loss + discriminator_weight x BCE(discriminator, replaced)
where the BCE is the mean over the real tokens ([CLS] and [SEP] included, padding not),
as ELECTRA's code (disc_weights = input_mask) and transformers' ElectraForPreTraining
compute it. A sampled token that happens to be the original counts as original (the
label is "differs", not "was masked"), as in the paper.

The two share their embeddings (ELECTRA section 3.1), and with them what a small
generator needs to be useful: the discriminator learns from every token of the table.
- BERT architecture: transformers' Electra classes. The discriminator is
  ElectraForPreTraining (`electra` + `discriminator_predictions`), the generator
  ElectraForMaskedLM (`electra` + `generator_predictions` + `generator_lm_head` tied to
  the word embeddings). The generator's whole `embeddings` module (word, position and
  segment tables and their LayerNorm) is the discriminator's, as in ELECTRA's code (the
  one "electra/embeddings" variable scope); a narrower generator projects it to its width
  by `embeddings_project`, which ElectraForMaskedLM has for that.
- ModernBERT architecture: transformers has no ModernBERT discriminator class, but
  ModernBertForTokenClassification with one label is exactly one (encoder, head, one
  logit per token), so the discriminator is that. The generator is a ModernBERT MLM
  model whose token table is the discriminator's: a narrower generator reads it through
  a bias-free projection (H_d -> H_g), and its decoder is tied to the projected table.
  A table times a projection is a table, so the generator exports as a plain
  ModernBertForMaskedLM with tok_embeddings = E P^T (the decoder tied to it): the same
  logits. There are no position tables to share (RoPE).

`embedding_sharing` "gdes" is DeBERTaV3's gradient-disentangled embedding sharing (He et
al. 2021, arXiv 2111.09543, section 3.2) in place of ELECTRA's plain tying: the generator
owns the token table E; the discriminator reads E_D = sg(E) + E_delta (E_delta starts at
0), so the MLM loss alone moves E and the discriminator's loss alone moves E_delta (the
"tug-of-war" between the two objectives that tying sets up, which DeBERTaV3 measured as
the cause of slower convergence). The other embedding parts (BERT's position and segment
tables and the embedding LayerNorm) stay tied. The discriminator exports E + E_delta as
its table.

The generator's size (`generator_config`) scales the discriminator's hidden size,
attention heads and feed-forward width by one fraction (ELECTRA-Base: 1/3, Large: 1/4,
Table 6), its depth by another (ELECTRA keeps the depth: 1.0).
Shapes: B batch, T padded length, P prediction slots, V vocabulary, H_d / H_g widths.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertmodel.errors import BertmodelError
from bertmodel.model.config import BertConfig, ElectraConfig, ModernBertConfig
from bertmodel.model.electra_heads import ElectraWithHead
from bertmodel.model.embedding_sharing import EMBEDDING_SHARING, ProjectedEmbedding, disentangle
from bertmodel.model.encoder import init_weights
from bertmodel.model.heads import (HeadModel, PredictionHeadTransform, PretrainingOutput, _mlm_loss, at_least_fp32,
                                   mlm_output)
from bertmodel.model.linear import Linear
from bertmodel.model.modernbert_heads import ModernBertForTokenClassification, ModernBertWithHead

DEFAULT_GENERATOR_SIZE = 1 / 3  # ELECTRA-Base's generator: hidden, heads and FFN width x 1/3
DEFAULT_DISCRIMINATOR_WEIGHT = 50.0  # ELECTRA's lambda (disc_weight)
REPLACED_LABELS = {"id2label": {"0": "replaced"}, "label2id": {"replaced": 0}}  # the ModernBERT discriminator's


class RTDOutput(NamedTuple):
    loss: torch.Tensor  # mlm_loss + discriminator_weight * disc_loss
    mlm_loss: torch.Tensor  # the generator's, mean over real prediction slots
    disc_loss: torch.Tensor  # BCE, mean over real tokens
    mlm_logits: torch.Tensor  # (B, P, V) the generator's, at the prediction slots
    disc_logits: torch.Tensor  # (B, T) the discriminator's "replaced" logit per token
    replaced: torch.Tensor  # (B, T) bool: the token the discriminator read is not the original


def discriminator_config(config: BertConfig | ModernBertConfig) -> ElectraConfig | ModernBertConfig:
    """The discriminator of a BERT-architecture config is an ElectraConfig (its tables
    H wide, so no projection, as ELECTRA-Base); a ModernBERT config is used as it is."""
    if isinstance(config, (ElectraConfig, ModernBertConfig)):
        return config
    return ElectraConfig(**config.to_dict())


def generator_config(config: ElectraConfig | ModernBertConfig, size: float, depth: float = 1.0):
    """The generator for discriminator `config`: hidden size, heads and feed-forward width
    x `size` (heads at least 1; the hidden size a whole number of heads, of an even head
    size for RoPE), layers x `depth`; the embedding tables stay the discriminator's width."""
    if not 0 < size <= 1:
        raise BertmodelError(f"generator size must be above 0 and at most 1 (a fraction of the discriminator), "
                             f"got {size}")
    if not 0 < depth <= 1:
        raise BertmodelError(f"generator layers must be above 0 and at most 1 (a fraction of the discriminator's "
                             f"depth), got {depth}")
    heads = max(1, round(config.num_attention_heads * size))
    head_size = config.hidden_size * size / heads
    step = 2 if isinstance(config, ModernBertConfig) else 1
    head_size = max(step, step * round(head_size / step))
    fields = dict(hidden_size=heads * head_size, num_attention_heads=heads,
                  intermediate_size=max(1, round(config.intermediate_size * size)),
                  num_hidden_layers=max(1, round(config.num_hidden_layers * depth)))
    if isinstance(config, ModernBertConfig):
        layers = fields["num_hidden_layers"]
        # The generator keeps the discriminator's pattern of global and local layers, cut to its depth.
        return dataclasses.replace(config, **fields, layer_types=list(config.layer_types[:layers]))
    return dataclasses.replace(config, **fields, embedding_size=config.embedding_width)


def gumbel_sample(logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A token per slot drawn from softmax(logits) by the Gumbel-max trick, as ELECTRA's
    pretrain_helpers.sample_from_softmax: argmax(logits + G), G = -log(-log(U + 1e-9) + 1e-9),
    U uniform in fp32 from `generator` (None: torch's default one of the device, which
    checkpoints save, so a resumed run draws what the uninterrupted one drew)."""
    logits = logits.detach().float() if logits.dtype != torch.float64 else logits.detach()
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float32)
    gumbel = -torch.log(-torch.log(u + 1e-9) + 1e-9)
    return (logits + gumbel.to(logits.dtype)).argmax(-1)


def corrupt(input_ids: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor,
            sampled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(original, corrupted) (B, T): the masked input with its original tokens restored at
    the real prediction slots (label != -100), and with the generator's samples there.
    Padded slots point anywhere: they are sent to a spare column that is dropped."""
    B, T = input_ids.shape
    real = labels != -100
    spare = torch.full_like(positions, T)
    index = torch.where(real, positions, spare)
    wide = torch.cat([input_ids.long(), input_ids.new_zeros(B, 1, dtype=torch.long)], 1)  # (B, T + 1)
    original = wide.scatter(1, index, torch.where(real, labels.long(), 0))[:, :T]
    corrupted = wide.scatter(1, index, torch.where(real, sampled.long(), 0))[:, :T]
    return original, corrupted


def replaced_token_loss(logits: torch.Tensor, replaced: torch.Tensor,
                        attention_mask: torch.Tensor | None) -> torch.Tensor:
    """BCE with logits, mean over the real tokens (transformers' ElectraForPreTraining).
    A weighted sum rather than a boolean selection: the same mean with static shapes
    (no graph break under torch.compile)."""
    logits = at_least_fp32(logits)
    losses = F.binary_cross_entropy_with_logits(logits, replaced.to(logits.dtype), reduction="none")
    if attention_mask is None:
        return losses.mean()
    real = attention_mask.to(logits.dtype)
    return (losses * real).sum() / real.sum()


# -- the BERT architecture: transformers' Electra classes ----------------------------------
class ElectraDiscriminatorPredictions(nn.Module):
    """dense (H -> H) -> hidden_act -> dense_prediction (H -> 1): one logit per token."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.dense_prediction = Linear(config.hidden_size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(F.gelu(self.dense(x))).squeeze(-1)  # BertConfig allows only exact gelu


class ElectraForPreTraining(ElectraWithHead):
    """The discriminator: a "replaced" logit per token (B, T)."""

    hf_architecture = "ElectraForPreTraining"

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config)
        self.init_weights()

    def forward(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        return self.discriminator_predictions(self.electra(input_ids, token_type_ids, attention_mask))


class ElectraForMaskedLM(ElectraWithHead):
    """The generator: logits (B, P, V) at the prediction slots only (the last layer runs
    there alone, as BERT's MLM head)."""

    hf_architecture = "ElectraForMaskedLM"

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        # dense (H_g -> E) -> GELU -> LayerNorm(E): transformers' ElectraGeneratorPredictions
        self.generator_predictions = PredictionHeadTransform(config, config.embedding_width)
        self.generator_lm_head = Linear(config.embedding_width, config.vocab_size)
        self.tie_weights()
        words = self.electra.embeddings.word_embeddings
        self.apply(lambda m: init_weights(m, config, words, skip=(self.generator_lm_head,)))
        nn.init.zeros_(self.generator_lm_head.bias)

    def tie_weights(self) -> None:
        self.generator_lm_head.weight = self.electra.embeddings.word_embeddings.weight

    def share_embeddings(self, discriminator: ElectraForPreTraining, sharing: str = "tied") -> None:
        theirs = discriminator.electra.embeddings
        if sharing == "tied":  # one module, as ELECTRA's single "electra/embeddings" scope
            self.electra.embeddings = theirs
        else:  # the same tables and LayerNorm in a module of its own: the discriminator's word table is then disentangled
            mine = self.electra.embeddings
            for name in ("word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm"):
                setattr(mine, name, getattr(theirs, name))
            disentangle(theirs, "word_embeddings")
        self.tie_weights()

    def slot_logits(self, input_ids, token_type_ids, attention_mask, positions) -> torch.Tensor:
        hidden = self.electra(input_ids, token_type_ids, attention_mask, positions)  # (B, P, H_g)
        return self.generator_lm_head(self.generator_predictions(hidden))

    def forward(self, input_ids, token_type_ids, attention_mask, masked_lm_positions, masked_lm_labels=None,
                next_sentence_label=None) -> PretrainingOutput:
        """As the MLM heads (model/heads.py): what fill-mask and the pre-training stats read."""
        mlm_logits = self.slot_logits(input_ids, token_type_ids, attention_mask, masked_lm_positions.long())
        return mlm_output(mlm_logits, masked_lm_labels)


# -- the ModernBERT architecture ------------------------------------------------------------
class ModernBertGenerator(ModernBertWithHead):
    """ModernBertForMaskedLM on the discriminator's token table: logits (B, P, V) at the
    prediction slots, the decoder tied to the (projected) table, with its own bias
    (`decoder_bias`: ModernBertForMaskedLM's decoder.bias)."""

    hf_architecture = "ModernBertForMaskedLM"

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.decoder_bias = nn.Parameter(torch.zeros(config.vocab_size)) if config.decoder_bias else None
        self.init_weights()

    def share_embeddings(self, discriminator: ModernBertForTokenClassification, sharing: str = "tied") -> None:
        table = discriminator.model.embeddings.tok_embeddings
        if sharing == "gdes":
            disentangle(discriminator.model.embeddings, "tok_embeddings")
        c = self.config
        if table.embedding_dim == c.hidden_size:
            self.model.embeddings.tok_embeddings = table
        else:  # the projection writes into the generator's stream: the output-side std, as Wo
            std = c.initializer_range / math.sqrt(2.0 * c.num_hidden_layers)
            self.model.embeddings.tok_embeddings = ProjectedEmbedding(table, c.hidden_size, std,
                                                                      c.initializer_cutoff_factor)

    def slot_logits(self, input_ids, token_type_ids, attention_mask, positions) -> torch.Tensor:
        hidden = self.head(self.model(input_ids, None, attention_mask, positions))  # (B, P, H_g)
        return F.linear(hidden, self.model.embeddings.tok_embeddings.weight, self.decoder_bias)


class ModernBertDiscriminator(ModernBertForTokenClassification):
    """ModernBertForTokenClassification with one label, "replaced": a logit per token (B, T)."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config, 1)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:  # type: ignore[override]
        return self.classifier(self.drop(self.head(self.model(input_ids, None, attention_mask)))).squeeze(-1)


# -- the pair ---------------------------------------------------------------------------------
def pair_classes(config) -> tuple[type, type]:
    """(discriminator, generator) classes for a discriminator config's architecture; their
    hf_architecture is what RUN/hf and RUN/generator load as."""
    if isinstance(config, ModernBertConfig):
        return ModernBertDiscriminator, ModernBertGenerator
    return ElectraForPreTraining, ElectraForMaskedLM


class ReplacedTokenDetection(HeadModel):
    """Generator + discriminator, embeddings shared, trained together on one loss.

    Its state dict holds both under `generator.` and `discriminator.` (a shared tensor
    under both names, loaded back as one); `config` is the discriminator's, the model the
    run is for (it is what fine-tuning reads); `hf_architecture` the discriminator's class."""

    def __init__(self, config: BertConfig | ModernBertConfig, generator: ElectraConfig | ModernBertConfig,
                 discriminator_weight: float = DEFAULT_DISCRIMINATOR_WEIGHT, embedding_sharing: str = "tied"):
        super().__init__()
        if embedding_sharing not in EMBEDDING_SHARING:
            raise BertmodelError(f"embedding sharing must be {' or '.join(EMBEDDING_SHARING)}, got {embedding_sharing!r}")
        config = discriminator_config(config)
        self.config, self.generator_config = config, generator
        self.discriminator_weight = float(discriminator_weight)
        discriminator_class, generator_class = pair_classes(config)
        self.discriminator, self.generator = discriminator_class(config), generator_class(generator)
        self.generator.share_embeddings(self.discriminator, embedding_sharing)
        self.hf_architecture = self.discriminator.hf_architecture

    def submodels(self) -> tuple[nn.Module, nn.Module]:
        """What has an encoder (for unpadding: model/unpad.py)."""
        return self.generator, self.discriminator

    def tie_weights(self) -> None:
        self.generator.tie_weights()

    def num_params(self, embeddings: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())  # the shared tables once
        if not embeddings:
            tables = {id(p): p for m in (self.generator, self.discriminator) for t in m.encoder.embedding_tables()
                      for p in t.parameters()}
            n -= sum(p.numel() for p in tables.values())
        return n

    def forward(self, input_ids, token_type_ids, attention_mask, masked_lm_positions, masked_lm_labels,
                next_sentence_label=None, sample_generator: torch.Generator | None = None) -> RTDOutput:
        """next_sentence_label: taken and ignored (the shards' pair label); sample_generator:
        where the Gumbel noise comes from (None: torch's default generator)."""
        positions = masked_lm_positions.long()
        mlm_logits = self.generator.slot_logits(input_ids, token_type_ids, attention_mask, positions)
        mlm_loss = _mlm_loss(mlm_logits, masked_lm_labels)
        with torch.no_grad():  # the samples are data for the discriminator: no gradient flows through them
            sampled = gumbel_sample(mlm_logits, sample_generator)
            original, corrupted = corrupt(input_ids, positions, masked_lm_labels, sampled)
            replaced = corrupted != original
        disc_logits = self.discriminator(corrupted, token_type_ids, attention_mask)
        disc_loss = replaced_token_loss(disc_logits, replaced, attention_mask)
        loss = mlm_loss + self.discriminator_weight * disc_loss
        return RTDOutput(loss, mlm_loss, disc_loss, mlm_logits, disc_logits, replaced)


def split_state(state_dict: dict, prefix: str) -> dict[str, torch.Tensor]:
    """The entries under `prefix`, without it."""
    return {k.removeprefix(prefix): v for k, v in state_dict.items() if k.startswith(prefix)}


def discriminator_state(state_dict: dict) -> dict[str, torch.Tensor]:
    """The discriminator's tensors of a ReplacedTokenDetection state dict, under its
    transformers class's names (ElectraForPreTraining, ModernBertForTokenClassification):
    a disentangled table (gdes) as the one it reads, E + E_delta."""
    sd = split_state(state_dict, "discriminator.")
    for key in [k for k in sd if k.endswith(".delta")]:
        table = key.removesuffix(".delta")
        sd[f"{table}.weight"] = sd.pop(f"{table}.shared.weight") + sd.pop(key)
    return sd


PROJECTED = "model.embeddings.tok_embeddings."  # a ModernBERT generator's table and projection live here


def generator_state(state_dict: dict) -> dict[str, torch.Tensor]:
    """The generator's tensors under its transformers class's names: ElectraForMaskedLM's
    as they are; ModernBertForMaskedLM's with a projected table multiplied out into
    tok_embeddings (E P^T: the same lookups and, the decoder tied to it, the same logits)
    and decoder_bias as decoder.bias."""
    sd = split_state(state_dict, "generator.")
    if "decoder_bias" not in sd and f"{PROJECTED}table.weight" not in sd:
        return sd  # ELECTRA's names already
    out = {("decoder.bias" if k == "decoder_bias" else k): v for k, v in sd.items() if not k.startswith(PROJECTED)}
    if f"{PROJECTED}table.weight" in sd:
        table, project = sd[f"{PROJECTED}table.weight"], sd[f"{PROJECTED}project.weight"]
        out[f"{PROJECTED}weight"] = (table.detach().double() @ project.detach().double().t()).to(table.dtype)
    else:
        out[f"{PROJECTED}weight"] = sd[f"{PROJECTED}weight"]
    return out


def generator_task(task: dict) -> dict:
    """The task record (bertmodel_task.json, Pretrained.head) of an RTD run's generator,
    from the run's own: its class, no head fields, and which part it is."""
    return {**task, "architecture": task["generator_architecture"], "hf_config": {}, "part": "generator"}


def discriminator_head_config(config) -> dict:
    """config.json fields of the discriminator's class beyond the encoder's."""
    return {"num_labels": 1, **REPLACED_LABELS} if isinstance(config, ModernBertConfig) else {}
