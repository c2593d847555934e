"""Tokenizers. Training (training.py, the driver: read, split, measure, report,
publish; training_config.py its options) of WordPiece (wordpiece_training.py, with its
guards in guards.py), byte-level BPE (bpe_training.py) and Unigram (unigram_training.py),
whose files subword_files.py writes; the normalisation per script (scripts.py) and the
alphabet (alphabet.py). Loading: WordPiece files (files.py), released tokenizers of other
kinds (released.py: byte-level BPE, SentencePiece), the special-token templates of any of
them (templates.py), one loader for all (load.py). Bulk encoding (encoding.py).
Extension of a vocabulary with the tokens that save the most pieces on a corpus
(extension.py, per kind extension_wordpiece.py and extension_subword.py), and what an
extension is, which a model's vocabulary growth asks (vocab_extension.py).
"""
from bertprep.tokenizer.encoding import SentenceEncoder, nanotoken_available
from bertprep.tokenizer.files import (LoadedTokenizer, SPECIAL_TOKENS, SPECIAL_TOKENS_BY_KEY, SPECIAL_TOKENS_MAP,
                                      SpecialIds, TOKENIZER_FILES, build_tokenizer, infer_lowercase, resolve_strip_accents, span_end)
from bertprep.tokenizer.load import load_tokenizer
from bertprep.tokenizer.released import RELEASED_FILES, ReleasedTokenizer, is_released_tokenizer
from bertprep.tokenizer.templates import Template
from bertprep.tokenizer.guards import LongWords, UNCASED_GROWTH, WORD_BOUNDARIES
from bertprep.tokenizer.scripts import Normalisation, choose_normalisation, script_of
from bertprep.tokenizer.training import TokenizerTrainingConfig, train_tokenizer
from bertprep.tokenizer.extension import ExtensionConfig, extend_tokenizer
from bertprep.tokenizer.vocab_extension import base_pieces, is_unused_slot, new_token_ids

__all__ = ["ExtensionConfig", "LoadedTokenizer", "LongWords", "Normalisation", "RELEASED_FILES", "ReleasedTokenizer", "SPECIAL_TOKENS", "SPECIAL_TOKENS_BY_KEY", "SPECIAL_TOKENS_MAP", "SentenceEncoder", "SpecialIds",
           "TOKENIZER_FILES", "Template", "TokenizerTrainingConfig", "UNCASED_GROWTH", "WORD_BOUNDARIES", "build_tokenizer",
           "base_pieces", "choose_normalisation", "extend_tokenizer", "infer_lowercase", "is_unused_slot", "is_released_tokenizer", "load_tokenizer", "nanotoken_available", "new_token_ids",
           "resolve_strip_accents", "script_of", "span_end", "train_tokenizer"]
