"""What the training data looks like at optimizer step s, for two schedules over a run:
the global batch (`--batch-size-warmup`) and the dynamic-masking rate
(`--mask-rate-schedule`). Both are pure functions of the step, so the data cursor after
step s (the sum of the global batches before it) and the masks of every batch stay
functions of (seed, step): a resumed run is still a seek, bit-exact.

Batch-size warmup (ModernBERT, Warner et al. 2024, arXiv 2412.13663: 768 -> 4,608 over
50B tokens): `START:AMOUNT` with AMOUNT in tokens (a number with an optional k, M, B or T
multiplier, e.g. `768:50B`) or in steps (`768:2000steps`). The global batch grows
linearly in steps from START to the full one (--batch-size x --grad-accum x ranks) over
the warmup, each batch rounded to the nearest multiple of grad_accum x ranks (every
micro-batch of a step is the same size: the step's batch / (grad_accum x ranks) rows a
rank). As in ModernBERT's BatchSizeWarmupScheduler, which holds every batch size for the
same number of steps, a warmup in tokens becomes steps: K = 2 W / (START + full), W the
warmup's samples (tokens over the shards' sequence length: packed FULL-SENTENCES rows
fill it; shorter pair rows make the same steps count fewer real tokens).

Mask-rate schedule (grammar, rates in (0, 1), WHEN an optimizer step, 0-based, or N% of
--max-steps, rounded):
  A:B@WHEN                      A, then B from WHEN on (`0.3:0.15@80%`)
  R@0,R@WHEN,...                phases: each rate from its WHEN on (`0.3@0,0.15@60%,0.05@90%`)
  linear:R@0,R@WHEN,...         the same points joined linearly (`linear:0.3@0,0.15@100%`),
                                the last rate held after its point
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from bertmodel.errors import BertmodelError

MULTIPLIERS = {"": 1, "k": 10 ** 3, "m": 10 ** 6, "b": 10 ** 9, "t": 10 ** 12}
_WARMUP = re.compile(r"^(\d+):(\d+(?:\.\d+)?)([kmbt]?)(tokens|tok|steps)?$", re.IGNORECASE)


@dataclass(frozen=True)
class BatchWarmup:
    """--batch-size-warmup as given: the first global batch and the warmup's length."""

    start: int
    amount: float
    unit: str  # "tokens" or "steps"


def parse_batch_warmup(text: str) -> BatchWarmup:
    m = _WARMUP.match(text.strip().replace("_", "").replace(",", ""))
    if not m:
        raise BertmodelError(f"--batch-size-warmup {text!r}: expected START:TOKENS (e.g. 768:50B) or START:Nsteps "
                             "(e.g. 768:2000steps)")
    start, number, multiplier, unit = m.groups()
    amount = float(number) * MULTIPLIERS[multiplier.lower()]
    unit = "steps" if (unit or "").lower() == "steps" else "tokens"
    if int(start) < 1 or amount <= 0:
        raise BertmodelError(f"--batch-size-warmup {text!r}: the start batch and the warmup must be positive")
    if unit == "steps" and amount != int(amount):
        raise BertmodelError(f"--batch-size-warmup {text!r}: a warmup in steps is a whole number")
    return BatchWarmup(int(start), amount, unit)


@dataclass(frozen=True)
class BatchSchedule:
    """The global batch of each optimizer step: `start` at step 0 growing linearly to
    `full` at step `steps`, in multiples of `unit` (grad_accum x ranks) samples."""

    start: int
    full: int
    steps: int
    unit: int

    @classmethod
    def build(cls, warmup: BatchWarmup, full: int, unit: int, tokens_per_sample: int) -> "BatchSchedule":
        if warmup.start > full:
            raise BertmodelError(f"--batch-size-warmup starts at {warmup.start:,} samples, above the global batch "
                                 f"({full:,}); the warmup grows the batch to it")
        start = max(unit, warmup.start // unit * unit)
        if warmup.unit == "steps":
            steps = int(warmup.amount)
        else:
            samples = math.ceil(warmup.amount / tokens_per_sample)
            steps = max(1, round(2 * samples / (start + full)))
        return cls(start, full, steps, unit)

    def global_batch(self, step: int) -> int:
        if step >= self.steps:
            return self.full
        return int(self._ramp(np.asarray([step], np.int64))[0])

    def _ramp(self, step: np.ndarray) -> np.ndarray:
        """start + (full - start) * step / steps to the nearest multiple of unit (halves up),
        at least one unit, in integers: no float rounding to drift between machines."""
        grown = self.start * self.steps + (self.full - self.start) * step  # the batch x steps
        nearest = (2 * grown + self.unit * self.steps) // (2 * self.unit * self.steps)
        return np.maximum(1, nearest) * self.unit

    def micro_batch(self, step: int) -> int:
        """Rows of each micro-batch on each rank at this step."""
        return self.global_batch(step) // self.unit

    def cursor_after(self, steps: int) -> int:
        """Global samples consumed by the first `steps` steps (the data cursor after them)."""
        ramp = min(steps, self.steps)
        return int(self._ramp(np.arange(ramp, dtype=np.int64)).sum()) + (steps - ramp) * self.full

    def describe(self, tokens_per_sample: int) -> str:
        samples = self.cursor_after(self.steps)
        return (f"batch warmup: {self.start:,} -> {self.full:,} samples a step over the first {self.steps:,} steps "
                f"({samples:,} samples, {samples * tokens_per_sample:,} tokens at {tokens_per_sample:,} a sample)")


_POINT = re.compile(r"^(\d*\.?\d+(?:e-?\d+)?)@(\d+(?:\.\d+)?%|\d+)$", re.IGNORECASE)


@dataclass(frozen=True)
class MaskRateSchedule:
    """Dynamic masking's rate per optimizer step: (first step, rate) points, held between
    them or joined linearly."""

    points: tuple[tuple[int, float], ...]
    linear: bool = False

    def __call__(self, step: int) -> float:
        at = 0
        for i, (first, _) in enumerate(self.points):
            if first <= step:
                at = i
        first, rate = self.points[at]
        if not self.linear or at == len(self.points) - 1:
            return rate
        end, next_rate = self.points[at + 1]
        return rate + (next_rate - rate) * (step - first) / (end - first)

    @property
    def max_rate(self) -> float:
        return max(rate for _, rate in self.points)  # a linear join never leaves its endpoints' range

    def describe(self) -> str:
        joined = " then linearly to " if self.linear else ", then "
        return joined.join(f"{rate:g} from step {first:,}" for first, rate in self.points)


def parse_mask_rate_schedule(text: str, max_steps: int) -> MaskRateSchedule:
    """The grammar of the module docstring; WHEN N% is round(N / 100 x max_steps), halves to even."""
    def bad(why: str) -> BertmodelError:
        return BertmodelError(f"--mask-rate-schedule {text!r}: {why}")

    spec = text.strip().replace(" ", "")
    linear = spec.lower().startswith("linear:")
    if linear:
        spec = spec[len("linear:"):]
    if ":" in spec and "," not in spec and not linear:  # A:B@WHEN
        first, _, rest = spec.partition(":")
        spec = f"{first}@0,{rest}"
    points = []
    for part in spec.split(","):
        m = _POINT.match(part)
        if not m:
            raise bad(f"{part!r} is not RATE@STEP or RATE@N% (e.g. 0.3:0.15@80%, 0.3@0,0.15@60%, or "
                      "linear:0.3@0,0.15@100%)")
        rate, when = float(m.group(1)), m.group(2)
        if not 0 < rate < 1:
            raise bad(f"rate {rate:g} is not strictly between 0 and 1")
        # N% in exact decimals: in binary floats 35% of 90 is 31.499999999999996, which would
        # round down where 12.5 (exactly a half) rounds to even; every half rounds alike.
        step = round(Fraction(when[:-1]) * max_steps / 100) if when.endswith("%") else int(when)
        if step > max_steps:
            raise bad(f"{when} is past --max-steps {max_steps:,}")
        points.append((step, rate))
    if points[0][0] != 0:
        raise bad("the first rate must start at step 0 (RATE@0)")
    if any(b[0] <= a[0] for a, b in zip(points, points[1:])):
        raise bad(f"its steps must increase ({', '.join(str(s) for s, _ in points)} at --max-steps {max_steps:,})")
    if len(points) < 2:
        raise bad("one rate is --mask-rate; a schedule has two or more")
    return MaskRateSchedule(tuple(points), linear)
