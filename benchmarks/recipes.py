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
    # samples_per_s over each logging interval: the interval's seconds are its samples / rate
    seconds, last = 0.0, 0
    for r in train_records:
        seconds += (r["step"] - last) * args.batch_size / r["samples_per_s"]
        last = r["step"]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bertmodel-recipes"))
    ap.add_argument("--eval-batches", type=int, default=50)
    ap.add_argument("--only", nargs="*", help="recipe names to run (default: all)")
    ap.add_argument("--architectures", action="store_true",
                    help="compare BERT and ModernBERT of the same width and depth (equal steps, equal time)")
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
