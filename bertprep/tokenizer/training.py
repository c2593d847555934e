"""Deterministic WordPiece training: same corpus + config => byte-identical TOKDIR files.

`tokenizers`' WordPieceTrainer (BPE-style merges ranked by pair count, then greedy
WordPiece) is not reproducible run to run: it gives the `##x` continuation forms their
ids while iterating a Rust HashMap of words (random order per process), breaks merge ties
by pair id, and breaks ties at the `limit_alphabet` cut in hash order too. So ids, ties
and a few dozen tokens change between identical runs (LIBRARY-NOTES.md).

What we do instead (measured: byte-identical vocab.txt across processes, see
tests/test_train_tokenizer_determinism.py and benchmarks/bench_train_tokenizer.py):

1. Compute the alphabet ourselves (alphabet.py): count the characters of the training
   text, map each through the same normalizer and pre-tokenizer, keep the most frequent
   ones covering `character_coverage` of the occurrences, or the `limit_alphabet` most
   frequent (ties: lower code point first), sorted by code point.
2. Hand the trainer, as *special tokens*, in that canonical order: [PAD], [unused0..N-1],
   [UNK], [CLS], [SEP], [MASK], every alphabet char, then `##char` for every char that can
   continue a word (punctuation and CJK ideographs never do: the pre-tokenizer isolates
   them, so their `##` forms would be dead slots). With `limit_alphabet=0` the trainer
   adds no alphabet of its own, so every initial id is fixed before it iterates the
   HashMap; pair ids, merge ties and new-token ids then follow deterministically.
3. Read the vocabulary back in trainer id order, which is already canonical.

Size: the trainer stops merging at exactly `vocab_size` entries; it stops earlier when
no pair reaches `min_frequency` (reported as a shortfall). If the specials and alphabet
alone exceed `vocab_size`, the rarest alphabet characters are dropped (reported).

Normalisation: lower-casing and accent stripping are separate (scripts.py); accent
stripping is decided from the training sample's script mix unless given, and reported
through `on_normalisation` before the trainer starts.

Input: documents are split by content hash into a held-out slice (never trained on; the
report's [UNK] rate and tokens/word are measured on it) and the training text. With
`sample_bytes`, the training text is the "bottom-k by bytes" sample: the documents with
the smallest content hashes whose sizes add up to the budget. It is kept on disk and
compacted as it grows, so memory stays small whatever the corpus size, and it does not
depend on document order. The training text is staged in a temporary file beside TOKDIR
(as large as the training text: use `sample_bytes` for corpora of many GB), which the
Rust trainer then reads in parallel.

Residual risk, for the record: the trainer's heap can hold two entries for the same
pair with equal counts (a stale one re-pushed, and one pushed for new occurrences);
which pops first depends on the heap's layout, which hash order can influence, and the
two orders can interleave later merges differently. We have never observed it: every
repeated run so far was byte-identical (the 2 configurations of the test suite; 3 more
on 4 MB x 6 processes each; 20 MB uncased at 30,522 entries x 5 processes; 20 MB cased,
--limit-alphabet 200, --unused 99, 28,996 entries x 3 processes), but it is not
excluded by construction; the determinism test would catch it.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Iterable

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from bertprep.corpus import BottomSample
from bertprep.errors import BertprepError, check_parent_is_directory, describe_path
from bertprep.progress import progress_bar
from bertprep.tokenizer.files import DEFAULT_MAX_CHARS_PER_WORD, SPECIAL_TOKENS, build_tokenizer
from bertprep.tokenizer.alphabet import (choose_alphabet, complete_alphabet, fit_alphabet, nonzero_counts,
                                         normalized_char_counts, raw_char_counts, vocab_size_for_repertoires)
from bertprep.tokenizer.guards import LongWords, train_interruptibly
from bertprep.tokenizer.scripts import Normalisation, bert_normalizer, choose_normalisation

REPORT_FILE = "training.json"
_HASH_SPACE = 1 << 64


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

    def __post_init__(self):
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
        minimum = len(SPECIAL_TOKENS) + self.unused + 1
        if self.vocab_size < minimum:
            raise BertprepError(f"--vocab-size: {self.vocab_size:,} is too small: the {len(SPECIAL_TOKENS)} special "
                                f"tokens and {self.unused:,} [unused] slots leave no room (need at least {minimum:,})")

    def initial_specials(self) -> list[str]:
        """[PAD], [unused0..N-1], [UNK], [CLS], [SEP], [MASK]: Google's layout."""
        return ["[PAD]", *(f"[unused{i}]" for i in range(self.unused)), *SPECIAL_TOKENS[1:]]


@dataclass
class TrainingReport:
    vocab_size: int
    requested_vocab_size: int
    shortfall: int  # requested - actual, when the corpus has too few distinct words
    alphabet_size: int  # initial characters kept
    alphabet_dropped: int  # characters left out by the coverage or limit (or to fit vocab_size)
    alphabet_dropped_share: float  # their share of the character occurrences inside words
    alphabet_completed: dict  # script -> characters its everyday repertoire added (alphabet.py)
    alphabet_not_completed: list  # scripts whose repertoire did not fit in the vocabulary
    # The smallest --vocab-size that would have added them, for this sample (None: all fit)
    vocab_size_for_repertoires: int | None
    unk_rate: float | None  # [UNK] tokens / all tokens on the measured text
    tokens_per_word: float | None
    heldout_words: int  # words measured (pre-tokenizer words)
    heldout_documents: int
    measured_on: str  # "held-out" or "training" (when nothing was held out)
    corpus_bytes: int  # UTF-8 bytes of every document read
    corpus_documents: int
    training_bytes: int
    training_documents: int
    seconds: float
    fingerprint: str
    out_dir: str
    normalisation: Normalisation | None = None  # lowercase, strip_accents, why, the script mix
    warnings: list[str] = field(default_factory=list)

    @property
    def mb_per_second(self) -> float:
        return self.corpus_bytes / 1e6 / max(self.seconds, 1e-9)


def train_tokenizer(documents: Iterable[list[str]], config: TokenizerTrainingConfig, out_dir,
                    overwrite: bool = False, progress: bool = True,
                    on_normalisation: Callable[[Normalisation], None] | None = None) -> TrainingReport:
    """Train a WordPiece vocabulary on `documents` (each a list of sentence strings) and
    write a TOKDIR (vocab.txt, tokenizer.json, tokenizer_config.json,
    special_tokens_map.json, training.json). Refuses an existing non-empty `out_dir`
    unless `overwrite`; writes beside it and renames, so a crash leaves no half TOKDIR.
    `on_normalisation` is called with the normalisation chosen, once the corpus is read
    and before the trainer starts."""
    started = time.perf_counter()
    out_dir = pathlib.Path(out_dir)
    _check_output(out_dir, overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.work-", dir=out_dir.parent))
    try:
        split = _split_corpus(documents, config, work, progress)
        norm = choose_normalisation(nonzero_counts(raw_char_counts(split.train_path)), config.lowercase,
                                    config.strip_accents)
        if on_normalisation is not None:
            on_normalisation(norm)
        normalizer, pre_tokenizer = bert_normalizer(norm.lowercase, norm.strip_accents), pre_tokenizers.BertPreTokenizer()
        # Words too long to encode go before anything is counted (guards.py); held-out
        # text keeps them, as their [UNK]s count in its [UNK] rate.
        long_words = LongWords(config.max_chars_per_word, norm.lowercase, normalizer, pre_tokenizer,
                               strip_accents=norm.strip_accents)
        filtered = long_words.filter_file(split.train_path)
        if filtered is not None:
            split.train_bytes = filtered
        warnings = list(split.warnings) + norm.warnings + ([long_words.warning()] if long_words.dropped else [])
        char_counts = normalized_char_counts(raw_char_counts(split.train_path), normalizer, pre_tokenizer)
        alphabet = choose_alphabet(char_counts, config.character_coverage, config.limit_alphabet,
                                   normalizer, pre_tokenizer, config.min_alphabet)
        room = config.vocab_size - len(config.initial_specials())
        kept = replace(alphabet)  # the coverage rule's alphabet, before the vocabulary cuts it
        fit_dropped = fit_alphabet(alphabet, char_counts, room)
        needed = None
        if config.complete_scripts and config.limit_alphabet is None:
            complete_alphabet(alphabet, norm.scripts, config.vocab_size, room, normalizer, pre_tokenizer)
            if alphabet.not_completed:
                needed = vocab_size_for_repertoires(kept, norm.scripts, len(config.initial_specials()),
                                                    normalizer, pre_tokenizer)
        if fit_dropped:
            warnings.append(f"--vocab-size {config.vocab_size:,} leaves room for only {len(alphabet.characters):,} "
                            f"initial characters: {fit_dropped:,} rare characters left out (they encode as [UNK])")
        vocab = _run_trainer(split.train_path, config, alphabet.characters, alphabet.continuing, normalizer,
                             pre_tokenizer, progress)
        shortfall = config.vocab_size - len(vocab)
        if shortfall > 0:
            warnings.append(f"vocabulary has {len(vocab):,} entries, {shortfall:,} fewer than --vocab-size: "
                            "the corpus has too few distinct words")
        loaded = build_tokenizer(vocab, norm.lowercase, config.max_chars_per_word, strip_accents=norm.strip_accents)
        unk_rate, tokens_per_word, words = _measure(loaded, split.measure_path)
        report = TrainingReport(
            vocab_size=len(vocab), requested_vocab_size=config.vocab_size, shortfall=max(shortfall, 0),
            alphabet_size=len(alphabet.characters), alphabet_dropped=alphabet.dropped,
            alphabet_dropped_share=alphabet.dropped_share, alphabet_completed=dict(alphabet.completed),
            alphabet_not_completed=list(alphabet.not_completed), vocab_size_for_repertoires=needed,
            unk_rate=unk_rate, tokens_per_word=tokens_per_word, heldout_words=words,
            heldout_documents=split.heldout_documents, measured_on=split.measured_on,
            corpus_bytes=split.corpus_bytes, corpus_documents=split.corpus_documents,
            training_bytes=split.train_bytes, training_documents=split.train_documents,
            seconds=0.0, fingerprint=loaded.fingerprint(), out_dir=str(out_dir), normalisation=norm,
            warnings=warnings,
        )
        staged = work / "tokdir"
        loaded.save(staged)
        report.seconds = time.perf_counter() - started
        # Without the timing and the output path, so the whole TOKDIR is reproducible.
        recorded = {k: v for k, v in asdict(report).items() if k not in ("seconds", "out_dir")}
        (staged / REPORT_FILE).write_text(json.dumps(
            {"config": asdict(config), "report": recorded}, indent=2, ensure_ascii=False) + "\n",
            encoding="utf-8")
        _publish(staged, out_dir, overwrite)
        return report
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            kept = "is unchanged" if out_dir.exists() else "was not created"
            raise BertprepError(f"{describe_path(out_dir.parent)}: disk full while training the tokenizer "
                                f"({exc.strerror}); {describe_path(out_dir)} {kept}") from None
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- output directory


def _check_output(out_dir: pathlib.Path, overwrite: bool) -> None:
    check_parent_is_directory(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise BertprepError(f"{describe_path(out_dir)}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise BertprepError(f"{describe_path(out_dir)}: exists and is not empty (use --overwrite to replace it)")


def _publish(staged: pathlib.Path, out_dir: pathlib.Path, overwrite: bool) -> None:
    """Move the finished TOKDIR into place with renames (same filesystem)."""
    _check_output(out_dir, overwrite)
    final = out_dir.parent / f".{out_dir.name}.new-{os.getpid()}"
    os.rename(staged, final)
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
        os.rename(out_dir, old)
        os.rename(final, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(final, out_dir)


# ---------------------------------------------------------------- reading and splitting


@dataclass
class _Split:
    train_path: pathlib.Path
    measure_path: pathlib.Path
    measured_on: str
    corpus_bytes: int = 0
    corpus_documents: int = 0
    train_bytes: int = 0
    train_documents: int = 0
    heldout_documents: int = 0
    warnings: list[str] = field(default_factory=list)


def _split_corpus(documents, config: TokenizerTrainingConfig, work: pathlib.Path, progress: bool) -> _Split:
    """Stream documents into train.txt (all, or the sample) and heldout.txt."""
    heldout_path = work / "heldout.txt"
    train_path = work / "train.txt"
    sampler = BottomSample(work / "sample.txt", config.sample_bytes) if config.sample_bytes else None
    heldout_cut = int(config.heldout_fraction * _HASH_SPACE)
    split = _Split(train_path, heldout_path, "held-out")
    heldout_bytes = 0
    with open(heldout_path, "wb") as heldout, open(train_path, "wb") as train, \
            progress_bar(progress, desc="reading", unit="B", unit_scale=True, unit_divisor=1000) as bar:
        for sentences in documents:
            text = "".join(s + "\n" for s in sentences)
            data = text.encode("utf-8", "replace")
            split.corpus_bytes += len(data)
            split.corpus_documents += 1
            bar.update(len(data))
            digest = hashlib.blake2b(data, digest_size=16).digest()
            if int.from_bytes(digest[:8], "little") < heldout_cut:
                split.heldout_documents += 1
                if heldout_bytes < config.heldout_max_bytes:
                    heldout.write(data)
                    heldout_bytes += len(data)
                continue
            if sampler is not None:
                sampler.add(data, int.from_bytes(digest[8:], "little"))
            else:
                train.write(data)
                split.train_bytes += len(data)
                split.train_documents += 1
    if sampler is not None:
        split.train_path, split.train_bytes, split.train_documents = sampler.finish()
    if split.corpus_bytes == 0:
        raise BertprepError("the corpus is empty: no documents to train on")
    if split.train_bytes == 0:
        # A tiny corpus whose every document hashed into the held-out slice.
        shutil.copyfile(heldout_path, train_path)
        split.train_path, split.train_bytes = train_path, heldout_path.stat().st_size
        split.train_documents, split.heldout_documents = split.heldout_documents, 0
        split.measured_on = "training"
        split.warnings.append("every document fell in the held-out slice: trained on all of them, "
                              "so the [UNK] rate is measured on training text")
    elif heldout_bytes == 0:
        split.measure_path, split.measured_on = split.train_path, "training"
        if config.heldout_fraction > 0:
            split.warnings.append("no document fell in the held-out slice (corpus too small): "
                                  "the [UNK] rate is measured on training text")
    return split


# ---------------------------------------------------------------- normaliser


def _normalizer(lowercase: bool, strip_accents: bool | None = None):
    """BertNormalizer; accents stripped when lower-casing unless told (BERT's convention)."""
    return bert_normalizer(lowercase, lowercase if strip_accents is None else strip_accents)


# ---------------------------------------------------------------- training and measuring


def _run_trainer(train_path, config, alphabet, continuing, normalizer, pre_tokenizer, progress) -> list[str]:
    specials = config.initial_specials()
    initial = [*specials, *alphabet, *("##" + ch for ch in continuing)]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##",
                                           max_input_chars_per_word=config.max_chars_per_word))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    trainer = trainers.WordPieceTrainer(
        # The trainer's bars go to stderr but its line ends to stdout: only on a terminal.
        vocab_size=config.vocab_size, min_frequency=config.min_frequency,
        show_progress=progress and sys.stderr.isatty(),
        special_tokens=initial, limit_alphabet=0, continuing_subword_prefix="##",
    )
    train_interruptibly(tokenizer, [str(train_path)], trainer)
    token_to_id = tokenizer.get_vocab(with_added_tokens=False)
    vocab = sorted(token_to_id, key=token_to_id.__getitem__)
    if vocab[:len(initial)] != initial or [token_to_id[t] for t in vocab] != list(range(len(vocab))):
        raise RuntimeError("WordPieceTrainer did not keep the initial tokens in order; "
                           "this tokenizers version breaks the determinism recipe")
    # Merges only append, so the tail is the last merges: trim it if the trainer overshoots.
    return vocab[:config.vocab_size]


def _measure(loaded, path: pathlib.Path, batch_lines: int = 4096) -> tuple[float | None, float | None, int]:
    """([UNK] tokens / tokens, tokens / word, words) over the lines of `path`."""
    unk, tokens, words = loaded.special.unk, 0, 0
    unk_tokens = 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = [line.rstrip("\n") for line in handle]
    for start in range(0, len(lines), batch_lines):
        for encoding in loaded.tokenizer.encode_batch(lines[start:start + batch_lines], add_special_tokens=False):
            ids = encoding.ids
            tokens += len(ids)
            unk_tokens += ids.count(unk)
            word_ids = encoding.word_ids
            words += len(set(word_ids))
    if not tokens:
        return None, None, 0
    return unk_tokens / tokens, tokens / max(words, 1), words
