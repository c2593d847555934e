"""The options every training run has, whatever its task: one dataclass whose field
docstrings are the documentation; pretrain's and finetune's configs extend it."""
from __future__ import annotations

from dataclasses import dataclass, field

from bertmodel.errors import BertmodelError
from bertmodel.training.optim import Schedule

# Options whose change on resume would change what the run means (its schedule, its
# optimizer, its data order): refused unless allow_changed_options is set.
MEANINGFUL = ("batch_size", "grad_accum", "lr", "warmup_steps", "warmup_ratio", "max_steps", "schedule",
              "optimizer", "weight_decay", "clip_grad")


@dataclass(kw_only=True)
class LoopConfig:
    out: str
    """Run directory: checkpoints/step-N/, hf/, metrics.jsonl. Rerunning resumes here."""
    batch_size: int = 32
    """Micro-batch per device; the global batch is batch_size * grad_accum * world size."""
    grad_accum: int = 1
    lr: float = 1e-4
    warmup_steps: int | None = None
    """Linear warmup steps; when None, warmup_ratio * max_steps."""
    warmup_ratio: float = 0.01
    max_steps: int = 10_000
    schedule: str = "linear"  # "linear" or "poly" (power 0.5)
    optimizer: str = "adamw"  # "adamw" or "lamb"
    weight_decay: float = 0.01
    clip_grad: float = 1.0
    """Clip the global gradient norm to this; 0 disables clipping (the norm is still logged)."""
    seed: int = 42
    device: str = "auto"
    precision: str | None = None
    """"bf16" (autocast) or "fp32"; None: bf16 on CUDA, fp32 on CPU."""
    compile: bool = False
    unpad: str = "auto"
    """"on": compute only the real tokens of each batch (packed, model/unpad.py); "off": padded;
    "auto": whichever benchmarks/bench_train_step.py measured faster on the device (padded on CPU)."""
    save_every: int = 1000
    keep_last: int = 3
    eval_every: int = 0
    """Evaluate every this many steps (0: only at the end)."""
    log_every: int = 10
    max_bad_steps: int = 10
    """Stop after this many optimizer steps in a row with a non-finite loss or gradient."""
    stop_at: int | None = None
    """Save and stop at this step without changing the schedule (time-sliced jobs)."""
    allow_changed_options: bool = False
    """On resume, apply options that differ from the run's (each is logged) instead of refusing."""
    report_to: list[str] = field(default_factory=list)
    """Where metrics go besides metrics.jsonl: "tensorboard", "wandb" (rank 0 only)."""
    progress: bool = True

    def __post_init__(self):
        for name in ("batch_size", "grad_accum", "max_steps", "save_every", "keep_last", "log_every",
                     "max_bad_steps"):  # max_steps / save_every may wait for the data (finetune)
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise BertmodelError(f"{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.unpad not in ("auto", "on", "off"):
            raise BertmodelError(f"unpad must be auto, on or off, got {self.unpad!r}")
        if self.precision not in (None, "bf16", "fp32"):
            raise BertmodelError(f"precision must be bf16 or fp32, got {self.precision!r}")
        if not 0 <= self.warmup_ratio <= 1:
            raise BertmodelError(f"warmup ratio must be within 0..1, got {self.warmup_ratio}")
        if self.lr <= 0:
            raise BertmodelError(f"lr must be positive, got {self.lr}")
        self.report_to = [r for r in self.report_to if r != "none"]

    def lr_schedule(self) -> Schedule:
        warmup = self.warmup_steps if self.warmup_steps is not None else round(self.warmup_ratio * self.max_steps)
        return Schedule(self.lr, warmup, self.max_steps, kind=self.schedule)

    def meaningful_options(self) -> tuple[str, ...]:
        """The options a resume must not change silently (a subclass adds its own)."""
        return MEANINGFUL
