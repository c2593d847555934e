"""Unpadded (packed) execution equals the padded path: forward and gradients, in float64
to 1e-10, for every head (the last layer's query rows included) and both attention
kernels, over length mixes from one token to the full window; through the trainer the
same losses; the state dict and export unchanged.

In float64 because the two paths sum in other orders (rows packed or padded, another
kernel per shape), which fp32 rounds apart by as much as the 1e-5 once allowed on some
CPUs (2.2x it for the jagged kernel's token-type gradient with MKL and oneDNN held to
SSE4.2); float64's rounding is 2^-29 of fp32's, so 1e-10 holds on any CPU
(tests/head_steps.py). Packed rows through the fp32-only oneDNN linear, as the CPU
trains them, are tests/test_heads_match_transformers.py's and
tests/test_modernbert_matches_transformers.py's first fp32 step."""
from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch

from bertmodel.model.config import BertConfig
from bertmodel.model.unpad import unpadded_extent
from bertmodel.model import (BertForMaskedLM, BertForPreTraining, BertForQuestionAnswering,
                             BertForSequenceClassification)
from bertmodel.model.unpad import resolve, set_unpad, unpad_kernel
from bertmodel.tasks.pretraining import PretrainingTask
from bertmodel.data.synthetic import small_shard_dir
from bertmodel.train import TrainConfig, train

T = 24
TOL = 1e-10  # float64 (module docstring)
LENGTH_MIXES = {
    "all full": [T, T, T],
    "one token rows": [1, T, 1, 2],
    "mixed": [T, 3, 17, 9, 1],
    "one short row": [5],
}


def batch(lengths, vocab: int = 300, predictions: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor(lengths)
    B = len(lengths)
    mask = (torch.arange(T)[None] < lens[:, None]).long()  # (B, T)
    ids = torch.randint(5, vocab, (B, T), generator=g) * mask
    types = ((torch.arange(T)[None] >= (lens[:, None] + 1) // 2).long()) * mask
    # positions inside each row, repeats allowed (padded slots point at any valid index)
    positions = torch.stack([torch.randint(0, int(n), (predictions,), generator=g) for n in lens])
    labels = torch.randint(5, vocab, (B, predictions), generator=g)
    labels[:, -1] = -100
    return dict(input_ids=ids, token_type_ids=types, attention_mask=mask), positions, labels


def config() -> BertConfig:
    # No dropout: the two paths draw their masks over differently shaped tensors.
    return BertConfig.preset("tiny", num_hidden_layers=3, hidden_size=32, num_attention_heads=4,
                             intermediate_size=64, vocab_size=300, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)


def twins(model_class, kernel, *args):
    torch.manual_seed(0)
    padded = model_class(config(), *args).double()
    packed = copy.deepcopy(padded)
    set_unpad(packed, kernel)
    return padded, packed


def assert_same_grads(padded, packed):
    for (name, a), (_, b) in zip(padded.named_parameters(), packed.named_parameters()):
        assert a.grad is not None and b.grad is not None, name
        torch.testing.assert_close(b.grad, a.grad, atol=TOL, rtol=TOL, msg=name)


def run(model, *args, **kwargs):
    with warnings.catch_warnings():
        # the jagged kernel's CPU fallback warns about torch's own nested-tensor internals
        warnings.simplefilter("ignore", UserWarning)
        return model(*args, **kwargs)


@pytest.mark.parametrize("kernel", ["repad", "jagged"])
@pytest.mark.parametrize("mix", list(LENGTH_MIXES))
def test_pretraining_heads_equal_padded(kernel, mix):
    """MLM + NSP and MLM alone: the last layer runs at [CLS] and the slots only."""
    inputs, positions, labels = batch(LENGTH_MIXES[mix])
    nsp = torch.arange(len(LENGTH_MIXES[mix])) % 2
    for model_class in (BertForPreTraining, BertForMaskedLM):
        padded, packed = twins(model_class, kernel)
        a = padded(**inputs, masked_lm_positions=positions, masked_lm_labels=labels, next_sentence_label=nsp)
        b = run(packed, **inputs, masked_lm_positions=positions, masked_lm_labels=labels, next_sentence_label=nsp)
        torch.testing.assert_close(b.mlm_logits, a.mlm_logits, atol=TOL, rtol=TOL)
        if a.nsp_logits is not None:
            torch.testing.assert_close(b.nsp_logits, a.nsp_logits, atol=TOL, rtol=TOL)
        torch.testing.assert_close(b.loss, a.loss, atol=TOL, rtol=TOL)
        a.loss.backward()
        b.loss.backward()
        assert_same_grads(padded, packed)


@pytest.mark.parametrize("kernel", ["repad", "jagged"])
@pytest.mark.parametrize("mix", ["one token rows", "mixed"])
def test_finetuning_heads_equal_padded(kernel, mix):
    """Classification reads [CLS] alone (query path). QA's loss is a softmax over the
    whole window, padding included (as transformers'), so QA stays padded; its encoder
    alone, unpadded, gives the same states at real tokens and zeros at padding."""
    inputs, _, _ = batch(LENGTH_MIXES[mix])
    B = inputs["input_ids"].shape[0]
    padded, packed = twins(BertForSequenceClassification, kernel, 3)
    labels = torch.arange(B) % 3
    a, b = padded(**inputs, labels=labels), run(packed, **inputs, labels=labels)
    torch.testing.assert_close(b.logits, a.logits, atol=TOL, rtol=TOL)
    a.loss.backward()
    b.loss.backward()
    assert_same_grads(padded, packed)

    padded, packed = twins(BertForQuestionAnswering, kernel)
    assert packed.bert.unpad is None
    set_unpad(packed.bert, kernel)  # the bare encoder, every position
    real = inputs["attention_mask"].bool()
    args = inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"]
    a, b = padded.bert(*args), run(packed.bert, *args)
    torch.testing.assert_close(b[real], a[real], atol=TOL, rtol=TOL)
    assert b[~real].abs().max() == 0  # nothing computed at padding
    # a fixed random readout (a sum of squares of LayerNorm outputs would be constant)
    readout = torch.randn(a[real].shape, generator=torch.Generator().manual_seed(1))
    (a[real] * readout).sum().backward()
    (b[real] * readout).sum().backward()
    for (name, p), (_, q) in zip(padded.bert.named_parameters(), packed.bert.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=TOL, rtol=TOL, msg=name)


def test_unpad_keeps_the_state_dict():
    padded, packed = twins(BertForPreTraining, "repad")
    assert list(packed.state_dict()) == list(padded.state_dict())
    assert unpad_kernel(packed) == "repad" and unpad_kernel(packed.bert) == "repad" and unpad_kernel(padded) is None
    set_unpad(packed, None)  # and switches back
    assert packed.bert.unpad is None and unpad_kernel(packed) is None


def test_resolve():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve("auto", cpu) is None  # measured: pre-training batches gain nothing packed on CPU
    config = BertConfig.preset("tiny", vocab_size=64)
    # ... while classification batches (mostly padding) take half the time packed
    assert resolve("auto", cpu, BertForSequenceClassification(config, 2)) == "repad"
    assert resolve("auto", cpu, BertForPreTraining(config)) is None
    assert resolve("auto", cuda, BertForSequenceClassification(config, 2)) is None  # not measured on a GPU
    assert resolve("off", cuda) is None
    assert resolve("on", cpu) == "repad"
    assert resolve("on", cuda) == "jagged"


def test_pretrain_unpadded_gives_the_padded_losses(tmp_path, monkeypatch):
    """Through the trainer (batches of several padded lengths): the same losses as the
    padded run over a few steps, and an export transformers loads with no missing keys."""
    transformers = pytest.importorskip("transformers")
    real_config = TrainConfig.model_config

    def no_dropout(self, tokenizer):
        c = real_config(self, tokenizer)
        c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0
        return c

    monkeypatch.setattr(TrainConfig, "model_config", no_dropout)
    counted = []  # (extent the loop gave, the batch's own) per micro-batch: MFU counts what runs
    real_flops = PretrainingTask.flops

    def recording_flops(self, config, tensors, extent=None):
        counted.append((extent, unpadded_extent(tensors["attention_mask"])))
        return real_flops(self, config, tensors, extent)

    monkeypatch.setattr(PretrainingTask, "flops", recording_flops)
    shards = small_shard_dir(tmp_path / "small", rows=48, max_seq_length=64)
    base = dict(data=[str(shards)], preset="tiny", layers=2, hidden=32, heads=2, intermediate=64, batch_size=6,
                max_steps=3, lr=1e-3, warmup_steps=1, log_every=1, save_every=100, progress=False, seed=5)
    lines = []
    train(TrainConfig(out=str(tmp_path / "padded"), unpad="off", **base), log=lambda *a: None)
    padded_counts, counted[:] = list(counted), []
    train(TrainConfig(out=str(tmp_path / "packed"), unpad="on", **base), log=lines.append)
    assert any("unpadded (repad)" in line for line in lines)
    assert len(padded_counts) == len(counted) == 3
    assert all(extent is None for extent, _ in padded_counts)  # padded: every (B, T) position
    assert all(extent == real for extent, real in counted)  # unpadded: the real tokens and pairs
    assert any(real["tokens"] < 6 * 64 for _, real in counted)  # the batches did have padding

    def losses(run):
        return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]

    assert len(losses(tmp_path / "packed")) == 3
    assert losses(tmp_path / "packed") == pytest.approx(losses(tmp_path / "padded"), abs=1e-5)
    _, loading = transformers.BertForPreTraining.from_pretrained(tmp_path / "packed" / "hf", output_loading_info=True)
    assert {k: v for k, v in loading.items() if v} == {}
