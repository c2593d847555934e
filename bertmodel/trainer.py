"""The step loop of `pretrain`, once everything is built (see train.py for the building).

Per optimizer step: grad_accum micro-batches (DDP syncs gradients only on the last, via
no_sync) -> clip the global norm -> skip the step if that norm is not finite (count it,
stop after --max-bad-steps in a row) -> optimizer step. Then, at their intervals: log
(metrics.jsonl + progress bar), evaluate, checkpoint; a SIGTERM or --stop-at saves and
stops. The one host sync per step is the gradient norm, needed for the skip decision.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from bertmodel import checkpoint as ckpt
from bertmodel import parallel
from bertmodel.config import BertConfig
from bertmodel.data import BatchLoader, ShardDataset, eval_batches
from bertmodel.errors import BertmodelError
from bertmodel.export import export_hf
from bertmodel.metrics import MetricsWriter, StepStats, peak_flops, train_flops
from bertmodel.optim import Schedule, set_lr


@torch.no_grad()
def evaluate(model, data: ShardDataset, batch_size: int, max_batches: int, d: parallel.Dist, autocast,
             max_len: int) -> dict:
    """MLM and NSP accuracy (and losses) on the first max_batches batches of `data`,
    dropout off, on the plain module (no DDP hooks, no compiled shapes to add)."""
    was_training = model.training
    model.eval()
    stats = StepStats(d.device)
    for arrays in eval_batches(data, batch_size, d.rank, d.world, max_batches, max_len):
        batch = {k: torch.from_numpy(v).to(d.device) for k, v in arrays.items()}
        with autocast:
            out = model(**batch)
        stats.add(out, batch["masked_lm_labels"], batch["next_sentence_label"])
    model.train(was_training)
    summary = StepStats.summarize(parallel.all_reduce_sum(stats.totals(), d))
    return {f"eval_{k}": v for k, v in summary.items()}


@dataclass
class Interval:
    """Throughput counters since the last log line (this rank)."""

    start: float = field(default_factory=time.perf_counter)
    samples: int = 0
    tokens: int = 0
    flops: float = 0.0


@dataclass
class Trainer:
    cfg: "TrainConfig"  # noqa: F821 - train.TrainConfig (imported there, not here: no cycle)
    d: parallel.Dist
    run: Path
    model: torch.nn.Module  # the plain module: state dicts, evaluation
    train_model: torch.nn.Module  # compiled and/or DDP-wrapped: forward/backward
    config: BertConfig
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    loader: BatchLoader
    data: ShardDataset
    eval_data: ShardDataset | None
    writer: MetricsWriter | None
    autocast: contextlib.AbstractContextManager
    log: callable
    step: int = 0
    cursor: int = 0
    bad_total: int = 0
    bad_in_row: int = 0

    def __post_init__(self):
        self.stats = StepStats(self.d.device)
        self.interval = Interval()
        self.peak = peak_flops(self.d.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.max_norm = self.cfg.clip_grad if self.cfg.clip_grad > 0 else math.inf
        self.last: dict = {"step": self.step}

    def run_until_done(self, stop) -> dict:
        cfg = self.cfg
        bar = tqdm(total=cfg.max_steps, initial=self.step, disable=not (self.d.is_main and cfg.progress),
                   unit="step", dynamic_ncols=True)
        self.model.train()
        while self.step < cfg.max_steps:
            lr = self.schedule(self.step)
            set_lr(self.optimizer, lr)
            grad_norm = self.train_step()
            bar.update(1)
            if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                self.log_interval(lr, grad_norm, bar)
            if self.eval_data is not None and (
                    (cfg.eval_every and self.step % cfg.eval_every == 0) or self.step == cfg.max_steps):
                self.evaluate()
            stopping = parallel.any_rank(stop.requested, self.d) or self.step == cfg.stop_at
            if self.step % cfg.save_every == 0 or self.step == cfg.max_steps or stopping:
                self.save()
            if stopping:
                self.log(f"stopped at step {self.step:,}" + (" on a signal" if stop.requested else "")
                         + "; rerun the same command to resume")
                break
        bar.close()
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
            self.stats.add(out, batch.tensors["masked_lm_labels"], batch.tensors["next_sentence_label"])
            B, T, P = batch.shape
            self.interval.samples += B
            self.interval.tokens += batch.tokens
            self.interval.flops += train_flops(self.config, B, T, P)
            self.cursor = batch.cursor
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.max_norm))  # the step's one sync
        if math.isfinite(grad_norm):  # the norm is global under DDP, so every rank decides alike
            self.optimizer.step()
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
        summary = StepStats.summarize(totals[:-3])
        samples, tokens, flops = totals[-3:].tolist()
        self.last = {"step": self.step, **summary, "lr": lr, "grad_norm": grad_norm,
                     "samples_per_s": samples / elapsed, "tokens_per_s": tokens / elapsed,
                     "skipped_steps": self.bad_total}
        if self.peak:
            self.last["mfu"] = flops / elapsed / (self.peak * d.world)
        if self.writer:
            self.writer.write(self.last)
        bar.set_postfix(loss=f"{summary['loss']:.3f}", mlm_acc=f"{summary['mlm_acc']:.3f}", lr=f"{lr:.2e}")
        self.stats.reset()
        self.interval = Interval()

    def evaluate(self) -> None:
        record = {"step": self.step, **evaluate(self.model, self.eval_data, self.cfg.batch_size,
                                                self.cfg.eval_batches, self.d, self.autocast,
                                                self.config.max_position_embeddings)}
        if self.writer:
            self.writer.write(record)
        self.log(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()))
        self.last.update(record)

    def save(self) -> None:
        """Every rank contributes its RNG state; rank 0 writes step-N/ and refreshes RUN/hf/."""
        rngs = parallel.gather_states(ckpt.rng_state(), self.d)
        if self.d.is_main:
            cfg = self.cfg
            state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "scheduler": {"step": self.step}, "rng": rngs,
                     "data": {"cursor": self.cursor, "seed": cfg.seed, "rows": len(self.data)},
                     "config": self.config.to_dict(), "train": asdict(cfg), "step": self.step,
                     "skipped_steps": self.bad_total}
            path = ckpt.save_checkpoint(self.run, state, self.data.tokenizer.files, cfg.keep_last)
            export_hf(state, self.run / "hf", tokenizer=self.data.tokenizer, config=self.config)
            self.log(f"saved {path} and {self.run / 'hf'}")
        parallel.barrier(self.d)
