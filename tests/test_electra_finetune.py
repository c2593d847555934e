"""Fine-tuning an ELECTRA discriminator: every head computes and trains as its
transformers class (ElectraForSequenceClassification, also as regression,
...ForQuestionAnswering, ...ForTokenClassification, ...ForMultipleChoice), with
embedding tables narrower than H (`embeddings_project`) and without; a transformers
Electra directory (ElectraForPreTraining, ElectraModel, ElectraForMaskedLM) loads into
every task with its whole encoder and its own head reported as not used; the exports load
as the ElectraFor... class with no missing or unexpected keys and equal logits; and the
CLI fine-tunes and evaluates one end to end on RTE.

The steps run in float64 (tests/head_steps.py says why and how closely they must agree),
dropout 0 (the two draw their masks differently), in train mode as the loop runs them."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.hf import export_hf, load_into, load_pretrained
from bertmodel.model import (HEADS, ElectraConfig, ElectraForMultipleChoice, ElectraForQuestionAnswering,
                             ElectraForSequenceClassification, ElectraForTokenClassification, head_class)
from bertmodel.model.heads import IGNORE_INDEX
from bertmodel.model.linear import cpu_matmul
from bertmodel.model.unpad import resolve, set_unpad
from bertmodel.tasks.finetuning import start_from
from qa_fixtures import tiny_tokenizer
from shared_data import SHARED_DATA

transformers = pytest.importorskip("transformers")

from head_steps import (STEPS, classification_batches, first_step_in_fp32, fp32_rounding,  # noqa: E402
                        qa_batches, train_both)

VOCAB = 120
HF_CLASS = {"classify": "ElectraForSequenceClassification", "qa": "ElectraForQuestionAnswering",
            "tokens": "ElectraForTokenClassification", "choice": "ElectraForMultipleChoice"}


def tiny(vocab_size: int = VOCAB, **overrides) -> ElectraConfig:
    """2 layers of 32 (4 heads); embedding tables 16 wide (projected to 32) unless told."""
    fields = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, vocab_size=vocab_size,
                  max_position_embeddings=64, embedding_size=16, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0, summary_last_dropout=0.0)
    return ElectraConfig.preset("tiny", **{**fields, **overrides})


def hf_config(config: ElectraConfig, **options):
    fields = {k: v for k, v in config.to_hf_dict().items() if k not in ("architectures", "dtype")}
    return transformers.ElectraConfig(**fields, **options)


def twin(ours: torch.nn.Module, **options) -> torch.nn.Module:
    """Ours's transformers class holding exactly our weights (no key missing or left over)."""
    theirs = getattr(transformers, ours.hf_architecture)(hf_config(ours.config, **options))
    theirs.load_state_dict(ours.state_dict(), strict=True)
    return theirs


def mixed(B: int, T: int, seed: int) -> dict:
    """Ids, segments (the second half of each row) and a right-padded mask, a row full."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, T + 1, B)
    lengths[0] = T
    mask = (np.arange(T)[None] < lengths[:, None]).astype(np.int64)
    segments = (np.arange(T)[None] >= lengths[:, None] // 2).astype(np.int64) * mask
    return {"input_ids": torch.from_numpy(rng.integers(5, VOCAB, (B, T)) * mask),
            "token_type_ids": torch.from_numpy(segments), "attention_mask": torch.from_numpy(mask)}


def token_batches():
    rng = np.random.default_rng(1)
    for step in range(STEPS):
        batch = mixed(8, int(rng.integers(12, 40)), seed=100 + step)
        mask = batch["attention_mask"].numpy().astype(bool)
        labels = np.where(mask & (rng.random(mask.shape) < 0.8), rng.integers(0, 5, mask.shape), IGNORE_INDEX)
        batch["labels"] = torch.from_numpy(labels)
        yield batch, dict(batch)


def choice_batches():
    rng = np.random.default_rng(2)
    for step in range(STEPS):
        flat = mixed(12, int(rng.integers(8, 30)), seed=200 + step)
        batch = {k: v.view(4, 3, -1) for k, v in flat.items()}
        batch["labels"] = torch.from_numpy(rng.integers(0, 3, 4))
        yield batch, dict(batch)


def build(kind: str, config: ElectraConfig) -> torch.nn.Module:
    return HEADS["electra"][kind](config, *((3,) if kind in ("classify", "tokens") else ()))


# -- names, shapes and logits ---------------------------------------------------------------

@pytest.mark.parametrize("embedding_size", [16, None], ids=["projected", "unprojected"])
def test_every_head_has_the_transformers_names_and_shapes(embedding_size):
    config = tiny(embedding_size=embedding_size)
    # Beside the fine-tuning heads, "mlm": an ELECTRA generator (fill-mask's model of an RTD run).
    assert {cls.hf_architecture for cls in HEADS["electra"].values()} == {*HF_CLASS.values(), "ElectraForMaskedLM"}
    generator, theirs = HEADS["electra"]["mlm"](config), transformers.ElectraForMaskedLM(hf_config(config))
    assert ({k: tuple(v.shape) for k, v in generator.state_dict().items()}
            == {k: tuple(v.shape) for k, v in theirs.state_dict().items()})
    for kind, name in HF_CLASS.items():
        ours = build(kind, config)
        assert head_class(config, kind) is type(ours) and ours.hf_architecture == name
        # ElectraForQuestionAnswering sizes qa_outputs by num_labels (start and end: 2).
        theirs = getattr(transformers, name)(hf_config(config, num_labels=2 if kind == "qa" else 3))
        assert ({k: tuple(v.shape) for k, v in ours.state_dict().items()}
                == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}), name
        assert ("electra.embeddings_project.weight" in ours.state_dict()) == (embedding_size is not None)
        assert not any("pooler" in k for k in ours.state_dict())  # ELECTRA has none


@pytest.mark.parametrize("kernel", [None, "repad"], ids=["padded", "packed"])
def test_logits_equal_transformers(kernel):
    """Eval-mode logits of every head, fp32 at 1e-5, at mixed lengths with segments (QA
    reads padding, so never packs: model/unpad.py)."""
    torch.manual_seed(0)
    config = tiny(classifier_dropout=0.3, summary_last_dropout=0.2)  # off in eval mode, as theirs
    batch = mixed(6, 20, seed=0)
    real = batch["attention_mask"].bool()
    for kind in HF_CLASS:
        ours = build(kind, config).eval()
        # ElectraForQuestionAnswering sizes qa_outputs by num_labels: start and end.
        theirs = twin(ours, num_labels=2 if kind == "qa" else 3).eval()
        set_unpad(ours, kernel)
        inputs = {k: v.view(3, 2, -1) for k, v in batch.items()} if kind == "choice" else batch
        with torch.no_grad():
            out, ref = ours(**inputs), theirs(**inputs)
        if kind == "qa":
            torch.testing.assert_close(out.start_logits, ref.start_logits, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(out.end_logits, ref.end_logits, atol=1e-5, rtol=1e-5)
        elif kind == "tokens":
            torch.testing.assert_close(out.logits[real], ref.logits[real], atol=1e-5, rtol=1e-5)
        else:
            torch.testing.assert_close(out.logits, ref.logits, atol=1e-5, rtol=1e-5, msg=kind)


# -- training steps (float64) ----------------------------------------------------------------

@pytest.mark.parametrize("num_labels,embedding_size,kernel",
                         [(3, 16, "repad"), (3, None, None), (1, 16, "repad")],
                         ids=["classification-projected-packed", "classification-padded", "regression-packed"])
def test_sequence_classification_steps_equal_transformers(num_labels, embedding_size, kernel):
    torch.manual_seed(0)
    ours = ElectraForSequenceClassification(tiny(embedding_size=embedding_size), num_labels)
    if kernel is not None:
        assert resolve("auto", torch.device("cpu"), ours) == kernel  # what --unpad auto trains it with here
    theirs = twin(ours, num_labels=num_labels)
    set_unpad(ours, kernel)
    # One batch, seen at every step: ELECTRA's head starts near uniform (out_proj at std 0.02),
    # and STEPS steps over as many batches of random labels need not lower batch 0's loss (train_both's check).
    first, _ = next(iter(classification_batches(VOCAB, regression=num_labels == 1)))
    train_both(ours, theirs, [(dict(first), dict(first)) for _ in range(STEPS)], clip=None)


def test_a_first_step_in_fp32_is_within_fp32_rounding_of_float64():
    """The oneDNN linear the CPU trains with is fp32 only (model/linear.py): one packed
    classification step in fp32 against transformers' in float64; the bound is
    fp32_rounding's chain plus the projection's dot product (E terms)."""
    config = tiny()
    torch.manual_seed(0)
    ours = ElectraForSequenceClassification(config, 3)
    theirs = twin(ours, num_labels=3)
    set_unpad(ours, "repad")
    assert cpu_matmul() == "onednn" or not torch.backends.mkldnn.is_available()
    batch_ours, batch_theirs = next(classification_batches(VOCAB, regression=False))
    (B, T), classes = batch_ours["input_ids"].shape, 3
    bound = fp32_rounding(config, T, B, classes) + config.embedding_size * 2.0 ** -24
    # A key bias adds q.b to all of a query's scores alike, which the softmax does not see:
    # its exact gradient is 0 but for rounding, with no scale to be relative to.
    key_biases = tuple(f"electra.encoder.layer.{i}.attention.self.key.bias" for i in range(config.num_hidden_layers))
    first_step_in_fp32(ours, theirs, batch_ours, batch_theirs, bound, loss_free=key_biases)


def test_question_answering_steps_equal_transformers():
    config = tiny(tiny_tokenizer().vocab_size)
    torch.manual_seed(0)
    ours = ElectraForQuestionAnswering(config)
    theirs = twin(ours)
    # Each shifts all T start (or end) logits of a window alike: the softmax does not see it.
    shifts = ("qa_outputs.bias", f"electra.encoder.layer.{config.num_hidden_layers - 1}.output.LayerNorm.bias")
    train_both(ours, theirs, list(qa_batches(config.vocab_size)), clip=None, loss_free=shifts)


@pytest.mark.parametrize("kernel", [None, "repad"], ids=["padded", "packed"])
def test_token_classification_steps_equal_transformers(kernel):
    torch.manual_seed(0)
    ours = ElectraForTokenClassification(tiny(), 5)
    theirs = twin(ours, num_labels=5)
    set_unpad(ours, kernel)
    train_both(ours, theirs, token_batches(), clip=None)


@pytest.mark.parametrize("activation,kernel", [("gelu", "repad"), ("tanh", None)])
def test_multiple_choice_steps_equal_transformers(activation, kernel):
    torch.manual_seed(0)
    ours = ElectraForMultipleChoice(tiny(summary_activation=activation))
    theirs = twin(ours)
    set_unpad(ours, kernel)
    # classifier.bias shifts every choice's score alike: the softmax over choices does not see it.
    train_both(ours, theirs, choice_batches(), clip=None, loss_free=("classifier.bias",))


# -- loading transformers directories, exporting ---------------------------------------------

def saved(tmp_path, hf_class: str, config: ElectraConfig, name: str):
    """A transformers Electra directory as save_pretrained writes it (random weights)."""
    torch.manual_seed(1)
    model = getattr(transformers, hf_class)(hf_config(config))
    model.save_pretrained(tmp_path / name)
    return tmp_path / name, model.state_dict()


@pytest.mark.parametrize("kind", list(HF_CLASS))
def test_a_discriminator_dir_loads_into_every_task_with_no_weight_lost(tmp_path, kind):
    directory, source = saved(tmp_path, "ElectraForPreTraining", tiny(), "disc")
    pre = load_pretrained(directory)
    assert isinstance(pre.config, ElectraConfig) and pre.config.embedding_size == 16
    assert pre.architecture == "ElectraForPreTraining"
    log = []
    model_cls = head_class(pre.config, kind)
    model = start_from(model_cls, pre, log.append, **({"num_labels": 3} if kind in ("classify", "tokens") else {}))
    ours = model.state_dict()
    encoder = [k for k in source if k.startswith("electra.")]
    assert "electra.embeddings_project.weight" in encoder
    for key in encoder:
        torch.testing.assert_close(ours[key], source[key], atol=0, rtol=0, msg=key)
    assert set(ours) - set(encoder) == {k for k in ours if not k.startswith("electra.")}
    text = "\n".join(log)
    # The log names the dropped groups one module deep: both are the discriminator's head.
    unused = next(line for line in log if line.startswith(f"not used from {directory}: "))
    assert unused.split(": ", 1)[1].split(", ") == ["discriminator_predictions.dense.*",
                                                   "discriminator_predictions.dense_prediction.*"], unused
    fresh = next(line for line in log if line.startswith("newly initialised"))
    assert "electra." not in fresh, fresh


def test_a_bare_electra_model_and_a_generator_dir_load_too(tmp_path):
    for hf_class, unused in (("ElectraModel", None), ("ElectraForMaskedLM", "generator_predictions.*")):
        directory, source = saved(tmp_path, hf_class, tiny(), hf_class)
        pre = load_pretrained(directory)
        log = []
        model = start_from(ElectraForSequenceClassification, pre, log.append, num_labels=2)
        for key, value in source.items():
            ours_key = key if key.startswith("electra.") or unused else f"electra.{key}"
            if ours_key.startswith("electra."):
                torch.testing.assert_close(model.state_dict()[ours_key], value, atol=0, rtol=0)
        assert (unused is None) == ("not used" not in "\n".join(log)), log
        if unused:  # the MLM head's groups (generator_predictions.*, generator_lm_head.*), nothing of the encoder
            line = next(line for line in log if line.startswith(f"not used from {directory}: "))
            groups = line.split(": ", 1)[1].split(", ")
            assert any(g.startswith(unused[:-1]) for g in groups) and all(g.startswith("generator_") for g in groups), line


@pytest.mark.parametrize("kind", list(HF_CLASS))
def test_export_loads_as_the_electra_class_with_equal_logits(tmp_path, kind):
    torch.manual_seed(3)
    ours = build(kind, tiny()).eval()
    head = {"num_labels": 3, "id2label": {0: "a", 1: "b", 2: "c"}, "label2id": {"a": 0, "b": 1, "c": 2}}
    out = export_hf(ours, tmp_path / "hf", head_config=head if kind in ("classify", "tokens") else {})
    theirs, info = getattr(transformers, HF_CLASS[kind]).from_pretrained(out, output_loading_info=True)
    assert not any(info.values()), info
    auto = {"classify": transformers.AutoModelForSequenceClassification, "qa": transformers.AutoModelForQuestionAnswering,
            "tokens": transformers.AutoModelForTokenClassification,
            "choice": transformers.AutoModelForMultipleChoice}[kind]
    assert type(auto.from_pretrained(out)).__name__ == HF_CLASS[kind]
    theirs.eval()
    batch = mixed(4, 16, seed=5)
    inputs = {k: v.view(2, 2, -1) for k, v in batch.items()} if kind == "choice" else batch
    with torch.no_grad():
        a, b = ours(**inputs), theirs(**inputs)
    for name in ("start_logits", "end_logits") if kind == "qa" else ("logits",):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), atol=1e-5, rtol=1e-5)
    back = load_pretrained(out)  # and ours reads its own export back
    assert back.architecture == HF_CLASS[kind] and back.config == ours.config
    again = build(kind, back.config)
    assert load_into(again, back) == []


# -- the CLI, end to end ---------------------------------------------------------------------

RTE, UNCASED = SHARED_DATA / "glue" / "RTE", SHARED_DATA / "bert-base-uncased-vocab.txt"


def ok(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.skipif(not RTE.is_dir() or not UNCASED.is_file(), reason="needs ../shared/data (glue/RTE, the vocab)")
def test_finetune_classify_on_an_electra_dir_then_evaluate(tmp_path):
    """finetune classify --model a transformers ElectraForPreTraining directory (with
    bert-base-uncased's vocabulary) on 64 RTE pairs; RUN/hf loads as
    ElectraForSequenceClassification with RTE's labels and our logits; evaluate scores it."""
    directory, source = saved(tmp_path, "ElectraForPreTraining", tiny(30522, max_position_embeddings=128), "disc")
    shutil.copyfile(UNCASED, directory / "vocab.txt")
    out = tmp_path / "rte"
    result = ok("finetune", "classify", "--model", directory, "--train", RTE / "train.tsv", "--validation",
                RTE / "dev.tsv", "--out", out, "--max-train-examples", 64, "--max-eval-examples", 32,
                "--batch-size", 16, "--epochs", 1, "--max-seq-length", 128, "--no-progress")
    assert "discriminator_predictions.dense_prediction.*" in result.output and "(ElectraForPreTraining)" in result.output
    theirs, info = transformers.ElectraForSequenceClassification.from_pretrained(out / "hf", output_loading_info=True)
    assert not any(info.values()), info
    assert theirs.config.id2label == {0: "entailment", 1: "not_entailment"}
    assert json.loads((out / "hf" / "config.json").read_text())["embedding_size"] == 16
    pre = load_pretrained(out / "hf")
    ours = ElectraForSequenceClassification(pre.config, 2).eval()
    assert load_into(ours, pre) == []
    batch = mixed(3, 40, seed=7)
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch).logits, theirs.eval()(**batch).logits, atol=1e-5, rtol=1e-5)
    moved = (ours.state_dict()["electra.encoder.layer.0.output.dense.weight"]
             - source["electra.encoder.layer.0.output.dense.weight"]).abs().max()
    assert float(moved) > 0  # it trained from the discriminator's weights
    metrics = json.loads(ok("evaluate", out, "--no-progress").stdout)
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 32, len(records)
    assert metrics["accuracy"] == pytest.approx(sum(r["label"] == r["gold"] for r in records) / len(records))
