"""The step loop, once everything is built (training/run.py builds it), for any task.

Per optimizer step: grad_accum micro-batches (DDP syncs gradients only on the last, via
no_sync) -> clip the global norm -> skip the step if that norm is not finite (count it,
stop after --max-bad-steps in a row) -> optimizer step. Then, at their intervals: log
(metrics.jsonl, reporters, progress bar), evaluate, checkpoint; a SIGTERM or --stop-at
saves and stops. The one host sync per step is the gradient norm, needed for the skip
decision. What the loss, the metrics and the FLOPs are is the task's business.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from bertmodel import checkpoint as ckpt
from bertmodel import parallel
from bertmodel.config import BertConfig
from bertmodel.data import BatchLoader
from bertmodel.errors import BertmodelError
from bertmodel.hf import export_hf
from bertmodel.metrics import MetricsWriter, peak_flops
from bertmodel.model.unpad import unpad_kernel
from bertmodel.optim import Schedule, clip_and_step, set_lr
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

    def __post_init__(self):
        self.stats = self.task.new_stats(self.d.device)
        self.interval = Interval()
        self.peak = peak_flops(self.d.device)
        self.unpadded = unpad_kernel(self.model) is not None  # FLOPs of the real tokens only, then
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.max_norm = self.cfg.clip_grad if self.cfg.clip_grad > 0 else math.inf
        self.last: dict = {"step": self.step}
        self.saved: Path | None = None  # the checkpoint written last

    def run_until_done(self, stop) -> dict:
        cfg = self.cfg
        bar = progress_bar(total=cfg.max_steps, initial=self.step, enabled=self.d.is_main and cfg.progress,
                           unit="step")
        self.model.train()
        while self.step < cfg.max_steps:
            lr = self.schedule(self.step)
            set_lr(self.optimizer, lr)
            grad_norm = self.train_step()
            bar.update(1)
            if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                self.log_interval(lr, grad_norm, bar)
            if self.task.has_eval and (
                    (cfg.eval_every and self.step % cfg.eval_every == 0) or self.step == cfg.max_steps):
                self.evaluate()
            stopping = parallel.any_rank(stop.requested, self.d) or self.step == cfg.stop_at
            if self.step % cfg.save_every == 0 or self.step == cfg.max_steps or stopping:
                self.save()
            if stopping:
                how = f" on {stop.name}" if stop.requested else ""
                self.log(f"stopped at step {self.step:,}{how}; saved {self.saved}; rerun the same command to resume")
                self.last["stopped_by"] = stop.signum
                break
        bar.close()
        self.last["checkpoint"] = str(self.saved) if self.saved else None
        return self.last

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

    def log_interval(self, lr: float, grad_norm: float, bar) -> None:
        d, iv = self.d, self.interval
        elapsed = time.perf_counter() - iv.start
        counters = torch.tensor([iv.samples, iv.tokens, iv.flops], dtype=torch.float64, device=d.device)
        totals = parallel.all_reduce_sum(torch.cat([self.stats.totals(), counters]), d)
        summary = self.stats.summarize(totals[:-3])
        samples, tokens, flops = totals[-3:].tolist()
        self.last = {"step": self.step, **summary, "lr": lr, "grad_norm": grad_norm,
                     "samples_per_s": samples / elapsed, "tokens_per_s": tokens / elapsed,
                     "skipped_steps": self.bad_total}
        if self.peak:
            self.last["mfu"] = flops / elapsed / (self.peak * d.world)
        if self.writer:
            self.writer.write(self.last)
        shown = {k: f"{summary[k]:.3f}" for k in list(summary)[:2]}
        bar.set_postfix(**shown, lr=f"{lr:.2e}")
        self.stats.reset()
        self.interval = Interval()

    def evaluate(self) -> None:
        metrics = self.task.evaluate(self.model, self.d, self.autocast)
        record = {"step": self.step, **metrics}
        if self.writer:
            self.writer.write(record)
        self.log(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()))
        self.last.update(record)
        self._track_best(metrics)

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
        self.best = {"step": self.step, "metric": name, "value": value,
                     **({"eval_loss": loss} if loss is not None else {})}
        if self.d.is_main:
            self._export(self.model)
            ckpt.write_best(self.run, self.best)
        self.log(f"best {name} so far: {value:.4f} at step {self.step:,}; exported to {self.run / 'hf'}")

    def _export(self, source) -> None:
        state = self.task.state()
        export_hf(source, self.run / "hf", tokenizer=self.task.tokenizer, config=self.config,
                  architecture=state["architecture"], head_config=state.get("hf_config"), task=state)

    def save(self) -> None:
        """Every rank contributes its RNG state; rank 0 writes step-N/ (and RUN/hf/ when
        the task keeps no best model)."""
        rngs = parallel.gather_states(ckpt.rng_state(), self.d)
        if self.d.is_main:
            cfg = self.cfg
            state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "scheduler": {"step": self.step}, "rng": rngs,
                     "data": {"cursor": self.cursor, "seed": cfg.seed, "rows": len(self.task.train_set)},
                     "config": self.config.to_dict(), "train": asdict(cfg), "step": self.step,
                     "skipped_steps": self.bad_total, "task": self.task.state(), "best": self.best,
                     "inputs": self.inputs}
            self.saved = ckpt.save_checkpoint(self.run, state, self.task.tokenizer.files, cfg.keep_last)
            if self.task.best_metric is None or self.best is None:
                self._export(state)
            self.log(f"saved {self.saved}" + (f" and {self.run / 'hf'}" if self.best is None else ""))
        else:
            self.saved = self.run / "checkpoints" / f"step-{self.step}"
        parallel.barrier(self.d)
