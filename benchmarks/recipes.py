"""Pre-training recipes compared on real text: one tiny model per recipe, the same steps,
batch and seed, trained on Wikipedia + WikiText shards, then MLM accuracy measured the
same way for all (the held-out shards' own 15% static masks, same batches).

Recipes: static (BERT), dynamic (RoBERTa's re-masking), dynamic at 0.3 (MosaicBERT /
ModernBERT's rate), MLM alone (no NSP), SOP (ALBERT; shards built with --pairs sop),
FULL-SENTENCES (RoBERTa; --pairs none, MLM alone).

The vocabulary is trained on the training text by `bertprep train-tokenizer` (8,192
entries by default, uncased): with BERT's 30,522 the output layer and its softmax are
most of a tiny model's step, and the comparison between recipes does not need them.
`--vocab-size 0` uses bert-base-uncased's vocab.txt instead.

  python benchmarks/recipes.py --steps 3000 --work /tmp/recipes

`--architectures` compares the two encoders instead, on the same FULL-SENTENCES shards
with the same recipe (MLM alone, dynamic masking at 0.3, warmup-stable-decay with 1-sqrt
decay, lr 1e-3, batch 32, seed 1) and the same width and depth (4 layers x 256, 4 heads;
each with its own feed-forward: BERT's 4H GELU MLP, ModernBERT's 1.5H GeGLU): at equal
steps, and at equal time (the faster one run again with as many steps as fit in the
slower one's wall time, its schedule fitted to them, as a time-budgeted run would be).

  python benchmarks/recipes.py --architectures --steps 3000 --work /tmp/recipes

`--modern` compares the pieces of ModernBERT's recipe on ModernBERT mini (4 layers x
256, GeGLU 384) on the same FULL-SENTENCES shards (MLM alone, dynamic masking, wsd with
1-sqrt decay, warmup 5%, batch 32, betas 0.9 0.98, seed 1): AdamW (weight decay 0.01,
global clipping at 1.0) against StableAdamW (fully decoupled weight decay 1e-5, no
global clipping) at lr 1e-3 and 3e-3; a batch-size warmup (from a quarter of the batch
over the first quarter of the samples) on and off; a mask-rate schedule (0.3, then 0.15
over the last 20% of the steps) on and off, the last two with AdamW at 1e-3. Every run
consumes the same samples (the batch-warmup run takes more, smaller steps to them), so
each costs about the same CPU time; the minutes are measured and printed. Each model is
then fine-tuned once on the demo's topic task (stdlib docstrings: which package a
sentence documents; best dev accuracy over the epochs):

  python benchmarks/recipes.py --modern --steps 1000 --work /tmp/recipes
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from bertmodel.data.synthetic import SHARED, wiki_to_reference_layout

DATA = SHARED / "data"
VOCAB = DATA / "bert-base-uncased-vocab.txt"
RECIPES = [  # name, shard pairing, pretrain options
    ("static", "nsp", []),
    ("dynamic", "nsp", ["--masking", "dynamic"]),
    ("dynamic 0.3", "nsp", ["--masking", "dynamic", "--mask-rate", "0.3"]),
    ("MLM only", "nsp", ["--objective", "mlm"]),
    ("SOP", "sop", []),
    ("FULL-SENTENCES", "none", []),
]


def wikitext_to_reference_layout(path: Path, out: Path) -> Path:
    """WikiText raw: ' = Title = ' lines start articles; paragraphs -> one sentence a line."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if re.fullmatch(r"= [^=].* =", line):
            lines.append("")
        elif line and not line.startswith("="):
            lines.extend(s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"'(])", line) if s)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def bertprep(*args) -> None:
    subprocess.run([sys.executable, "-c", "from bertprep.cli import main; main()", *map(str, args)], check=True)


def train_vocab(corpus: list[Path], out: Path, size: int) -> Path:
    if not (out / "vocab.txt").exists():
        bertprep("train-tokenizer", *corpus, "--out", out, "--vocab-size", size, "--quiet")
    return out


def build(corpus: list[Path], out: Path, pairs: str, dupe: int, vocab: Path) -> Path:
    if not (out / "manifest.json").exists():
        subprocess.run([sys.executable, "-c", "from bertprep.cli import main; main()", "build-shards", *map(str, corpus), "--tokenizer", str(vocab),
                        "--out", str(out), "--pairs", pairs, "--dupe-factor", str(dupe), "--quiet",
                        "--cache-dir", str(out.parent / ".cache")], check=True)
    return out


ARCHITECTURE_OPTIONS = ["--objective", "mlm", "--masking", "dynamic", "--mask-rate", "0.3", "--schedule", "wsd",
                        "--layers", "4", "--hidden", "256", "--heads", "4"]


def pretrain(shards: Path, run: Path, steps: int, args, held_out: Path, options: list[str]) -> tuple[dict, float]:
    """One run (reused when its metrics are complete); returns its last held-out record
    and the seconds its steps took (the trainer's own step times, without start-up)."""
    records_path = run / "metrics.jsonl"
    if not records_path.exists() or not any(json.loads(x).get("step") == steps and "eval_mlm_acc" in x
                                           for x in records_path.read_text().splitlines()):
        subprocess.run([sys.executable, "-m", "bertmodel.cli", "pretrain", "--data", str(shards), "--out", str(run),
                        "--preset", "tiny", "--batch-size", str(args.batch_size), "--max-steps", str(steps),
                        "--lr", "1e-3", "--warmup-ratio", "0.05", "--save-every", str(steps), "--log-every", "50",
                        "--eval-data", str(held_out), "--eval-batches", str(args.eval_batches), "--seed", "1",
                        "--no-progress", *options], check=True, capture_output=True, text=True)
    records = [json.loads(x) for x in records_path.read_text().splitlines()]
    train_records = [r for r in records if "loss" in r]
    # samples_per_s over each logging interval: the interval's seconds are its samples /
    # rate (a batch-size warmup logs the samples consumed so far; else steps x batch)
    seconds, last = 0.0, 0
    for r in train_records:
        done = r.get("samples", r["step"] * args.batch_size)
        seconds += (done - last) / r["samples_per_s"]
        last = done
    return [r for r in records if "eval_mlm_acc" in r][-1], seconds


def compare_architectures(args, train_text: list[Path], held_out: Path, vocab: Path, tag: str) -> None:
    shards = build(train_text, args.work / f"train-none{tag}", "none", 5, vocab)
    rows = []
    timed = {}
    for architecture in ("bert", "modernbert"):
        run = args.work / f"arch-{architecture}-{args.steps}{tag}"
        evaluation, seconds = pretrain(shards, run, args.steps, args, held_out,
                                       [*ARCHITECTURE_OPTIONS, "--architecture", architecture])
        timed[architecture] = seconds
        rows.append((architecture, "equal steps", args.steps, evaluation, seconds))
        print(json.dumps({"architecture": architecture, "steps": args.steps, "seconds": round(seconds, 1),
                          **{k: v for k, v in evaluation.items() if k.startswith("eval_")}}), flush=True)
    faster = min(timed, key=timed.get)
    slower = max(timed, key=timed.get)
    steps = round(args.steps * timed[slower] / timed[faster])
    run = args.work / f"arch-{faster}-{steps}{tag}"
    evaluation, seconds = pretrain(shards, run, steps, args, held_out,
                                   [*ARCHITECTURE_OPTIONS, "--architecture", faster])
    rows.append((faster, f"equal time ({slower}'s {timed[slower] / 60:.1f} min)", steps, evaluation, seconds))
    print(json.dumps({"architecture": faster, "steps": steps, "seconds": round(seconds, 1),
                      **{k: v for k, v in evaluation.items() if k.startswith("eval_")}}), flush=True)
    print(f"\nFULL-SENTENCES shards, MLM, dynamic 0.3, wsd, lr 1e-3, batch {args.batch_size}, 4 layers x 256, "
          f"seed 1, vocabulary {args.vocab_size or 'bert-base-uncased'}; held-out: wiki_02 NSP shards, their 15% "
          f"static masks, {args.eval_batches} batches; minutes = the trainer's step time")
    print(f"{'architecture':12} {'budget':34} {'steps':>6} {'held-out mlm_acc':>16} {'held-out mlm_loss':>17} "
          f"{'minutes':>7}")
    for architecture, budget, n, ev, secs in rows:
        print(f"{architecture:12} {budget:34} {n:>6} {ev['eval_mlm_acc']:>16.3f} {ev['eval_mlm_loss']:>17.3f} "
              f"{secs / 60:>7.1f}")


MODERN_OPTIONS = ["--architecture", "modernbert", "--preset", "mini", "--objective", "mlm", "--masking", "dynamic",
                  "--schedule", "wsd", "--adam-betas", "0.9", "0.98"]
ADAMW = ["--optimizer", "adamw", "--weight-decay", "0.01"]
STABLE = ["--optimizer", "stable-adamw", "--weight-decay", "1e-5"]


def modern_variants(args) -> list[tuple[str, int, list[str]]]:
    """(name, steps, options) of each --modern run; every run consumes steps x batch samples."""
    from bertmodel.data.schedules import BatchSchedule, BatchWarmup

    rate = ["--mask-rate", "0.3"]
    start = max(1, args.batch_size // 4)
    # the warmup spans a quarter of the samples: K steps averaging (start + batch) / 2
    ramp = max(1, round(2 * args.steps * args.batch_size / 4 / (start + args.batch_size)))
    schedule = BatchSchedule.build(BatchWarmup(start, ramp, "steps"), args.batch_size, 1, 1)
    budget = args.steps * args.batch_size
    in_ramp = schedule.cursor_after(ramp)
    warmup_steps = ramp + max(0, -(-(budget - in_ramp) // args.batch_size))  # to at least the same samples
    return [
        ("AdamW lr 1e-3", args.steps, [*ADAMW, "--lr", "1e-3", *rate]),
        ("AdamW lr 3e-3", args.steps, [*ADAMW, "--lr", "3e-3", *rate]),
        ("StableAdamW lr 1e-3", args.steps, [*STABLE, "--lr", "1e-3", *rate]),
        ("StableAdamW lr 3e-3", args.steps, [*STABLE, "--lr", "3e-3", *rate]),
        (f"AdamW 1e-3, batch warmup {start}->{args.batch_size}", warmup_steps,
         [*ADAMW, "--lr", "1e-3", *rate, "--batch-size-warmup", f"{start}:{ramp}steps"]),
        ("AdamW 1e-3, mask rate 0.3->0.15@80%", args.steps,
         [*ADAMW, "--lr", "1e-3", "--mask-rate-schedule", "0.3:0.15@80%"]),
    ]


def finetune_topic(args, run: Path) -> float:
    """Best dev accuracy of one fine-tune of `run` on the demo's topic task."""
    from bertmodel.demo.task import write_topic_task

    task = args.work / "topic-task"
    if not (task / "dev.tsv").is_file():
        write_topic_task(task)
    out = run.parent / f"{run.name}-topic"
    # Always run the command: a finished run says "nothing to do", a killed one resumes.
    subprocess.run([sys.executable, "-m", "bertmodel.cli", "finetune", "classify", "--model", str(run),
                    "--train", str(task / "train.tsv"), "--validation", str(task / "dev.tsv"), "--out", str(out),
                    "--epochs", str(args.finetune_epochs), "--batch-size", "32", "--lr", str(args.finetune_lr),
                    "--seed", "1", "--max-seq-length", "128", "--device", "cpu", "--no-progress"],
                   check=True, capture_output=True, text=True)
    return json.loads((out / "best.json").read_text())["value"]


def compare_modern(args, train_text: list[Path], held_out: Path, vocab: Path, tag: str) -> None:
    shards = build(train_text, args.work / f"train-none{tag}", "none", 5, vocab)
    rows = []
    for name, steps, options in modern_variants(args):
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        run = args.work / f"modern-{slug}-{args.steps}x{args.batch_size}{tag}"
        evaluation, seconds = pretrain(shards, run, steps, args, held_out, [*MODERN_OPTIONS, *options])
        topic = finetune_topic(args, run)
        rows.append((name, steps, evaluation, seconds, topic))
        print(json.dumps({"variant": name, "steps": steps, "seconds": round(seconds, 1), "topic_dev_acc": topic,
                          **{k: v for k, v in evaluation.items() if k.startswith("eval_")}}), flush=True)
    print(f"\nModernBERT mini (4 x 256), FULL-SENTENCES shards, MLM, dynamic masking, wsd 1-sqrt, warmup 5%, "
          f"betas 0.9 0.98, seed 1, {args.steps:,} x {args.batch_size} samples each, vocabulary "
          f"{args.vocab_size or 'bert-base-uncased'}; held-out: wiki_02 NSP shards, their 15% static masks, "
          f"{args.eval_batches} batches; topic: one fine-tune ({args.finetune_epochs} epochs, lr {args.finetune_lr}, "
          "best dev accuracy); minutes = the trainer's step time")
    print(f"{'variant':42} {'steps':>6} {'held-out mlm_acc':>16} {'held-out mlm_loss':>17} {'topic acc':>9} "
          f"{'minutes':>7}")
    for name, n, ev, secs, topic in rows:
        print(f"{name:42} {n:>6} {ev['eval_mlm_acc']:>16.3f} {ev['eval_mlm_loss']:>17.3f} {topic:>9.3f} "
              f"{secs / 60:>7.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bertmodel-recipes"))
    ap.add_argument("--eval-batches", type=int, default=50)
    ap.add_argument("--only", nargs="*", help="recipe names to run (default: all)")
    ap.add_argument("--architectures", action="store_true",
                    help="compare BERT and ModernBERT of the same width and depth (equal steps, equal time)")
    ap.add_argument("--modern", action="store_true",
                    help="compare ModernBERT's recipe pieces on ModernBERT mini: AdamW vs StableAdamW at lr 1e-3 and "
                         "3e-3, batch-size warmup on/off, mask-rate schedule on/off, with one fine-tune each")
    ap.add_argument("--finetune-epochs", type=float, default=3, help="--modern: epochs of each topic fine-tune")
    ap.add_argument("--finetune-lr", type=float, default=2e-4, help="--modern: lr of each topic fine-tune")
    ap.add_argument("--vocab-size", type=int, default=8192,
                    help="train a vocabulary of this size on the training text (0: bert-base-uncased's)")
    args = ap.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    wiki = DATA / "enwiki_wikiextractor"
    train_text = [wiki_to_reference_layout([wiki / "wiki_00", wiki / "wiki_01"], work / "wiki-train.txt"),
                  wikitext_to_reference_layout(DATA / "wikitext-2-raw-train-head.txt", work / "wikitext.txt")]
    vocab = train_vocab(train_text, work / f"tokenizer-{args.vocab_size}", args.vocab_size) if args.vocab_size else VOCAB
    tag = f"-{args.vocab_size}" if args.vocab_size else ""
    held_out = build([wiki_to_reference_layout([wiki / "wiki_02"], work / "wiki-heldout.txt")], work / f"heldout{tag}", "nsp", 1,
                     vocab)
    if args.architectures:
        compare_architectures(args, train_text, held_out, vocab, tag)
        return
    if args.modern:
        compare_modern(args, train_text, held_out, vocab, tag)
        return
    results = []
    for name, pairs, options in RECIPES:
        if args.only and name not in args.only:
            continue
        shards = build(train_text, work / f"train-{pairs}{tag}", pairs, 5, vocab)
        run = work / f"run-{name.replace(' ', '-')}{tag}"
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "bertmodel.cli", "pretrain", "--data", str(shards), "--out", str(run),
                        "--preset", "tiny", "--batch-size", str(args.batch_size), "--max-steps", str(args.steps),
                        "--lr", "1e-3", "--warmup-ratio", "0.05", "--save-every", str(args.steps), "--log-every", "100",
                        "--eval-data", str(held_out), "--eval-batches", str(args.eval_batches), "--seed", "1", "--no-progress",
                        *options], check=True, capture_output=True, text=True)
        records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        last_train = [r for r in records if "mlm_acc" in r][-1]
        evaluation = [r for r in records if "eval_mlm_acc" in r][-1]
        results.append((name, pairs, options, last_train, evaluation, time.perf_counter() - started))
        print(json.dumps({"recipe": name, "pairs": pairs, "train_mlm_acc": last_train["mlm_acc"],
                          **{k: v for k, v in evaluation.items() if k.startswith("eval_")},
                          "minutes": round(results[-1][-1] / 60, 1)}), flush=True)  # each as it finishes
    print(f"\n{args.steps:,} steps, batch {args.batch_size}, tiny (2 layers, hidden 128), seed 1, "
          f"vocabulary {args.vocab_size or 'bert-base-uncased'}; held-out: wiki_02 "
          f"NSP shards, their 15% static masks, {args.eval_batches} batches")
    print(f"{'recipe':16} {'shards':6} {'train mlm_acc':>13} {'held-out mlm_acc':>16} {'held-out mlm_loss':>17} "
          f"{'pair acc':>8} {'minutes':>7}")
    for name, pairs, options, tr, ev, secs in results:
        pair = f"{ev['eval_nsp_acc']:.3f}" if pairs == "nsp" and "eval_nsp_acc" in ev else "-"  # an SOP head on NSP labels means nothing
        print(f"{name:16} {pairs:6} {tr['mlm_acc']:>13.3f} {ev['eval_mlm_acc']:>16.3f} {ev['eval_mlm_loss']:>17.3f} "
              f"{pair:>8} {secs / 60:>7.1f}")


if __name__ == "__main__":
    main()
