"""A checkpoint's vocabulary grown for a tokenizer that extends its own (`bertprep
extend-tokenizer`): `pretrain --init-from BASE` on shards built with the extension.

The input embeddings and the MLM decoder (weight and bias) get a row per new id (an id
after the base's last, or a reserved `[unusedK]` slot the extension gave a token). Each
new row is the mean of the base rows of the pieces the *base* tokenizer makes of the new
token's text (bertprep.tokenizer.vocab_extension.base_pieces); the decoder bias entry the
mean of those pieces' biases. Why the mean of the pieces: at step 0 the new token reads
as what the model already made of the same text spelled in base pieces (a model's input
embedding of a word is close to the mean of its pieces' rows in the representations it
learned; Gee et al. 2022 "Fast Vocabulary Transfer", Dobler & de Melo 2023 "FOCUS" start
from the same), instead of a random row that the first steps' large gradients would have
to drag into place while they also disturb the body. Every other row, and every other
tensor, is the checkpoint's bit for bit; so on text whose ids are all base ids, the grown
model's logits over the base vocabulary are the base model's.

`--new-rows-only-steps K` then trains the new embedding rows alone for K steps
(training/partial_steps.py): the body and the base rows wait until the new rows fit them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from bertmodel.data.tokenizer_info import TokenizerInfo, tokenizer_path
from bertmodel.errors import BertmodelError
from bertmodel.hf import TIED_KEYS, Pretrained
from bertmodel.training.partial_steps import PartialSteps
from bertprep.errors import BertprepError
from bertprep.tokenizer import base_pieces, new_token_ids

# Tensors indexed by token id besides the input embeddings (whose names end in
# EMBEDDING_NAMES): the MLM decoders (tied or not) and their biases, of every architecture.
VOCAB_BIASES = ("cls.predictions.bias", "lm_head.bias", "decoder.bias", "generator_lm_head.bias")
EMBEDDING_NAMES = ("embeddings.word_embeddings.weight", "embeddings.tok_embeddings.weight")


@dataclass
class VocabGrowth:
    rows: int  # the checkpoint's vocabulary rows
    size: int  # the extension's vocabulary size
    new_ids: list[int]  # ids whose token the base does not have
    pieces: list[list[int]]  # per new id: the base ids of its text's pieces
    extension: TokenizerInfo  # the tokenizer the grown model reads
    tokenizer: str  # where the extension was read from, for messages

    def describe(self) -> str:
        reused = sum(1 for i in self.new_ids if i < self.rows)
        slots = f", {reused:,} of them reserved [unused] slots" if reused else ""
        return (f"vocabulary {self.rows:,} -> {self.size:,} rows for {self.tokenizer}: {len(self.new_ids):,} new "
                f"tokens{slots}, each row the mean of the base rows of its pieces under the base tokenizer")

    def grow(self, pre: Pretrained) -> Pretrained:
        """`pre` with its id-indexed tensors grown (tied entries stay one tensor), its
        config's vocab_size and its tokenizer the extension's."""
        grown: dict[int, torch.Tensor] = {}  # by id(tensor): a tied decoder is the embedding itself
        state = {}
        for key, value in pre.state_dict.items():
            if _indexed_by_token(key) and value.shape[0] == self.rows:
                if id(value) not in grown:
                    grown[id(value)] = self._grown(value)
                value = grown[id(value)]
            state[key] = value
        config = dataclasses.replace(pre.config, vocab_size=max(self.size, self.rows))
        return dataclasses.replace(pre, state_dict=state, config=config, tokenizer=self.extension)

    @torch.no_grad()
    def _grown(self, table: torch.Tensor) -> torch.Tensor:
        """(rows, ...) -> (size, ...): base rows as they are, each new row the mean of its
        pieces' rows (in float64, then the table's dtype)."""
        out = torch.zeros((max(self.size, self.rows), *table.shape[1:]), dtype=table.dtype)
        out[:self.rows] = table
        for i, pieces in zip(self.new_ids, self.pieces):
            out[i] = table[pieces].to(torch.float64).mean(dim=0).to(table.dtype)
        return out

    def new_rows_only(self, model: torch.nn.Module, steps: int) -> PartialSteps:
        """The first `steps` steps train the input embedding's new rows alone."""
        name, weight = input_embedding(model)
        mask = torch.zeros(weight.shape[0], dtype=torch.bool)
        mask[self.new_ids] = True
        return PartialSteps(model, {weight: mask}, steps, f"the {len(self.new_ids):,} new rows of {name}")


def _indexed_by_token(key: str) -> bool:
    return key.endswith(EMBEDDING_NAMES) or key in TIED_KEYS or key in VOCAB_BIASES


def input_embedding(model: torch.nn.Module) -> tuple[str, torch.nn.Parameter]:
    """The model's token embedding table (tied to its MLM decoder): (name, parameter)."""
    for name, p in model.named_parameters():
        if name.endswith(EMBEDDING_NAMES):
            return name, p
    raise BertmodelError(f"{type(model).__name__} has no token embedding table")


def plan_growth(pre: Pretrained, tokenizer: TokenizerInfo, where: str) -> VocabGrowth | None:
    """How `pre` grows for `tokenizer` (the shards'), or None when it needs not or cannot:
    the same tokenizer, a smaller one, one of the checkpoint's size that is no extension, a
    checkpoint without tokenizer files (the caller's checks name what differs). One-line
    BertmodelError for a larger tokenizer that is no extension of the checkpoint's (the
    first id that changed named)."""
    rows = pre.config.vocab_size
    if tokenizer.vocab_size < rows or pre.tokenizer is None or pre.tokenizer.same_as(tokenizer) is None:
        return None
    base, extended = pre.tokenizer.load(), tokenizer.load()
    named = str(tokenizer_path(tokenizer))
    try:
        new_ids = new_token_ids(base, extended, named, f"the tokenizer of {where}")
    except BertprepError as exc:
        if tokenizer.vocab_size == rows:
            return None
        raise BertmodelError(str(exc)) from None
    if base.vocab_size != rows:
        raise BertmodelError(f"{where}: {rows:,} vocabulary rows but its tokenizer has {base.vocab_size:,} tokens; "
                             "its vocabulary grows only for a tokenizer of its own size")
    pieces = base_pieces(base, [extended.vocab[i] for i in new_ids])
    return VocabGrowth(rows, tokenizer.vocab_size, new_ids, pieces, tokenizer, named)
