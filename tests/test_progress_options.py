"""One progress option on every long command of both CLIs: --progress/--no-progress, with
-q/--quiet meaning --no-progress, defined once (bertprep.cli.kit.progress_option), and
each command's progress display follows it: build-shards' and train-tokenizer's bars,
evaluate's and predict --file's passes over the data, eval-suite's line per run,
squad-to-beir's records written."""
from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

from bertmodel.cli import main as bertmodel_main
from bertprep.cli import main as bertprep_main
from bertprep.cli.kit import progress_option
from finetune_fixtures import sentence, tiny_bert, write_tsv
from shard_fixtures import write_corpus, write_vocab

LONG_COMMANDS = [(bertprep_main, ("build-shards",)), (bertprep_main, ("train-tokenizer",)),
                 (bertmodel_main, ("pretrain",)), *[(bertmodel_main, ("finetune", task))
                                                    for task in ("classify", "qa", "tokens", "choice")],
                 (bertmodel_main, ("evaluate",)), (bertmodel_main, ("predict",)), (bertmodel_main, ("eval-suite",)),
                 (bertmodel_main, ("squad-to-beir",))]
SHARED = progress_option(lambda progress: None).__click_params__[0]


def command_of(group, path):
    for name in path:
        group = group.commands[name]
    return group


@pytest.mark.parametrize("group, path", LONG_COMMANDS, ids=[" ".join(p) for _, p in LONG_COMMANDS])
def test_every_long_command_takes_the_one_progress_option(group, path):
    [option] = [p for p in command_of(group, path).params if p.name == "progress"]
    assert (option.opts, sorted(option.secondary_opts), option.default, option.help) == (
        ["--progress"], ["--no-progress", "--quiet", "-q"], True, SHARED.help)
    for flag in ("--progress", "--no-progress", "-q", "--quiet"):
        result = CliRunner().invoke(group, [*path, flag, "--help"])
        assert result.exit_code == 0, result.output
        assert "--progress / -q, --no-progress, --quiet" in result.output


def test_build_shards_and_train_tokenizer_are_silent_with_no_progress(tmp_path):
    corpus, vocab = write_corpus(tmp_path / "corpus.txt", documents=40), write_vocab(tmp_path / "vocab.txt")
    common = ["--workers", "1", "--dupe-factor", "1", "--cache-dir", str(tmp_path / "cache")]
    shown = CliRunner().invoke(bertprep_main, ["build-shards", str(corpus), "--tokenizer", str(vocab), "--out",
                                               str(tmp_path / "a"), *common])
    assert shown.exit_code == 0, shown.output
    assert any(line.startswith("build: ") for line in shown.stderr.splitlines())
    for flag in ("--no-progress", "-q"):
        silent = CliRunner().invoke(bertprep_main, ["build-shards", str(corpus), "--tokenizer", str(vocab), "--out",
                                                    str(tmp_path / f"b{flag}"), *common, flag])
        assert silent.exit_code == 0, silent.output
        assert not any(line.startswith("build: ") for line in silent.stderr.splitlines())
    for flag, shows in (("--progress", True), ("--no-progress", False), ("--quiet", False)):
        tok = CliRunner().invoke(bertprep_main, ["train-tokenizer", str(corpus), "--out", str(tmp_path / f"tok{flag}"),
                                                 "--vocab-size", "80", flag])
        assert tok.exit_code == 0, tok.output
        assert any(line.startswith("reading: ") for line in tok.stderr.splitlines()) == shows, tok.stderr


def test_squad_to_beir_shows_the_records_it_writes_unless_told_not_to(tmp_path):
    """Three articles of two paragraphs, each with two questions: 6 passages, 12 queries,
    12 judgements, 30 records; the directory is the same with the bar or without it."""
    rng = random.Random(0)
    articles = [{"title": f"Article {a}", "paragraphs": [
        {"context": sentence(rng, 12, 20), "qas": [{"id": f"q{a}{p}{i}", "question": sentence(rng) + "?",
                                                    "answers": [{"text": "w1", "answer_start": 0}]}
                                                   for i in range(2)]} for p in range(2)]} for a in range(3)]
    source = tmp_path / "squad.json"
    source.write_text(json.dumps({"version": "1.1", "data": articles}))

    def run(out, *flags):
        result = CliRunner().invoke(bertmodel_main, ["squad-to-beir", str(source), "--out", str(tmp_path / out),
                                                     *flags])
        assert result.exit_code == 0, result.output
        return result, {p.relative_to(tmp_path / out): p.read_bytes() for p in (tmp_path / out).rglob("*")
                        if p.is_file()}

    shown, written = run("shown")
    lines = [line for line in shown.stderr.splitlines() if line.startswith("writing: ")]
    assert lines and lines[-1].startswith("writing: 30/30 "), shown.stderr
    for flag in ("--no-progress", "-q", "--quiet"):
        silent, same = run(f"silent{flag}", flag)
        assert silent.stderr == ""
        assert silent.stdout.split(": ", 1)[1] == shown.stdout.split(": ", 1)[1]  # the same summary line
        assert same == written


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """A classifier fine-tuned for one step, and a file of texts to read with it."""
    root = tmp_path_factory.mktemp("progress")
    rng = random.Random(0)
    rows = [(sentence(rng), "yes" if i % 2 else "no") for i in range(24)]
    data = write_tsv(root / "data.tsv", ("sentence", "label"), rows)
    result = CliRunner().invoke(bertmodel_main, ["finetune", "classify", "--model", str(tiny_bert(root)), "--train",
                                                 str(data), "--validation", str(data), "--out", str(root / "run"),
                                                 "--max-steps", "1", "--batch-size", "8", "--eval-batch-size", "8",
                                                 "--device", "cpu", "--no-progress"])
    assert result.exit_code == 0, result.output
    return root / "run", data


@pytest.mark.parametrize("command, desc", [("evaluate", "eval"), ("predict", "predict")])
def test_evaluate_and_predict_file_show_their_passes_unless_told_not_to(classifier, command, desc, tmp_path):
    run, data = classifier
    args = [command, str(run), "--data" if command == "evaluate" else "--file", str(data), "--out",
            str(tmp_path / ("evaluated" if command == "evaluate" else "predictions.jsonl"))]
    if command == "evaluate":
        args += ["--eval-batch-size", "8"]
    shown = CliRunner().invoke(bertmodel_main, args)
    assert shown.exit_code == 0, shown.output
    # 24 examples in batches of 8 (evaluate) or of predict's 64
    lines = [line for line in shown.stderr.splitlines() if line.startswith(f"{desc}: ")]
    assert lines and lines[-1].startswith(f"{desc}: 3/3 " if command == "evaluate" else f"{desc}: 1/1 "), lines
    silent = CliRunner().invoke(bertmodel_main, args + ["--no-progress", "--overwrite"])
    assert silent.exit_code == 0, silent.output
    assert not [line for line in silent.stderr.splitlines() if line.startswith(f"{desc}: ")]
    assert silent.stdout == shown.stdout  # the same metrics or predictions


@pytest.mark.slow  # one fine-tuning subprocess
def test_eval_suite_no_progress_drops_the_line_per_run_and_keeps_the_results(classifier, tmp_path):
    run, data = classifier
    suite = tmp_path / "suite.toml"
    suite.write_text(f"""name = "one"
seeds = [1]
[defaults]
max_steps = 1
batch_size = 8
device = "cpu"
[[task]]
name = "topic"
command = "classify"
train = "{data}"
validation = "{data}"
""", encoding="utf-8")
    args = ["eval-suite", "--model", str(run / "hf"), "--suite", str(suite), "--out", str(tmp_path / "out"),
            "--no-progress"]
    result = CliRunner().invoke(bertmodel_main, args)
    assert result.exit_code == 0, result.output
    assert not [line for line in result.stderr.splitlines() if line.startswith("[1/1]")]
    assert result.stdout.splitlines()[2].startswith("topic    accuracy  ")
