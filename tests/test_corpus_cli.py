"""bertprep.cli.options: the shared corpus options and the SIZE type, through Click."""
from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from bertprep.cli.options import SIZE, corpus_options, corpus_spec_from_options, parse_size
from bertprep.corpus import CorpusSpec, MixSource


@click.command()
@corpus_options
@click.option("--sample-bytes", type=SIZE, help="A size.")
def probe(inputs, text_field, dataset, dataset_config, split, sentences, document_separator, mix, sample_bytes):
    """Print the CorpusSpec the options make."""
    spec = corpus_spec_from_options(inputs, text_field, dataset, dataset_config, split, sentences,
                                    document_separator, mix)
    click.echo(repr(spec))
    click.echo(repr(sample_bytes))


def invoke(*args):
    return CliRunner().invoke(probe, list(args))


def test_inputs_and_defaults():
    result = invoke("a.txt", "dir/", "*.jsonl")
    assert result.exit_code == 0, result.output
    assert result.output == repr(CorpusSpec(paths=("a.txt", "dir/", "*.jsonl"))) + "\nNone\n"


def test_every_option():
    result = invoke(
        "--text-field", "body", "--dataset", "wikitext", "--dataset-config", "wikitext-2-raw-v1",
        "--split", "validation", "--sentences", "prose", "--document-separator", "^CHAPTER ",
        "--sample-bytes", "1.5GB",
    )
    assert result.exit_code == 0, result.output
    expected = CorpusSpec(
        text_field="body", dataset="wikitext", dataset_config="wikitext-2-raw-v1", split="validation", sentences="prose",
        document_separator="^CHAPTER ",
    )
    assert result.output == f"{expected!r}\n1500000000\n"


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "Error: give at least one INPUT file or directory, or --dataset"),
        (["a.txt", "--dataset-config", "x"], "Error: --dataset-config only applies with --dataset"),
        (["a.txt", "--sentences", "words"], "Error: Invalid value for '--sentences': 'words' is not one of 'lines', 'split', 'prose'."),
        (["a.txt", "--document-separator", "(CHAPTER"],
         "Error: --document-separator: '(CHAPTER' is not a valid regular expression (missing ), unterminated subpattern at position 0)"),
        (["a.txt", "--document-separator", "^"],
         "Error: --document-separator: '^' matches an empty line, so it would match every line"),
        (["a.txt", "--sample-bytes", "5 parsecs"], "Error: Invalid value for '--sample-bytes': '5 parsecs' is not a size: use bytes or a unit, e.g. 500MB, 1.5GB, 20MiB"),
        # --mix: malformed, bad weights, duplicates, and what it cannot be combined with
        (["--mix", "ko/petitions"], "Error: Invalid value for '--mix': 'ko/petitions' is not NAME=PATH[:WEIGHT] (e.g. ko=petitions/*:0.7)"),
        (["--mix", "ko=p/*:lots"], "Error: Invalid value for '--mix': ko: weight 'lots' is not a number"),
        (["--mix", "ko=p/*:1,,en=w/*:1"], "Error: Invalid value for '--mix': empty entry in 'ko=p/*:1,,en=w/*:1'; expected NAME=PATH[:WEIGHT],..."),
        (["--mix", "k o=p/*"], "Error: Invalid value for '--mix': source name 'k o' must be letters, digits, '_', '.' or '-'"),
        (["--mix", "ko=p/*:0,en=w/*:1"], "Error: --mix ko: weight 0 must be a number > 0"),
        (["--mix", "ko=p/*:-0.5"], "Error: --mix ko: weight -0.5 must be a number > 0"),
        (["--mix", "ko=p/*:1", "--mix", "ko=w/*:1"], "Error: --mix: source 'ko' is named twice"),
        (["--mix", "ko=p/*:1,en=w/*"], "Error: --mix: en without a weight; give every source one, or none (then --sampling-temperature decides, 1 by default)"),
        (["--mix", "ko=p/*:1", "--sampling-temperature", "0.3"], "Error: --mix: give weights or --sampling-temperature, not both (weighted: ko)"),
        (["--mix", "ko=p/*", "--sampling-temperature", "-1"], "Error: --sampling-temperature: -1.0 must be a number >= 0"),
        (["a.txt", "--sampling-temperature", "0.3"], "Error: --sampling-temperature only applies with --mix"),
        (["a.txt", "--mix", "ko=p/*:1"], "Error: --mix names the inputs: give them there, not also as INPUT or --dataset"),
    ],
)
def test_usage_errors(args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == message


def test_mix_options():
    """--mix given twice, weights after the last ':', a URL's ':' kept in its path."""
    result = invoke("--mix", "ko=petitions/*:0.7", "--mix", "en=wiki/*:0.3,web=s3://bucket/crawl/*:2",
                    "--mix-seed", "7")
    assert result.exit_code == 0, result.output
    expected = CorpusSpec(mix=(MixSource("ko", "petitions/*", 0.7), MixSource("en", "wiki/*", 0.3),
                               MixSource("web", "s3://bucket/crawl/*", 2.0)), mix_seed=7)
    assert result.output == f"{expected!r}\nNone\n"
    result = invoke("--mix", "ko=petitions/*,en=s3://bucket/wiki/*", "--sampling-temperature", "0.3")
    assert result.exit_code == 0, result.output
    expected = CorpusSpec(mix=(MixSource("ko", "petitions/*"), MixSource("en", "s3://bucket/wiki/*")),
                          sampling_temperature=0.3)
    assert result.output == f"{expected!r}\nNone\n"


def test_help_text_on_every_option():
    result = invoke("--help")
    assert result.exit_code == 0
    assert "Usage: probe [OPTIONS] INPUT..." in result.output
    for option in ("--text-field", "--dataset ", "--dataset-config", "--split", "--sentences [lines|split|prose]", "--document-separator REGEX",
                   "--mix NAME=PATH[:WEIGHT],...", "--sampling-temperature T", "--mix-seed"):
        assert option in result.output
    assert all(param.help for param in probe.params if isinstance(param, click.Option))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("123", 123), ("0", 0), (42, 42), ("10KB", 10_000), ("10kb", 10_000), ("10K", 10_000),
        ("1.5GB", 1_500_000_000), ("500MB", 500_000_000), ("20MiB", 20 * 2**20), ("2 KiB", 2048),
        ("1TB", 10**12), ("1TiB", 2**40), ("0.5B", 0), (".5KB", 500),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "-5MB", "5 parsecs", "1e3", "1,000", -1, "5MBs"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)
