"""Optimizers (AdamW, LAMB, StableAdamW) and learning-rate schedules (linear, poly, wsd).

- AdamW: `torch.optim.AdamW`, fused where this torch build supports it for the device.
- LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning"), as NVIDIA's
  FusedLAMB that DeepLearningExamples uses for BERT: Adam moments with bias correction,
  update u = m_hat / (sqrt(v_hat) + eps) + weight_decay * p, then a per-tensor trust ratio
  ||p|| / ||u|| (1 where either norm is 0), p -= lr * ratio * u. As in FusedLAMB's default
  (use_nvlamb=False, apex multi_tensor_lamb.cu), the trust ratio applies only to groups
  with non-zero weight decay: biases and LayerNorm weights take the plain Adam step
  lr * u, since their norms (LayerNorm gains start at 1, biases at 0) say nothing about
  a sensible step size. `use_nvlamb=True` applies it to every tensor (NVLAMB). Written
  with torch's _foreach ops so it is a handful of kernels per step.
- StableAdamW (Wortsman et al. 2023, "Stable and low-precision training for large-scale
  vision-language models", arXiv 2304.13013, Algorithm 2), as ModernBERT trains with it
  (optimi's StableAdamW with decouple_lr=True, the `decoupled_stableadamw` of its
  configs): AdamW whose step is clipped per tensor instead of by the gradients' global
  norm. With debiased betas beta_hat_t = beta (1 - beta^(t-1)) / (1 - beta^t) the moments
  are Adam's bias-corrected ones; per tensor RMS = sqrt(mean(g^2 / max(v, eps^2))) and
  lr_t = lr / max(1, RMS), so a tensor whose gradient jumps far above its running second
  moment takes a smaller step (1 when its gradients are as expected: then it is AdamW).
  Weight decay is "fully decoupled": p *= 1 - (lr_t / peak_lr) * weight_decay, the decay
  following the schedule's shape but not its size (ModernBERT's 1e-5 is per step at the
  peak, not multiplied by the lr); then p -= lr_t * m / (sqrt(v) + eps). Gradients are
  already all-reduced when it runs, so under DDP every rank takes the same step.
- Schedules: linear warmup from 0 to the peak, then linear decay to 0 (Devlin et al.) or
  polynomial decay with power 0.5 (NVIDIA's BERT recipe, PolyWarmUpScheduler), or
  warmup-stable-decay ("wsd", trapezoidal): the peak held until the last `decay_steps`
  steps, which decay it to 0 linearly or as 1 - sqrt(progress) (Hägele et al. 2024,
  "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations"; ModernBERT,
  Warner et al. 2024, arXiv 2412.13663, trained with the 1-sqrt shape). Every decay reaches
  0 at step max_steps, one past the last step taken, so the last step still moves (as
  transformers' get_linear_schedule_with_warmup). A schedule is a pure function of the
  step; the trainer sets each group's lr before every step, so the only scheduler state to
  checkpoint is the step itself.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import torch

from bertmodel.errors import BertmodelError


@dataclass(frozen=True)
class Schedule:
    peak_lr: float
    warmup_steps: int
    max_steps: int
    kind: str = "linear"  # "linear", "poly" or "wsd"
    power: float = 0.5  # poly only
    decay_steps: int = 0  # wsd only: the last steps before max_steps, which decay the peak to 0
    decay_shape: str = "1-sqrt"  # wsd only: "1-sqrt" or "linear"

    def __post_init__(self):
        if self.kind not in ("linear", "poly", "wsd"):
            raise BertmodelError(f"unknown schedule {self.kind!r}; choose linear, poly or wsd")
        if not 0 <= self.warmup_steps <= self.max_steps:
            raise BertmodelError(f"warmup steps {self.warmup_steps} must be within 0..max steps {self.max_steps}")
        if self.kind == "wsd":
            if self.decay_shape not in ("1-sqrt", "linear"):
                raise BertmodelError(f"unknown decay shape {self.decay_shape!r}; choose 1-sqrt or linear")
            if not 0 <= self.decay_steps <= self.max_steps - self.warmup_steps:
                raise BertmodelError(f"decay steps {self.decay_steps} must fit after the {self.warmup_steps} warmup "
                                     f"steps, within max steps {self.max_steps}")

    def __call__(self, step: int) -> float:
        """Learning rate for optimizer step `step` (0-based)."""
        if step < self.warmup_steps:
            # step / warmup: the first step's lr is 0 (it only fills Adam's moments), as in
            # transformers' schedules (the Trainer's) and Google's optimization.py, so a
            # run here and there take the same steps.
            return self.peak_lr * step / self.warmup_steps
        if self.kind == "wsd":
            decay_start = self.max_steps - self.decay_steps
            if step < decay_start:
                return self.peak_lr
            progress = min(1.0, (step - decay_start) / max(1, self.decay_steps))  # 0 at the first decay step
            return self.peak_lr * (1.0 - (progress if self.decay_shape == "linear" else math.sqrt(progress)))
        remaining = max(0.0, 1.0 - (step - self.warmup_steps) / max(1, self.max_steps - self.warmup_steps))
        return self.peak_lr * (remaining if self.kind == "linear" else remaining ** self.power)


class Lamb(torch.optim.Optimizer):
    """LAMB with decoupled weight decay inside the trust ratio (see module docstring).
    `use_nvlamb`: also apply the trust ratio to groups without weight decay."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01, use_nvlamb: bool = False):
        if lr < 0 or eps < 0 or not all(0 <= b < 1 for b in betas):
            raise BertmodelError(f"invalid LAMB hyperparameters lr={lr} betas={betas} eps={eps}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      use_nvlamb=use_nvlamb))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            beta1, beta2 = group["betas"]
            states = [self.state[p] for p in params]
            for p, st in zip(params, states):
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float32)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            exp_avg = [st["exp_avg"] for st in states]
            exp_avg_sq = [st["exp_avg_sq"] for st in states]
            for st in states:
                st["step"] += 1
            step = float(states[0]["step"])
            torch._foreach_lerp_(exp_avg, grads, 1 - beta1)  # m = b1 m + (1 - b1) g
            torch._foreach_mul_(exp_avg_sq, beta2)
            torch._foreach_addcmul_(exp_avg_sq, grads, grads, 1 - beta2)  # v = b2 v + (1 - b2) g^2
            bc1, bc2 = 1 - beta1 ** step, 1 - beta2 ** step
            denom = torch._foreach_sqrt(exp_avg_sq)
            torch._foreach_div_(denom, bc2 ** 0.5)
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(exp_avg, denom)
            torch._foreach_div_(update, bc1)  # m_hat / (sqrt(v_hat) + eps)
            if group["weight_decay"]:
                torch._foreach_add_(update, params, alpha=group["weight_decay"])
            if group["weight_decay"] or group.get("use_nvlamb", False):
                p_norm = torch._foreach_norm(params)
                u_norm = torch._foreach_norm(update)
                ratios = [torch.where((pn > 0) & (un > 0), pn / un, torch.ones_like(pn))
                          for pn, un in zip(p_norm, u_norm)]
                torch._foreach_mul_(update, ratios)
            torch._foreach_add_(params, update, alpha=-group["lr"])
        return loss


def debiased_beta(beta: float, step: float) -> float:
    """beta (1 - beta^(t-1)) / (1 - beta^t): an average with this coefficient is Adam's
    bias-corrected one (0 at step 1, so the first moment is the first gradient)."""
    return beta * (1 - beta ** (step - 1)) / (1 - beta ** step)


class StableAdamW(torch.optim.Optimizer):
    """AdamW with per-tensor update clipping and fully decoupled weight decay (see the
    module docstring). `peak_lr`: the lr the weight decay is relative to; the lr given
    (the schedule's peak, which the trainer scales per step) when None."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.98), eps: float = 1e-6,
                 weight_decay: float = 1e-5, peak_lr: float | None = None):
        if lr < 0 or eps <= 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise BertmodelError(f"invalid StableAdamW hyperparameters lr={lr} betas={betas} eps={eps} "
                                 f"weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      peak_lr=lr if peak_lr is None else peak_lr))

    def load_state_dict(self, state_dict) -> None:
        # The weight decay is relative to this run's peak lr (a resume with another --lr,
        # allowed, must not keep the checkpoint's), as the lr itself is set every step.
        peaks = [group["peak_lr"] for group in self.param_groups]
        super().load_state_dict(state_dict)
        for group, peak in zip(self.param_groups, peaks):
            group["peak_lr"] = peak

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            by_step: dict[float, list] = {}  # tensors stepped as often share their betas (all of them, in practice)
            for p in params:
                st = self.state[p]
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float32)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["step"] += 1
                by_step.setdefault(float(st["step"]), []).append(p)
            for step, same in by_step.items():
                self._update(group, step, same)
        return loss

    def _update(self, group: dict, step: float, params: list) -> None:
        beta1, beta2 = group["betas"]
        eps, decay = group["eps"], group["weight_decay"]
        grads = [p.grad for p in params]
        exp_avg = [self.state[p]["exp_avg"] for p in params]
        exp_avg_sq = [self.state[p]["exp_avg_sq"] for p in params]
        b1, b2 = debiased_beta(beta1, step), debiased_beta(beta2, step)
        torch._foreach_lerp_(exp_avg, grads, 1 - b1)  # m = b1 m + (1 - b1) g
        torch._foreach_mul_(exp_avg_sq, b2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, 1 - b2)  # v = b2 v + (1 - b2) g^2
        # Per tensor: RMS of g / sqrt(max(v, eps^2)), with this step's v; lr_t = lr / max(1, RMS).
        ratio = torch._foreach_mul(grads, grads)
        torch._foreach_div_(ratio, torch._foreach_clamp_min(exp_avg_sq, eps * eps))
        rms = torch._foreach_norm(ratio, 1)  # the sum: every term is >= 0
        del ratio
        rms = torch._foreach_div(rms, [float(p.numel()) for p in params])
        torch._foreach_sqrt_(rms)
        torch._foreach_clamp_min_(rms, 1.0)
        step_lr = torch._foreach_reciprocal(rms)
        torch._foreach_mul_(step_lr, group["lr"])  # (one 0-dim tensor per parameter: no host sync)
        if decay:
            factor = torch._foreach_mul(step_lr, -decay / group["peak_lr"])
            torch._foreach_add_(factor, 1.0)
            torch._foreach_mul_(params, factor)  # p *= 1 - (lr_t / peak_lr) * weight_decay
        denom = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_add_(denom, eps)
        update = torch._foreach_div(exp_avg, denom)
        del denom
        torch._foreach_mul_(update, torch._foreach_neg(step_lr))
        torch._foreach_add_(params, update)  # p -= lr_t m / (sqrt(v) + eps)


OPTIMIZERS = ("adamw", "lamb", "stable-adamw")


def _fused_adamw_ok(device: torch.device) -> bool:
    if "fused" not in inspect.signature(torch.optim.AdamW).parameters:
        return False
    try:  # the CPU fused kernel exists only in newer builds; probe once
        p = torch.nn.Parameter(torch.zeros(2, device=device))
        p.grad = torch.zeros(2, device=device)
        torch.optim.AdamW([p], fused=True).step()
        return True
    except (RuntimeError, NotImplementedError):
        return False


def build_optimizer(model, name: str, lr: float, weight_decay: float, device: torch.device,
                    betas=(0.9, 0.999), eps: float = 1e-6) -> torch.optim.Optimizer:
    """AdamW (fused when available), LAMB or StableAdamW over the model's own param
    groups (no weight decay on biases and LayerNorm). eps 1e-6 as in BERT's AdamWeightDecay."""
    groups = model.param_groups(weight_decay)
    if name == "adamw":
        extra = {"fused": True} if _fused_adamw_ok(device) else {}
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **extra)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if name == "stable-adamw":
        return StableAdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    raise BertmodelError(f"unknown optimizer {name!r}; choose {', '.join(OPTIMIZERS)}")


def clip_and_step(optimizer: torch.optim.Optimizer, params: list, max_norm: float) -> float:
    """Clip the gradients' global L2 norm to max_norm (as `clip_grad_norm_`: scale by
    max_norm / (norm + 1e-6) when that is below 1; max_norm inf: no clipping), then step,
    unless the norm is not finite: then the weights and the optimizer state are left as
    they were (the gradients need not be). Returns the norm before clipping.

    Fused AdamW takes the clipping into its kernel: its `grad_scale` input (the hook
    GradScaler uses) divides each gradient as the kernel reads it, so the separate pass
    that multiplies every gradient in place (4 ms a MiniLM step on 2 cores, 3% of a CoLA
    step) is skipped. Dividing by 1/c rather than multiplying by c can differ in the last
    bit of a gradient; runs stay exactly repeatable. The kernel takes an fp32 scale only
    (GradScaler's), so a float64 model's gradients are clipped as clip_grad_norm_ clips
    them, then stepped by the same fused kernel."""
    get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6
    fused = isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults.get("fused")
    if get_total_norm is None or not fused:
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        if math.isfinite(norm):
            optimizer.step()
        return norm
    total = get_total_norm([p.grad for p in params if p.grad is not None])
    norm = float(total)  # the step's one host sync, as with clip_grad_norm_
    if math.isfinite(norm) and total.dtype != torch.float32:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
        optimizer.step()
    elif math.isfinite(norm):
        optimizer.grad_scale = (total + 1e-6).div(max_norm).clamp(min=1.0)  # 1 / clip_grad_norm_'s factor
        try:
            optimizer.step()
        finally:
            optimizer.grad_scale = None
    return norm


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
