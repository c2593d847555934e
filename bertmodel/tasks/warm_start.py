"""Pre-training from a released model (`pretrain --init-from DIR`): what of it loads, the
objective its heads imply, the one line said about it, and what a head warmup holds still.

A starting model is, to pre-training, one of:
- a model with its MLM head (BertForPreTraining / BertForMaskedLM `cls.predictions`,
  RobertaForMaskedLM / XLMRobertaForMaskedLM `lm_head`, ModernBertForMaskedLM `head` +
  `decoder`, an ELECTRA generator's `generator_predictions` + `generator_lm_head`): the
  head loads with the encoder, its decoder tied to the word embeddings as the source ties
  it. A source whose decoder is a matrix of its own (tie_word_embeddings false) is refused:
  every model here ties it, and tying would silently drop one of the two;
- a model without one (a bare BertModel such as sentence-transformers' all-MiniLM-L6-v2,
  a ModernBertModel, a classifier): the head's own tensors start fresh (BERT's init; the
  decoder is the source's word table, tied), said in the one line. `--head-warmup-steps K`
  then trains that head alone for K steps (head_warmup): the gradients of a random
  head are noise to a trained encoder, so the encoder (its word table, the decoder, with
  it) waits until the head predicts something;
- an ELECTRA discriminator: no MLM head at all, refused (its generator is the MLM model;
  the two continue together as --objective rtd: tasks/electra_start.py).

The objective follows the source where --objective is not given: MLM alone unless the
source has a pair head (BERT's `cls.seq_relationship`), so the run's export is the
source's own class (BertForMaskedLM from a BertModel or BertForMaskedLM, BertForPreTraining
from BertForPreTraining) and `AutoModelForMaskedLM.from_pretrained(RUN/hf)` reads it.
"""
from __future__ import annotations

from bertmodel.errors import BertmodelError
from bertmodel.hf import ENCODER_PREFIXES, TIED_KEYS, Pretrained, group_names, load_weights
from bertmodel.training.partial_steps import PartialSteps

PAIR_HEAD = "cls.seq_relationship."  # BERT's NSP/SOP head


def source_objective(pre: Pretrained | None) -> str | None:
    """The objective a starting model implies when --objective is not given: "mlm" where
    it has no pair head; None (the shards' own) where it has one, or there is no source."""
    if pre is None or any(key.startswith(PAIR_HEAD) for key in pre.state_dict):
        return None
    return "mlm"


def check_source(pre: Pretrained, objective: str) -> None:
    """A source pre-training cannot continue as an MLM model, refused in one line."""
    if pre.architecture == "ElectraForPreTraining" and objective != "rtd":
        raise BertmodelError(f"{pre.source}: an ELECTRA discriminator (ElectraForPreTraining), which has no MLM "
                             "head to continue; continue its generator (ElectraForMaskedLM) with MLM, or the pair "
                             "with --objective rtd --init-generator GENERATOR_DIR")
    if not pre.tied:
        raise BertmodelError(f"{pre.source}: its MLM decoder is a matrix of its own, not its word embeddings "
                             "(config.json's tie_word_embeddings is false); pretrain trains tied decoders")


def _is_mlm_head(name: str) -> bool:
    return not name.startswith((*ENCODER_PREFIXES, PAIR_HEAD))


def start_from(model, pre: Pretrained, head_warmup_steps: int = 0) -> str:
    """Load `pre` into `model` (load_weights) and return the one line that says what
    loaded: its encoder and MLM head, or that the head starts fresh (and what to do about
    it), and any tensor of it left out or of the model left fresh besides."""
    fresh, unused = load_weights(model, pre)
    head = sorted(name for name in model.state_dict() if _is_mlm_head(name) and name not in TIED_KEYS)
    fresh_head = [name for name in fresh if _is_mlm_head(name)]
    others = [name for name in fresh if not _is_mlm_head(name)]
    line = f"initialised from {pre.source} ({pre.architecture}): "
    if fresh_head:
        line += (f"it has no MLM head, so {group_names(fresh_head)} start fresh (BERT's init; the decoder is its "
                 "word embeddings, tied); ")
        line += (f"the encoder waits {head_warmup_steps:,} steps while they train (--head-warmup-steps)"
                 if head_warmup_steps else "--head-warmup-steps K trains them alone first")
    else:
        line += f"its encoder and MLM head ({group_names(head)}), the decoder tied to the word embeddings as there"
        if head_warmup_steps:
            line += f"; the encoder waits {head_warmup_steps:,} steps (--head-warmup-steps)"
    if others:
        line += f"; fresh: {group_names(others)}"
    if unused:
        line += f"; not used: {group_names(unused)}"
    return line


def head_warmup(model, steps: int) -> PartialSteps:
    """--head-warmup-steps K: the first K steps train the head alone (training/partial_steps.py);
    every parameter of the encoder (its pooler and its word table, which is the tied
    decoder, included) keeps the source's weights bit for bit until then."""
    head = {p: None for name, p in model.named_parameters() if not name.startswith(ENCODER_PREFIXES)}
    names = [name for name, _ in model.named_parameters() if not name.startswith(ENCODER_PREFIXES)]
    return PartialSteps(model, head, steps, f"the head ({group_names(names)})")
