"""Pre-training recipes chosen at train time, from the shards' rows as they are.

A shard row keeps the original token at each masked position (`masked_lm_ids` at
`masked_lm_positions`), so every row can be un-masked exactly and masked anew:
- objective: what the pair label means is recorded in the manifest (`options.pairs`:
  nsp = random next, sop = swapped order, none = FULL-SENTENCES rows with no label);
  `objective_for` picks and checks the objective a run trains;
- DynamicMasking (RoBERTa, Liu et al. 2019, section 4.1): a train set whose batches are
  restored to the original tokens and masked afresh by bertprep's own rules
  (bertprep.instances.masking.mask_padded: the count formula, 80/10/10, never the specials, the
  random-draw vocabulary), at any rate.

Determinism: the masks of a batch are a function of (seed, epoch, the global index of
the batch's first sample, rank) only, the same coordinates the sample order uses, so a
resumed run (a seek to its cursor) draws the very masks the uninterrupted run drew.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from bertmodel.data.tokenizer_info import tokenizer_path
from bertmodel.errors import BertmodelError
from bertmodel.model.heads import IGNORE_INDEX
from bertprep.shards import pairing
from bertprep.instances import MaskingConfig, Vocabulary, mask_padded

OBJECTIVES = ("mlm+nsp", "mlm+sop", "mlm", "rtd", "minilm")
# pairing -> objectives; MLM alone and ELECTRA's replaced-token detection read any rows as sequences,
# MiniLMv2's distillation any rows as text
SERVES = {"nsp": ("mlm+nsp", "mlm", "rtd", "minilm"), "sop": ("mlm+sop", "mlm", "rtd", "minilm"),
          "none": ("mlm", "rtd", "minilm")}
DEFAULT_OBJECTIVE = {"nsp": "mlm+nsp", "sop": "mlm+sop", "none": "mlm"}
MASK_STREAM = 0x6D61736B  # "mask": keeps these draws apart from the sample order's PCG64([seed, epoch])


PAIRING_WORDS = {"nsp": "next-sentence pairs", "sop": "sentence-order pairs", "none": "FULL-SENTENCES rows"}


def pairing_of_dir(shard_dir) -> str:
    """The pairing one directory holds (manifests from before --pairs hold NSP pairs)."""
    return pairing(shard_dir.manifest)


def pairing_of(shard_dirs) -> str:
    """The pairing all directories hold; different ones are an error."""
    kinds = {d.path: pairing_of_dir(d) for d in shard_dirs}
    if len(set(kinds.values())) > 1:
        listed = ", ".join(f"{p} ({k})" for p, k in kinds.items())
        raise BertmodelError(f"the shard directories hold different pairings: {listed}; train on one kind")
    return next(iter(kinds.values()))


def objective_for(requested: str | None, shard_dirs) -> str:
    pairing = pairing_of(shard_dirs)
    if requested is None:
        return DEFAULT_OBJECTIVE[pairing]
    if requested not in SERVES[pairing]:
        what = PAIRING_WORDS[pairing]
        need = {"mlm+nsp": "--pairs nsp", "mlm+sop": "--pairs sop"}[requested]
        raise BertmodelError(f"--objective {requested} needs shards built with {need}, but {shard_dirs[0].path} "
                             f"holds {what}; use --objective {' or '.join(SERVES[pairing])}")
    return requested


def masking_vocabulary(tokenizer) -> Vocabulary:
    """bertprep's Vocabulary for the run's tokenizer files (the same random-draw pool);
    a tokenizer without a mask token is refused in one line naming its files."""
    from bertprep.builder import vocabulary_for_masking

    if not tokenizer.files:
        raise BertmodelError("dynamic masking needs the tokenizer's files (vocab.txt, tokenizer.json)")
    tokenizer.require_mask(f"{tokenizer_path(tokenizer)} (dynamic masking)")
    return vocabulary_for_masking(tokenizer.load())


def default_max_predictions(shard_predictions: int, shard_rate: float, rate: float) -> int:
    """The shards' cap scaled with the rate (20 at 0.15 -> 40 at 0.3), never below it."""
    return max(shard_predictions, math.ceil(shard_predictions * rate / shard_rate - 1e-9))


class DynamicMasking:
    """A ShardDataset seen with fresh masks: same rows, same order, new masks per epoch.
    `rates` (data/schedules.MaskRateSchedule): the masking rate of each optimizer step,
    in place of config.masked_lm_prob (whose cap, max_predictions_per_seq, then fits the
    schedule's highest rate)."""

    def __init__(self, dataset, seed: int, config: MaskingConfig, vocab: Vocabulary, rates=None):
        self.dataset, self.seed, self.config, self.vocab, self.rates = dataset, seed, config, vocab, rates
        # Never masked: the tokens of the tokenizer's template ([CLS] [SEP]; <s> </s>).
        template = dataset.tokenizer.load().template
        self.specials = np.unique(np.asarray([*template.prefix, *template.middle, *template.suffix,
                                              *template.single_suffix], np.int64))

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name):  # tokenizer, dirs, max_seq_length ... of the shards
        return getattr(self.dataset, name)

    def collate(self, rows: np.ndarray, max_len: int | None = None) -> dict[str, np.ndarray]:
        raise BertmodelError("dynamic masking draws from the batch's position: use collate_at")

    def collate_at(self, rows: np.ndarray, max_len: int | None, first_sample: int, rank: int, step: int = 0) -> dict:
        """collate() of the rows, re-masked; first_sample = global index of the batch's
        first sample (its epoch follows from it); step: the optimizer step it is for (the
        rate of a schedule)."""
        config = self.config if self.rates is None else replace(self.config, masked_lm_prob=self.rates(step))
        arrays = self.dataset.collate(rows, max_len)
        ids = restore_originals(arrays)
        lengths = arrays["attention_mask"].sum(1)
        special = np.isin(ids, self.specials) & (arrays["attention_mask"] == 1)
        epoch = first_sample // len(self.dataset)
        rng = np.random.Generator(np.random.PCG64([self.seed, MASK_STREAM, epoch, first_sample, rank]))
        masked, positions, labels = mask_padded(ids, lengths, special, config, self.vocab, rng)
        arrays["input_ids"] = masked
        arrays["masked_lm_positions"] = positions
        arrays["masked_lm_labels"] = np.where(labels < 0, IGNORE_INDEX, labels)
        return arrays


def restore_originals(arrays: dict) -> np.ndarray:
    """input_ids with every masked position given back its original id (B, T)."""
    ids = arrays["input_ids"].copy()
    labels, positions = arrays["masked_lm_labels"], arrays["masked_lm_positions"]
    real = labels != IGNORE_INDEX
    ids[np.nonzero(real)[0], positions[real]] = labels[real]
    return ids
