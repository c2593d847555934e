"""`Linear` and `linear()`: `nn.Linear` / `F.linear`, with the CPU's fp32 matmuls that
are slow in torch's default BLAS run through oneDNN instead.

On a CPU torch sends an fp32 `F.linear` to MKL's sgemm. On this project's AMD EPYC (Zen
4, 2 cores) MKL runs the two products a linear layer's forward and input gradient need,
x @ W^T and dy @ W, at 95-130 GFLOP/s at BERT's shapes with a few hundred to a couple of
thousand rows (768 x 768 -> 3072 and the like), where oneDNN, which torch ships for its
own CPU kernels (`mkldnn::_linear_pointwise`, the op inductor's CPU linear fusion calls),
runs them at 155-180 alone and up to 200 inside a step. The weight gradient dy^T @ x
MKL already runs at 150-185, as fast as oneDNN, and oneDNN made whole steps slower
there, so it stays with torch. Measured with each product alone (20 calls, median),
and in whole steps (`benchmarks/bench_train_step.py`, its `torch-mm` variant: the same
step on MKL): a bert-base classification step on 32 packed SST-2-length rows took 0.87x
its MKL time, a base pre-training step at 8 x 128 0.90x, mini 0.98x.

The results are fp32 products like MKL's, summed in another order: equal to `F.linear`
to fp32 rounding (tests/test_linear.py), and, like MKL's, the same bytes every call for
the same shapes and thread count, so a seed still replays a run exactly. oneDNN builds a
kernel per new shape and caches it (about 1 ms, once per distinct row count; its cache
holds 1,024).

Used only where it applies: fp32 on the CPU, no CPU autocast (whose casts a custom
function would bypass), not under torch.compile (inductor picks its own kernels), a
torch built with oneDNN. Everything else is `F.linear`. `set_cpu_matmul("torch")` (or
BERTMODEL_CPU_MATMUL=torch in the environment) turns it off, to compare or to rule it out.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

CHOICES = ("onednn", "torch")


def _checked(choice: str, what: str) -> str:
    if choice not in CHOICES:
        raise ValueError(f"{what}={choice!r}: expected one of {', '.join(CHOICES)}")
    return choice


_choice = _checked(os.environ.get("BERTMODEL_CPU_MATMUL", "onednn"), "BERTMODEL_CPU_MATMUL")


def _onednn_linear_op():
    """oneDNN's linear, or None in a torch built without it. The op is internal to
    torch, so it is also tried once on small tensors, the way the backward calls it (a
    transposed weight view), and left alone if it fails or disagrees with F.linear in
    this torch version."""
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        op = torch.ops.mkldnn._linear_pointwise.default
        x, w, b = (torch.arange(n, dtype=torch.float32).reshape(shape) / n
                   for n, shape in ((12, (3, 4)), (20, (5, 4)), (5, (5,))))
        works = (torch.allclose(op(x, w, b, "none", [], ""), F.linear(x, w, b), atol=1e-5)
                 and torch.allclose(op(x @ w.t(), w.t(), None, "none", [], ""), (x @ w.t()) @ w, atol=1e-5))
        return op if works else None
    except (AttributeError, RuntimeError, NotImplementedError):
        return None


_ONEDNN = _onednn_linear_op()


def set_cpu_matmul(choice: str) -> str:
    """"onednn" (the default where torch has it) or "torch"; returns the one before."""
    global _choice
    previous, _choice = _choice, _checked(choice, "cpu_matmul")
    return previous


def cpu_matmul() -> str:
    """What fp32 CPU linears run on now: "onednn" or "torch"."""
    return "onednn" if _choice == "onednn" and _ONEDNN is not None else "torch"


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (M, K) @ weight (N, K)^T + bias, by oneDNN; weight may be a transposed view."""
    return _ONEDNN(x, weight, bias, "none", [], "")


class _OneDnnLinear(torch.autograd.Function):
    """Forward and input gradient by oneDNN, weight and bias gradients by torch."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        # As F.linear: the input is kept only for a weight gradient, the weight only for
        # an input gradient (a frozen layer does not hold its input).
        ctx.save_for_backward(rows if ctx.needs_input_grad[1] else None,
                              weight if ctx.needs_input_grad[0] else None)
        ctx.input_shape = x.shape
        ctx.has_bias = bias is not None
        return _onednn(rows, weight, bias).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    @once_differentiable  # oneDNN's op has no autograd of its own: no double backward
    def backward(ctx, grad: torch.Tensor):
        rows, weight = ctx.saved_tensors
        grad = grad.reshape(-1, grad.shape[-1])
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _onednn(grad, weight.t(), None).view(ctx.input_shape)  # dy @ W
        if ctx.needs_input_grad[1]:
            grad_w = grad.t().mm(rows)  # MKL is as fast as oneDNN here
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b


def _uses_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (cpu_matmul() == "onednn" and x.device.type == "cpu" and x.dtype == torch.float32
            and weight.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling())


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`."""
    if _uses_onednn(x, weight):
        return _OneDnnLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """`nn.Linear` (same parameters, names and initialisation) computed by `linear()`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
