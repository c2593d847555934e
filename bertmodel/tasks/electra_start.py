"""Replaced-token detection from a trained ELECTRA pair (`pretrain --objective rtd
--init-from DISC [--init-generator GEN]`): which generator goes with the discriminator,
the checks that the two are one pair, and loading both into the run's model.

A pair comes as
- one of our ELECTRA runs (its RUN dir or a checkpoint of it; either architecture): both
  models are in the checkpoint, loaded as they were, their embedding sharing too;
- transformers' ELECTRA directories (the BERT architecture): the discriminator
  (ElectraForPreTraining) in --init-from and its generator (ElectraForMaskedLM) in
  --init-generator, as Google released them (google/electra-*-discriminator and
  -generator), or RUN/hf of our ELECTRA run, whose generator RUN/generator is found beside
  it. ELECTRA trains one embedding module for both (the "electra/embeddings" scope, section
  3.1 of the paper), so the generator's must equal the discriminator's bit for bit, which
  makes them one module again here (--embedding-sharing tied); a pair whose tables differ
  was not trained together, and is refused rather than silently given one of the two.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from bertmodel.errors import BertmodelError
from bertmodel.hf import Pretrained, load_pretrained
from bertmodel.model.config import config_from_dict
from bertmodel.training.checkpoint import load_checkpoint

SHARED = "electra.embeddings."  # the module the two models of a transformers ELECTRA pair share


@dataclass
class PairStart:
    config: object  # the discriminator's config
    generator: object  # the generator's config
    load: Callable  # load(model) puts both into a ReplacedTokenDetection; returns the line to say
    sharing: str  # the embedding sharing the pair was trained with


def pair_start(init_from: str, disc: Pretrained, generator_dir: str | None, sharing: str | None) -> PairStart:
    """The pair to start replaced-token detection from (module docstring), checked."""
    if disc.head.get("objective") == "rtd" and (Path(disc.source) / "state.pt").is_file():
        return _from_our_run(disc, generator_dir, sharing)
    if disc.architecture != "ElectraForPreTraining":
        raise BertmodelError(f"{init_from}: a {disc.architecture}, not an ELECTRA discriminator "
                             "(ElectraForPreTraining); --objective rtd starts from one with its generator "
                             "(--init-generator) or from one of our ELECTRA runs")
    gen = load_pretrained(generator_dir) if generator_dir else load_pretrained(init_from, part="generator")
    if gen.architecture != "ElectraForMaskedLM":
        if not generator_dir:
            raise BertmodelError(f"{init_from}: an ELECTRA discriminator without its generator; give the "
                                 "generator's directory (ElectraForMaskedLM) with --init-generator")
        raise BertmodelError(f"{generator_dir}: a {gen.architecture}, not an ELECTRA generator (ElectraForMaskedLM)")
    if sharing not in (None, "tied"):
        raise BertmodelError(f"--embedding-sharing {sharing}: a released ELECTRA pair shares one embedding module "
                             "(tied); drop --embedding-sharing")
    _check_one_pair(disc, gen)

    def load(model) -> str:
        model.discriminator.load_state_dict(disc.state_dict)
        model.generator.load_state_dict(gen.state_dict)  # its embeddings: the same module, the same values
        model.tie_weights()
        return (f"initialised from {disc.source} (ElectraForPreTraining) and its generator {gen.source} "
                f"(ElectraForMaskedLM), their one embedding module shared as there")
    return PairStart(disc.config, gen.config, load, "tied")


def _from_our_run(disc: Pretrained, generator_dir: str | None, sharing: str | None) -> PairStart:
    if generator_dir:
        raise BertmodelError(f"{disc.source}: an ELECTRA run's checkpoint, which holds its generator; drop "
                             "--init-generator")
    state = load_checkpoint(disc.source)
    task = state["task"]
    held = task.get("embedding_sharing", "tied")
    if sharing not in (None, held):
        raise BertmodelError(f"{disc.source}: an ELECTRA run with --embedding-sharing {held}; drop "
                             f"--embedding-sharing {sharing}")

    def load(model) -> str:
        model.load_state_dict(state["model"])
        return f"initialised from {disc.source} (both models of an ELECTRA run, embeddings {held})"
    return PairStart(config_from_dict(state["config"]), config_from_dict(task["generator_config"]), load, held)


def _check_one_pair(disc: Pretrained, gen: Pretrained) -> None:
    d, g = disc.config, gen.config
    for name in ("vocab_size", "embedding_size", "max_position_embeddings", "type_vocab_size"):
        if getattr(d, name) != getattr(g, name):
            raise BertmodelError(f"{gen.source}: {name} {getattr(g, name):,} but the discriminator {disc.source} has "
                                 f"{getattr(d, name):,}; the two models of a pair share their embeddings")
    if gen.tokenizer is not None and disc.tokenizer is not None and (diff := gen.tokenizer.same_as(disc.tokenizer)):
        raise BertmodelError(f"{gen.source}: another tokenizer than the discriminator {disc.source} ({diff})")
    for key in sorted(k for k in gen.state_dict if k.startswith(SHARED)):
        theirs = disc.state_dict.get(key)
        if theirs is None or not torch.equal(gen.state_dict[key], theirs):
            raise BertmodelError(f"{gen.source}: its {key} is not the discriminator's ({disc.source}); an ELECTRA "
                                 "pair trains one embedding module, so these two were not trained together")
