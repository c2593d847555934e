"""The model: transformers' names and shapes, masked-only MLM head, losses, optimizer groups."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from bertmodel.model.config import PRESETS, BertConfig
from bertmodel.errors import BertmodelError
from bertmodel.model import BertForPreTraining
from bertmodel.training.optim import Lamb, Schedule


@pytest.fixture
def transformers():
    """Only the tests that compare against transformers need it; the rest run without."""
    return pytest.importorskip("transformers")


def batch(B=3, T=24, P=5, V=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, T // 2:] = 1
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, T - 8:] = 0
    positions = torch.sort(torch.randint(1, T - 8, (B, P), generator=g), dim=1).values
    labels = torch.randint(5, V, (B, P), generator=g)
    labels[0, -2:] = -100  # padded prediction slots
    return dict(input_ids=ids, token_type_ids=types, attention_mask=mask, masked_lm_positions=positions,
                masked_lm_labels=labels, next_sentence_label=torch.tensor([0, 1, 1]))


@pytest.mark.parametrize("preset", list(PRESETS))
def test_state_dict_names_and_shapes_are_transformers(preset, transformers):
    config = BertConfig.preset(preset)
    with torch.device("meta"):
        ours = BertForPreTraining(config).state_dict()
        theirs = transformers.BertForPreTraining(transformers.BertConfig(**config.to_hf_dict())).state_dict()
    assert list(ours) == list(theirs)
    assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in theirs.items()}
    assert not any("position_ids" in k for k in ours)


def test_presets():
    got = {name: (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size)
           for name in PRESETS for c in [BertConfig.preset(name)]}
    assert got == {"tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024), "small": (4, 512, 8, 2048),
                   "medium": (8, 512, 8, 2048), "base": (12, 768, 12, 3072), "large": (24, 1024, 16, 4096)}
    base = BertConfig.preset("base")
    assert (base.max_position_embeddings, base.type_vocab_size, base.layer_norm_eps, base.initializer_range,
            base.hidden_dropout_prob, base.hidden_act) == (512, 2, 1e-12, 0.02, 0.1, "gelu")
    assert BertForPreTraining(BertConfig.preset("base")).num_params() == base.num_params() == 110_106_428
    assert BertConfig.preset("mini", hidden_size=128).intermediate_size == 512


def test_config_validation():
    with pytest.raises(BertmodelError, match="not divisible by 5 heads"):
        BertConfig.preset("tiny", num_attention_heads=5)
    with pytest.raises(BertmodelError, match="hidden_act 'relu' is not supported"):
        BertConfig(hidden_act="relu")
    with pytest.raises(BertmodelError, match="unknown preset 'huge'"):
        BertConfig.preset("huge")


def test_hf_config_dict(transformers):
    hf = BertConfig.preset("tiny", vocab_size=300, pad_token_id=0).to_hf_dict()
    assert hf["architectures"] == ["BertForPreTraining"] and hf["model_type"] == "bert"
    assert hf["hidden_act"] == "gelu" and hf["pad_token_id"] == 0 and hf["vocab_size"] == 300
    back = BertConfig.from_dict(transformers.BertConfig(**hf).to_dict())
    assert back == BertConfig.preset("tiny", vocab_size=300)


def test_decoder_is_tied_and_init_follows_bert():
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("mini", vocab_size=3000))
    emb = model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.weight is emb
    assert model.cls.predictions.decoder.bias is model.cls.predictions.bias
    assert emb[0].abs().max() == 0  # [PAD] row
    q = model.bert.encoder.layer[0].attention.self.query
    assert abs(q.weight.std().item() - 0.02) < 0.001 and q.bias.abs().max() == 0
    assert model.cls.predictions.bias.abs().max() == 0
    ln = model.bert.encoder.layer[0].output.LayerNorm
    assert (ln.weight == 1).all() and (ln.bias == 0).all()


class ShapeRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def test_mlm_head_never_builds_batch_by_length_by_vocab():
    V = 300
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=V))
    b = batch(V=V)
    with ShapeRecorder() as rec:
        out = model(**b)
        out.loss.backward()
    assert out.mlm_logits.shape == (3, 5, V) and out.nsp_logits.shape == (3, 2)
    assert (3, 24, V) not in rec.shapes and (3 * 24, V) not in rec.shapes  # forward or backward
    assert (3, 5, V) in rec.shapes


def test_losses_ignore_padded_slots_and_sum():
    V = 300
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=V)).eval()
    b = batch(V=V)
    out = model(**b)
    valid = b["masked_lm_labels"] != -100
    mlm = F.cross_entropy(out.mlm_logits[valid], b["masked_lm_labels"][valid])
    nsp = F.cross_entropy(out.nsp_logits, b["next_sentence_label"])
    torch.testing.assert_close(out.mlm_loss, mlm)
    torch.testing.assert_close(out.nsp_loss, nsp)
    torch.testing.assert_close(out.loss, mlm + nsp)
    assert model(b["input_ids"], b["token_type_ids"], b["attention_mask"], b["masked_lm_positions"]).loss is None


def test_padding_does_not_change_outputs():
    V = 300
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=V)).eval()
    b = batch(V=V)
    out = model(**b)
    padded = {k: v.clone() for k, v in b.items()}
    for k in ("input_ids", "token_type_ids", "attention_mask"):
        padded[k] = F.pad(b[k], (0, 16), value=0)
    out2 = model(**padded)
    torch.testing.assert_close(out.mlm_logits, out2.mlm_logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.nsp_logits, out2.nsp_logits, rtol=0, atol=1e-5)


def test_param_groups_no_decay_on_bias_and_layernorm():
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=300))
    decay, no_decay = model.param_groups(0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"])
    assert all(names[id(p)].endswith("bias") or "LayerNorm" in names[id(p)] for p in no_decay["params"])
    assert "bert.embeddings.word_embeddings.weight" in {names[id(p)] for p in decay["params"]}
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_schedules():
    lin = Schedule(1e-3, warmup_steps=10, max_steps=110)
    # warmup from 0 (step / warmup, as transformers' and Google's schedules), the peak at step 10
    assert [round(lin(s), 6) for s in (0, 4, 9, 10, 60, 109)] == [0.0, 4e-4, 9e-4, 1e-3, 5e-4, 1e-5]
    poly = Schedule(1e-3, warmup_steps=0, max_steps=100, kind="poly")
    assert poly(0) == 1e-3 and abs(poly(75) - 1e-3 * 0.25 ** 0.5) < 1e-12


def _reference_lamb(params, grads_per_step, lr, wd, decays, use_nvlamb=False, b1=0.9, b2=0.999, eps=1e-6):
    """LAMB as apex's multi_tensor_lamb.cu computes it, in float64 numpy, one tensor at a time:
    stage 1 forms the Adam-W update per element, stage 2 scales it by lr * ||p|| / ||u||
    only where the tensor decays (or use_nvlamb), else by lr alone."""
    params = [p.astype(np.float64) for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for t, grads in enumerate(grads_per_step, start=1):
        for i, (g, decay) in enumerate(zip(grads, decays)):
            g = g.astype(np.float64)
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            d = wd if decay else 0.0
            u = (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps) + d * params[i]
            ratio = lr
            if use_nvlamb or d != 0.0:
                pn, un = np.linalg.norm(params[i]), np.linalg.norm(u)
                ratio = lr * pn / un if pn != 0 and un != 0 else lr
            params[i] = params[i] - ratio * u
    return params


@pytest.mark.parametrize("use_nvlamb", [False, True])
def test_lamb_follows_fused_lamb_on_a_model_with_both_groups(use_nvlamb):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=120, max_position_embeddings=32))
    groups = model.param_groups(0.01)
    params = [p for g in groups for p in g["params"]]
    decays = [g["weight_decay"] != 0 for g in groups for _ in g["params"]]
    assert sum(decays) and not all(decays)  # matrices decay; biases and LayerNorm do not
    start = [p.detach().numpy().copy() for p in params]
    opt = Lamb(groups, lr=0.05, weight_decay=0.01, use_nvlamb=use_nvlamb)
    g = torch.Generator().manual_seed(1)
    steps = []
    for _ in range(3):
        grads = [torch.randn(p.shape, generator=g) for p in params]
        for p, gr in zip(params, grads):
            p.grad = gr.clone()
        opt.step()
        steps.append([gr.numpy() for gr in grads])
    want = _reference_lamb(start, steps, lr=0.05, wd=0.01, decays=decays, use_nvlamb=use_nvlamb)
    for p, w in zip(params, want):
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-4, atol=1e-6)


def test_lamb_first_step_no_decay_is_adam_and_decay_step_has_norm_lr_times_param_norm():
    """Independent of any formula: Adam's first step moves each element by lr * g / (|g| + eps);
    a trust-ratio step moves a tensor by exactly lr * ||p||."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(6, 4))
    b = torch.nn.Parameter(torch.full((4,), 3.0))  # a LayerNorm-like gain far from the step size
    opt = Lamb([{"params": [w], "weight_decay": 0.01}, {"params": [b], "weight_decay": 0.0}], lr=0.01)
    w0, b0 = w.detach().clone(), b.detach().clone()
    w.grad, b.grad = torch.randn(6, 4), torch.randn(4)
    gb = b.grad.clone()
    opt.step()
    torch.testing.assert_close(b.detach() - b0, -0.01 * gb / (gb.abs() + 1e-6))
    assert abs((w.detach() - w0).norm().item() - 0.01 * w0.norm().item()) < 1e-6


def test_lamb_matches_a_plain_implementation():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(4, 3))
    ref = p.detach().clone()
    opt = Lamb([p], lr=0.1, weight_decay=0.01)
    m = v = torch.zeros_like(ref)
    for step in range(1, 4):
        g = torch.randn(4, 3)
        p.grad = g.clone()
        opt.step()
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        u = (m / (1 - 0.9 ** step)) / ((v / (1 - 0.999 ** step)).sqrt() + 1e-6) + 0.01 * ref
        ref = ref - 0.1 * (ref.norm() / u.norm()) * u
    torch.testing.assert_close(p.detach(), ref, rtol=1e-5, atol=1e-6)


def test_attention_masks_only_batches_with_padding(monkeypatch):
    """A batch without padding attends with no mask (no masked_fill over the scores); one
    with padding still gets its mask, and a padded key still changes nothing."""
    from bertmodel.model import encoder

    V = 300
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=V))  # training: our math attention
    seen = []
    real_attention = encoder.attention
    monkeypatch.setattr(encoder, "attention", lambda q, k, v, mask, p: seen.append(mask) or real_attention(q, k, v, mask, p))
    b = batch(V=V)
    full = {**b, "attention_mask": torch.ones_like(b["attention_mask"])}
    model(**full)
    assert len(seen) == 2 and all(m is None for m in seen)
    seen.clear()
    model(**b)
    assert len(seen) == 2 and all(m is not None and not bool(m.all()) for m in seen)
    # and without padding the result is that of the masked path (eval: no dropout)
    model.eval()
    monkeypatch.setattr(encoder, "_attends_everywhere", lambda m: m is None)
    masked = model(**full).mlm_logits
    monkeypatch.undo()
    torch.testing.assert_close(model(**full).mlm_logits, masked, rtol=0, atol=1e-6)
