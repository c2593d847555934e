"""`pretrain`: the BERT pre-training loop (masked LM + next sentence prediction).

train() builds the pieces in a fixed order, torchtitan style: open and check the shards,
resume from the latest complete checkpoint or --init-from or the preset, the model on
its device, the optimizer (and its state), compile, DDP, the loader at the data cursor;
then trainer.Trainer runs the steps (log, evaluate, checkpoint; stop at max_steps, at
--stop-at, or on SIGTERM, after writing a checkpoint).

Determinism: the model is initialised from `seed`, dropout draws from torch's global
generator (seeded with seed + rank, saved in every checkpoint per rank), the data order is
a pure function of (seed, cursor). So on CPU in fp32, N steps + resume + N steps gives the
same weights as 2N steps straight, bit for bit (tests/test_train.py, tests/test_train_ddp.py).
"""
from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from bertmodel import checkpoint as ckpt
from bertmodel import parallel
from bertmodel.config import BertConfig
from bertmodel.data import BatchLoader, SampleOrder, ShardDataset
from bertmodel.errors import BertmodelError
from bertprep.errors import BertprepError
from bertmodel.export import load_into, load_pretrained
from bertmodel.metrics import MetricsWriter, format_count
from bertmodel.model import BertForPreTraining
from bertmodel.optim import Schedule, build_optimizer
from bertmodel.data.shards import open_shard_dir
from bertmodel.trainer import Trainer
from bertprep.errors import check_parent_is_directory


@dataclass
class TrainConfig:
    data: list[str]
    """Shard directories written by `bertprep build-shards` (read together)."""
    out: str
    """Run directory: checkpoints/step-N/, hf/, metrics.jsonl. Rerunning resumes here."""
    preset: str = "base"
    """Model size preset (config.PRESETS); --layers/--hidden/--heads/--intermediate override."""
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    intermediate: int | None = None
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
    save_every: int = 1000
    keep_last: int = 3
    eval_data: list[str] = field(default_factory=list)
    eval_every: int = 0
    """Evaluate MLM/NSP accuracy on eval_data every this many steps (0: only at the end)."""
    eval_batches: int = 50
    log_every: int = 10
    init_from: str | None = None
    """An HF BertForPreTraining dir or one of our run/checkpoint dirs to start from."""
    max_bad_steps: int = 10
    """Stop after this many optimizer steps in a row with a non-finite loss or gradient."""
    stop_at: int | None = None
    """Save and stop at this step without changing the schedule (time-sliced jobs)."""
    verify: str = "sha256"  # shard check: "sha256" or "size" (see shards.py)
    tokenizer: str | None = None
    """Tokenizer (vocab.txt or dir) for shard dirs that carry none."""
    progress: bool = True

    def __post_init__(self):
        for name in ("batch_size", "grad_accum", "max_steps", "save_every", "keep_last", "log_every",
                     "eval_batches", "max_bad_steps"):
            if getattr(self, name) <= 0:
                raise BertmodelError(f"{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.precision not in (None, "bf16", "fp32"):
            raise BertmodelError(f"precision must be bf16 or fp32, got {self.precision!r}")
        if not 0 <= self.warmup_ratio <= 1:
            raise BertmodelError(f"warmup ratio must be within 0..1, got {self.warmup_ratio}")
        if self.lr <= 0:
            raise BertmodelError(f"lr must be positive, got {self.lr}")

    def model_config(self, vocab_size: int, pad_id: int) -> BertConfig:
        return BertConfig.preset(self.preset, num_hidden_layers=self.layers, hidden_size=self.hidden,
                                 num_attention_heads=self.heads, intermediate_size=self.intermediate,
                                 vocab_size=vocab_size, pad_token_id=pad_id)

    def lr_schedule(self) -> Schedule:
        warmup = self.warmup_steps if self.warmup_steps is not None else round(self.warmup_ratio * self.max_steps)
        return Schedule(self.lr, warmup, self.max_steps, kind=self.schedule)


class _Stop:
    """SIGTERM/SIGINT -> finish the current step, save, exit cleanly."""

    def __init__(self):
        self.requested = False
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError):  # not the main thread: no handler
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.requested = True

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _open_data(dirs, cfg: TrainConfig, d: parallel.Dist) -> ShardDataset:
    """Open (and check) the shard directories. Under DDP each rank hashes its share of
    the files, so the ranks agree on the outcome before going on: a rank that found a
    damaged file must not leave the others waiting in a collective."""
    error, data = None, None
    try:
        data = ShardDataset([open_shard_dir(p, verify=cfg.verify, rank=d.rank, world=d.world, tokenizer=cfg.tokenizer)
                             for p in dirs])
    except (BertmodelError, BertprepError) as exc:
        error = exc
    if parallel.any_rank(error is not None, d) and error is None:
        raise BertmodelError("another rank found a problem with the shards; its message names the file")
    if error is not None:
        raise error
    return data


def _build_model(cfg: TrainConfig, data: ShardDataset, resume: dict | None, log):
    """(model on CPU, its config): from a checkpoint we resume, --init-from, or the preset."""
    tok = data.tokenizer
    if resume is not None:
        config = BertConfig.from_dict(resume["config"])
        if not cfg.init_from:
            wanted = cfg.model_config(tok.vocab_size, tok.special_ids.get("pad", 0))
            if wanted != config:
                raise BertmodelError(f"{cfg.out} holds checkpoints of another model ({config.num_hidden_layers} layers, "
                                     f"hidden {config.hidden_size}); use another --out or the same size options")
        _check_positions(config, data)
        model = BertForPreTraining(config)
        model.load_state_dict(resume["model"])
        return model, config
    if cfg.init_from:
        if any(v is not None for v in (cfg.layers, cfg.hidden, cfg.heads, cfg.intermediate)):
            raise BertmodelError("--init-from takes the model size from the checkpoint; drop the size options")
        pre = load_pretrained(cfg.init_from)
        if pre.config.vocab_size != tok.vocab_size:
            raise BertmodelError(f"{cfg.init_from}: vocab size {pre.config.vocab_size:,} but the shards' tokenizer has "
                                 f"{tok.vocab_size:,}; use shards built with the model's tokenizer")
        if pre.tokenizer is not None:
            diff = pre.tokenizer.same_as(tok)
            if diff:
                raise BertmodelError(f"{cfg.init_from}: its tokenizer differs from the shards' ({diff})")
        else:
            log(f"warning: {cfg.init_from} has no tokenizer files; only the vocab size could be checked")
        _check_positions(pre.config, data)
        model = BertForPreTraining(pre.config)
        load_into(model, pre)
        log(f"initialised from {pre.source}")
        return model, pre.config
    config = cfg.model_config(tok.vocab_size, tok.special_ids.get("pad", 0))
    _check_positions(config, data)
    return BertForPreTraining(config), config


def _check_positions(config: BertConfig, data: ShardDataset) -> None:
    longest = data.max_seq_length
    if longest > config.max_position_embeddings:
        raise BertmodelError(f"shards hold sequences of {longest} tokens but the model has "
                             f"{config.max_position_embeddings} positions")


def train(cfg: TrainConfig, log=tqdm.write) -> dict:
    """Pre-train (or resume) into cfg.out. Returns the last logged metrics."""
    d = parallel.setup(cfg.device)
    log = log if d.is_main else (lambda *a, **k: None)
    try:
        return _train(cfg, d, log)
    finally:
        parallel.teardown(d)


RUN_ENTRIES = ("checkpoints", "hf", "metrics.jsonl")  # what a pretrain RUN dir holds


def _check_run_dir(run: Path) -> None:
    """RUN is new, empty, or one of ours (then the run resumes): never someone's files."""
    check_parent_is_directory(run)
    if run.exists() and not run.is_dir():
        raise BertmodelError(f"{run}: exists and is a file, not a run directory")
    if run.is_dir() and any(run.iterdir()) and not any((run / name).exists() for name in RUN_ENTRIES):
        raise BertmodelError(f"{run}: exists and is not a pretrain run directory (no checkpoints/ or "
                             "metrics.jsonl); choose a new or empty --out")


def _restore(resume: dict, optimizer, cfg: TrainConfig, d: parallel.Dist, rows: int, log) -> tuple[int, int, int]:
    """Optimizer state and this rank's RNG state from a checkpoint; (step, cursor, skipped)."""
    saved_seed = resume["data"].get("seed")
    if saved_seed is not None and saved_seed != cfg.seed:
        # The data order and dropout streams are functions of the seed: resuming with
        # another one would silently change the run half-way.
        raise BertmodelError(f"{cfg.out}: this run was started with --seed {saved_seed}, not {cfg.seed}; "
                             "rerun with the same seed, or use another --out for a new run")
    optimizer.load_state_dict(resume["optimizer"])
    step, cursor = int(resume["step"]), int(resume["data"]["cursor"])
    rngs = resume["rng"]
    if len(rngs) == d.world:
        ckpt.set_rng_state(rngs[d.rank])
    else:
        log(f"warning: checkpoint from {len(rngs)} ranks, running on {d.world}: dropout streams reseeded")
        torch.manual_seed(cfg.seed + 1000 * step + d.rank)
    if resume["data"].get("rows") not in (None, rows):
        log(f"warning: the shards now hold {rows:,} rows, the checkpoint saw {resume['data']['rows']:,}; "
            "the sample order changes")
    return step, cursor, int(resume.get("skipped_steps", 0))


def _train(cfg: TrainConfig, d: parallel.Dist, log) -> dict:
    run = Path(cfg.out)
    _check_run_dir(run)
    data = _open_data(cfg.data, cfg, d)
    eval_data = _open_data(cfg.eval_data, cfg, d) if cfg.eval_data else None
    if eval_data is not None and (diff := eval_data.tokenizer.same_as(data.tokenizer)):
        raise BertmodelError(f"--eval-data uses another tokenizer than --data ({diff})")
    latest = ckpt.latest_checkpoint(run)
    resume = ckpt.load_checkpoint(latest) if latest else None
    if resume is None:
        torch.manual_seed(cfg.seed)  # the initial weights depend on the seed only
    model, config = _build_model(cfg, data, resume, log)
    if eval_data is not None:
        _check_positions(config, eval_data)
    model.to(d.device)
    optimizer = build_optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay, d.device)
    step, cursor, bad_total = 0, 0, 0
    if resume is not None:
        step, cursor, bad_total = _restore(resume, optimizer, cfg, d, len(data), log)
        log(f"resuming from {latest} (step {step:,}, sample {cursor:,})")
    else:
        torch.manual_seed(cfg.seed + d.rank)  # dropout streams differ per rank
    if step >= cfg.max_steps:
        log(f"{run} already reached step {step:,} of {cfg.max_steps:,}; nothing to do")
        return {"step": step}
    train_model = parallel.wrap(model, d, cfg.compile)
    precision = cfg.precision or ("bf16" if d.device.type == "cuda" else "fp32")
    autocast = (torch.autocast(d.device.type, dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
    schedule = cfg.lr_schedule()
    order = SampleOrder(len(data), cfg.seed)
    loader = BatchLoader(data, order, cfg.batch_size, cursor, d.rank, d.world, d.device,
                         max_len=config.max_position_embeddings)
    run.mkdir(parents=True, exist_ok=True)
    # A fresh start (step 0) also drops what a run killed before its first checkpoint wrote.
    writer = MetricsWriter(run / "metrics.jsonl", resume_step=step) if d.is_main else None
    global_batch = cfg.batch_size * cfg.grad_accum * d.world
    log(f"model: {format_count(model.num_params())} parameters ({config.num_hidden_layers} layers, hidden "
        f"{config.hidden_size}, {config.num_attention_heads} heads); data: {len(data):,} samples; global batch "
        f"{global_batch:,}; {d.world} x {d.device.type}, {precision}{', compiled' if cfg.compile else ''}")
    trainer = Trainer(cfg, d, run, model, train_model, config, optimizer, schedule, loader, data, eval_data,
                      writer, autocast, log, step=step, cursor=cursor, bad_total=bad_total)
    try:
        with _Stop() as stop:
            return trainer.run_until_done(stop)
    finally:
        loader.close()
        if writer:
            writer.close()
