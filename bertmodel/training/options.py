"""The options every training run has, whatever its task: one dataclass whose field
docstrings are the documentation; pretrain's and finetune's configs extend it."""
from __future__ import annotations

from dataclasses import dataclass, field

from bertmodel.errors import BertmodelError
from bertmodel.training.optim import OPTIMIZERS, Schedule

# Options whose change on resume would change what the run means (its schedule, its
# optimizer, its data order): refused unless allow_changed_options is set.
MEANINGFUL = ("batch_size", "grad_accum", "lr", "warmup_steps", "warmup_ratio", "max_steps", "schedule",
              "decay_ratio", "decay_shape", "optimizer", "weight_decay", "clip_grad", "adam_betas", "adam_eps")


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
    schedule: str = "linear"
    """After warmup: "linear" decay to 0, "poly" (power 0.5, NVIDIA's BERT recipe) or "wsd"
    (warmup-stable-decay: the peak held, then the last decay_ratio of the steps decay to 0)."""
    decay_ratio: float | None = None
    """wsd only: share of max_steps spent decaying (at least one step); None: 0.1."""
    decay_shape: str | None = None
    """wsd only: "1-sqrt" (lr = peak * (1 - sqrt(progress)), Hägele et al. 2024, as ModernBERT) or
    "linear"; None: 1-sqrt."""
    optimizer: str = "adamw"
    """"adamw", "lamb" or "stable-adamw" (AdamW with per-tensor update clipping, as ModernBERT; optim.py)."""
    weight_decay: float | None = None
    """Decoupled weight decay; None: 0.01, or 1e-5 with stable-adamw, whose decay is fully decoupled
    (each step multiplies the weights by 1 - lr/peak x weight_decay, so AdamW's 0.01 would shrink them
    by 1% a step; ModernBERT's 1e-5)."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """The moments' betas of every optimizer here (ModernBERT: 0.9, 0.98)."""
    adam_eps: float = 1e-6
    """The optimizers' epsilon (1e-6 as BERT's AdamWeightDecay and ModernBERT)."""
    clip_grad: float | None = None
    """Clip the global gradient norm to this; 0 disables clipping (the norm is still logged). None:
    1.0, or 0 with stable-adamw, whose per-tensor update clipping takes the place of global clipping
    (as ModernBERT, which sets its gradient clipping off); given explicitly, it clips as well."""
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
        if self.optimizer not in OPTIMIZERS:
            raise BertmodelError(f"optimizer must be {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        self.adam_betas = tuple(float(b) for b in self.adam_betas)
        if len(self.adam_betas) != 2 or not all(0 <= b < 1 for b in self.adam_betas):
            raise BertmodelError(f"adam betas must be two numbers in [0, 1), got {self.adam_betas}")
        if self.adam_eps <= 0:
            raise BertmodelError(f"adam eps must be positive, got {self.adam_eps}")
        if self.weight_decay is None:
            self.weight_decay = 1e-5 if self.optimizer == "stable-adamw" else 0.01
        if self.weight_decay < 0:
            raise BertmodelError(f"weight decay must be 0 or positive, got {self.weight_decay}")
        if self.clip_grad is None:
            self.clip_grad = 0.0 if self.optimizer == "stable-adamw" else 1.0
        if self.clip_grad < 0:
            raise BertmodelError(f"clip-grad must be 0 (off) or positive, got {self.clip_grad}")
        self._check_schedule()
        self.report_to = [r for r in self.report_to if r != "none"]

    def _check_schedule(self) -> None:
        """The schedule's options, and the schedule itself once max_steps is known (finetune
        knows it only with the data), so a bad combination fails before anything loads."""
        if self.schedule not in ("linear", "poly", "wsd"):
            raise BertmodelError(f"schedule must be linear, poly or wsd, got {self.schedule!r}")
        if self.schedule != "wsd":
            if self.decay_ratio is not None or self.decay_shape is not None:
                raise BertmodelError("--decay-ratio and --decay-shape shape the wsd schedule's decay; "
                                     f"drop them or use --schedule wsd, not {self.schedule}")
            return
        if self.decay_ratio is None:
            self.decay_ratio = 0.1
        if self.decay_shape is None:
            self.decay_shape = "1-sqrt"
        if not 0 < self.decay_ratio <= 1:
            raise BertmodelError(f"decay ratio must be above 0 and at most 1, got {self.decay_ratio}")
        if self.decay_shape not in ("1-sqrt", "linear"):
            raise BertmodelError(f"decay shape must be 1-sqrt or linear, got {self.decay_shape!r}")
        if self.warmup_steps is None and self.warmup_ratio + self.decay_ratio > 1:
            raise BertmodelError(f"warmup ratio {self.warmup_ratio} + decay ratio {self.decay_ratio} exceed the "
                                 "run; lower one of them")
        if self.max_steps is not None:
            self.lr_schedule()

    def lr_schedule(self) -> Schedule:
        warmup = self.warmup_steps if self.warmup_steps is not None else round(self.warmup_ratio * self.max_steps)
        if self.schedule != "wsd":
            return Schedule(self.lr, warmup, self.max_steps, kind=self.schedule)
        decay = max(1, round(self.decay_ratio * self.max_steps))  # at least one step decays
        if self.warmup_steps is None:  # both from ratios that fit (checked above): rounding must not overlap them
            decay = min(decay, self.max_steps - warmup)
        if warmup > self.max_steps:
            raise BertmodelError(f"warmup steps {warmup} must be within 0..max steps {self.max_steps}")
        if warmup + decay > self.max_steps:
            raise BertmodelError(f"--decay-ratio {self.decay_ratio} ({decay:,} steps) does not fit after the "
                                 f"{warmup:,} warmup steps of --max-steps {self.max_steps:,}; lower one of them")
        return Schedule(self.lr, warmup, self.max_steps, kind="wsd", decay_steps=decay, decay_shape=self.decay_shape)

    def meaningful_options(self) -> tuple[str, ...]:
        """The options a resume must not change silently (a subclass adds its own)."""
        return MEANINGFUL
