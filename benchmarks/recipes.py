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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bertmodel-recipes"))
    ap.add_argument("--eval-batches", type=int, default=50)
    ap.add_argument("--only", nargs="*", help="recipe names to run (default: all)")
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
