"""Task distillation's loss (Hinton, Vinyals and Dean 2015, "Distilling the Knowledge in a
Neural Network", arXiv 1503.02531) and the module a fine-tuning step calls to take it.

  loss = alpha x T^2 x KL(softmax(t / T) || softmax(s / T)) + (1 - alpha) x task loss

s and t are the student's and the teacher's logits over the same classes; the KL is
averaged over the rows a task scores (sequences, labelled tokens, QA windows, examples of
multiple choice) and, where a task scores several distributions per row (QA's start and
end), over those as the task's loss averages them. T^2 keeps the soft targets' gradients
on the scale of the hard ones' as T changes (Hinton et al. §2). A regression head (one
output, transformers' num_labels 1) has no distribution to soften: its distillation term
is the MSE to the teacher's prediction, and T does not enter it.

The task says which outputs (and positions) the two models are compared on: a function
`logit_pairs(student_out, teacher_out, batch) -> [(student (N, K), teacher (N, K)), ...]`
(tasks/*.py). `TaskDistillation` holds the student and a frozen teacher: both see the
same batch (the same padding, the same packed layout), the teacher in eval mode under
no_grad; its output is the student's with `loss` replaced, and `kd_loss` / `task_loss`
beside it for DistillationStats to log.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertmodel.model.heads import at_least_fp32
from bertmodel.model.unpad import set_unpad, unpad_kernel

# Batch entries that are targets, not inputs: the teacher is not given them.
TARGETS = ("labels", "start_positions", "end_positions")


def soft_target_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 x KL(softmax(teacher / T) || softmax(student / T)), the mean over the N rows of
    (N, K) logits; for K = 1 (regression) the MSE of the two predictions. No rows: 0 (a
    batch whose tokens carry no label), still part of the graph."""
    student = at_least_fp32(student)
    teacher = at_least_fp32(teacher).to(student.dtype)
    if student.shape[0] == 0:
        return student.sum() * 0.0
    if student.shape[-1] == 1:
        return F.mse_loss(student.squeeze(-1), teacher.squeeze(-1))
    log_student = F.log_softmax(student / temperature, dim=-1)
    log_teacher = F.log_softmax(teacher / temperature, dim=-1)
    kl = (log_teacher.exp() * (log_teacher - log_student)).sum(-1).mean()
    return temperature * temperature * kl


def kd_loss(pairs: list[tuple[torch.Tensor, torch.Tensor]], task_loss: torch.Tensor, alpha: float,
            temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, distillation term): alpha x the mean of soft_target_loss over `pairs` +
    (1 - alpha) x task_loss."""
    kd = torch.stack([soft_target_loss(s, t, temperature) for s, t in pairs]).mean()
    return alpha * kd + (1 - alpha) * task_loss, kd


class DistilledOutput:
    """The student's output (its logits, read by the task's stats) with `loss` the
    distillation loss, and its two parts."""

    def __init__(self, student_out, loss: torch.Tensor, kd_loss: torch.Tensor, task_loss: torch.Tensor):
        self.student_out, self.loss, self.kd_loss, self.task_loss = student_out, loss, kd_loss, task_loss

    def __getattr__(self, name: str):
        if name == "student_out":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.student_out, name)


class TaskDistillation(nn.Module):
    """The module a distilling run's steps call: the student and its frozen teacher.

    The teacher is set to the student's execution (model/unpad.py: packed or padded), so
    both see one layout; it stays in eval mode (no dropout) whatever train() is called
    with, and takes no gradient. The trainer builds the optimizer, checkpoints, evaluates
    and exports from the student alone; param_groups are the student's."""

    def __init__(self, student: nn.Module, teacher: nn.Module, logit_pairs, alpha: float, temperature: float):
        super().__init__()
        self.student, self.teacher = student, teacher
        self.teacher.eval().requires_grad_(False)
        set_unpad(self.teacher, unpad_kernel(student))
        self.logit_pairs, self.alpha, self.temperature = logit_pairs, alpha, temperature

    def train(self, mode: bool = True) -> "TaskDistillation":
        self.training = mode
        self.student.train(mode)
        return self

    def param_groups(self, weight_decay: float) -> list[dict]:
        return self.student.param_groups(weight_decay)

    def forward(self, **batch) -> DistilledOutput:
        out = self.student(**batch)
        with torch.no_grad():
            taught = self.teacher(**{k: v for k, v in batch.items() if k not in TARGETS})
        loss, kd = kd_loss(self.logit_pairs(out, taught, batch), out.loss, self.alpha, self.temperature)
        return DistilledOutput(out, loss, kd, out.loss)


class DistillationStats:
    """A task's interval stats (its loss, the combined one, and its own metrics) with the
    two parts beside them: kd_loss and task_loss, each a mean per micro-batch."""

    def __init__(self, inner):
        self.inner = inner
        self.parts = None  # (kd, task, micro-batches), on the inner sums' device once the first batch is in

    @torch.no_grad()
    def add(self, out: DistilledOutput, tensors: dict) -> None:
        self.inner.add(out, tensors)
        one = torch.ones((), dtype=torch.float64, device=out.loss.device)
        step = torch.stack([out.kd_loss.detach().double(), out.task_loss.detach().double(), one])
        self.parts = step if self.parts is None else self.parts + step

    def totals(self) -> torch.Tensor:
        inner = self.inner.totals()
        parts = self.parts if self.parts is not None else inner.new_zeros(3)
        return torch.cat([inner, parts.to(inner.device)])

    def summarize(self, totals: torch.Tensor) -> dict:
        kd, task, n = totals[-3:].tolist()
        return {**self.inner.summarize(totals[:-3]), "kd_loss": kd / max(1.0, n), "task_loss": task / max(1.0, n)}

    def reset(self) -> None:
        self.inner.reset()
        self.parts = None
