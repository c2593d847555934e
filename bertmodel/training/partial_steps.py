"""Train only part of a model for the first K optimizer steps, everything else bit for bit
as it was: whole parameters, or some rows of one (the rows a grown vocabulary added,
tasks/vocab_growth.py).

How, in three hooks while the phase lasts (run.py attaches it to the optimizer):

- each parameter's gradient hook zeroes the gradient of what is frozen (every other
  parameter, the kept rows of a partly trained one), so the global norm the loop clips
  by is that of the trained part alone;
- the optimizer's step pre-hook drops the frozen parameters' gradients (`grad = None`):
  AdamW, LAMB and StableAdamW skip such a parameter entirely (no moments, no weight
  decay), so it does not move by a bit;
- the step post-hook writes the kept rows of a partly trained parameter back from a copy
  taken at the start: their gradients are zero, and with zero moments Adam's update of
  them is exactly zero, but decoupled weight decay would still shrink them.

K counts the optimizer steps taken (a step skipped for a non-finite gradient is not one);
a resume passes the steps already done, so it continues the phase where it stopped.
"""
from __future__ import annotations

import torch


class PartialSteps:
    """For the first `steps` optimizer steps only `trained` learns: parameter -> None (all
    of it) or a bool mask of its rows (dim 0) that learn."""

    def __init__(self, model: torch.nn.Module, trained: dict[torch.nn.Parameter, torch.Tensor | None], steps: int,
                 what: str):
        self.model, self.trained, self.steps, self.what = model, trained, steps, what
        self._trained_ids = {id(p) for p in trained}  # a tensor's == is elementwise: look parameters up by id
        self.done = 0
        self._handles: list = []
        self._kept: list[tuple] = []  # (parameter, rows that learn, a copy of the others)

    @property
    def active(self) -> bool:
        return self.done < self.steps

    def describe(self) -> str:
        return f"the first {self.steps:,} steps train {self.what} only; every other weight stays as it is"

    def attach(self, optimizer: torch.optim.Optimizer, steps_done: int) -> None:
        """Hook into `optimizer` and the model's parameters, `steps_done` steps into the run."""
        self.done = steps_done
        if not self.active:
            return
        rows = {id(p): (p, mask.to(p.device)) for p, mask in self.trained.items() if mask is not None}
        self._kept = [(p, mask, p.detach()[~mask].clone()) for p, mask in rows.values()]
        for p in self.model.parameters():
            if p.requires_grad:
                self._handles.append(p.register_hook(self._gradient_hook(p, rows.get(id(p), (None, None))[1])))
        self._handles.append(optimizer.register_step_pre_hook(self._drop_frozen_gradients))
        self._handles.append(optimizer.register_step_post_hook(self._after_step))

    def _gradient_hook(self, p: torch.nn.Parameter, mask: torch.Tensor | None):
        frozen = id(p) not in self._trained_ids

        def hook(grad: torch.Tensor) -> torch.Tensor:
            if not self.active:
                return grad
            if frozen:
                return torch.zeros_like(grad)
            if mask is None:
                return grad
            return grad * mask.view(-1, *([1] * (grad.dim() - 1))).to(grad.dtype)  # (V, H) * (V, 1)
        return hook

    def _drop_frozen_gradients(self, optimizer, args, kwargs) -> None:
        if not self.active:
            return
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in self._trained_ids:
                    p.grad = None

    @torch.no_grad()
    def _after_step(self, optimizer, args, kwargs) -> None:
        if not self.active:
            return
        for p, mask, kept in self._kept:
            p[~mask] = kept
        self.done += 1
        if not self.active:  # the phase is over: the hooks and the copies go
            for handle in self._handles:
                handle.remove()
            self._handles, self._kept = [], []
