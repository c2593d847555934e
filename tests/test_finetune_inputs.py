"""Bad input to `bertmodel finetune` / `evaluate`: exit 1 with one line naming the file
(and the record) and the problem, no traceback, and no RUN directory left behind that
looks like a started or finished run."""
import json
import random

import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from finetune_fixtures import one_line_failure, sentence, tiny_bert, write_tsv


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    rng = random.Random(0)
    rows = [(sentence(rng), "yes" if i % 2 else "no") for i in range(12)]
    squad_context = " ".join(f"w{i}" for i in range(20))
    return {
        "model": tiny_bert(root),
        "train": write_tsv(root / "train.tsv", ("sentence", "label"), rows),
        "dev": write_tsv(root / "dev.tsv", ("sentence", "label"), rows[:3] + [(sentence(rng), "maybe")]),
        "root": root,
        "context": squad_context,
    }


def fails(files, tmp_path, *args, names=()):
    """Run `bertmodel finetune ARGS --out RUN`; expect exit 1 with one `Error:` line that
    contains each of `names`, and no RUN dir left."""
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["finetune", *map(str, args), "--out", str(out), "--device", "cpu",
                                       "--no-progress", "--batch-size", "4", "--max-steps", "2"])
    return one_line_failure(result, out, names)


def test_missing_column(files, tmp_path):
    line = fails(files, tmp_path, "classify", "--model", files["model"], "--train", files["train"],
                 "--text-column", "text", names=(files["train"], "'text'"))
    assert "'sentence', 'label'" in line  # the columns there are


def test_unknown_label_in_validation(files, tmp_path):
    fails(files, tmp_path, "classify", "--model", files["model"], "--train", files["train"], "--validation",
          files["dev"], names=(files["dev"], "line 5", "'maybe'"))


@pytest.mark.parametrize("content", ["", "sentence\tlabel\n"], ids=["empty", "header-only"])
def test_empty_training_file(files, tmp_path, content):
    path = tmp_path / "empty.tsv"
    path.write_text(content)
    fails(files, tmp_path, "classify", "--model", files["model"], "--train", path, names=(path,))


def test_malformed_squad_json(files, tmp_path):
    path = tmp_path / "train.json"
    path.write_text('{"version": "1.1", "data": [{"title": "x", "paragraphs": [')
    fails(files, tmp_path, "qa", "--model", files["model"], "--train", path, names=(path, "JSON"))
    path.write_text(json.dumps({"data": [{"title": "x", "paragraphs": [{"context": "w1 w2", "qas": [
        {"id": "a1", "question": "w3", "answers": [{"text": "w1"}]}]}]}]}))  # no answer_start
    fails(files, tmp_path, "qa", "--model", files["model"], "--train", path, names=(path, "answer_start"))


def test_question_longer_than_the_window(files, tmp_path):
    path = tmp_path / "train.json"
    context = files["context"]
    path.write_text(json.dumps({"data": [{"title": "x", "paragraphs": [{"context": context, "qas": [
        {"id": "long-one", "question": " ".join(["w3"] * 40),
         "answers": [{"text": "w2", "answer_start": context.index("w2")}]}]}]}]}))
    fails(files, tmp_path, "qa", "--model", files["model"], "--train", path, "--max-seq-length", "32",
          names=(path, "long-one", "max_seq_length 32"))


def test_model_that_is_not_a_bert(files, tmp_path):
    from transformers import GPT2Config, GPT2Model

    gpt2 = tmp_path / "gpt2"
    GPT2Model(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=65)).save_pretrained(gpt2)
    fails(files, tmp_path, "classify", "--model", gpt2, "--train", files["train"], names=(gpt2, "gpt2"))
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a model")
    fails(files, tmp_path, "classify", "--model", junk, "--train", files["train"], names=(junk,))
    fails(files, tmp_path, "classify", "--model", files["train"], "--train", files["train"],
          names=(files["train"],))


def test_broken_bert_directories(files, tmp_path):
    config = json.loads((files["model"] / "config.json").read_text())
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps(config))
    fails(files, tmp_path, "classify", "--model", broken, "--train", files["train"], names=(broken, "model.safetensors"))
    (broken / "model.safetensors").write_bytes(b"not safetensors" * 8)
    fails(files, tmp_path, "classify", "--model", broken, "--train", files["train"],
          names=(broken / "model.safetensors", "cannot read"))
    (broken / "config.json").write_text(json.dumps({**config, "num_attention_heads": 3}))
    fails(files, tmp_path, "classify", "--model", broken, "--train", files["train"],
          names=(broken / "config.json", "heads"))


def test_evaluate_refuses_a_model_that_is_not_fine_tuned(files):
    result = CliRunner().invoke(main, ["evaluate", str(files["model"]), "--data", str(files["dev"])])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(files["model"]) in lines[0] and "BertForPreTraining" in lines[0], result.output
