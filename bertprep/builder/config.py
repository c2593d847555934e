"""build-shards' options (BuildConfig: those that shape the output, recorded in the
manifest, and those that only say how it runs) and its result (BuildResult)."""
from __future__ import annotations

import os
import pathlib
from dataclasses import asdict, dataclass, field

from bertprep.corpus import ReadStats
from bertprep.errors import BertprepError
from bertprep.executors import EXECUTORS, ExecutorReport, default_workers
from bertprep.instances import PAIRINGS, PairConfig
from bertprep.instances import MaskingConfig

MB = 1 << 20


def default_cache_dir() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "bertprep" / "tokenized"


# The longest row build-shards makes: the longest context of the models here (the
# ModernBERT-style encoder's 8,192 positions; BERT's learned positions stop at 512, and
# bertmodel checks a row against the model it trains). What would grow with the row
# length is held to what it is at 512: masking's random keys come in chunks of at most
# 4,096 x 512 (instances/masking.py), a shard's record batches hold at most 4,096 x 512
# tokens (build/tasks.py), and by default a shard at most 100,000 x 512 tokens
# (default_shard_rows). At 512 and below nothing changes, so neither do the bytes.
MIN_SEQ_LENGTH, MAX_SEQ_LENGTH = 8, 8192
SHARD_ROWS = 100_000  # the default rows per shard, up to 512 tokens a row
SHARD_TOKENS = SHARD_ROWS * 512


def default_shard_rows(max_seq_length: int) -> int:
    """Rows per output shard when --shard-rows is not given: 100,000 up to 512 tokens a
    row, then fewer, so a shard holds at most as many tokens as at 512 (6,250 rows at
    8,192): a shard task's memory follows its shard's size, whatever the row length."""
    return max(1, min(SHARD_ROWS, SHARD_TOKENS // max(1, max_seq_length)))


RUN_ONLY_OPTIONS = ("workers", "cache_dir", "engine", "executor", "ray_address")
# The pairing and masking defaults are those of their stages' own configs, defined once.
_PAIRS, _MASKING = PairConfig(), MaskingConfig()


@dataclass(frozen=True)
class BuildConfig:
    """Options of build-shards. Those that shape the output are recorded in the manifest;
    `workers`, `cache_dir`, `engine`, `executor` and `ray_address` (RUN_ONLY_OPTIONS)
    do not change a byte of it, so they are not recorded."""

    max_seq_length: int = _PAIRS.max_seq_length  # [CLS] A [SEP] B [SEP] at most this long (BERT: 128, then 512; up to 8,192)
    max_predictions_per_seq: int = _MASKING.max_predictions_per_seq  # masked positions per row at most (phase 2: 80)
    masked_lm_prob: float = _MASKING.masked_lm_prob  # share of tokens to predict
    short_seq_prob: float = _PAIRS.short_seq_prob  # share of documents whose target length is drawn from [2, max]
    dupe_factor: int = 5  # passes over the corpus, each masked differently
    whole_word_mask: bool = _MASKING.whole_word_mask  # mask every piece of a word together
    random_from_whole_vocab: bool = _MASKING.random_from_whole_vocab  # Google's draw (specials included)
    pairs: str = _PAIRS.kind  # nsp (BERT), sop (ALBERT's sentence order) or none (RoBERTa's FULL-SENTENCES)
    seed: int = 12345
    # Rows per output shard (about; exact when num_shards is None); None: default_shard_rows
    # of max_seq_length, which __post_init__ puts here, so the manifest records the number.
    shard_rows: int | None = None
    num_shards: int | None = None  # a fixed shard count instead of shard_rows
    partition_bytes: int = 8 * MB  # text per partition: the unit of work and of caching
    workers: int = field(default_factory=default_workers)  # processes; output does not depend on it
    cache_dir: str | None = None  # tokenized partitions; default ~/.cache/bertprep/tokenized
    engine: str = "auto"  # bulk encoder: auto (nanotoken if installed) | nanotoken | tokenizers
    executor: str = "local"  # local (a process pool) | ray; output does not depend on it
    ray_address: str | None = None  # with executor "ray": "auto", HOST:PORT, or None for a local Ray

    def __post_init__(self):
        def bad(option: str, problem: str):
            raise BertprepError(f"--{option}: {problem}")

        if not MIN_SEQ_LENGTH <= self.max_seq_length <= MAX_SEQ_LENGTH:
            bad("max-seq-length", f"{self.max_seq_length} is outside {MIN_SEQ_LENGTH}..{MAX_SEQ_LENGTH} "
                                  "(the longest context of the models here; BERT has 512 positions)")
        if not 0.0 < self.masked_lm_prob < 1.0:
            bad("masked-lm-prob", f"{self.masked_lm_prob} is not strictly between 0 and 1")
        if self.max_predictions_per_seq < 1:
            bad("max-predictions-per-seq", "must be at least 1")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            bad("short-seq-prob", f"{self.short_seq_prob} is not between 0 and 1")
        if self.dupe_factor < 1:
            bad("dupe-factor", "must be at least 1")
        if self.workers < 1:
            bad("workers", "must be at least 1")
        if self.shard_rows is None:
            object.__setattr__(self, "shard_rows", default_shard_rows(self.max_seq_length))
        if self.shard_rows < 1:
            bad("shard-rows", "must be at least 1")
        if self.num_shards is not None and self.num_shards < 1:
            bad("num-shards", "must be at least 1")
        if self.partition_bytes < 1024:
            bad("partition-size", "must be at least 1 KB")
        if self.pairs not in PAIRINGS:
            bad("pairs", f"unknown pairing {self.pairs!r} (nsp, sop or none)")
        if self.engine not in ("auto", "nanotoken", "tokenizers"):
            bad("engine", f"unknown engine {self.engine!r}")
        if self.executor not in EXECUTORS:
            bad("executor", f"unknown executor {self.executor!r} (local or ray)")
        if self.ray_address and self.executor != "ray":
            bad("ray-address", "only applies with --executor ray")

    def pair_config(self, template=None) -> PairConfig:
        """The pairing stage's options, as its own config (the names the CLI shows
        become the stage's names here, and only here); `template`, the tokenizer's
        (bertprep.tokenizer.Template), says how many special tokens a row holds (BERT's
        when None)."""
        specials = {} if template is None else {"pair_specials": template.pair_specials,
                                                "single_specials": template.single_specials}
        return PairConfig(max_seq_length=self.max_seq_length, short_seq_prob=self.short_seq_prob, kind=self.pairs,
                          **specials)

    def masking_config(self) -> MaskingConfig:
        return MaskingConfig(max_predictions_per_seq=self.max_predictions_per_seq, masked_lm_prob=self.masked_lm_prob,
                             whole_word_mask=self.whole_word_mask, random_from_whole_vocab=self.random_from_whole_vocab)

    def output_options(self) -> dict:
        """The options that determine the output bytes (recorded in the manifest)."""
        options = asdict(self)
        for key in RUN_ONLY_OPTIONS:
            options.pop(key)
        return options


@dataclass
class BuildResult:
    out: pathlib.Path
    manifest: dict
    seconds: float
    text_bytes: int
    read_stats: ReadStats
    warnings: list[str]
    already_complete: bool = False  # OUT already held this exact build; nothing was written
    executor: ExecutorReport | None = None  # where the work ran (None when nothing ran)
