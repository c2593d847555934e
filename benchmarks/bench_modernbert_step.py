"""ModernBERT training-step time on this CPU: our ModernBertForMaskedLM against
transformers' on the same batch and weights, and our step's memory and time per token
at long context.

What a step is: forward + backward + clip + AdamW (torch's, fused where this torch has
it), fp32, the same initial weights (seed 0) in every process. Ours steps as bertmodel's
loop does (optim.clip_and_step: the clip inside fused AdamW) with glibc told to keep
freed blocks (bertmodel/training/host_memory.py); transformers as its Trainer does
(clip_grad_norm_, then the step) with glibc's defaults: bench_train_step.stepper for both.

The batch, built once in this process and read by every worker: real text (the head of
WikiText-2's training split, ../shared/data, tokenized with bert-base-uncased's
WordPiece vocabulary, 30,522 entries, so the model's vocabulary is that one, not
ModernBERT's 50,368), each row a window of it at a random offset, [CLS] ... [SEP], its
length drawn uniformly between T/4 and T (padding, the same for every variant), 30% of
each row's tokens chosen for prediction by the house masking (bertprep's mask_padded:
80% [MASK], 10% random, 10% kept, never [CLS]/[SEP]).

Variants (each in a fresh process, alternating: hf, hf-sparse, padded, packed, hf, ...):
  hf         transformers' ModernBertForMaskedLM, default config: logits over every
             position (B, T, V), labels (B, T), -100 except at the chosen positions
  hf-sparse  the same with sparse_prediction=True: head and decoder at the labelled
             positions only (the encoder still computes every position, padding too)
  padded     ours, padded (B, T), the sparse head: masked_lm_positions / labels (B, P),
             only those rows reach the last layer, the head and the decoder
  packed     ours with set_unpad(model, "repad"): only the real tokens are computed
Reported: the median step (min-max over every timed step of every round), the worker's
peak RSS (its process tree, sampled every 20 ms: measure.run_measured), the loss of the
first batch before any step (the same model on the same batch: equal up to rounding in
every variant), and padded/packed against hf and hf-sparse, with the issue's targets
(ours <= 0.6x at 128 tokens, <= 0.5x at 1,024) marked met or missed next to each ratio.

--long: our packed step, and transformers' (hf-sparse by default; --long-variants) at
1,024, 4,096 and 8,192 tokens, every row full length, batch = --long-tokens // T (8,192:
batch 8 at 1,024, 2 at 4,096, 1 at 8,192), so every step holds the same tokens and
time per token compares across lengths: median step, ms per 1,000 tokens and peak RSS.
transformers builds a (B, 1, T, T) mask for each layer type and computes every layer's
attention over all T keys; a transformers variant whose estimated footprint (weights,
gradients, AdamW state, masks, activations, logits: hf_footprint) exceeds --memory-limit-gb
(16) is skipped and the estimate printed instead.

  python benchmarks/bench_modernbert_step.py [--lengths 128 1024] [--rounds 2] [--steps 3] [--preset base]
         [--variants hf hf-sparse padded packed] [--threads N]
  python benchmarks/bench_modernbert_step.py --long [--lengths 1024 4096 8192] [--long-tokens 8192]
         [--long-variants packed hf-sparse] [--memory-limit-gb 16]
  smoke (seconds): --preset tiny --lengths 128 --rounds 1 --steps 2

On a shared machine CPU timings drift with the load: the load average is printed per
length; read the ratios, measured in the same run.

figures: see docs/performance.md
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertmodel.data.synthetic import SHARED
from bertmodel.model import ModernBertForMaskedLM
from bertmodel.model.config import MODERNBERT_PRESETS, ModernBertConfig
from bertmodel.model.heads import IGNORE_INDEX
from bertmodel.model.unpad import set_unpad
from bertmodel.training.host_memory import keep_freed_memory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train_step import stepper, warm_up_steps  # noqa: E402
from measure import run_measured  # noqa: E402

TEXT = SHARED / "data" / "wikitext-2-raw-train-head.txt"
VOCAB = SHARED / "data" / "bert-base-uncased-vocab.txt"
VARIANTS = ("hf", "hf-sparse", "padded", "packed")
OURS, THEIRS = ("padded", "packed"), ("hf", "hf-sparse")
TARGETS = {128: 0.6, 1024: 0.5}  # ours / transformers, the issue's
BATCH, MASK_RATE = 8, 0.3
GB = 1e9


def token_stream() -> tuple[np.ndarray, dict]:
    """WikiText's paragraphs (article titles left out) as one stream of WordPiece ids,
    and the tokenizer's special ids."""
    from bertprep.tokenizer import load_tokenizer

    tok = load_tokenizer(VOCAB)
    lines = [s for s in (x.strip() for x in TEXT.read_text(encoding="utf-8").splitlines())
             if s and not s.startswith("=")]
    ids = np.concatenate([np.asarray(e.ids, np.int64)
                          for e in tok.tokenizer.encode_batch(lines, add_special_tokens=False)])
    special = tok.special
    return ids, {"vocab_size": tok.vocab_size, "pad_token_id": special.pad, "cls_token_id": special.cls,
                 "sep_token_id": special.sep, "mask_token_id": special.mask, "tokenizer": tok}


def make_batch(stream: np.ndarray, vocab: dict, batch: int, T: int, full: bool, seed: int = 0) -> dict:
    """(batch, T) rows of text, lengths uniform in [T/4, T] (full: all T), 30% of each
    row's tokens chosen by bertprep's masking; the sparse targets (B, P) for ours and the
    (B, T) label map for transformers."""
    from bertprep.builder import vocabulary_for_masking
    from bertprep.instances import MaskingConfig, mask_padded

    rng = np.random.default_rng(seed)
    lengths = np.full(batch, T) if full else rng.integers(max(3, T // 4), T + 1, batch)
    ids = np.full((batch, T), vocab["pad_token_id"], np.int64)
    for row, n in enumerate(lengths):
        start = rng.integers(0, len(stream) - n)
        ids[row, :n] = [vocab["cls_token_id"], *stream[start:start + n - 2], vocab["sep_token_id"]]
    mask = (np.arange(T)[None] < lengths[:, None]).astype(np.int64)
    special = np.isin(ids, [vocab["cls_token_id"], vocab["sep_token_id"]]) & (mask == 1)
    config = MaskingConfig(max_predictions_per_seq=math.ceil(MASK_RATE * T), masked_lm_prob=MASK_RATE)
    masked, positions, labels = mask_padded(ids, lengths, special, config, vocabulary_for_masking(vocab["tokenizer"]),
                                            rng)
    P = int((labels >= 0).sum(1).max())  # slots the fullest row uses
    positions, labels = positions[:, :P], np.where(labels[:, :P] < 0, IGNORE_INDEX, labels[:, :P])
    label_map = np.full_like(ids, IGNORE_INDEX)
    rows, slots = np.nonzero(labels != IGNORE_INDEX)
    label_map[rows, positions[rows, slots]] = labels[rows, slots]
    return {"input_ids": masked, "attention_mask": mask, "masked_lm_positions": positions,
            "masked_lm_labels": labels, "labels": label_map}


def model_config(preset: str, meta: dict) -> ModernBertConfig:
    return ModernBertConfig.preset(preset, **{k: v for k, v in meta.items() if k != "tokenizer"})


def hf_twin(ours: ModernBertForMaskedLM, sparse: bool):
    """transformers' ModernBertForMaskedLM holding exactly our weights."""
    import transformers

    fields = {k: v for k, v in ours.config.to_hf_dict().items() if k not in ("architectures", "dtype")}
    hf = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(**{**fields, "sparse_prediction": sparse}))
    missing, unexpected = hf.load_state_dict(ours.state_dict(), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    hf.param_groups = lambda wd: [  # our decay groups, for the same optimizer work
        {"params": [p for p in hf.parameters() if p.dim() >= 2], "weight_decay": wd},
        {"params": [p for p in hf.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    return hf


def worker(args) -> int:
    """--worker VARIANT: warm-up steps, then --steps timed ones, alone in this process (JSON out)."""
    if args.worker in OURS:
        keep_freed_memory()  # as bertmodel's trainer does on a CPU
    data = np.load(args.batch)
    meta = json.loads(str(data["meta"]))
    torch.manual_seed(0)
    ours = ModernBertForMaskedLM(model_config(args.preset, meta))
    b = {k: torch.from_numpy(data[k]) for k in ("input_ids", "attention_mask")}
    if args.worker in THEIRS:
        model = hf_twin(ours, sparse=args.worker == "hf-sparse")
        del ours
        inputs = {**b, "labels": torch.from_numpy(data["labels"])}
    else:
        model = ours
        set_unpad(model, "repad" if args.worker == "packed" else None)
        inputs = {**b, **{k: torch.from_numpy(data[k]) for k in ("masked_lm_positions", "masked_lm_labels")}}
    with torch.no_grad():
        loss = float(model(**inputs).loss)
    step = stepper(model, model, inputs, ours=args.worker in OURS)
    for _ in range(warm_up_steps(args.worker)):
        step()
    print(json.dumps({"times": [step() for _ in range(args.steps)], "loss": loss}))
    return 0


def run_rounds(batch_file: Path, variants: list[str], args) -> dict[str, dict]:
    """Each variant in its own process, alternating, --rounds times: its step times, its
    largest peak RSS, its first-batch loss."""
    results = {v: {"times": [], "peak": 0, "loss": None} for v in variants}
    for _ in range(args.rounds):
        for variant in variants:
            cmd = [sys.executable, __file__, "--worker", variant, "--batch", str(batch_file), "--preset", args.preset,
                   "--steps", str(args.steps)] + (["--threads", str(args.threads)] if args.threads else [])
            try:
                _, peak, output = run_measured(cmd)
            except RuntimeError as exc:
                raise SystemExit(f"{variant}: worker failed: {str(exc)[-1500:]}")
            out = json.loads(output.strip().splitlines()[-1])
            r = results[variant]
            r["times"] += out["times"]
            r["peak"], r["loss"] = max(r["peak"], peak), out["loss"]
    return results


def save_batch(tmp: Path, b: dict, meta: dict, T: int) -> Path:
    path = tmp / f"batch-{T}.npz"
    np.savez(path, meta=json.dumps({k: v for k, v in meta.items() if k != "tokenizer"}), **b)
    return path


def describe(b: dict) -> str:
    mask, labels = b["attention_mask"], b["masked_lm_labels"]
    (B, T), real = mask.shape, int(mask.sum())
    return (f"batch {B} x {T} padded, {real / B:,.1f} real tokens a row ({1 - real / (B * T):.0%} padding); "
            f"{(labels != IGNORE_INDEX).sum() / real:.0%} of real tokens predicted, P = {labels.shape[1]} slots a row")


def step_line(variant: str, r: dict) -> str:
    t = r["times"]
    return (f"  {variant:<10} {1e3 * statistics.median(t):>9,.0f} ms ({1e3 * min(t):,.0f}-{1e3 * max(t):,.0f})  "
            f"peak RSS {r['peak'] / GB:5.2f} GB  first loss {r['loss']:.4f}")


def ratio_lines(T: int, med: dict) -> list[str]:
    target = TARGETS.get(T)
    lines = []
    for ours in (v for v in OURS if v in med):
        parts = []
        for theirs in (v for v in THEIRS if v in med):
            ratio = med[ours] / med[theirs]
            verdict = "" if target is None else f" (target <= {target}: {'met' if ratio <= target else 'missed'})"
            parts.append(f"{ours}/{theirs} {ratio:.2f}x{verdict}")
        if parts:
            lines.append("  " + ", ".join(parts))
    return lines


def bench_ratios(args, stream, meta, tmp: Path) -> None:
    print(f"ModernBERT-{args.preset}, fp32, batch {BATCH}, {MASK_RATE:.0%} masked; median step (min-max) over "
          f"{args.rounds} round(s) x {args.steps} step(s) a variant")
    for T in args.lengths or [128, 1024]:
        b = make_batch(stream, meta, BATCH, T, full=False)
        print(f"\n{T}: {describe(b)}")
        load = os.getloadavg()[0]
        results = run_rounds(save_batch(tmp, b, meta, T), args.variants, args)
        print(f"  load average {(load + os.getloadavg()[0]) / 2:.1f}")
        for variant, r in results.items():
            print(step_line(variant, r))
        for line in ratio_lines(T, {v: statistics.median(r["times"]) for v, r in results.items()}):
            print(line)


def hf_footprint(config: ModernBertConfig, batch: int, T: int, sparse: bool) -> dict[str, float]:
    """Estimated bytes of a transformers training step at (batch, T), fp32: each part.
    Activations: 12H + 4I fp32 values per token and layer kept for the backward (the
    norms' inputs, Wqkv's output, the rotated q and k, attention's output, the GLU's 2I
    input, its product...): at base widths 13,824, where saved-tensor hooks counted
    13,400 per token and layer of transformers 5.24 at 1,024 tokens; SDPA's CPU flash
    kernel, which takes the boolean masks, keeps no (T, T) scores. Logits, their softmax
    and its gradient: at every position, or at the predicted ones (sparse_prediction)."""
    H, I, L, V = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    params = V * H + L * config.layer_weight_macs() + H * H + V  # embeddings (tied decoder), layers, head
    rows = batch * (math.ceil(MASK_RATE * T) if sparse else T)
    return {"weights, gradients, AdamW state": 16 * params,
            "masks (B x T x T bool, one a layer type)": 2 * batch * T * T,
            "activations": 4 * L * batch * T * (12 * H + 4 * I),
            "logits": 3 * 4 * rows * V}


def bench_long(args, stream, meta, tmp: Path) -> None:
    config = model_config(args.preset, meta)
    print(f"ModernBERT-{args.preset} at long context, fp32, every row full length, batch = {args.long_tokens:,} // T "
          f"(batch 1 from T = {args.long_tokens:,} on), {MASK_RATE:.0%} masked; median step (min-max) over "
          f"{args.rounds} round(s) x {args.steps} step(s)")
    for T in args.lengths or [1024, 4096, 8192]:
        batch = max(1, args.long_tokens // T)
        b = make_batch(stream, meta, batch, T, full=True)
        print(f"\n{T}: batch {batch} x {T} ({batch * T:,} tokens a step)")
        variants = []
        for variant in args.long_variants:
            if variant in THEIRS:
                parts = hf_footprint(config, batch, T, sparse=variant == "hf-sparse")
                if sum(parts.values()) > args.memory_limit_gb * GB:
                    print(f"  {variant} skipped: its estimated {sum(parts.values()) / GB:.1f} GB exceeds "
                          f"{args.memory_limit_gb:g} GB (" + ", ".join(f"{k} {v / GB:.2f}" for k, v in parts.items())
                          + ")")
                    continue
            variants.append(variant)
        load = os.getloadavg()[0]
        results = run_rounds(save_batch(tmp, b, meta, T), variants, args)
        print(f"  load average {(load + os.getloadavg()[0]) / 2:.1f}")
        for variant, r in results.items():
            per_k = 1e6 * statistics.median(r["times"]) / (batch * T)
            print(f"{step_line(variant, r)}  {per_k:,.1f} ms per 1,000 tokens")


def cannot_run() -> str | None:
    """Why this benchmark cannot run here (a missing package or file), or None."""
    if importlib.util.find_spec("transformers") is None:
        return "transformers is not installed: pip install 'bertprep[test]'"
    missing = [str(p) for p in (TEXT, VOCAB) if not p.exists()]
    return f"needs the shared WikiText and vocab: {', '.join(missing)} missing" if missing else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+",
                    help="sequence lengths T (default 128 1024; --long: 1024 4096 8192)")
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the variants, each a fresh process")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per variant and round (after 2 warm-up steps)")
    ap.add_argument("--preset", default="base", choices=list(MODERNBERT_PRESETS),
                    help="ModernBertConfig preset (tiny for a smoke run)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--long", action="store_true", help="memory and time per token of long sequences instead")
    ap.add_argument("--long-tokens", type=int, default=8192,
                    help="--long: tokens a step (batch = this // T, at least 1)")
    ap.add_argument("--long-variants", nargs="+", default=["packed", "hf-sparse"], choices=VARIANTS)
    ap.add_argument("--memory-limit-gb", type=float, default=16.0,
                    help="--long: skip a transformers variant whose estimated footprint exceeds this")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    ap.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--batch", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    if args.worker:
        return worker(args)
    problem = cannot_run()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads on "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start; fused AdamW for every model")
    started = time.perf_counter()
    stream, meta = token_stream()
    with tempfile.TemporaryDirectory() as tmp:
        (bench_long if args.long else bench_ratios)(args, stream, meta, Path(tmp))
    print(f"\n{time.perf_counter() - started:,.0f} s; load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
