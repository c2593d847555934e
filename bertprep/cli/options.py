"""Click options shared by commands that read a corpus, and the SIZE parameter type.

    @main.command("train-tokenizer")
    @corpus_options
    def train_tokenizer(inputs, text_field, dataset, dataset_config, split, sentences, document_separator, mix, ...):
        spec = corpus_spec_from_options(inputs, text_field, dataset, dataset_config, split, sentences,
                                        document_separator, mix)

`mix` is the mix options (--mix, --sampling-temperature, --mix-seed) as one MixOptions.
"""
from __future__ import annotations

import functools
import re
from typing import NamedTuple

import click

from bertprep.corpus import SENTENCE_MODES, CorpusSpec, parse_mix
from bertprep.errors import BertprepError

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*")


def parse_size(text: str | int) -> int:
    """ "500MB" -> 500_000_000, "20MiB" -> 20_971_520, "1.5GB", "10KB", "123" (bytes).

    KB/MB/GB/TB (and K/M/G/T) are decimal, KiB/MiB/GiB/TiB binary; case is ignored.
    Raises ValueError for anything else.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"{text}: a size cannot be negative")
        return text
    match = _SIZE.fullmatch(str(text))
    unit = match and _UNITS.get(match.group(2).lower())
    if not unit:
        raise ValueError(f"{text!r} is not a size: use bytes or a unit, e.g. 500MB, 1.5GB, 20MiB")
    return round(float(match.group(1)) * unit)


def size_text(n_bytes: int) -> str:
    """The inverse of parse_size, in the largest unit that is exact: 8388608 -> "8MiB",
    500000000 -> "500MB", 1234 -> "1234"."""
    for unit in ("TiB", "TB", "GiB", "GB", "MiB", "MB", "KiB", "KB"):
        size = _UNITS[unit.lower()]
        if n_bytes >= size and n_bytes % size == 0:
            return f"{n_bytes // size}{unit}"
    return str(n_bytes)


class SizeParamType(click.ParamType):
    """A byte count written as 123, 10KB, 1.5GB or 20MiB."""

    name = "size"

    def convert(self, value, param, ctx):
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = SizeParamType()


class MixOptions(NamedTuple):
    """--mix (every value given, joined), --sampling-temperature and --mix-seed."""

    sources: tuple = ()
    temperature: float | None = None
    seed: int = 0


def corpus_options(fn):
    """Add INPUT... and the options that say how to read it (see bertprep.corpus.spec);
    the mix options reach the command as one `mix` argument (MixOptions)."""

    @functools.wraps(fn)
    def with_mix(*args, mix_sources, sampling_temperature, mix_seed, **kwargs):
        return fn(*args, mix=MixOptions(mix_sources, sampling_temperature, mix_seed), **kwargs)

    options = [
        click.argument("inputs", metavar="INPUT...", nargs=-1, type=click.Path()),
        click.option(
            "--text-field",
            metavar="NAME",
            help="Field holding the text in JSONL, Parquet and dataset inputs [default: text].",
        ),
        click.option(
            "--dataset",
            metavar="NAME|DIR",
            help="A Hugging Face dataset name (streamed) or a save_to_disk directory, read after any INPUT.",
        ),
        click.option("--dataset-config", metavar="NAME", help="Configuration of --dataset, e.g. wikitext-2-raw-v1."),
        click.option(
            "--split",
            metavar="NAME",
            help="Split of a dataset (--dataset, or a saved DatasetDict INPUT) [default: train].",
        ),
        click.option(
            "--sentences",
            type=click.Choice(SENTENCE_MODES),
            default="lines",
            show_default=True,
            help="lines: one sentence per line, blank line between documents (BERT's layout); "
            "split: each line is a paragraph, split into sentences by a rule-based splitter; "
            "prose: hard-wrapped books or articles, blank line between paragraphs, wrapped lines "
            "joined and split into sentences, a document per file.",
        ),
        click.option(
            "--document-separator",
            metavar="REGEX",
            help="A line matching REGEX (searched in the stripped line) ends a document and is dropped, "
            "e.g. '^CHAPTER ' or '^[*]{3} (START|END) OF' for Project Gutenberg books.",
        ),
        click.option(
            "--mix",
            "mix_sources",
            metavar="NAME=PATH[:WEIGHT],...",
            multiple=True,
            callback=_parse_mix_option,
            help="Instead of INPUT...: named sources (PATH a file, directory or glob), each sampled to its weight's "
            "share of the characters, e.g. 'ko=petitions/*:0.7,en=wiki/*:0.3'; a source over its natural share "
            "is repeated, one under it sampled. May be given more than once.",
        ),
        click.option(
            "--sampling-temperature",
            type=float,
            metavar="T",
            help="With a --mix without weights: shares proportional to size**T in characters (1: natural, "
            "0: equal; XLM-R 0.3, mmBERT 0.7 -> 0.5 -> 0.3) [default: 1].",
        ),
        click.option("--mix-seed", type=int, default=0, show_default=True,
                     help="Which documents a --mix keeps where it samples (the same in train-tokenizer and build-shards)."),
    ]
    for option in reversed(options):
        with_mix = option(with_mix)
    return with_mix


def _parse_mix_option(ctx, param, values):
    try:
        return tuple(source for value in values for source in parse_mix(value))
    except BertprepError as exc:
        raise click.BadParameter(str(exc).removeprefix("--mix").lstrip(": "), ctx, param) from None


def corpus_spec_from_options(
    inputs, text_field, dataset, dataset_config, split, sentences, document_separator=None, mix=MixOptions()
) -> CorpusSpec:
    """The CorpusSpec for corpus_options' values; click.UsageError for a bad combination."""
    if mix.sources and (inputs or dataset):
        raise click.UsageError("--mix names the inputs: give them there, not also as INPUT or --dataset")
    if not inputs and not dataset and not mix.sources:
        raise click.UsageError("give at least one INPUT file or directory, or --dataset")
    if dataset_config and not dataset:
        raise click.UsageError("--dataset-config only applies with --dataset")
    try:
        return CorpusSpec(
            paths=tuple(inputs),
            text_field=text_field,
            dataset=dataset,
            dataset_config=dataset_config,
            split=split,
            sentences=sentences or "lines",
            document_separator=document_separator or None,
            mix=mix.sources,
            sampling_temperature=mix.temperature,
            mix_seed=mix.seed,
        )
    except BertprepError as exc:  # a --document-separator that is no usable regex, a mix that cannot be sampled
        raise click.UsageError(str(exc)) from None
