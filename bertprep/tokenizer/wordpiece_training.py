"""Deterministic WordPiece training: same corpus + config => byte-identical files.

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

import sys

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from bertprep.tokenizer.alphabet import alphabet_for_vocabulary, normalized_char_counts, raw_char_counts
from bertprep.tokenizer.files import build_tokenizer
from bertprep.tokenizer.guards import LongWords, train_interruptibly
from bertprep.tokenizer.scripts import Normalisation, bert_normalizer
from bertprep.tokenizer.training_config import TokenizerTrainingConfig, TrainedModel


def train_wordpiece(train_path, config: TokenizerTrainingConfig, norm: Normalisation, progress: bool) -> TrainedModel:
    """BERT's WordPiece tokenizer trained on the lines of `train_path` (which loses its
    words too long to encode)."""
    normalizer, pre_tokenizer = bert_normalizer(norm.lowercase, norm.strip_accents), pre_tokenizers.BertPreTokenizer()
    # Words too long to encode go before anything is counted (guards.py); held-out
    # text keeps them, as their [UNK]s count in its [UNK] rate.
    long_words = LongWords(config.max_chars_per_word, norm.lowercase, normalizer, pre_tokenizer,
                           strip_accents=norm.strip_accents)
    filtered = long_words.filter_file(train_path)
    warnings = [long_words.warning()] if long_words.dropped else []
    char_counts = normalized_char_counts(raw_char_counts(train_path), normalizer, pre_tokenizer)
    alphabet, needed, fit_warnings = alphabet_for_vocabulary(char_counts, norm.scripts, config,
                                                             len(config.initial_specials()), normalizer, pre_tokenizer)
    vocab = _run_trainer(train_path, config, alphabet.characters, alphabet.continuing, normalizer, pre_tokenizer,
                         progress)
    loaded = build_tokenizer(vocab, norm.lowercase, config.max_chars_per_word, strip_accents=norm.strip_accents)
    return TrainedModel(tokenizer=loaded.tokenizer, vocab_size=len(vocab), unk_id=loaded.special.unk,
                        save=loaded.save, fingerprint=loaded.fingerprint(), alphabet=alphabet,
                        vocab_size_for_repertoires=needed, training_bytes=filtered,
                        warnings=warnings + fit_warnings)


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
