"""The control that shows what pre-training bought: the same fine-tune from random
weights of a model's shape (--init random) or of a preset (--model random:PRESET)."""
from __future__ import annotations

import json
import random

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from bertmodel.cli import main
from finetune_fixtures import WORDS, sentence, write_tsv
from finetune_fixtures import tiny_bert as make_tiny_bert

FAST = ["--batch-size", "4", "--eval-batch-size", "8", "--device", "cpu", "--no-progress", "--max-steps", "2"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("random-init")
    bert = make_tiny_bert(root)
    rng = random.Random(2)
    rows = [(i, sentence(rng), "ab"[i % 2]) for i in range(16)]
    return bert, root / "tok", write_tsv(root / "train.tsv", ("index", "sentence", "label"), rows)


def finetune(out, *args):
    result = CliRunner().invoke(main, ["finetune", "classify", *map(str, args), "--out", str(out), *FAST])
    assert result.exit_code == 0, result.output
    return result


def initial_weights(out):
    """The weights after two steps at lr 1e-6: within ~1e-5 of where the run started."""
    state = torch.load(out / "checkpoints" / "step-2" / "state.pt", map_location="cpu", weights_only=True)
    return state["model"]


def test_init_random_keeps_the_shape_and_draws_every_weight_from_the_seed(setup, tmp_path):
    bert, tok, train = setup
    result = finetune(tmp_path / "pre", "--model", bert, "--train", train, "--lr", "1e-6")
    assert f"initialised from {bert}" in result.output
    result = finetune(tmp_path / "rnd", "--model", bert, "--init", "random", "--train", train, "--lr", "1e-6")
    assert f"initialised at random in the shape of {bert} (2 layers, hidden 128): no pre-trained weights" \
        in result.output
    finetune(tmp_path / "rnd2", "--model", bert, "--init", "random", "--train", train, "--lr", "1e-6")
    finetune(tmp_path / "rnd3", "--model", bert, "--init", "random", "--train", train, "--lr", "1e-6",
             "--seed", "7")
    source = load_file(bert / "model.safetensors")
    pre, rnd, rnd2, rnd3 = (initial_weights(tmp_path / n) for n in ("pre", "rnd", "rnd2", "rnd3"))
    key = "bert.encoder.layer.0.attention.self.query.weight"
    assert rnd[key].shape == pre[key].shape == source[key].shape
    # lr 1e-6 for two steps moves a weight by ~2e-6: the pre-trained run is still its source,
    # the random ones are far from it, equal for a seed and different for another.
    assert torch.allclose(pre[key], source[key], atol=1e-4)
    assert not torch.allclose(rnd[key], source[key], atol=1e-2)
    assert torch.equal(rnd[key], rnd2[key]) and not torch.allclose(rnd[key], rnd3[key], atol=1e-2)
    assert 0.015 < float(rnd[key].std()) < 0.025  # BERT's normal(0.02) initialiser
    # The run records its init: the exported classifier loads, and a resume cannot switch it.
    config = json.loads((tmp_path / "rnd" / "hf" / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    again = CliRunner().invoke(main, ["finetune", "classify", "--model", str(bert), "--train", str(train), "--out",
                                      str(tmp_path / "rnd"), *FAST[:-1], "4"])
    assert again.exit_code == 1 and "--init random -> pretrained" in again.output


def test_model_random_preset_needs_a_tokenizer_and_a_real_preset(setup, tmp_path):
    bert, tok, train = setup
    result = finetune(tmp_path / "r", "--model", "random:tiny", "--tokenizer", tok, "--train", train)
    assert "initialised at random in the shape of random:tiny (2 layers, hidden 128)" in result.output
    config = json.loads((tmp_path / "r" / "hf" / "config.json").read_text())
    assert config["vocab_size"] == WORDS + 5 and config["num_hidden_layers"] == 2
    bad = CliRunner().invoke(main, ["finetune", "classify", "--model", "random:tiny", "--train", str(train),
                                    "--out", str(tmp_path / "x"), *FAST])
    assert bad.exit_code == 1
    assert bad.output == "Error: --model random:tiny has no tokenizer of its own; pass --tokenizer\n"
    bad = CliRunner().invoke(main, ["finetune", "classify", "--model", "random:huge", "--tokenizer", str(tok),
                                    "--train", str(train), "--out", str(tmp_path / "x"), *FAST])
    assert bad.exit_code == 1 and "no such preset; choose one of random:tiny, random:mini" in bad.output
    assert not (tmp_path / "x").exists()
