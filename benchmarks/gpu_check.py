"""One-command GPU check: BERT-base at seq 128 and ModernBERT-base at 1,024 in bf16 on this
CUDA device.

1. step throughput: synthetic realistic batches (seq 128, 20 prediction slots, 90% of
   rows full length), forward + backward + clip + fused AdamW, bf16 autocast; padded and
   unpadded (`--unpad on`'s kernel: nested/jagged tensors on CUDA), each eager and with
   torch.compile (a mode that fails to compile is reported and skipped); warm-up steps,
   then timed steps between cuda.synchronize() calls; then the unpadded/padded and
   compiled/eager ratios;
1b. the same modes for ModernBERT-base (ModernBertForMaskedLM, MLM alone) on rows of
   1,024 tokens (90% full length, 15% predicted as in the BERT rows, up to 160 slots;
   ModernBERT trains at 30%; the shards' vocabulary, 30,522, not ModernBERT's 50,368),
   --modernbert-batch-size rows a step (32: the 32,768 token slots of BERT's 256 x 128);
   unpadded, its global layers take the jagged kernel and its local (sliding-window)
   layers the banded repad one (model/unpad.py). No target is set for these rows:
   samples/s, tokens/s and MFU are for the record (`--no-modernbert`: skip);
2. the real loop: `bertmodel pretrain` on synthetic shards (loader thread, per-step
   non-finite check, metrics.jsonl), samples/s and MFU read back from its metrics; then
   the same loop with `--objective rtd` (ELECTRA: a generator 1/3 the width and the
   discriminator, the trainer's FLOP count of both), its step time against MLM's: no
   target set (`--no-rtd`: skip);
3. data loading: collate samples/s on this machine's CPU, against what the GPU consumes.
Prints samples/s, real (non-pad) tokens/s and MFU (FLOPs as in bertmodel/training/metrics.py,
counting what each mode computes: an unpadded step only its real tokens; ModernBERT's
local layers only their window, train_flops with pair_head=False; peak from its table,
H100/H200 989 TFLOP/s dense bf16). Targets on an H200 (BERT-base): >= 5,000 samples/s
and >= 40% MFU.

  python benchmarks/gpu_check.py [--batch-size 256] [--steps 30] [--no-compile] [--no-unpad] [--loop-steps 60]
         [--modernbert-batch-size 32] [--no-modernbert] [--no-rtd]

Without CUDA it prints why and exits with status 2 (nothing to check).

Time: five compiles (BERT padded and unpadded, the compiled loop, ModernBERT padded and
unpadded) are most of it (not yet measured on a GPU: expect minutes each); the eager
modes take seconds. Each mode's line is printed when it is measured, so a run stopped by
a time limit still reports the modes it finished; `--no-compile` gives the eager figures
in well under a minute.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertmodel.model.config import BertConfig, ModernBertConfig
from bertmodel.data import SampleOrder, ShardDataset
from bertmodel.model.unpad import unpadded_extent
from bertmodel.training.metrics import peak_flops, train_flops
from bertmodel.model import BertForPreTraining, ModernBertForMaskedLM
from bertmodel.model.unpad import resolve, set_unpad
from bertmodel.training.optim import build_optimizer
from bertmodel.data.shards import open_shard_dir
from bertmodel.data.synthetic import synthetic_rows, write_shard_dir

TARGET_SAMPLES_S, TARGET_MFU = 5000, 0.40
VOCAB = 30522
MODERNBERT_SEQ = 1024


@dataclass
class Arch:
    """A model whose step throughput is measured: `prefix` begins its rows' names (BERT's: none)."""

    prefix: str
    config: BertConfig | ModernBertConfig
    model_class: type
    batch_size: int
    seq: int


def synthetic_shards(tmp: Path, rows: int, seq: int = 128, predictions: int = 20) -> Path:
    vocab = tmp / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                *(f"w{i}" for i in range(VOCAB - 104))]) + "\n")
    return write_shard_dir(tmp / f"shards-{seq}", synthetic_rows(rows, VOCAB, seed=0, max_seq_length=seq,
                                                                  max_predictions=predictions),
                           vocab, num_shards=4, batch_rows=2048, max_seq_length=seq,
                           max_predictions_per_seq=predictions)


def modernbert_shards(tmp: Path, args) -> Path:
    """Rows of MODERNBERT_SEQ tokens, 15% predicted (synthetic_rows' rate) in up to 160 slots."""
    rows = 16 if args.cpu_smoke else max(512, 16 * args.modernbert_batch_size)
    return synthetic_shards(tmp, rows, MODERNBERT_SEQ, math.ceil(0.15 * MODERNBERT_SEQ / 8) * 8)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_steps(model, optimizer, batches, steps: int, warmup: int, config: BertConfig | ModernBertConfig, device,
               unpadded: bool = False) -> dict:
    params = [p for p in model.parameters()]
    model.train()

    def step(b):
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    for i in range(warmup):
        step(batches[i % len(batches)])
    sync(device)
    t0 = time.perf_counter()
    losses = [step(batches[i % len(batches)]) for i in range(steps)]
    sync(device)
    elapsed = time.perf_counter() - t0
    timed = [batches[i % len(batches)] for i in range(steps)]
    extents = [unpadded_extent(b["attention_mask"]) for b in timed]
    flops = sum(step_flops(config, b, e if unpadded else None) for b, e in zip(timed, extents))
    samples = sum(b["input_ids"].shape[0] for b in timed)
    real_tokens = sum(e["tokens"] for e in extents)
    peak = peak_flops(device)
    loss_values = [float(x) for x in losses]
    return {"samples_s": samples / elapsed, "tokens_s": real_tokens / elapsed, "ms_step": 1e3 * elapsed / steps,
            "mfu": flops / elapsed / peak if peak else None, "finite": all(np.isfinite(loss_values)),
            "first_loss": loss_values[0], "last_loss": loss_values[-1]}


def step_flops(config: BertConfig | ModernBertConfig, b: dict, extent: dict | None) -> float:
    """What one step computes: padded (extent None), every (B, T) position; unpadded, the
    real tokens and each sequence's own attention pairs of `extent` (model/unpad.py's
    unpadded_extent, as the trainer counts them). BERT's pair head (NSP) too; ModernBERT trains MLM alone."""
    batch, seq = b["input_ids"].shape
    return train_flops(config, batch, seq, b["masked_lm_positions"].shape[1], pair_head=config.architecture == "bert",
                       **(extent or {}))


def report(name: str, r: dict, targets: bool = True) -> None:
    """One row of the table; targets False: no target for this model ("no target set")."""
    mfu = "n/a (device not in the peak table)" if r.get("mfu") is None else f"{r['mfu']:.1%}"
    ok = r["samples_s"] >= TARGET_SAMPLES_S and (r.get("mfu") or 0) >= TARGET_MFU
    verdict = f"{'meets' if ok else 'below'} target" if targets else "no target set"
    tokens = f"{r['tokens_s']:>11,.0f} tokens/s" if "tokens_s" in r else f"{'':>20}"
    print(f"{name:<40} {r['samples_s']:>9,.0f} samples/s {tokens}  {r.get('ms_step', float('nan')):>7.1f} ms/step  "
          f"MFU {mfu}  {verdict}")


def report_ratios(results: list[tuple[str, dict]], prefix: str = "") -> None:
    """Step time of unpadded against padded (each compile mode) and of compiled against
    eager (each padding mode), from samples/s at one batch size: the figures `--unpad
    auto` and `--compile` are chosen by; of the rows named `prefix` + mode (one model's)."""
    by = {name: r["samples_s"] for name, r in results}
    for compiled in ("eager", "torch.compile"):
        padded, unpadded = by.get(f"{prefix}{compiled}, padded"), by.get(f"{prefix}{compiled}, unpadded")
        if padded and unpadded:
            print(f"{prefix}unpadded/padded step time, {compiled}: {padded / unpadded:.2f}x")
    for padding in ("padded", "unpadded"):
        eager, compiled = by.get(f"{prefix}eager, {padding}"), by.get(f"{prefix}torch.compile, {padding}")
        if eager and compiled:
            print(f"{prefix}compiled/eager step time, {padding}: {eager / compiled:.2f}x")


def bert_arch(args) -> Arch:
    return Arch("", BertConfig.preset(args.preset, vocab_size=VOCAB), BertForPreTraining, args.batch_size, 512)


def modernbert_arch(args) -> Arch:
    return Arch(f"ModernBERT {MODERNBERT_SEQ}, ", ModernBertConfig.preset(args.preset, vocab_size=VOCAB),
                ModernBertForMaskedLM, args.modernbert_batch_size, MODERNBERT_SEQ)


def bench_step(args, ds: ShardDataset, arch: Arch) -> list[tuple[str, dict]]:
    """Timed steps in each mode: eager and compiled, padded and unpadded. A mode that
    fails (a compile, the jagged kernel) is reported and left out, so the minutes of a
    device run still give the other modes; only the plain eager padded step failing is
    an error."""
    device = torch.device(args.device)
    config = arch.config
    order = SampleOrder(len(ds), seed=0)
    batches = [{k: torch.from_numpy(v).to(device) for k, v in
                ds.collate(order.take(i * arch.batch_size, arch.batch_size), arch.seq).items()} for i in range(8)]
    # The smoke run takes the jagged kernel a GPU would, on the CPU (slow there, but the path is the point).
    kernels = [None] + (["jagged" if args.cpu_smoke else resolve("on", device)] if args.unpad else [])
    results = []
    for compiled in [False] + ([True] if args.compile else []):
        for kernel in kernels:
            name = f"{arch.prefix}{'torch.compile' if compiled else 'eager'}, {'unpadded' if kernel else 'padded'}"
            torch.manual_seed(0)
            model = arch.model_class(config).to(device)
            set_unpad(model, kernel)
            optimizer = build_optimizer(model, "adamw", 1e-4, 0.01, device)
            t0, run = time.perf_counter(), None
            try:
                # dynamic=False: the batches here all have one shape; the trainer marks its
                # varying lengths dynamic instead (bertmodel/training).
                run = torch.compile(model, dynamic=False) if compiled else model
                r = time_steps(run, optimizer, batches, args.steps, args.warmup, config, device, unpadded=bool(kernel))
            except Exception as exc:  # noqa: BLE001 - compile errors surface at the first call
                if not compiled and kernel is None:
                    raise
                print(f"  ({name}: failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}; left out)")
                continue
            finally:
                del model, optimizer, run  # the compiled wrapper holds the model too
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            print(f"  ({args.preset} bf16, {name}{f' ({kernel})' if kernel else ''}: {time.perf_counter() - t0:.0f} s "
                  f"including warm-up/compile; loss {r['first_loss']:.3f} -> {r['last_loss']:.3f}, finite: {r['finite']})")
            results.append((name, r))
            # now, as well as in the table: a later mode that crashes the process keeps this one
            report(name, r, targets=not arch.prefix)
    return results


def bench_loop(args, shards: Path, tmp: Path, objective: str | None = None) -> dict | None:
    """The real `pretrain` loop for --loop-steps steps; throughput from its metrics.jsonl.
    objective: "rtd" for ELECTRA's (None: what the shards hold, MLM + NSP)."""
    from bertmodel.train import TrainConfig, train

    run = tmp / f"run-{objective or 'mlm'}"
    cfg = TrainConfig(data=[str(shards)], out=str(run), preset=args.preset, batch_size=args.batch_size,
                      max_steps=args.loop_steps, lr=1e-4, warmup_steps=min(10, args.loop_steps),
                      log_every=max(1, args.loop_steps // 3), save_every=10**9, compile=args.compile, progress=False,
                      verify="size", device=args.device, precision="bf16", objective=objective)
    train(cfg, log=lambda *a: None)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if "samples_per_s" in r][-1]  # the last interval: compile and warm-up excluded
    return {"samples_s": last["samples_per_s"], "mfu": last.get("mfu"), "ms_step": float("nan")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=256, help="micro-batch (H200: 256 fits easily)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compile happens here)")
    ap.add_argument("--loop-steps", type=int, default=60, help="steps of the real pretrain loop (0: skip)")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="eager only")
    ap.add_argument("--no-unpad", dest="unpad", action="store_false", help="padded only")
    ap.add_argument("--modernbert-batch-size", type=int, default=32,
                    help=f"ModernBERT rows of {MODERNBERT_SEQ} tokens a step (32: BERT's 256 x 128 token slots)")
    ap.add_argument("--no-modernbert", dest="modernbert", action="store_false", help="BERT-base only")
    ap.add_argument("--no-rtd", dest="rtd", action="store_false", help="skip the ELECTRA (--objective rtd) loop")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="run every code path on the CPU with the tiny preset (checks the script, measures nothing)")
    args = ap.parse_args(argv)
    args.preset, args.device = "base", "cuda"
    if args.cpu_smoke:
        args.preset, args.device, args.batch_size, args.steps, args.warmup = "tiny", "cpu", 4, 2, 1
        args.modernbert_batch_size = 2
        args.loop_steps, args.compile = min(args.loop_steps, 3), False
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False); it measures BERT-base and "
              "ModernBERT-base bf16 throughput on an NVIDIA GPU, so there is nothing to check here.", file=sys.stderr)
        return 2
    if args.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        peak = peak_flops(torch.device("cuda"))
        print(f"{props.name}, {props.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, "
              f"peak bf16 {peak / 1e12:.0f} TFLOP/s" if peak else f"{props.name}: not in the peak table, no MFU")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shards = synthetic_shards(tmp, rows=64 if args.cpu_smoke else max(8192, 16 * args.batch_size))
        ds = ShardDataset([open_shard_dir(shards, verify="size")])
        results = bench_step(args, ds, bert_arch(args))
        modern = modernbert_arch(args)
        if args.modernbert:
            modern_ds = ShardDataset([open_shard_dir(modernbert_shards(tmp, args), verify="size")])
            modern_results = bench_step(args, modern_ds, modern)
        if args.loop_steps:
            results.append(("pretrain loop" + (" (compiled)" if args.compile else ""), bench_loop(args, shards, tmp)))
        rtd = bench_loop(args, shards, tmp, "rtd") if args.loop_steps and args.rtd else None
        order = SampleOrder(len(ds), seed=0)
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < 2:
            ds.collate(order.take(n, args.batch_size))
            n += args.batch_size
        loading = n / (time.perf_counter() - t0)
    print(f"\n{args.preset} bf16, batch {args.batch_size} x 128 {'target':>14}: >= {TARGET_SAMPLES_S:,} samples/s "
          f"and >= {TARGET_MFU:.0%} MFU on an H200")
    for name, r in results:
        report(name, r)
    report_ratios(results)
    if rtd is not None:
        report("pretrain loop, ELECTRA rtd" + (" (compiled)" if args.compile else ""), rtd, targets=False)
        print(f"rtd/mlm+nsp loop step time: {results[-1][1]['samples_s'] / rtd['samples_s']:.2f}x")
    if args.modernbert:
        print(f"\nModernBERT-{args.preset} bf16, batch {modern.batch_size} x {MODERNBERT_SEQ}, MLM alone: "
              "no target set")
        for name, r in modern_results:
            report(name, r, targets=False)
        report_ratios(modern_results, modern.prefix)
    best = max(r["samples_s"] for _, r in results)
    print(f"data loading: {loading:,.0f} samples/s on one CPU core = {loading / best:.1f}x what the GPU consumes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
