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

Two weight gradients do better off MKL's plain `dy^T @ x` (`_weight_and_bias_grad`):
- from a few hundred rows or more, with both sides 384 wide or wider (BERT-base and
  MiniLM's layers), oneDNN's own inner-product weight gradient, which also sums the bias
  gradient in the same pass: 0.81-1.01x MKL's product plus `sum(0)` at BERT-base's
  shapes from 800-1,024 rows (most near 0.9; three runs of 768 x 3072, 3072 x 768,
  768 x 768 and 2,304 x 768); 1.10-1.13x MKL with a side of 128, so narrower layers
  stay on MKL;
- a wide output from few rows (the tied MLM decoder's vocabulary x hidden from the
  prediction slots alone) in blocks of output rows: MKL ran 30,522 x 768 from 160 rows
  at 56-109 GFLOP/s as one product, 134-139 in blocks of 512-2,048 rows (each block's
  slice of the gradient stays in cache).
Each product alone, the two interleaved over 30-60 calls, median; in a whole base step
at 8 x 128 (steps alternated in one process, 12 pairs) both together took 0.97-0.98x.

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


def _ramp(*shape: int) -> torch.Tensor:
    """Small distinct values of this shape, to try an op on once at import."""
    n = torch.Size(shape).numel()
    return torch.arange(n, dtype=torch.float32).reshape(shape) / n


def _onednn_linear_op():
    """oneDNN's linear, or None in a torch built without it. The op is internal to
    torch, so it is also tried once on small tensors, the way the backward calls it (a
    transposed weight view), and left alone if it fails or disagrees with F.linear in
    this torch version."""
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        op = torch.ops.mkldnn._linear_pointwise.default
        x, w, b = _ramp(3, 4), _ramp(5, 4), _ramp(5)
        works = (torch.allclose(op(x, w, b, "none", [], ""), F.linear(x, w, b), atol=1e-5)
                 and torch.allclose(op(x @ w.t(), w.t(), None, "none", [], ""), (x @ w.t()) @ w, atol=1e-5))
        return op if works else None
    except (AttributeError, RuntimeError, NotImplementedError):
        return None


_ONEDNN = _onednn_linear_op()


def _onednn_weight_grad_op():
    """oneDNN's inner-product weight and bias gradient (on oneDNN tensors), or None where
    this torch has no such op or it disagrees with torch's product; tried once on small
    tensors, as `_onednn_linear_op` is."""
    try:
        if _ONEDNN is None:
            return None
        op = torch.ops.aten.mkldnn_linear_backward_weights.default
        grad, x = _ramp(3, 5), _ramp(3, 4)
        w, b = op(grad.to_mkldnn(), x.to_mkldnn(), _shape_of_weight(grad, x), True)
        works = (w.layout == torch.strided and torch.allclose(w, grad.t() @ x, atol=1e-5)
                 and torch.allclose(b, grad.sum(0), atol=1e-5))
        return op if works else None
    except (AttributeError, RuntimeError, NotImplementedError):
        return None


def _shape_of_weight(grad: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """A stand-in for the weight, whose shape alone oneDNN's weight gradient reads
    (the backward keeps no weight when only the weight's gradient is asked for)."""
    return grad.new_zeros(()).expand(grad.shape[-1], rows.shape[-1])


_ONEDNN_WEIGHT_GRAD = _onednn_weight_grad_op()
# Where oneDNN's weight gradient beats MKL's (module docstring): rows, narrowest side.
ONEDNN_WEIGHT_GRAD_MIN_ROWS = 256
ONEDNN_WEIGHT_GRAD_MIN_SIDE = 384
# A weight gradient at least this many outputs wide from fewer rows than that is
# computed in blocks of WIDE_OUTPUT_BLOCK output rows (the tied MLM decoder's).
WIDE_OUTPUT = 8192
WIDE_OUTPUT_BLOCK = 2048


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
        grad_w, grad_b = _weight_and_bias_grad(grad, rows, ctx.needs_input_grad[1],
                                               ctx.has_bias and ctx.needs_input_grad[2])
        return grad_x, grad_w, grad_b


def _weight_and_bias_grad(grad: torch.Tensor, rows: torch.Tensor | None, want_weight: bool,
                          want_bias: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """dy^T @ x and dy summed over rows, each where asked for, by the kernel that is
    faster at these shapes (module docstring). The choice depends on shapes alone, so a
    run repeats its bytes."""
    if not want_weight:
        return None, grad.sum(0) if want_bias else None
    n, out_features, in_features = grad.shape[0], grad.shape[1], rows.shape[1]
    if (_ONEDNN_WEIGHT_GRAD is not None and n >= ONEDNN_WEIGHT_GRAD_MIN_ROWS and out_features < WIDE_OUTPUT
            and min(out_features, in_features) >= ONEDNN_WEIGHT_GRAD_MIN_SIDE):
        grad_w, grad_b = _ONEDNN_WEIGHT_GRAD(grad.to_mkldnn(), rows.to_mkldnn(), _shape_of_weight(grad, rows),
                                             want_bias)
        return grad_w, grad_b if want_bias else None
    if out_features >= WIDE_OUTPUT and n < ONEDNN_WEIGHT_GRAD_MIN_ROWS:
        grad_w = grad.new_empty(out_features, in_features)
        for start in range(0, out_features, WIDE_OUTPUT_BLOCK):
            block = slice(start, start + WIDE_OUTPUT_BLOCK)
            torch.mm(grad[:, block].t(), rows, out=grad_w[block])
    else:
        grad_w = grad.t().mm(rows)
    return grad_w, grad.sum(0) if want_bias else None


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
