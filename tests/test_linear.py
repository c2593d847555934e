"""bertmodel.model.linear: the oneDNN CPU linear is F.linear to fp32 rounding, forward
and every gradient, is chosen only where it applies, and repeats its bytes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertmodel.model.config import BertConfig
from bertmodel.model import BertForSequenceClassification
from bertmodel.model import linear as linear_module
from bertmodel.model.linear import Linear, cpu_matmul, linear, set_cpu_matmul

needs_onednn = pytest.mark.skipif(linear_module._ONEDNN is None, reason="this torch build has no oneDNN")


@pytest.fixture
def matmul_choice():
    """Restores the module's choice after a test that changes it."""
    previous = set_cpu_matmul("onednn")
    yield
    set_cpu_matmul(previous)


def products(fn, x, weight, bias, grad):
    """fn's output and the gradients of x, weight and bias for an upstream `grad`."""
    leaves = [t.detach().clone().requires_grad_(True) if t is not None else None for t in (x, weight, bias)]
    out = fn(*leaves)
    out.backward(grad)
    return [out.detach()] + [t.grad for t in leaves if t is not None]


def assert_as_exact_as_torch(x, weight, bias):
    """Each of ours is within fp32 rounding of the fp64 result: no further from it than a
    small multiple of F.linear's own fp32 error (plus an absolute floor)."""
    torch.manual_seed(1)
    grad = torch.randn(*x.shape[:-1], weight.shape[0])
    as64 = lambda t: t.double() if t is not None else None  # noqa: E731
    exact = products(F.linear, as64(x), as64(weight), as64(bias), grad.double())
    torch32 = products(F.linear, x, weight, bias, grad)
    ours = products(linear, x, weight, bias, grad)
    for name, e, t, o in zip(("output", "grad x", "grad weight", "grad bias"), exact, torch32, ours):
        torch_error = (t.double() - e).abs().max().item()
        our_error = (o.double() - e).abs().max().item()
        assert o.dtype == torch.float32 and o.shape == t.shape, name
        assert our_error <= 4 * torch_error + 1e-6 * e.abs().max().item(), (name, our_error, torch_error)


@needs_onednn
@pytest.mark.parametrize("shape", [(7, 33, 768), (300, 384), (2, 1, 64)])
def test_equal_to_f_linear_forward_and_gradients(matmul_choice, shape):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    weight = torch.randn(1536 if shape[-1] != 64 else 2, shape[-1]) * 0.05
    bias = torch.randn(weight.shape[0])
    assert_as_exact_as_torch(x, weight, bias)
    assert_as_exact_as_torch(x, weight, None)


@needs_onednn
def test_non_contiguous_input_and_concatenated_weight(matmul_choice):
    """As the encoder calls it: a view for x, Q/K/V weights concatenated per call."""
    torch.manual_seed(0)
    x = torch.randn(96, 5, 128).transpose(0, 1)  # (5, 96, 128), not contiguous
    weight = torch.cat([torch.randn(128, 128), torch.randn(128, 128), torch.randn(128, 128)]) * 0.05
    assert_as_exact_as_torch(x, weight, torch.randn(384))


@needs_onednn
def test_only_the_gradients_asked_for(matmul_choice):
    """A frozen weight and an input without gradient (an embedding output of a frozen
    table) get none; the trainable ones still do."""
    x = torch.randn(10, 32)
    weight = torch.randn(16, 32)
    bias = torch.randn(16, requires_grad=True)
    out = linear(x, weight, bias)
    assert "OneDnn" in type(out.grad_fn).__name__
    out.sum().backward()
    assert weight.grad is None and x.grad is None
    torch.testing.assert_close(bias.grad, torch.full((16,), 10.0))


@needs_onednn
def test_frozen_weight_still_gives_the_input_gradient_and_no_double_backward(matmul_choice):
    torch.manual_seed(0)
    x = torch.randn(9, 16, requires_grad=True)
    weight = torch.randn(8, 16)  # frozen: the input is not kept for it
    linear(x, weight).pow(2).sum().backward()
    # Within fp32 rounding of the fp64 gradient, as assert_as_exact_as_torch judges it: an
    # entry near 0 still carries the rounding of its terms' sizes, so a tolerance on the
    # result alone (rtol 1e-5, atol 1e-6) was 0.7 used up with MKL and oneDNN held to SSE4.2.
    exact, expected = (x.detach().to(dtype).requires_grad_(True) for dtype in (torch.float64, torch.float32))
    F.linear(exact, weight.double()).pow(2).sum().backward()
    F.linear(expected, weight).pow(2).sum().backward()
    torch_error = (expected.grad.double() - exact.grad).abs().max().item()
    our_error = (x.grad.double() - exact.grad).abs().max().item()
    assert our_error <= 4 * torch_error + 1e-6 * exact.grad.abs().max().item(), (our_error, torch_error)
    # a second-order gradient is refused in one clear error, not computed wrongly
    w = torch.randn(8, 16, requires_grad=True)
    (grad,) = torch.autograd.grad(linear(x, w).pow(2).sum(), w, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grad.sum().backward()


@needs_onednn
def test_same_bytes_every_call(matmul_choice):
    torch.manual_seed(0)
    x, weight = torch.randn(700, 768, requires_grad=True), torch.randn(3072, 768, requires_grad=True)
    runs = []
    for _ in range(3):
        x.grad = weight.grad = None
        out = linear(x, weight)
        out.backward(torch.ones_like(out))
        runs.append((out.detach().clone(), x.grad.clone(), weight.grad.clone()))
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run))


@needs_onednn
def test_chosen_only_where_it_applies(matmul_choice):
    x, weight = torch.randn(4, 8, requires_grad=True), torch.randn(6, 8)
    assert cpu_matmul() == "onednn"
    assert "OneDnn" in type(linear(x, weight).grad_fn).__name__
    # fp64 and CPU autocast go to torch (autocast casts a custom function would skip)
    assert type(linear(x.double(), weight.double()).grad_fn).__name__ == "MmBackward0"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert linear(x, weight).dtype == torch.bfloat16
    # an empty batch too, both ways
    empty = torch.randn(0, 8, requires_grad=True)
    linear(empty, weight).sum().backward()
    assert empty.grad.shape == (0, 8)
    # and switched off
    set_cpu_matmul("torch")
    assert cpu_matmul() == "torch"
    assert type(linear(x, weight).grad_fn).__name__ == "MmBackward0"


def test_unknown_choice_refused(matmul_choice):
    with pytest.raises(ValueError, match="expected one of onednn, torch"):
        set_cpu_matmul("mkl")


def test_linear_module_is_nn_linear_with_its_names():
    """State dicts and initialisation are those of nn.Linear (export relies on them)."""
    layer = Linear(8, 4)
    assert isinstance(layer, torch.nn.Linear)
    assert sorted(layer.state_dict()) == ["bias", "weight"]


@needs_onednn
def test_model_step_equal_either_way(matmul_choice):
    """A whole classification model: loss and every parameter's gradient with oneDNN
    equal those with torch's matmuls to fp32 rounding (dropout off, the same batch)."""
    config = BertConfig.preset("tiny", vocab_size=300, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config, 3)
    ids = torch.randint(5, 300, (6, 20))
    mask = (torch.arange(20)[None] < torch.tensor([20, 17, 9, 12, 20, 3])[:, None]).long()
    batch = dict(input_ids=ids * mask, token_type_ids=torch.zeros_like(ids), attention_mask=mask,
                 labels=torch.tensor([0, 1, 2, 0, 1, 2]))
    results = {}
    for choice in ("torch", "onednn"):
        set_cpu_matmul(choice)
        model.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        results[choice] = (loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    torch.testing.assert_close(results["onednn"][0], results["torch"][0], rtol=1e-5, atol=1e-6)
    for name, grad in results["torch"][1].items():
        torch.testing.assert_close(results["onednn"][1][name], grad, rtol=1e-4, atol=1e-6, msg=name)


needs_onednn_weight_grad = pytest.mark.skipif(linear_module._ONEDNN_WEIGHT_GRAD is None,
                                              reason="this torch has no oneDNN weight gradient")


@needs_onednn_weight_grad
@pytest.mark.parametrize("rows, out_features, in_features", [
    (300, 768, 384),    # oneDNN's weight and bias gradient (enough rows, both sides >= 384)
    (256, 384, 1536),   # its edges: the fewest rows, the narrowest side
    (40, 9000, 64),     # a wide output from few rows (the tied decoder's), in blocks
    (40, 8192, 32),     # the first width computed in blocks
    (255, 768, 768),    # one row short of oneDNN: MKL
    (512, 1024, 128),   # a side narrower than 384: MKL
])
def test_each_weight_gradient_kernel_equals_f_linear(matmul_choice, rows, out_features, in_features):
    torch.manual_seed(0)
    x = torch.randn(rows, in_features)
    weight = torch.randn(out_features, in_features) * 0.05
    assert_as_exact_as_torch(x, weight, torch.randn(out_features))
    assert_as_exact_as_torch(x, weight, None)


@needs_onednn_weight_grad
def test_weight_gradient_kernel_chosen_by_shape_alone(matmul_choice, monkeypatch):
    """oneDNN's weight gradient runs for BERT-base's shapes, not for narrow layers, few
    rows or the wide decoder; the choice depends on nothing but shapes (same bytes)."""
    calls = []
    real = linear_module._ONEDNN_WEIGHT_GRAD
    monkeypatch.setattr(linear_module, "_ONEDNN_WEIGHT_GRAD", lambda *a: calls.append(a[0].shape) or real(*a))

    def weight_grad(rows, out_features, in_features, bias=True):
        torch.manual_seed(0)
        w = torch.randn(out_features, in_features, requires_grad=True)
        b = torch.randn(out_features, requires_grad=True) if bias else None
        out = linear(torch.randn(rows, in_features), w, b)
        out.backward(torch.randn_like(out))
        return w.grad, None if b is None else b.grad

    first = weight_grad(1024, 3072, 768)
    assert calls == [(1024, 3072)]
    assert all(torch.equal(a, b) for a, b in zip(first, weight_grad(1024, 3072, 768)))
    weight_grad(1024, 768, 768, bias=False)
    assert len(calls) == 3
    for shape in ((168, 768, 3072), (2048, 1024, 256), (160, 30522, 64)):
        weight_grad(*shape)
    assert len(calls) == 3
