"""What `train_tokenizer` is asked for (the model kind and its options, checked once) and
what each model's trainer gives back to it (`TrainedModel`).

Three models: "wordpiece" (BERT's, the default), "bpe" (byte-level, as RoBERTa and
ModernBERT: bpe_training.py) and "unigram" (as SentencePiece: unigram_training.py).
Options that shape one model only are refused with the others rather than ignored
(`refused_options`): byte-level BPE has no alphabet to choose (the 256 bytes encode any
text) and no word-length limit; Unigram has neither a length limit nor a pair-count
threshold. A library caller is refused a value other than the default; the command line
refuses the option whenever it is given.
"""
from __future__ import annotations

import pathlib
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Callable, ClassVar

from bertprep.errors import BertprepError
from bertprep.tokenizer.files import DEFAULT_MAX_CHARS_PER_WORD, SPECIAL_TOKENS

MODELS = ("wordpiece", "bpe", "unigram")
BYTE_ALPHABET_SIZE = 256
_BYTES = "byte-level BPE starts from the 256 bytes, which encode any text with no [UNK]"
# model -> {config field: (option as the user gives it, why the model has no use for it)}
_REFUSED = {
    "bpe": {
        "character_coverage": ("--character-coverage", _BYTES),
        "limit_alphabet": ("--limit-alphabet", _BYTES),
        "min_alphabet": ("min_alphabet", _BYTES),
        "complete_scripts": ("--complete-scripts/--sample-alphabet", _BYTES),
        "max_chars_per_word": ("--max-chars-per-word", "byte-level BPE encodes words of any length"),
    },
    "unigram": {
        "max_chars_per_word": ("--max-chars-per-word", "Unigram encodes words of any length"),
        "min_frequency": ("--min-frequency", "Unigram prunes pieces by likelihood, not by pair counts"),
    },
}


@dataclass
class TokenizerTrainingConfig:
    vocab_size: int = 30522  # exact size of the result when the corpus supports it
    lowercase: bool = True  # lower-case the text (BERT-uncased)
    strip_accents: bool | None = None  # None: auto, from the sample's scripts (scripts.py)
    min_frequency: int = 2  # a merge needs a pair seen at least this often
    character_coverage: float = 0.9995  # the alphabet covers this share of character occurrences
    min_alphabet: int = 1000  # ... and holds at least this many characters (the most frequent)
    limit_alphabet: int | None = None  # instead: exactly the N most frequent characters
    complete_scripts: bool = True  # add each main script's everyday characters (alphabet.py)
    unused: int = 0  # reserved [unused0..N-1] slots after [PAD], as Google's vocab
    max_chars_per_word: int = DEFAULT_MAX_CHARS_PER_WORD  # longer words -> [UNK]
    sample_bytes: int | None = None  # train on a deterministic sample of this many bytes
    heldout_fraction: float = 0.01  # documents (by content hash) kept out of training
    heldout_max_bytes: int = 2_000_000  # at most this much held-out text is measured
    model: str = "wordpiece"  # one of MODELS

    MODELS: ClassVar[tuple[str, ...]] = MODELS

    def __post_init__(self):
        if self.model not in MODELS:
            raise BertprepError(f"--model: {self.model!r} is not one of {', '.join(MODELS)}")
        defaults = {f.name: f.default for f in fields(self) if f.default is not MISSING}
        for name, message in refused_options(self.model).items():
            if getattr(self, name) != defaults[name]:
                raise BertprepError(message)
        # Messages name the CLI options, as every user-facing error does.
        checks = [
            (self.vocab_size >= 1, "--vocab-size: must be positive"),
            (self.min_frequency >= 0, "--min-frequency: cannot be negative"),
            (self.limit_alphabet is None or self.limit_alphabet >= 1, "--limit-alphabet: must be at least 1"),
            (0.0 < self.character_coverage <= 1.0, "--character-coverage: must be in (0, 1]"),
            (self.min_alphabet >= 0, "min_alphabet cannot be negative"),
            (self.unused >= 0, "--unused: cannot be negative"),
            (self.max_chars_per_word >= 1, "--max-chars-per-word: must be at least 1"),
            (self.sample_bytes is None or self.sample_bytes > 0, "--sample-bytes: must be positive"),
            (0.0 <= self.heldout_fraction < 1.0, "--heldout-fraction: must be in [0, 1)"),
            (self.heldout_max_bytes >= 0, "heldout_max_bytes cannot be negative"),
        ]
        for ok, message in checks:
            if not ok:
                raise BertprepError(message)
        self._check_room()

    def _check_room(self) -> None:
        specials = len(SPECIAL_TOKENS) + self.unused
        if self.model == "bpe" and self.vocab_size < specials + BYTE_ALPHABET_SIZE:
            raise BertprepError(f"--vocab-size: {self.vocab_size:,} is too small for byte-level BPE: the "
                                f"{len(SPECIAL_TOKENS)} special tokens, {self.unused:,} [unused] slots and the "
                                f"{BYTE_ALPHABET_SIZE} bytes take {specials + BYTE_ALPHABET_SIZE:,}")
        if self.vocab_size < specials + 1:
            raise BertprepError(f"--vocab-size: {self.vocab_size:,} is too small: the {len(SPECIAL_TOKENS)} special "
                                f"tokens and {self.unused:,} [unused] slots leave no room (need at least "
                                f"{specials + 1:,})")

    def initial_specials(self) -> list[str]:
        """[PAD], [unused0..N-1], [UNK], [CLS], [SEP], [MASK]: Google's layout."""
        return ["[PAD]", *(f"[unused{i}]" for i in range(self.unused)), *SPECIAL_TOKENS[1:]]

    def recorded(self) -> dict:
        """The options as training.json records them: a WordPiece run's exactly as before
        other models existed (no "model" key, so its files keep their bytes), another
        model's with "model" and without the options it refuses."""
        options = asdict(self)
        if self.model == "wordpiece":
            del options["model"]
        for name in refused_options(self.model):
            del options[name]
        return options

    @staticmethod
    def refused_options(model: str) -> dict[str, str]:
        """{config field: the one-line error} for the options `model` has no use for."""
        return refused_options(model)


def refused_options(model: str) -> dict[str, str]:
    """{config field: the one-line error} for the options `model` has no use for."""
    return {name: f"{option}: not an option of --model {model} ({why})"
            for name, (option, why) in _REFUSED.get(model, {}).items()}


@dataclass
class TrainedModel:
    """A model's trainer's result (wordpiece_training, bpe_training, unigram_training)."""

    tokenizer: object  # the tokenizers.Tokenizer saved, which the held-out text is measured with
    vocab_size: int
    unk_id: int | None  # [UNK]'s id, for the [UNK] rate
    save: Callable[[pathlib.Path], object]  # writes the tokenizer files into a directory
    fingerprint: str | None = None  # None: read back from the saved files
    alphabet: object | None = None  # alphabet.Alphabet; None for byte-level BPE (the 256 bytes)
    vocab_size_for_repertoires: int | None = None
    training_bytes: int | None = None  # the training text's size when the trainer rewrote it
    count_model_words: bool = True  # tokens/word over the model's words (WordPiece), else BERT's
    warnings: list[str] = field(default_factory=list)
