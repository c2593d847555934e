"""`bertprep build-shards` and `bertprep inspect`."""
from __future__ import annotations

import json

import click

from bertprep.builder import SHARD_ROWS, BuildConfig, build_shards, default_shard_rows
from bertprep.cli.kit import progress_option, user_errors
from bertprep.cli.options import SIZE, corpus_options, corpus_spec_from_options, size_text
from bertprep.corpus import mix_summary, plural
from bertprep.executors import default_workers
from bertprep.shards import decode_samples, format_report, measure, sample_rows
from bertprep.shards import pairing
from bertprep.instances import LABEL_NAMES

DEFAULTS = BuildConfig(workers=1)


@click.command("build-shards")
@corpus_options
@click.option("--tokenizer", "tokenizer_path", required=True, type=click.Path(exists=True), help="A TOKDIR, a tokenizer.json or a bare vocab.txt (e.g. Google's), or a released model's tokenizer directory or file (byte-level BPE as RoBERTa's and ModernBERT's, SentencePiece as DeBERTa-v3's): rows take its own templates, mask token and words.")
@click.option("--out", "out", required=True, type=click.Path(), help="Output directory for the shards, manifest and tokenizer files.")
@click.option("--max-seq-length", type=int, default=DEFAULTS.max_seq_length, show_default=True, help="Longest row, the template's special tokens ([CLS] A [SEP] B [SEP]) included, from 8 to 8,192 (BERT: 128 in phase 1, 512 in phase 2, its limit; a ModernBERT-style encoder takes up to 8,192).")
@click.option("--max-predictions-per-seq", type=int, default=DEFAULTS.max_predictions_per_seq, show_default=True, help="Most masked positions in a row, a fixed cap as in Google's script (BERT: 20 at 128, 80 at 512). It does not grow with --max-seq-length: for long rows pass about max-seq-length x masked-lm-prob (154 at 1,024, 1,229 at 8,192), or masking stays far below --masked-lm-prob (the build warns).")
@click.option("--masked-lm-prob", type=float, default=DEFAULTS.masked_lm_prob, show_default=True, help="Share of tokens to mask and predict.")
@click.option("--short-seq-prob", type=float, default=DEFAULTS.short_seq_prob, show_default=True, help="Share of documents whose target length is drawn uniformly from [2, max].")
@click.option("--dupe-factor", type=int, default=DEFAULTS.dupe_factor, show_default=True, help="Passes over the corpus, each with its own pairs and masks.")
@click.option("--whole-word-mask/--no-whole-word-mask", default=False, show_default=True, help="Mask all pieces of a word together (WordPiece: a word and its ## pieces; other tokenizers: the words their pre-tokenizer splits).")
@click.option("--pairs", type=click.Choice(["nsp", "sop", "none"]), default=DEFAULTS.pairs, show_default=True, help="Row layout: nsp = BERT's next-sentence pairs (label 1 = random B); sop = ALBERT's sentence-order pairs (consecutive segments, label 1 = swapped); none = RoBERTa's FULL-SENTENCES (sentences packed to the length across documents, one segment, label 0).")
@click.option("--random-from-whole-vocab", is_flag=True, help="Draw random replacements from the whole vocabulary, specials included, as Google's script does (default: ordinary tokens only).")
@click.option("--seed", type=int, default=DEFAULTS.seed, show_default=True, help="Random seed; same inputs, options and seed give byte-identical shards.")
@click.option("--shard-rows", type=int, default=None, help=f"Rows per output shard [default: {SHARD_ROWS:,}; past --max-seq-length 512, fewer, so that a shard holds at most {SHARD_ROWS:,} x 512 tokens: {default_shard_rows(8192):,} rows at 8,192].")
@click.option("--num-shards", type=int, default=None, help="Write exactly this many shards instead (overrides --shard-rows).")
@click.option("--partition-size", "partition_bytes", type=SIZE, default=size_text(DEFAULTS.partition_bytes), show_default=True, help="Text per partition, the unit of work and caching; random-next B comes from the same partition. Changes the output.")
@click.option("--workers", type=int, default=None, help="Worker processes [default: all cores]. Does not change the output.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help="Where tokenized partitions are cached [default: ~/.cache/bertprep/tokenized].")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True, help="Where the tasks run: local = a process pool of --workers; ray = a Ray cluster (needs the ray extra). Does not change the output.")
@click.option("--ray-address", default=None, metavar="auto|HOST:PORT", help="With --executor ray: join this cluster (auto = the one this node belongs to) [default: start a local Ray of --workers CPUs for the run].")
@click.option("--engine", type=click.Choice(["auto", "nanotoken", "tokenizers"]), default="auto", show_default=True, help="Bulk encoder; nanotoken output is spot-checked against tokenizers. Does not change the output.")
@click.option("--overwrite", is_flag=True, help="Replace an existing OUT (only once the new build is complete).")
@progress_option
@user_errors
def build_shards_command(inputs, text_field, dataset, dataset_config, split, sentences, document_separator, mix, tokenizer_path, out, workers, overwrite, progress, **options):
    """Build masked next-sentence-prediction pairs (or --pairs sop|none) into Arrow shards.

    Reads INPUT... (text with a sentence per line and a blank line between documents,
    compressed text, JSONL/Parquet with --text-field, or --dataset), makes
    [CLS] A [SEP] B [SEP] pairs as Google's create_pretraining_data.py does (--pairs sop:
    ALBERT's sentence-order pairs; --pairs none: RoBERTa's FULL-SENTENCES rows), applies
    static masking, shuffles globally and writes Arrow shards that
    datasets.load_from_disk(OUT) opens. Rerunning an interrupted build resumes it.

    \b
    Example:
      bertprep build-shards corpus.txt --tokenizer tok/ --out shards/ --dupe-factor 5
    """
    spec = corpus_spec_from_options(inputs, text_field, dataset, dataset_config, split, sentences, document_separator, mix)
    config = BuildConfig(workers=workers if workers is not None else default_workers(), **options)
    result = build_shards(spec, tokenizer_path, out, config, overwrite=overwrite, progress=progress)
    m = result.manifest
    if result.already_complete:
        click.echo(f"{result.out}: already complete ({m['totals']['rows']:,} rows from the same inputs, options, seed "
                   "and tokenizer); nothing to do")
        return
    stats, totals = m["statistics"], m["totals"]
    mb = result.text_bytes / 1e6
    click.echo(
        f"Wrote {totals['rows']:,} rows ({totals['tokens']:,} tokens) in {len(m['shards'])} shards to {result.out} "
        f"in {result.seconds:.1f} s ({mb / result.seconds:.1f} MB/s of text, {totals['rows'] / result.seconds:,.0f} rows/s)"
    )
    # One size, as read: the text's own size differs a little (line ends, stripped spaces).
    corpus = f"  corpus: {result.read_stats.summary()}"
    if totals["documents"] != result.read_stats.documents:
        corpus += f"; {plural(totals['documents'], 'document')} with tokens"
    click.echo(corpus)
    if "mix" in m:
        click.echo(f"  {mix_summary(m['mix'])}")
    if result.executor is not None:
        for line in result.executor.summary().splitlines():
            click.echo(f"  {line}")
    name = LABEL_NAMES.get(pairing(m))  # none for FULL-SENTENCES rows
    label = f"{name} {stats['next_sentence_random_fraction']:.3f}; " if name else ""
    click.echo(
        f"  masked {stats['mask_rate']:.4f} of tokens: [MASK] {stats['share_mask']:.3f} / kept {stats['share_kept']:.3f} / "
        f"random {stats['share_random']:.3f}; {label}mean length {stats['mean_length']:.1f}"
    )


@click.command("inspect")
@click.argument("out", type=click.Path(exists=True, file_okay=False))
@click.option("--show", type=click.IntRange(min=0), default=0, metavar="N", help="Decode the first N rows, masked positions as [shown->original].")
@click.option("--json", "as_json", is_flag=True, help="Print the measurements as JSON (with --show, the rows' ids and tokens).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, metavar="FILE.png",
              help="Also draw the length and masked-per-row histograms and the [MASK]/random/kept split (needs the plot extra).")
@click.option("--overwrite", is_flag=True, help="Replace an existing --plot file.")
@user_errors
def inspect_command(out, show, as_json, plot_path, overwrite):
    """Summarise a shard directory, re-measuring its statistics from the rows.

    Prints the manifest summary, then rows, tokens, the mask rate with a 95% interval,
    the [MASK]/kept/random split, the pair label's share (NSP's random B, SOP's swapped)
    and a length histogram.

    \b
    Example:
      bertprep inspect shards/ --show 3
    """
    report = measure(out)
    if plot_path:
        from bertprep.shards import plot_shards

        click.echo(f"wrote {plot_shards(out, report, plot_path, overwrite=overwrite)}", err=as_json)
    if as_json:
        if show:
            report["samples"] = sample_rows(out, show)
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(format_report(report))
    if show:
        click.echo("samples:")
        for line in decode_samples(out, show):
            click.echo(line)
