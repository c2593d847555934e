"""Unigram training, as SentencePiece does it: tokenizers' UnigramTrainer (SentencePiece's
EM over a suffix-array seed vocabulary, pruning by likelihood loss; its defaults:
pieces of up to 16 characters, shrinking 0.75, 2 EM sub-iterations), the Metaspace
pre-tokenizer (spaces become "▁", one is prepended to every text: prepend_scheme
"always") and decoder, an [UNK] for characters outside the vocabulary. The normaliser is
the script-aware one (scripts.subword_normalizer: NFC, not SentencePiece's NFKC), the
special tokens and templates BERT's (subword_files.py).

The alphabet is chosen as WordPiece's (alphabet.py: character coverage, at least the
1,000 most frequent, each main script's everyday repertoire), without "##" forms: every
character of the alphabet becomes a piece (the trainer's `initial_alphabet`). The
trainer keeps every character it sees, so the words holding a character outside the
alphabet are left out of the text it reads (`leave_out_words_with`): they would encode
with an [UNK] anyway, as in SentencePiece, whose `character_coverage` this is.

Determinism. The trainer is not reproducible run to run as it stands: it iterates its
word HashMap (random order per process) and sums expected counts in parallel chunks, so
scores differ in their last bits (about 1e-15) between runs; and the characters it adds
at the end (those the EM dropped, given the lowest score plus 0.0001 per character)
take their penalties in HashSet order. The set of pieces came out the same in every
run we made (the float noise changes a choice only at an exact tie; the pruning's
Viterbi counts are integers, summed exactly), and `canonical_pieces` makes the rest
deterministic: it gives the added characters their penalties in a fixed order, rounds
every score to 1e-6 (a millionth of a nat: far below any difference that decides a
segmentation other than an exact tie, and far above the noise), and orders pieces by
(score descending, piece). Residual risk, for the record: a score within ~1e-15 of a
rounding boundary (about 6 in 100,000 runs of 30,000 pieces), or a piece set decided
by an exact tie; the determinism test would catch either.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from bertprep.errors import BertprepError
from bertprep.tokenizer.alphabet import alphabet_for_vocabulary, normalized_char_counts, raw_char_counts
from bertprep.tokenizer.guards import train_interruptibly
from bertprep.tokenizer.scripts import Normalisation, subword_normalizer
from bertprep.tokenizer.subword_files import add_specials_and_template, write_files
from bertprep.tokenizer.training_config import TokenizerTrainingConfig, TrainedModel

SPACE = "▁"  # U+2581, SentencePiece's space
SCORE_DECIMALS = 6
PENALTY_STEP = 0.0001  # tokenizers' UnigramTrainer::finalize, min_score_penalty_delta
# The special tokens' pieces: far below any path of ordinary pieces, so text never
# reaches them through the model (SentencePiece's control symbols are never matched; the
# trainer gives them 0.0, the best score, and a cased model encoded a literal "[MASK]"
# in text as the mask id even where added tokens are not matched).
SPECIAL_SCORE = -1000.0


def metaspace_pre_tokenizer() -> pre_tokenizers.Metaspace:
    return pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)


def character_pre_tokenizer() -> pre_tokenizers.Sequence:
    """Splits at whitespace and isolates every character: what alphabet.py counts with for
    Unigram (the characters inside words), and where no character "continues" a word, so
    the alphabet gets no "##" forms."""
    return pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                    pre_tokenizers.Split(Regex("."), behavior="isolated")])


def leave_out_words_with(source, target, characters: set[str]) -> tuple[int, int] | None:
    """Copy the UTF-8 text file `source` to `target` without the whitespace-separated
    words holding any of `characters` (raw characters). Returns (the copy's size in bytes,
    words left out), or None when no line held one (then `source` is only read)."""
    if not characters:
        return None
    holds = re.compile("[" + "".join(re.escape(ch) for ch in sorted(characters)) + "]")
    size, left_out = 0, 0
    with open(source, encoding="utf-8", errors="replace", newline="") as lines, \
            open(target, "w", encoding="utf-8", newline="") as copy:
        for line in lines:
            if holds.search(line):
                words = line.split()
                kept = [word for word in words if not holds.search(word)]
                left_out += len(words) - len(kept)
                line = " ".join(kept) + "\n"
            copy.write(line)
            size += len(line.encode("utf-8"))
    if not left_out:
        os.remove(target)
        return None
    return size, left_out


def train_unigram(train_path, config: TokenizerTrainingConfig, norm: Normalisation, progress: bool) -> TrainedModel:
    """The Unigram tokenizer trained on the lines of `train_path`, less the words holding
    a character outside the alphabet: the special tokens first (ids 0..), then
    the pieces by score, `config.vocab_size` entries in all unless the text has too few."""
    specials = config.initial_specials()
    normalizer, counting = subword_normalizer(norm.lowercase, norm.strip_accents), character_pre_tokenizer()
    raw_counts = raw_char_counts(train_path)
    char_counts = normalized_char_counts(raw_counts, normalizer, counting)
    # Every word starts with SPACE, which takes one entry beside the special tokens.
    alphabet, needed, warnings = alphabet_for_vocabulary(char_counts, norm.scripts, config, len(specials) + 1,
                                                         normalizer, counting)
    kept = set(alphabet.characters)
    outside = {chr(cp) for cp in raw_counts.nonzero()[0].tolist()
               if any(ch not in kept and not ch.isspace() for ch in normalizer.normalize_str(chr(cp)))}
    # A copy, so that text measured after training (the training text itself when nothing
    # was held out) keeps those words and their [UNK]s.
    filtered = pathlib.Path(f"{train_path}.in-alphabet")
    rewritten = leave_out_words_with(train_path, filtered, outside)
    if rewritten is not None:
        warnings.append(f"left out {rewritten[1]:,} words holding characters outside the alphabet from training "
                        "(they encode with [UNK])")
    tokenizer = _train(filtered if rewritten else train_path, config.vocab_size, specials, alphabet.characters,
                       char_counts, normalizer, progress)
    return TrainedModel(tokenizer=tokenizer, vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
                        unk_id=tokenizer.token_to_id("[UNK]"), save=lambda directory: write_files(tokenizer, directory),
                        alphabet=alphabet, vocab_size_for_repertoires=needed,
                        training_bytes=rewritten[0] if rewritten else None, count_model_words=False,
                        warnings=warnings)


def _train(train_path, vocab_size: int, specials: list[str], alphabet: list[str], char_counts: dict[str, int],
           normalizer, progress: bool) -> Tokenizer:
    """Every character of `alphabet` is a piece; `char_counts` (normalised character ->
    occurrences) orders the characters the trainer adds at the end."""
    scratch = Tokenizer(models.Unigram())
    scratch.normalizer = normalizer
    scratch.pre_tokenizer = metaspace_pre_tokenizer()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, show_progress=progress and sys.stderr.isatty(), special_tokens=specials,
        unk_token="[UNK]", initial_alphabet=alphabet,
    )
    try:
        train_interruptibly(scratch, [str(train_path)], trainer)
    except Exception as exc:  # tokenizers raises plain Exceptions
        if "not large enough" not in str(exc):
            raise
        raise BertprepError(f"--vocab-size: {vocab_size:,} cannot hold every character of the training text "
                            f"and the special tokens") from None
    trained = json.loads(scratch.to_str())["model"]["vocab"]
    if [piece for piece, _ in trained[:len(specials)]] != specials:
        raise RuntimeError("UnigramTrainer did not put the special tokens first, in order; "
                           "this tokenizers version breaks the determinism recipe")
    pieces = canonical_pieces([(piece, score) for piece, score in trained[len(specials):]], char_counts)
    model = models.Unigram([(token, SPECIAL_SCORE) for token in specials] + pieces, specials.index("[UNK]"), False)
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = metaspace_pre_tokenizer()
    tokenizer.decoder = decoders.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)
    add_specials_and_template(tokenizer, specials)
    return tokenizer


def canonical_pieces(pieces: list[tuple[str, float]], char_counts: dict[str, int]) -> list[tuple[str, float]]:
    """The trainer's pieces with run-independent scores and order (module docstring)."""
    scores = dict(pieces)
    added = _added_characters(pieces)
    # The added characters' penalties, as the trainer adds them, in a fixed order: the
    # rarest first (ties: lower code point).
    penalty = 0.0
    for ch in sorted(added, key=lambda ch: (char_counts.get(ch, 0), ch)):
        scores[ch] = added[ch] + penalty
        penalty += PENALTY_STEP
    rounded = [(piece, round(score, SCORE_DECIMALS)) for piece, score in scores.items()]
    return sorted(rounded, key=lambda item: (-item[1], item[0]))


def _added_characters(pieces: list[tuple[str, float]]) -> dict[str, float]:
    """character -> the trainer's minimum score, for the characters it added at the end:
    single characters whose scores are exactly min, min + step, min + 2 steps, ... (min
    is the lowest score: the first added character's). Found in that order, each score
    held by exactly one character; an EM score equal to one of these to the last bit is
    not to be expected, and would only join the reordering."""
    if not pieces:
        return {}
    base = min(score for _, score in pieces)
    by_score: dict[float, list[str]] = {}
    for piece, score in pieces:
        if len(piece) == 1:
            by_score.setdefault(score, []).append(piece)
    added, penalty = {}, 0.0
    while len(by_score.get(base + penalty, ())) == 1:
        added[by_score[base + penalty][0]] = base
        penalty += PENALTY_STEP
    return added
