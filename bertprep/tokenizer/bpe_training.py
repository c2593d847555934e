"""Byte-level BPE training, as RoBERTa and ModernBERT build theirs: tokenizers' ByteLevel
pre-tokenizer (GPT-2's regex, no prefix space) over the UTF-8 bytes of each word, a BPE
model whose initial alphabet is the 256 bytes, the ByteLevel decoder. Every text
encodes, whatever its script, with no [UNK]; the normaliser is the script-aware one
(scripts.subword_normalizer), the special tokens and templates BERT's (subword_files.py).

Deterministic by construction, with no help (measured: byte-identical tokenizer.json
from separate processes, tests/test_train_tokenizer_kinds.py): the trainer puts the
special tokens first in the order given, then the alphabet sorted by code point (no
`limit_alphabet`, so no frequency cut whose ties follow hash order), and with no
continuing-subword prefix it adds no tokens while iterating its word HashMap; merges are
ranked by (count, pair ids) and new ids follow the merges. The one residual risk is the
WordPiece trainer's, whose merge loop this is (training.py): two heap entries for one
pair with equal counts.
"""
from __future__ import annotations

import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from bertprep.tokenizer.guards import train_interruptibly
from bertprep.tokenizer.scripts import Normalisation, subword_normalizer
from bertprep.tokenizer.subword_files import add_specials_and_template, write_files
from bertprep.tokenizer.training_config import TokenizerTrainingConfig, TrainedModel

BYTE_ALPHABET = sorted(pre_tokenizers.ByteLevel.alphabet())  # the 256 byte characters, "Ġ" for " "


def byte_level_pre_tokenizer() -> pre_tokenizers.ByteLevel:
    """RoBERTa's and ModernBERT's: no space added before the first word."""
    return pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)


def train_bpe(train_path, config: TokenizerTrainingConfig, norm: Normalisation, progress: bool) -> TrainedModel:
    """The byte-level BPE tokenizer trained on the lines of `train_path`: the special
    tokens first (ids 0..), the 256 bytes, then the merges, `config.vocab_size` entries in
    all unless no pair reaches `config.min_frequency` sooner; with BERT's template."""
    specials = config.initial_specials()
    tokenizer = _train(train_path, config.vocab_size, config.min_frequency, specials,
                       subword_normalizer(norm.lowercase, norm.strip_accents), progress)
    return TrainedModel(tokenizer=tokenizer, vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
                        unk_id=tokenizer.token_to_id("[UNK]"), save=lambda directory: write_files(tokenizer, directory),
                        count_model_words=False)


def _train(train_path, vocab_size: int, min_frequency: int, specials: list[str], normalizer,
           progress: bool) -> Tokenizer:
    scratch = Tokenizer(models.BPE())
    scratch.normalizer = normalizer
    scratch.pre_tokenizer = byte_level_pre_tokenizer()
    trainer = trainers.BpeTrainer(
        # The trainer's bars go to stderr but its line ends to stdout: only on a terminal.
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=progress and sys.stderr.isatty(),
        special_tokens=specials, initial_alphabet=BYTE_ALPHABET,
    )
    train_interruptibly(scratch, [str(train_path)], trainer)
    token_to_id = scratch.get_vocab(with_added_tokens=False)
    initial = [*specials, *BYTE_ALPHABET]
    if [token_to_id.get(token) for token in initial] != list(range(len(initial))):
        raise RuntimeError("BpeTrainer did not put the special tokens and the bytes first, in order; "
                           "this tokenizers version breaks the determinism recipe")
    # A fresh pipeline around the trained model: its added tokens are exactly ours.
    tokenizer = Tokenizer(scratch.model)
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = byte_level_pre_tokenizer()
    tokenizer.decoder = decoders.ByteLevel()
    add_specials_and_template(tokenizer, specials)
    return tokenizer
