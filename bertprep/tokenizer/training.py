"""Deterministic tokenizer training: same corpus + config => byte-identical TOKDIR files.

One run for three models (training_config.py): WordPiece (wordpiece_training.py, the
default), byte-level BPE (bpe_training.py) and Unigram (unigram_training.py). Each
module says how its trainer is made reproducible; this one reads and splits the corpus,
chooses the normalisation, measures the result, writes the report and publishes TOKDIR.

Normalisation: lower-casing and accent stripping are separate (scripts.py); accent
stripping is decided from the training sample's script mix unless given, and reported
through `on_normalisation` before the trainer starts. Every model applies it.

Input: documents are split by content hash into a held-out slice (never trained on; the
report's [UNK] rate and tokens/word are measured on it) and the training text. With
`sample_bytes`, the training text is the "bottom-k by bytes" sample: the documents with
the smallest content hashes whose sizes add up to the budget. It is kept on disk and
compacted as it grows, so memory stays small whatever the corpus size, and it does not
depend on document order. The training text is staged in a temporary file beside TOKDIR
(as large as the training text: use `sample_bytes` for corpora of many GB), which the
Rust trainer then reads in parallel.

Measured on the held-out text: the [UNK] rate and tokens per word, where words are BERT's
(whitespace, then every punctuation character alone, CJK ideographs one by one) whatever
the model, so the figures of the three models compare.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

from tokenizers import Tokenizer, pre_tokenizers

from bertprep.corpus import BottomSample
from bertprep.errors import BertprepError, check_parent_is_directory, describe_path
from bertprep.progress import progress_bar
from bertprep.tokenizer.alphabet import nonzero_counts, raw_char_counts
from bertprep.tokenizer.bpe_training import train_bpe
from bertprep.tokenizer.load import load_tokenizer
from bertprep.tokenizer.scripts import Normalisation, bert_normalizer, choose_normalisation
from bertprep.tokenizer.training_config import BYTE_ALPHABET_SIZE, TokenizerTrainingConfig, TrainedModel
from bertprep.tokenizer.unigram_training import train_unigram
from bertprep.tokenizer.wordpiece_training import train_wordpiece

REPORT_FILE = "training.json"
_HASH_SPACE = 1 << 64
_TRAINERS = {"wordpiece": train_wordpiece, "bpe": train_bpe, "unigram": train_unigram}


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
    check_output(out_dir, overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.work-", dir=out_dir.parent))
    try:
        split = split_corpus(documents, config, work, progress)
        norm = choose_normalisation(nonzero_counts(raw_char_counts(split.train_path)), config.lowercase,
                                    config.strip_accents)
        if on_normalisation is not None:
            on_normalisation(norm)
        trained = _TRAINERS[config.model](split.train_path, config, norm, progress)
        if trained.training_bytes is not None:
            split.train_bytes = trained.training_bytes
        warnings = list(split.warnings) + norm.warnings + trained.warnings
        shortfall = config.vocab_size - trained.vocab_size
        if shortfall > 0:
            warnings.append(f"vocabulary has {trained.vocab_size:,} entries, {shortfall:,} fewer than --vocab-size: "
                            "the corpus has too few distinct words")
        words_of = None if trained.count_model_words else _bert_words(norm)
        measured = measure_tokens(trained.tokenizer, trained.unk_id, split.measure_path, words_of)
        staged = work / "tokdir"
        trained.save(staged)
        fingerprint = trained.fingerprint or load_tokenizer(staged).fingerprint()
        report = _report(config, split, trained, measured, fingerprint, norm, warnings, out_dir)
        report.seconds = time.perf_counter() - started
        # Without the timing and the output path, so the whole TOKDIR is reproducible.
        recorded = {k: v for k, v in asdict(report).items() if k not in ("seconds", "out_dir")}
        (staged / REPORT_FILE).write_text(json.dumps(
            {"config": config.recorded(), "report": recorded}, indent=2, ensure_ascii=False) + "\n",
            encoding="utf-8")
        publish(staged, out_dir, overwrite)
        return report
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            kept = "is unchanged" if out_dir.exists() else "was not created"
            raise BertprepError(f"{describe_path(out_dir.parent)}: disk full while training the tokenizer "
                                f"({exc.strerror}); {describe_path(out_dir)} {kept}") from None
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _report(config: TokenizerTrainingConfig, split, trained: TrainedModel, measured: tuple, fingerprint: str,
            norm: Normalisation, warnings: list[str], out_dir: pathlib.Path) -> TrainingReport:
    alphabet = trained.alphabet  # None: byte-level BPE, whose alphabet is the 256 bytes
    unk_rate, tokens_per_word, words = measured
    return TrainingReport(
        vocab_size=trained.vocab_size, requested_vocab_size=config.vocab_size,
        shortfall=max(config.vocab_size - trained.vocab_size, 0),
        alphabet_size=len(alphabet.characters) if alphabet else BYTE_ALPHABET_SIZE,
        alphabet_dropped=alphabet.dropped if alphabet else 0,
        alphabet_dropped_share=alphabet.dropped_share if alphabet else 0.0,
        alphabet_completed=dict(alphabet.completed) if alphabet else {},
        alphabet_not_completed=list(alphabet.not_completed) if alphabet else [],
        vocab_size_for_repertoires=trained.vocab_size_for_repertoires,
        unk_rate=unk_rate, tokens_per_word=tokens_per_word, heldout_words=words,
        heldout_documents=split.heldout_documents, measured_on=split.measured_on,
        corpus_bytes=split.corpus_bytes, corpus_documents=split.corpus_documents,
        training_bytes=split.train_bytes, training_documents=split.train_documents,
        seconds=0.0, fingerprint=fingerprint, out_dir=str(out_dir), normalisation=norm, warnings=warnings,
    )


# ---------------------------------------------------------------- output directory


def check_output(out_dir: pathlib.Path, overwrite: bool) -> None:
    check_parent_is_directory(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise BertprepError(f"{describe_path(out_dir)}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise BertprepError(f"{describe_path(out_dir)}: exists and is not empty (use --overwrite to replace it)")


def publish(staged: pathlib.Path, out_dir: pathlib.Path, overwrite: bool) -> None:
    """Move the finished TOKDIR into place with renames (same filesystem)."""
    check_output(out_dir, overwrite)
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


def split_corpus(documents, config: TokenizerTrainingConfig, work: pathlib.Path, progress: bool) -> _Split:
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


def _bert_words(norm: Normalisation):
    """BERT's words of a line (module docstring), under the run's normalisation."""
    normalizer, pre_tokenizer = bert_normalizer(norm.lowercase, norm.strip_accents), pre_tokenizers.BertPreTokenizer()
    return lambda line: len(pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line)))


def measure_tokens(tokenizer: Tokenizer, unk: int | None, path: pathlib.Path, words_of: Callable[[str], int] | None = None,
             batch_lines: int = 4096) -> tuple[float | None, float | None, int]:
    """([UNK] tokens / tokens, tokens / word, words) over the lines of `path`; words are
    the tokenizer's pre-tokenizer words, or `words_of(line)` when given."""
    tokens, words, unk_tokens = 0, 0, 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = [line.rstrip("\n") for line in handle]
    for start in range(0, len(lines), batch_lines):
        batch = lines[start:start + batch_lines]
        for line, encoding in zip(batch, tokenizer.encode_batch(batch, add_special_tokens=False)):
            ids = encoding.ids
            tokens += len(ids)
            unk_tokens += ids.count(unk)
            words += len(set(encoding.word_ids)) if words_of is None else words_of(line)
    if not tokens:
        return None, None, 0
    return unk_tokens / tokens, tokens / max(words, 1), words
