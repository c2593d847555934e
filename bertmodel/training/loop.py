"""The step loop, once everything is built (training/run.py builds it), for any task.

Per optimizer step: grad_accum micro-batches (DDP syncs gradients only on the last, via
no_sync) -> clip the global norm -> skip the step if that norm is not finite (count it,
stop after --max-bad-steps in a row) -> optimizer step. Then, at their intervals: log
(metrics.jsonl, reporters, progress bar), evaluate, checkpoint; a SIGTERM or --stop-at
saves and stops. The one host sync per step is the gradient norm, needed for the skip
decision. What the loss, the metrics and the FLOPs are is the task's business.

An evaluation shows its own progress bar, is kept out of the training rates (both
clocks pause), and a SIGINT/SIGTERM during it abandons it at the next batch: the step's
checkpoint is saved with eval_pending, and a resume evaluates that step before training
on. A checkpoint also holds the logging interval's sums so far, so the first line a
resumed run logs covers the whole interval, as in the uninterrupted run.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from bertmodel.training import checkpoint as ckpt
from bertmodel.training import parallel
from bertmodel.model.config import BertConfig
from bertmodel.data import BatchLoader
from bertmodel.errors import BertmodelError
from bertmodel.hf import export_hf
from bertmodel.training.metrics import MetricsWriter, peak_flops
from bertmodel.model.unpad import unpad_kernel
from bertmodel.training.optim import Schedule, clip_and_step, set_lr
from bertprep.progress import progress_bar


def tie_loss(metrics: dict) -> float | None:
    """The evaluation's loss, which breaks a tie of the best metric: eval_loss, or eval_mse
    for regression (its training loss); None where the task reports none (QA)."""
    for key in ("eval_loss", "eval_mse"):
        value = metrics.get(key)
        if isinstance(value, float) and math.isfinite(value):
            return value
    return None


def is_better(best: dict | None, value: float, loss: float | None, greater: bool) -> bool:
    """Whether an evaluation beats the best so far: a better metric, or the same metric
    (accuracy on a small validation set ties often) at a lower eval loss; otherwise the
    earlier step stays."""
    if best is None:
        return True
    if value != best["value"]:
        return value > best["value"] if greater else value < best["value"]
    return loss is not None and best.get("eval_loss") is not None and loss < best["eval_loss"]


class EvaluationStopped(Exception):
    """A stop signal arrived during an evaluation, which is abandoned."""


class EvalProgress:
    """The hook a task's evaluate calls as on_batch(done, total), with 0 before its first
    batch and after each: a progress bar (plain lines in a log), and a stop signal on any
    rank raises EvaluationStopped (every rank runs the same number of batches, so the
    check is collective)."""

    def __init__(self, stop, d: parallel.Dist, enabled: bool):
        self.stop, self.d, self.enabled = stop, d, enabled
        self.bar = None
        self.done, self.total = 0, None

    def __call__(self, done: int, total: int | None) -> None:
        if self.bar is None:
            self.bar = progress_bar(total=total, enabled=self.enabled, desc="eval", unit="batch", leave=False)
        self.bar.update(done - self.bar.n)
        self.done, self.total = done, total
        if parallel.any_rank(self.stop.requested, self.d):
            raise EvaluationStopped

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclass
class Interval:
    """Throughput counters since the last log line (this rank)."""

    start: float = field(default_factory=time.perf_counter)
    samples: int = 0
    tokens: int = 0
    flops: float = 0.0


@dataclass
class Trainer:
    cfg: "LoopConfig"  # noqa: F821 - training.options.LoopConfig or a subclass
    task: "Task"  # noqa: F821 - tasks.base.Task
    d: parallel.Dist
    run: Path
    model: torch.nn.Module  # the plain module: state dicts, evaluation
    train_model: torch.nn.Module  # compiled and/or DDP-wrapped: forward/backward
    config: BertConfig
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    loader: BatchLoader
    writer: MetricsWriter | None
    autocast: contextlib.AbstractContextManager
    log: callable
    step: int = 0
    cursor: int = 0
    bad_total: int = 0
    bad_in_row: int = 0
    best: dict | None = None  # {"step", "metric", "value"[, "eval_loss"]} of the model exported to RUN/hf
    inputs: dict | None = None  # what the run trains on (task.inputs()), recorded in every checkpoint
    resumed: dict | None = None  # the checkpoint resumed from: its interval sums and eval_pending are used here
    batches: "BatchSchedule | None" = None  # noqa: F821 - data.schedules: the global batch per step (a warmup)

    def __post_init__(self):
        self.stats = self.task.new_stats(self.d.device)
        self.interval = Interval()
        self.peak = peak_flops(self.d.device)
        self.unpadded = unpad_kernel(self.model) is not None  # FLOPs of the real tokens only, then
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.max_norm = self.cfg.clip_grad if self.cfg.clip_grad > 0 else math.inf
        self.last: dict = {"step": self.step}
        self.saved: Path | None = None  # the checkpoint written last
        self.bar = None  # the training progress bar, while the loop runs
        self.paused_at: float | None = None  # when the clocks stopped for an evaluation or a checkpoint
        resumed, self.resumed = self.resumed or {}, None  # no reference kept to the checkpoint's tensors
        # This step's evaluation is still to do (unless the resumed run has no evaluation data now).
        self.eval_pending = bool(resumed.get("eval_pending")) and self.task.has_eval
        self.carried = self._carried_interval(resumed.get("interval"))

    def run_until_done(self, stop) -> dict:
        """Train to max_steps (or --stop-at, or a signal). Returns the last logged figures
        with "step" the step reached (and "logged_step" where the figures are older),
        "checkpoint" and, after a signal, "stopped_by"."""
        cfg = self.cfg
        self.bar = progress_bar(total=cfg.max_steps, initial=self.step, enabled=self.d.is_main and cfg.progress,
                                unit="step")
        self.model.train()
        stopped = False
        if self.eval_pending:  # the run stopped during this step's evaluation: it comes first
            self.log(f"evaluating step {self.step:,} first: the run stopped during that evaluation")
            stopped = self._evaluate_and_save(stop, evaluate=True, save=True)
        while not stopped and self.step < cfg.max_steps:
            lr = self.schedule(self.step)
            set_lr(self.optimizer, lr)
            grad_norm = self.train_step()
            self.bar.update(1)
            if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                self.log_interval(lr, grad_norm)
            evaluate = self.task.has_eval and (
                (cfg.eval_every and self.step % cfg.eval_every == 0) or self.step == cfg.max_steps)
            stopped = self._evaluate_and_save(stop, evaluate,
                                              save=self.step % cfg.save_every == 0 or self.step == cfg.max_steps)
        self.bar.close()
        if self.last["step"] != self.step:  # stopped between log lines, or before the first
            self.last = {**self.last, "step": self.step, "logged_step": self.last["step"]}
        self.last["checkpoint"] = str(self.saved) if self.saved else None
        return self.last

    def _evaluate_and_save(self, stop, evaluate: bool, save: bool) -> bool:
        """This step's evaluation and checkpoint as scheduled, and a checkpoint on a stop;
        True when the run stops here. A stop that comes once the last step is evaluated
        and saved finds the run finished: nothing is left for a rerun to do."""
        if evaluate:
            with self._off_the_clock():
                self.evaluate(stop)
        stopping = parallel.any_rank(stop.requested, self.d) or self.step == self.cfg.stop_at
        if save or stopping:
            with self._off_the_clock():
                self.save()
        if not stopping or (self.step >= self.cfg.max_steps and not self.eval_pending):
            return False
        how = f" on {stop.name}" if stop.requested else ""
        self.log(f"stopped at step {self.step:,}{how}; saved {self.saved}; rerun the same command to resume"
                 + (f" (it evaluates step {self.step:,} first)" if self.eval_pending else ""))
        self.last["stopped_by"] = stop.signum
        return True

    def train_step(self) -> float:
        """One optimizer step over grad_accum micro-batches; returns the gradient norm."""
        cfg, d = self.cfg, self.d
        for micro in range(cfg.grad_accum):
            batch = next(self.loader)
            last_micro = micro == cfg.grad_accum - 1
            sync = contextlib.nullcontext() if last_micro or not d.ddp else self.train_model.no_sync()
            with sync:
                with self.autocast:
                    out = self.train_model(**batch.tensors)
                (out.loss / cfg.grad_accum).backward()
            self.stats.add(out, batch.tensors)
            self.interval.samples += batch.shape[0]
            self.interval.tokens += batch.tokens
            extent = {"tokens": batch.tokens, "attention_pairs": batch.attention_pairs} if self.unpadded else None
            self.interval.flops += self.task.flops(self.config, batch.tensors, extent)
            self.cursor = batch.cursor
        # The norm is global under DDP, so every rank steps or skips alike.
        grad_norm = clip_and_step(self.optimizer, self.params, self.max_norm)
        if math.isfinite(grad_norm):
            self.bad_in_row = 0
        else:  # skip: weights and optimizer state stay as they were
            self.bad_in_row += 1
            self.bad_total += 1
            self.log(f"step {self.step + 1:,}: non-finite loss or gradient; step skipped "
                     f"({self.bad_in_row} in a row)")
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        if self.bad_in_row >= cfg.max_bad_steps:
            raise BertmodelError(f"{self.bad_in_row} steps in a row with a non-finite loss or gradient (up to step "
                                 f"{self.step:,}); lower --lr, use fp32, or check the data. Weights are those of "
                                 "the last checkpoint; rerun resumes from there")
        return grad_norm

    def _interval_totals(self) -> torch.Tensor:
        """The interval's sums on every rank together, and those of a resumed checkpoint's
        interval until they are logged: [task stats..., samples, tokens, flops]."""
        iv = self.interval
        counters = torch.tensor([iv.samples, iv.tokens, iv.flops], dtype=torch.float64, device=self.d.device)
        totals = parallel.all_reduce_sum(torch.cat([self.stats.totals(), counters]), self.d)
        return totals if self.carried is None else totals + self.carried

    def _carried_interval(self, saved: dict | None) -> torch.Tensor | None:
        """The sums of the interval a resumed checkpoint was saved in: added to the first
        line logged after the resume, whose clock goes back by the interval's time so far,
        so it reads as in the uninterrupted run (not the post-resume steps alone labelled
        as the whole interval's)."""
        if not saved:
            return None
        carried = torch.tensor(saved["totals"], dtype=torch.float64, device=self.d.device)
        if carried.numel() != self.stats.totals().numel() + 3:
            return None  # sums of another layout (another task): not comparable
        self.interval.start -= saved["elapsed"]
        return carried

    @contextlib.contextmanager
    def _off_the_clock(self):
        """Evaluations and checkpoints: their time is kept out of the training rates."""
        self.paused_at = time.perf_counter()
        try:
            yield
        finally:
            self._pause_clocks(time.perf_counter() - self.paused_at)
            self.paused_at = None

    def _pause_clocks(self, seconds: float) -> None:
        """Keep `seconds` out of the training rates: the interval's clock (samples/tokens
        per s, MFU) and the progress bar's (s/step, ETA)."""
        self.interval.start += seconds
        if self.bar is not None and not self.bar.disable:
            self.bar.start_t += seconds
            self.bar.last_print_t += seconds

    def log_interval(self, lr: float, grad_norm: float) -> None:
        d, iv = self.d, self.interval
        elapsed = time.perf_counter() - iv.start
        totals = self._interval_totals()
        self.carried = None
        summary = self.stats.summarize(totals[:-3])
        samples, tokens, flops = totals[-3:].tolist()
        self.last = {"step": self.step, **summary, "lr": lr, "grad_norm": grad_norm,
                     "samples_per_s": samples / elapsed, "tokens_per_s": tokens / elapsed,
                     "skipped_steps": self.bad_total}
        if self.batches is not None:  # the logged step's global batch, and the samples consumed so far
            self.last.update(batch_size=self.batches.global_batch(self.step - 1), samples=self.cursor)
        if hasattr(self.task, "step_metrics"):  # what the task varies per step (a mask-rate schedule)
            self.last.update(self.task.step_metrics(self.step - 1))
        if self.peak:
            self.last["mfu"] = flops / elapsed / (self.peak * d.world)
        if self.writer:
            self.writer.write(self.last)
        shown = {k: f"{summary[k]:.3f}" for k in list(summary)[:2]}
        self.bar.set_postfix(**shown, lr=f"{lr:.2e}")
        self.stats.reset()
        self.interval = Interval()

    def evaluate(self, stop) -> bool:
        """Evaluate this step, with a progress bar; a stop signal abandons it, leaving it
        pending. Returns whether it completed."""
        progress = EvalProgress(stop, self.d, self.d.is_main and self.cfg.progress)
        try:
            if parallel.any_rank(stop.requested, self.d):  # the signal came during the step
                raise EvaluationStopped
            metrics = self.task.evaluate(self.model, self.d, self.autocast, on_batch=progress)
        except EvaluationStopped:
            progress.close()
            self.eval_pending = True
            done = f" after {progress.done:,} of {progress.total:,} batches" if progress.total else ""
            self.log(f"evaluation of step {self.step:,} abandoned{done} on {stop.name or 'a stop signal'}")
            return False
        finally:
            progress.close()
        self.eval_pending = False
        record = {"step": self.step, **metrics}
        if self.writer:
            self.writer.write(record)
        self.log(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()))
        self.last.update(record)
        self._track_best(metrics)
        return True

    def _track_best(self, metrics: dict) -> None:
        """Keep the best model by the task's metric in RUN/hf (and say which in best.json)."""
        if self.task.best_metric is None:
            return
        name, greater = self.task.best_metric
        value = metrics.get(f"eval_{name}")
        if value is None or not math.isfinite(value):
            return
        loss = tie_loss(metrics)
        if not is_better(self.best, value, loss, greater):
            return
        tie = (f" (as step {self.best['step']:,}'s, at a lower eval loss: {loss:.4f})"
               if self.best is not None and value == self.best["value"] else "")
        self.best = {"step": self.step, "metric": name, "value": value,
                     **({"eval_loss": loss} if loss is not None else {})}
        if self.d.is_main:
            self._export(self.model)
            ckpt.write_best(self.run, self.best)
        self.log(f"best {name} so far: {value:.4f} at step {self.step:,}{tie}; exported to {self.run / 'hf'}")

    def _export(self, source) -> None:
        if hasattr(self.task, "export"):  # a task that writes more than RUN/hf (ELECTRA's generator too)
            self.task.export(source, self.run, self.config)
            return
        state = self.task.state()
        export_hf(source, self.run / "hf", tokenizer=self.task.tokenizer, config=self.config,
                  architecture=state["architecture"], head_config=state.get("hf_config"), task=state)

    def save(self) -> None:
        """Every rank contributes its RNG state; rank 0 writes step-N/ (and RUN/hf/ when
        the task keeps no best model)."""
        rngs = parallel.gather_states(ckpt.rng_state(), self.d)
        now = time.perf_counter() if self.paused_at is None else self.paused_at  # the interval's training time
        interval = {"totals": self._interval_totals().tolist(), "elapsed": now - self.interval.start}
        if self.d.is_main:
            cfg = self.cfg
            state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "scheduler": {"step": self.step}, "rng": rngs,
                     "data": {"cursor": self.cursor, "seed": cfg.seed, "rows": len(self.task.train_set)},
                     "config": self.config.to_dict(), "train": asdict(cfg), "step": self.step,
                     "skipped_steps": self.bad_total, "task": self.task.state(), "best": self.best,
                     "inputs": self.inputs, "interval": interval, "eval_pending": self.eval_pending}
            self.saved = ckpt.save_checkpoint(self.run, state, self.task.tokenizer.files, cfg.keep_last)
            if self.task.best_metric is None or self.best is None:
                self._export(state)
            self.log(f"saved {self.saved}" + (f" and {self.run / 'hf'}" if self.best is None else ""))
        else:
            self.saved = self.run / "checkpoints" / f"step-{self.step}"
        parallel.barrier(self.d)
