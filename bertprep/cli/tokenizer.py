"""Commands of bertprep (registered in bertprep.cli): train-tokenizer, extend-tokenizer, encode."""
from __future__ import annotations

import io
import itertools
import re
import sys

import click

from bertprep.cli.kit import progress_option, user_errors
from bertprep.cli.options import SIZE, corpus_options, corpus_spec_from_options
from bertprep.corpus import ReadStats, format_size, iter_documents, mix_summary, plural
from bertprep.corpus import decode_utf8
from bertprep.tokenizer import load_tokenizer
from bertprep.tokenizer import ExtensionConfig, TokenizerTrainingConfig, extend_tokenizer, train_tokenizer

DEFAULTS = TokenizerTrainingConfig()
ENCODE_BATCH_LINES = 4096


@click.command("train-tokenizer")
@corpus_options
@click.option("--out", "out_dir", required=True, metavar="TOKDIR", type=click.Path(file_okay=False),
              help="Directory to write vocab.txt (WordPiece only), tokenizer.json, tokenizer_config.json into.")
@click.option("--model", type=click.Choice(TokenizerTrainingConfig.MODELS), default=DEFAULTS.model, show_default=True,
              help="wordpiece: BERT's; bpe: byte-level BPE as RoBERTa and ModernBERT (any text encodes, no [UNK]; "
                   "they are --cased); unigram: SentencePiece's Unigram (as XLM-R, DeBERTa-v3). All three get the "
                   "same normalisation, special tokens and templates ([CLS] A [SEP] B [SEP], [PAD] = 0).")
@click.option("--vocab-size", type=click.IntRange(min=6), default=DEFAULTS.vocab_size, show_default=True,
              help="Exact number of vocabulary entries, specials included.")
@click.option("--lowercase/--cased", default=DEFAULTS.lowercase, show_default=True,
              help="Lower-case the text (BERT-uncased) or keep its case.")
@click.option("--strip-accents/--no-strip-accents", default=None,
              help="Strip accents (NFD, then delete combining marks), as BERT-uncased does [default: auto: only "
                   "when lower-casing text that is almost all Latin, Greek or Cyrillic with few accents; stripping "
                   "splits Hangul into jamo and deletes letters of Devanagari, Thai, Arabic, Vietnamese].")
@click.option("--min-frequency", type=click.IntRange(min=0), default=DEFAULTS.min_frequency, show_default=True,
              help="A merge needs a pair of pieces seen at least this often (wordpiece, bpe).")
@click.option("--character-coverage", type=click.FloatRange(0, 1, min_open=True), default=None,
              help=f"Keep the most frequent characters covering this share of character occurrences as the "
                   f"alphabet, and never fewer than the {DEFAULTS.min_alphabet:,} most frequent; the rest become "
                   f"[UNK] [default: {DEFAULTS.character_coverage}] (wordpiece, unigram).")
@click.option("--limit-alphabet", type=click.IntRange(min=1), default=None, metavar="N",
              help="Instead of --character-coverage: keep exactly the N most frequent characters (wordpiece, unigram).")
@click.option("--complete-scripts/--sample-alphabet", default=DEFAULTS.complete_scripts, show_default=True,
              help="Also give a token to the everyday characters of each main script that the sample lacks "
                   "(Hangul: KS X 1001's 2,350 syllables and the compatibility jamo; Indic, Thai, Arabic, Hebrew, "
                   "kana: their Unicode block), or keep the sample's characters only (wordpiece, unigram).")
@click.option("--unused", type=click.IntRange(min=0), default=DEFAULTS.unused, show_default=True, metavar="N",
              help="Reserve [unused0]..[unused{N-1}] right after [PAD] (Google's uncased vocab: 99).")
@click.option("--max-chars-per-word", type=click.IntRange(min=1), default=DEFAULTS.max_chars_per_word,
              show_default=True, help="Longer words encode as [UNK] (200 as Google's tokenizer; wordpiece only).")
@click.option("--sample-bytes", type=SIZE, default=None, metavar="SIZE",
              help="Train on a deterministic sample of about this much text, e.g. 500MB "
                   "[default: the whole corpus].")
@click.option("--heldout-fraction", type=click.FloatRange(0, 1, max_open=True),
              default=DEFAULTS.heldout_fraction, show_default=True,
              help="Share of documents (chosen by content hash) kept out of training to measure [UNK] rate.")
@click.option("--overwrite", is_flag=True, help="Replace TOKDIR if it exists and is not empty.")
@progress_option
@user_errors
def train_tokenizer_command(inputs, text_field, dataset, dataset_config, split, sentences,
                            document_separator, mix, out_dir, model,
                            vocab_size, lowercase, strip_accents, min_frequency, character_coverage,
                            limit_alphabet, complete_scripts, unused, max_chars_per_word, sample_bytes,
                            heldout_fraction, overwrite, progress):
    """Train a BERT WordPiece vocabulary (or byte-level BPE, or Unigram: --model) on
    INPUT... and write it to TOKDIR.

    Training is deterministic: the same corpus and options give byte-identical files.
    The vocabulary is [PAD], the --unused slots, [UNK] [CLS] [SEP] [MASK], the alphabet
    (byte-level BPE: the 256 bytes), then the learned pieces; it has exactly --vocab-size
    entries unless the corpus is too small (then a warning says so). The normalisation
    (lower-casing, accent stripping) and the corpus's scripts are reported before
    training starts. An option that shapes another model only is refused.

    \b
    Example:
      bertprep train-tokenizer wiki/ books.txt.gz --out tok/ --vocab-size 30522 --unused 99
      bertprep train-tokenizer wiki/ --out tok-bpe/ --model bpe --cased
    """
    spec = corpus_spec_from_options(inputs, text_field, dataset, dataset_config, split, sentences,
                                    document_separator, mix)
    if character_coverage is not None and limit_alphabet is not None:
        raise click.UsageError("--character-coverage and --limit-alphabet both choose the alphabet: give one")
    _refuse_options_of_other_models(model)
    config = TokenizerTrainingConfig(
        model=model,
        vocab_size=vocab_size, lowercase=lowercase, strip_accents=strip_accents, min_frequency=min_frequency,
        character_coverage=DEFAULTS.character_coverage if character_coverage is None else character_coverage,
        limit_alphabet=limit_alphabet, complete_scripts=complete_scripts, unused=unused,
        max_chars_per_word=max_chars_per_word,
        sample_bytes=sample_bytes, heldout_fraction=heldout_fraction,
    )
    stats = ReadStats()

    def read_and_decided(normalisation):
        # Reported before the trainer runs, so a wrong choice can be stopped early.
        click.echo(f"read {stats.summary()}")
        for line in normalisation.summary_lines():
            click.echo(line)

    report = train_tokenizer(iter_documents(spec, stats), config, out_dir, overwrite=overwrite,
                             progress=progress, on_normalisation=read_and_decided)
    if stats.mix is not None:
        click.echo(mix_summary(stats.mix.record()))
    if report.training_bytes != report.corpus_bytes:
        click.echo(f"trained on {format_size(report.training_bytes)} "
                   f"({report.training_documents:,} documents)")
    alphabet = "256 bytes" if model == "bpe" else f"{report.alphabet_size:,} characters"
    click.echo(f"vocabulary: {report.vocab_size:,} entries (requested {report.requested_vocab_size:,}), "
               f"alphabet {alphabet} -> {out_dir}")
    click.echo(_BYTE_ALPHABET_LINE if model == "bpe" else _alphabet_line(report))
    if report.unk_rate is not None:
        click.echo(f"[UNK] rate {report.unk_rate:.4%}, {report.tokens_per_word:.3f} tokens/word "
                   f"on {report.heldout_words:,} {report.measured_on} words")
    click.echo(f"{report.seconds:,.1f} s, {report.mb_per_second:,.2f} MB/s")
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)


@click.command("extend-tokenizer")
@click.argument("base", metavar="BASE_DIR", type=click.Path(exists=True))
@corpus_options
@click.option("--add", required=True, type=click.IntRange(min=1), metavar="N",
              help="How many tokens to add: those that save the most pieces on the corpus.")
@click.option("--out", "out_dir", required=True, metavar="NEWTOK", type=click.Path(file_okay=False),
              help="Directory to write the extended tokenizer into (the base's files, extended).")
@click.option("--reuse-unused", is_flag=True,
              help="Put new tokens in the base's reserved [unusedK] slots first (BERT's vocab.txt, ModernBERT's), "
                   "which keep their ids; the rest go after the base's last id.")
@click.option("--min-frequency", type=click.IntRange(min=0), default=2, show_default=True,
              help="A merge needs a pair of pieces seen at least this often (WordPiece, BPE).")
@click.option("--overwrite", is_flag=True, help="Replace NEWTOK if it exists and is not empty.")
@progress_option
@user_errors
def extend_tokenizer_command(base, inputs, text_field, dataset, dataset_config, split, sentences, document_separator,
                             mix, add, out_dir, reuse_unused, min_frequency, overwrite, progress):
    """Extend the tokenizer in BASE_DIR with the N tokens that save the most pieces on
    INPUT..., keeping every base id, and write it to NEWTOK.

    WordPiece gains whole words and ## pieces (merges continued from the base's own
    segmentation of the corpus's words), BPE merges continued the same way, appended after
    the base's, Unigram pieces with their scores. Tokens per word on the corpus are measured
    with the base and with the result. A model trained with the base grows its
    vocabulary for NEWTOK in `bertmodel pretrain --init-from BASE` on shards built with
    NEWTOK. The same inputs give byte-identical files.

    \b
    Example:
      bertprep extend-tokenizer minilm/ petitions/ --text-field content --sentences split --add 2000 --out tok-ko/
      bertprep extend-tokenizer roberta-base/ domain.txt --add 1000 --out tok-domain/
    """
    spec = corpus_spec_from_options(inputs, text_field, dataset, dataset_config, split, sentences,
                                    document_separator, mix)
    stats = ReadStats()
    report = extend_tokenizer(base, iter_documents(spec, stats), ExtensionConfig(add, reuse_unused, min_frequency),
                              out_dir, overwrite=overwrite, progress=progress)
    click.echo(f"read {stats.summary()}")
    if stats.mix is not None:
        click.echo(mix_summary(stats.mix.record()))
    where = [f"{report.reused_slots:,} in [unused] slots"] if report.reused_slots else []
    if report.characters:
        where.append(f"{report.characters:,} characters the base lacked")
    click.echo(f"added {len(report.added):,} tokens to the {report.kind} tokenizer of {report.base_vocab_size:,}"
               f"{' (' + '; '.join(where) + ')' if where else ''}: {report.vocab_size:,} tokens -> {out_dir}")
    before, after = report.tokens_per_word_before, report.tokens_per_word_after
    if before and after:
        # [UNK]s per word rather than per token: with fewer tokens an unchanged count is a higher share
        unk_before, unk_after = 1000 * report.unk_rate_before * before, 1000 * report.unk_rate_after * after
        click.echo(f"tokens per word on the corpus: {before:.3f} -> {after:.3f} ({1 - after / before:.1%} fewer) "
                   f"over {report.words:,} words; [UNK] per 1,000 words {unk_before:,.2f} -> {unk_after:,.2f}")
    click.echo(f"new tokens: {report.shown_tokens()}")
    click.echo(f"{report.seconds:,.1f} s")
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)


_BYTE_ALPHABET_LINE = "alphabet: the 256 bytes: every text encodes, with no [UNK]"


def _refuse_options_of_other_models(model: str) -> None:
    """An option given on the command line that `model` has no use for is refused (the
    library refuses only values other than the default)."""
    context = click.get_current_context()
    for name, message in TokenizerTrainingConfig.refused_options(model).items():
        source = context.get_parameter_source(name)
        if source is not None and source != click.core.ParameterSource.DEFAULT:
            raise click.UsageError(message)


def _alphabet_line(report) -> str:
    """What the alphabet covers: the sample's occurrences, and the scripts' repertoires."""
    line = (f"alphabet: {1 - report.alphabet_dropped_share:.3%} of the sample's character occurrences "
            f"({report.alphabet_dropped:,} rarer characters left out: [UNK])")
    added = ", ".join(f"{n:,} {script}" for script, n in report.alphabet_completed.items())
    if added:
        line += f"; everyday characters the sample lacks added: {added}"
    if report.alphabet_not_completed:
        need = "they need" if len(report.alphabet_not_completed) > 1 else "it needs"
        line += (f"; no room for the repertoire of {', '.join(report.alphabet_not_completed)}: {need} "
                 f"--vocab-size >= {report.vocab_size_for_repertoires:,} for this sample")
    return line


@click.command("encode")
@click.option("--tokenizer", "tokenizer_path", required=True, metavar="TOK", type=click.Path(),
              help="A TOKDIR, a tokenizer.json, a bare vocab.txt (e.g. Google's), or a released model's "
                   "tokenizer directory (byte-level BPE, SentencePiece).")
@click.argument("texts", metavar="[TEXT]...", nargs=-1)
@click.option("--ids", is_flag=True, help="Print token ids instead of tokens.")
@click.option("--special", is_flag=True,
              help="Add the tokenizer's special tokens around each input ([CLS] A [SEP]; <s> A </s>).")
@click.option("--pair", is_flag=True,
              help="Each input is two texts separated by a tab, encoded as a pair (A and B).")
@click.option("--lowercase/--cased", default=None,
              help="Override the tokenizer's casing [default: from the files; for a bare vocab.txt, "
                   "uncased unless a token has upper-case letters].")
@click.option("--strip-accents/--no-strip-accents", default=None,
              help="Override the tokenizer's accent stripping [default: from the files; for a bare vocab.txt, "
                   "stripped when uncased, as Google's tokenizer].")
@user_errors
def encode_command(tokenizer_path, texts, ids, special, pair, lowercase, strip_accents):
    """Tokenize each TEXT (or each line of stdin when no TEXT is given) and print the
    tokens, space-separated, one line per input.

    \b
    Example:
      bertprep encode --tokenizer tok/ "Hello, world!"
      cat corpus.txt | bertprep encode --tokenizer vocab.txt --ids
      printf 'A text\tits pair\n' | bertprep encode --tokenizer roberta-base/ --ids --special --pair
    """
    tok = load_tokenizer(tokenizer_path, lowercase=lowercase, strip_accents=strip_accents)
    if texts:
        raw, what, where = iter(texts), "argument", ""
    else:
        stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape")
        raw, what, where = (line.rstrip("\r\n") for line in stdin), "line", " of stdin"
    replaced = _Replaced()
    lines = (replaced.clean(number, text) for number, text in enumerate(raw, 1))
    while batch := list(itertools.islice(lines, ENCODE_BATCH_LINES)):
        if pair:
            batch = [tuple(text.split("\t", 1)) if "\t" in text else (text, "") for text in batch]
        for encoding in tok.tokenizer.encode_batch(batch, add_special_tokens=special):
            click.echo(" ".join(map(str, encoding.ids)) if ids else " ".join(encoding.tokens))
    if replaced.count:
        click.echo(f"warning: {replaced.describe(what)}{where}", err=True)


_SURROGATE = re.compile("[\ud800-\udfff]")


class _Replaced:
    """Undecodable bytes in the input, replaced with U+FFFD and counted, as the corpus
    readers do. Arguments and stdin arrive with such bytes as lone surrogates (Python's
    surrogateescape), which the tokenizer cannot take."""

    def __init__(self):
        self.count = 0
        self.inputs: list[int] = []  # numbers of the inputs that had any

    def clean(self, number: int, text: str) -> str:
        if not _SURROGATE.search(text):
            return text
        try:
            data = text.encode("utf-8", "surrogateescape")  # the bytes as they came
        except UnicodeEncodeError:  # a surrogate no decoder made: keep it as invalid bytes
            data = text.encode("utf-8", "surrogatepass")
        text, invalid = decode_utf8(data)
        self.count += invalid
        self.inputs.append(number)
        return text

    def describe(self, what: str) -> str:
        """"2 invalid byte sequences replaced with U+FFFD in lines 3, 8" (5 named at most)."""
        named = ", ".join(map(str, self.inputs[:5]))
        if len(self.inputs) > 5:
            named += f" and {len(self.inputs) - 5:,} more"
        return (f"{plural(self.count, 'invalid byte sequence')} replaced with U+FFFD "
                f"in {what}{'' if len(self.inputs) == 1 else 's'} {named}")
