"""Build a training run for any task and run it: torchtitan's fixed order.

run_training() checks and locks the run directory, lets the task open its data, resumes
from the latest complete checkpoint (refusing options that would change the run's
meaning, unless told to apply them) or asks the task for a fresh model, then: the model
on its device, the optimizer (and its state), compile, DDP, the loader at the data
cursor, and the loop (training/loop.py) until max_steps, --stop-at or a signal.

Determinism: the initial weights depend on `seed` only, dropout draws from torch's
global generator (seeded with seed + rank, saved in every checkpoint per rank), the data
order is a pure function of (seed, cursor). So on CPU in fp32, N steps + resume + N
steps gives the same weights as 2N steps straight, bit for bit.
"""
from __future__ import annotations

import contextlib
import shutil
import signal
from dataclasses import asdict
from pathlib import Path

import torch

from bertmodel.training import checkpoint as ckpt
from bertmodel.training import parallel
from bertmodel.data import BatchLoader, SampleOrder
from bertmodel.data.tokenizer_info import has_tokenizer, tokenizer_info
from bertmodel.errors import BertmodelError
from bertmodel.hf import check_export_dir
from bertmodel.training.host_memory import keep_freed_memory
from bertmodel.training.metrics import MetricsWriter, format_count
from bertmodel.model.unpad import resolve as resolve_unpad
from bertmodel.model.unpad import set_unpad
from bertmodel.training.optim import build_optimizer
from bertmodel.training.loop import Trainer
from bertmodel.training.run_dir import (LOCK_FILE, RUN_FILE, check_out_apart, check_resume_inputs, check_run_dir,
                                        check_task_of_checkpoint, write_run_record)
from bertprep.errors import BertprepError
from bertprep.storage import DirectoryLock



class StopSignal:
    """SIGTERM/SIGINT -> finish the current step, save, stop; the caller exits 128 + signal."""

    def __init__(self):
        self.requested = False
        self.signum: int | None = None
        self._previous = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError):  # not the main thread: no handler
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.requested = True
        self.signum = signum

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def all_ranks(fn, d: parallel.Dist, what: str):
    """Run fn on every rank; when any rank fails, every rank stops (a rank must not wait
    in a collective for one that raised): the failing rank with its message."""
    error, value = None, None
    try:
        value = fn()
    except (BertmodelError, BertprepError) as exc:
        error = exc
    if parallel.any_rank(error is not None, d) and error is None:
        raise BertmodelError(f"another rank found a problem with {what}; its message names it")
    if error is not None:
        raise error
    return value


def check_resume_options(saved: dict, cfg, log) -> None:
    """Refuse (or, with allow_changed_options, apply and log) options that differ from
    those the run was started with and would change what it means."""
    saved_seed = saved.get("seed")
    if saved_seed is not None and saved_seed != cfg.seed:
        # The data order and dropout streams are functions of the seed: resuming with
        # another one would silently change the run half-way.
        raise BertmodelError(f"{cfg.out}: this run was started with --seed {saved_seed}, not {cfg.seed}; "
                             "rerun with the same seed, or use another --out for a new run")
    now = asdict(cfg)
    changed = [(name, saved[name], now[name]) for name in cfg.meaningful_options()
               if name in saved and name in now and saved[name] != now[name]]
    if not changed:
        return
    listed = ", ".join(f"--{n.replace('_', '-')} {old} -> {new}" for n, old, new in changed)
    if not cfg.allow_changed_options:
        raise BertmodelError(f"{cfg.out}: resuming with changed options ({listed}); rerun with the run's own "
                             "options, use a new --out for a new run, or pass --allow-changed-options to "
                             "continue with the new values")
    log(f"warning: resuming with changed options, as asked: {listed}")


def _restore(resume: dict, optimizer, cfg, d: parallel.Dist, rows: int, log) -> tuple[int, int, int]:
    """Optimizer state and this rank's RNG state from a checkpoint; (step, cursor, skipped)."""
    optimizer.load_state_dict(resume["optimizer"])
    step, cursor = int(resume["step"]), int(resume["data"]["cursor"])
    rngs = resume["rng"]
    if len(rngs) == d.world:
        ckpt.set_rng_state(rngs[d.rank])
    else:
        log(f"warning: checkpoint from {len(rngs)} ranks, running on {d.world}: dropout streams reseeded")
        torch.manual_seed(cfg.seed + 1000 * step + d.rank)
    if resume["data"].get("rows") not in (None, rows):
        log(f"warning: the training data now holds {rows:,} rows, the checkpoint saw {resume['data']['rows']:,}; "
            "the sample order changes")
    return step, cursor, int(resume.get("skipped_steps", 0))


def run_training(cfg, make_task, log) -> dict:
    """Train (or resume) into cfg.out; make_task(d, log) opens the data and returns the
    task. Returns the last logged metrics (plus "checkpoint" and, after a signal,
    "stopped_by")."""
    d = parallel.setup(cfg.device)
    log = log if d.is_main else (lambda *a, **k: None)
    run = Path(cfg.out)
    try:
        # RUN/hf is checked now, not at the first save: the export there refuses a user's files.
        all_ranks(lambda: (check_out_apart(run, cfg.read_paths()), check_run_dir(run, cfg.task_name),
                           check_export_dir(run / "hf")), d, "the run directory")
        # Rank 0 holds RUN/.lock for the whole run: a second run into the same --out
        # stops at once instead of interleaving checkpoints and metrics.jsonl.
        lock = DirectoryLock(run, what="training run") if d.is_main else None
        created = not run.exists()
        all_ranks(lambda: lock and (run.mkdir(parents=True, exist_ok=True), lock.__enter__()), d,
                  "the run directory")
        try:
            return _run(cfg, make_task, d, run, log)
        except BaseException:
            # A run that failed before writing anything leaves no RUN dir behind that
            # looks like a started run.
            if lock is not None and created and run.is_dir() and \
                    {p.name for p in run.iterdir()} <= {LOCK_FILE, RUN_FILE}:
                lock.__exit__(None, None, None)
                lock = None
                shutil.rmtree(run, ignore_errors=True)
            raise
        finally:
            if lock is not None:
                # Unlinked while still held, so a finished RUN holds only its results.
                (run / LOCK_FILE).unlink(missing_ok=True)
                lock.__exit__(None, None, None)
    finally:
        parallel.teardown(d)


def check_resume_tokenizer(checkpoint: Path, task, cfg) -> None:
    """A resume reads its data with the tokenizer the run was trained with (the files its
    checkpoint keeps): shards of another tokenizer, even of the same size, would give the
    model other tokens under the same ids, which --allow-changed-options never allows."""
    saved = Path(checkpoint) / "tokenizer"
    if not has_tokenizer(saved):
        return  # a checkpoint written without tokenizer files: nothing to compare
    if diff := tokenizer_info(saved).same_as(task.tokenizer):
        reads = ", ".join(map(str, getattr(cfg, "data", None) or [])) or getattr(cfg, "tokenizer", None) or cfg.model
        raise BertmodelError(f"{checkpoint}: trained with another tokenizer than {reads} holds ({diff}); resume "
                             "with the run's own data, or use a new --out for a new run")


def _run(cfg, make_task, d: parallel.Dist, run: Path, log) -> dict:
    task = all_ranks(lambda: make_task(d, log), d, "the training data (shards or files)")
    rows = len(task.train_set)
    global_batch = cfg.batch_size * cfg.grad_accum * d.world
    inputs = task.inputs()  # hashed once; every checkpoint records it
    latest = ckpt.latest_checkpoint(run)
    resume = ckpt.load_checkpoint(latest) if latest else None
    if resume is not None:
        # What the run is, and what it was trained on, before any of it is loaded.
        check_task_of_checkpoint(run, resume, task.name)
        check_resume_tokenizer(latest, task, cfg)
        check_resume_inputs(resume.get("inputs"), inputs, cfg, log,  # a head's label set, before it is loaded
                            legacy_labels=(resume.get("task") or {}).get("label_space"))
        model = task.model_for_checkpoint(resume)
        check_resume_options({**resume.get("train", {}), "seed": resume["data"].get("seed")}, cfg, log)
    else:
        torch.manual_seed(cfg.seed)  # the initial weights depend on the seed only
        model = task.fresh_model(log)
    config = model.config
    if global_batch > rows:  # checked once the model options are known to be valid
        raise BertmodelError(f"the global batch ({cfg.batch_size:,} x {cfg.grad_accum} accumulation x {d.world} "
                             f"ranks = {global_batch:,}) is larger than the training data ({rows:,} samples); "
                             "lower --batch-size")
    if d.is_main:  # from here on (every start-up check passed) RUN is recognisably a run of this task
        write_run_record(run, task.name, task.architecture)
    for note in getattr(task, "notes", ()):
        log(note)
    model.to(d.device)
    if d.device.type == "cpu":
        keep_freed_memory()  # every step's large blocks reused, not page-faulted in again
    unpad = resolve_unpad(cfg.unpad, d.device, model)
    set_unpad(model, unpad)  # an attribute, not weights: checkpoints and exports are unchanged
    optimizer = build_optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay, d.device, betas=cfg.adam_betas,
                                eps=cfg.adam_eps)
    step, cursor, bad_total = 0, 0, 0
    if resume is not None:
        step, cursor, bad_total = _restore(resume, optimizer, cfg, d, rows, log)
        log(f"resuming from {latest} (step {step:,}, sample {cursor:,})")
    else:
        torch.manual_seed(cfg.seed + d.rank)  # dropout streams differ per rank
    partial = task.partial_steps(model) if hasattr(task, "partial_steps") else None
    if partial is not None and partial.steps > step:  # some first steps train part of the model (partial_steps.py)
        partial.attach(optimizer, step)
        log(partial.describe())
    pending = resume is not None and resume.get("eval_pending") and task.has_eval
    if step >= cfg.max_steps and not pending:  # (a stop cut its last evaluation short: do it)
        log(f"{run} already reached step {step:,} of {cfg.max_steps:,}; nothing to do")
        return {"step": step, "checkpoint": str(latest)}
    # A task that trains against another model (a distillation teacher) wraps the model for the
    # forward and backward only: checkpoints, evaluation and exports see the model alone.
    trained = task.training_module(model, d.device) if hasattr(task, "training_module") else model
    train_model = parallel.wrap(trained, d, cfg.compile)
    precision = cfg.precision or ("bf16" if d.device.type == "cuda" else "fp32")
    autocast = (torch.autocast(d.device.type, dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
    order = SampleOrder(rows, cfg.seed)
    # A batch-size warmup (pre-training): each step's batch from the schedule, so the
    # cursor after step s is its cumulative sum, and a resume is a seek as without one.
    batches = task.batch_schedule() if hasattr(task, "batch_schedule") else None
    loader = BatchLoader(task.train_set, order, cfg.batch_size, cursor, d.rank, d.world, d.device,
                         max_len=config.max_sequence_length, step=step, grad_accum=cfg.grad_accum,
                         batch_sizes=batches)
    # A fresh start (step 0) also drops what a run killed before its first checkpoint wrote.
    writer = _metrics_writer(cfg, run, step) if d.is_main else None
    log(f"model: {format_count(model.num_params())} parameters ({config.num_hidden_layers} layers, hidden "
        f"{config.hidden_size}, {config.num_attention_heads} heads); data: {rows:,} samples; global batch "
        f"{global_batch:,}; {d.world} x {d.device.type}, {precision}{', compiled' if cfg.compile else ''}"
        f"{f', unpadded ({unpad})' if unpad else ''}")
    trainer = Trainer(cfg, task, d, run, model, train_model, config, optimizer, cfg.lr_schedule(), loader,
                      writer, autocast, log, step=step, cursor=cursor, bad_total=bad_total,
                      best=(resume or {}).get("best"), inputs=inputs, resumed=resume, batches=batches)
    del resume  # the checkpoint's tensors (model, optimizer) are not held for the whole run
    try:
        with StopSignal() as stop:
            return trainer.run_until_done(stop)
    finally:
        loader.close()
        if writer:
            writer.close()


def _metrics_writer(cfg, run: Path, step: int) -> MetricsWriter:
    reporters = None
    if cfg.report_to:
        from bertmodel.training.reporting import open_reporters

        reporters = open_reporters(cfg.report_to, run, asdict(cfg), resume_step=step)
    if reporters is None:
        return MetricsWriter(run / "metrics.jsonl", resume_step=step)
    return MetricsWriter(run / "metrics.jsonl", resume_step=step, reporters=reporters)
