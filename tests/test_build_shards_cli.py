"""build-shards and inspect as a user meets them: warnings, summaries, option checks."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from bertprep.cli import main
from bertprep.cli.options import parse_size, size_text
from bertprep.corpus import format_size
from bertprep.instances import MaskingConfig, cap_warnings
from shard_fixtures import SHARED_DATA, read_rows, write_corpus, write_vocab

WIKITEXT = SHARED_DATA / "wikitext-2-raw-train-head.txt"


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus.txt", documents=80)


@pytest.fixture
def vocab(tmp_path):
    return write_vocab(tmp_path / "vocab.txt")


def build_cli(tmp_path, *inputs, out="out", **options):
    args = ["build-shards", *map(str, inputs), "--out", str(tmp_path / out), "--quiet",
            "--cache-dir", str(tmp_path / "cache"), "--workers", "1", "--dupe-factor", "1"]
    for name, value in options.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return CliRunner().invoke(main, args)


def histogram(**rows_by_length) -> list[int]:
    counts = [0] * 513
    for length, rows in rows_by_length.items():
        counts[int(length.removeprefix("L"))] = rows
    return counts


def test_cap_warning_figures():
    # 512-token rows want round(512 * 0.15) = 77 predictions; a cap of 20 gives 20/512.
    [warning] = cap_warnings(histogram(L512=100), MaskingConfig(max_predictions_per_seq=20))
    assert warning == (
        "--max-predictions-per-seq 20 caps masking at 3.9% of tokens, well below --masked-lm-prob 0.15 "
        "(15.0% for these row lengths): raise --max-predictions-per-seq to 77 (rows of up to 512 tokens)"
    )
    # BERT's own settings never warn: 20 at 128 (round(19.2) = 19), 80 at 512.
    assert cap_warnings(histogram(L128=100, L40=30), MaskingConfig(20, 0.15)) == []
    assert cap_warnings(histogram(L512=100), MaskingConfig(80, 0.15)) == []
    # A cap that binds on a few long rows only keeps the rate within 10%: no warning.
    assert cap_warnings(histogram(L128=100, L200=2), MaskingConfig(20, 0.15)) == []
    assert cap_warnings([0] * 129, MaskingConfig()) == []


def test_build_warns_when_the_cap_bounds_the_mask_rate(corpus, vocab, tmp_path):
    result = build_cli(tmp_path, corpus, tokenizer=vocab, max_predictions_per_seq=5)
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    lengths = np.flatnonzero(manifest["statistics"]["length_histogram"])
    observed = manifest["statistics"]["mask_rate"]  # measured from the rows written
    assert observed < 0.1
    [warning] = [line for line in result.stderr.splitlines() if "--max-predictions-per-seq" in line]
    assert warning == (
        f"warning: --max-predictions-per-seq 5 caps masking at {observed:.1%} of tokens, well below "
        f"--masked-lm-prob 0.15 (15.0% for these row lengths): raise --max-predictions-per-seq to "
        f"{round(lengths.max() * 0.15)} (rows of up to {lengths.max()} tokens)"
    )
    result = build_cli(tmp_path, corpus, tokenizer=vocab, out="default")
    assert result.exit_code == 0, result.output
    assert "--max-predictions-per-seq" not in result.stderr


def test_corpus_summary_gives_one_size(tmp_path, vocab):
    corpus = write_corpus(tmp_path / "big.txt", documents=400)  # over 10 kB: a size in kB
    result = build_cli(tmp_path, corpus, tokenizer=vocab)
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    totals = manifest["totals"]
    assert manifest["options"]["partition_bytes"] == 8 * 2**20  # the default, given as "8MiB"
    [line] = [line for line in result.stdout.splitlines() if line.startswith("  corpus:")]
    assert line == (f"  corpus: 1 file, {format_size(corpus.stat().st_size)}, {totals['documents']:,} documents, "
                    f"{totals['sentences']:,} sentences")
    assert format_size(corpus.stat().st_size).endswith(" kB")


def test_inspect_json_samples_and_show_range(corpus, vocab, tmp_path):
    assert build_cli(tmp_path, corpus, tokenizer=vocab).exit_code == 0
    out = tmp_path / "out"
    runner = CliRunner()
    result = runner.invoke(main, ["inspect", str(out), "--json", "--show", "2"])
    assert result.exit_code == 0, result.output
    samples = json.loads(result.stdout)["samples"]
    words = vocab.read_text(encoding="utf-8").splitlines()
    assert [s["row"] for s in samples] == [0, 1]
    for sample, row in zip(samples, read_rows(out)[:2]):  # the first shard's first rows
        assert {k: sample[k] for k in row} == row
        assert sample["tokens"] == [words[i] for i in row["input_ids"]]
        assert sample["masked_lm_tokens"] == [words[i] for i in row["masked_lm_ids"]]
        assert sample["tokens"][0] == "[CLS]" and "[MASK]" in sample["tokens"]
    result = runner.invoke(main, ["inspect", str(out), "--show", "-1"])
    assert result.exit_code == 2
    assert result.stderr == "Error: Invalid value for '--show': -1 is not in the range x>=0.\n"


def test_size_defaults_show_as_sizes():
    result = CliRunner().invoke(main, ["build-shards", "--help"])
    assert " ".join(result.stdout.split()).count("partition. Changes the output. [default: 8MiB]") == 1
    for n_bytes, text in [(8 * 2**20, "8MiB"), (500 * 10**6, "500MB"), (3 * 2**30, "3GiB"), (1234, "1234"), (10**3, "1KB")]:
        assert size_text(n_bytes) == text and parse_size(text) == n_bytes


@pytest.mark.skipif(not WIKITEXT.is_file(), reason=f"shared data not found at {SHARED_DATA}")
def test_raw_wikitext_read_by_lines_is_told_to_split(tmp_path):
    # Raw WikiText holds a paragraph per line: read as a sentence per line, most chunks
    # are one long "sentence", so most B segments are random.
    result = build_cli(tmp_path, WIKITEXT, tokenizer=SHARED_DATA / "bert-base-uncased-vocab.txt")
    assert result.exit_code == 0, result.output
    [warning] = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert "NSP random B 0.8" in warning
    assert warning.endswith("if a line holds a whole paragraph, use --sentences split")


def test_summaries_speak_of_the_pairing_built(corpus, vocab, tmp_path):
    # Each pairing's label means something else: NSP's random B, SOP's swapped order,
    # none for FULL-SENTENCES rows; summary, inspect and samples must say which.
    runner = CliRunner()
    shown = {}
    for pairs in ("nsp", "sop", "none"):
        args = ["build-shards", str(corpus), "--tokenizer", str(vocab), "--out", str(tmp_path / pairs), "--pairs", pairs,
                "--cache-dir", str(tmp_path / "cache"), "--workers", "1", "--dupe-factor", "2"]
        built = runner.invoke(main, args)
        assert built.exit_code == 0, built.output
        fraction = json.loads((tmp_path / pairs / "manifest.json").read_text())["statistics"]["next_sentence_random_fraction"]
        [summary] = [line for line in built.stdout.splitlines() if line.startswith("  masked ")]
        report = runner.invoke(main, ["inspect", str(tmp_path / pairs), "--show", "4"])
        assert report.exit_code == 0, report.output
        shown[pairs] = (summary, report.stdout, fraction)
    summary, report, fraction = shown["nsp"]
    assert f"; NSP random B {fraction:.3f}; " in summary and "swapped" not in report
    assert "NSP random B: " in report and f"pairs: NSP random B {fraction:.3f} (about 0.5 expected)" in report
    assert {line.split(", ")[-1] for line in report.splitlines() if line.startswith("#")} <= {"random B)", "actual next B)"}
    summary, report, fraction = shown["sop"]
    assert 0 < fraction < 1 and f"; SOP swapped {fraction:.3f}; " in summary and "NSP" not in summary + report
    assert f"SOP swapped: {fraction:.4f} (95% CI " in report and "random B" not in report
    kinds = [line.split(", ")[-1] for line in report.splitlines() if line.startswith("#")]
    assert len(kinds) == 4 and set(kinds) <= {"in order)", "swapped)"}
    summary, report, fraction = shown["none"]
    assert fraction == 0 and "NSP" not in summary + report and "swapped" not in summary + report
    assert "rows: " in report and "single-sentence" not in report
    rows = [line for line in report.splitlines() if line.startswith("#")]
    assert len(rows) == 4 and all(line.endswith(", full sentences)") for line in rows)
    decoded = report.split("samples:\n")[1].splitlines()
    assert all(line.startswith("  [CLS] ") and line.endswith(" [SEP]") for line in decoded[1::2])
    as_json = json.loads(runner.invoke(main, ["inspect", str(tmp_path / "none"), "--json"]).stdout)
    assert as_json["pairing"] == "none" and as_json["next_sentence_random"]["expected"] == 0.0
    assert as_json["next_sentence_random"]["z"] == 0.0 and as_json["next_sentence_random"]["ci95"][0] == 0.0


def test_one_document_is_enough_for_sop_and_full_sentences(vocab, tmp_path):
    # Only NSP draws its random B from another document.
    one = tmp_path / "one.txt"
    one.write_text("".join(f"The cat number {i} sat on the mat near the door.\n" for i in range(60)))
    refused = build_cli(tmp_path, one, tokenizer=vocab, out="nsp")
    assert refused.exit_code == 1 and "NSP needs at least two documents, found 1" in refused.stderr
    assert not (tmp_path / "nsp").exists()
    for pairs in ("sop", "none"):
        built = build_cli(tmp_path, one, tokenizer=vocab, out=pairs, pairs=pairs)
        assert built.exit_code == 0, built.output
        manifest = json.loads((tmp_path / pairs / "manifest.json").read_text())
        assert manifest["totals"]["documents"] == 1 and manifest["totals"]["rows"] > 0


def test_short_sop_and_full_sentences_rows_warn_at_build_time(vocab, tmp_path):
    # Documents of two short sentences: SOP pairs stay inside a document, so rows are
    # short; FULL-SENTENCES rows cross documents and fill up, so only SOP warns. A corpus
    # smaller than one row leaves a FULL-SENTENCES build short as well.
    short = tmp_path / "short.txt"
    short.write_text("".join(f"The cat {w} sat.\nThe dog ran far.\n\n" for w in ["a", "b", "c", "d"] * 40))
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("The cat sat.\nThe dog ran.\n")
    sop = build_cli(tmp_path, short, tokenizer=vocab, out="sop", pairs="sop")
    assert sop.exit_code == 0, sop.output
    [warning] = [line for line in sop.stderr.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: the SOP pairs degenerate: SOP swapped ") and "NSP" not in warning
    assert "documents are short" in warning
    packed = build_cli(tmp_path, short, tokenizer=vocab, out="packed", pairs="none")
    assert packed.exit_code == 0, packed.output
    assert "warning:" not in packed.stderr
    small = build_cli(tmp_path, tiny, tokenizer=vocab, out="small", pairs="none")
    assert small.exit_code == 0, small.output
    [warning] = [line for line in small.stderr.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: the FULL-SENTENCES rows degenerate: 1 document of 2.0 sentences")
    assert warning.endswith("the last row of each partition is only partly filled")
    info = json.loads((tmp_path / "small" / "dataset_info.json").read_text())
    assert info["description"] == "BERT pre-training instances (masked LM, FULL-SENTENCES rows) built by bertprep"
