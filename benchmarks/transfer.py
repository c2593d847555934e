"""What pre-training buys downstream, against the only control that can show it: the same
fine-tune from a random init of the same shape and vocabulary (`--init random`), with
the same hyperparameters and seeds.

One tiny BERT is pre-trained on Wikipedia + WikiText (../shared/data, about 4 MB) with
a recipe of today (dynamic masking at 30%, MLM only, lr 1e-3, batch 32), keeping a
checkpoint at each of --steps. Every checkpoint, and the random init, is fine-tuned on
each task with each seed; a task's figure is its best validation accuracy over the
epochs (the BERT paper's pick on dev, the same rule for both arms). Tasks:
- topic: the demo's task (which stdlib package a docstring sentence documents), far
  from the pre-training text's domain;
- mrpc, rte, cola: GLUE's, from ../shared/data.

Prints a table (mean ± sd over seeds per point), the gap to random init and whether it
exceeds the spread (the sum of both sds); --plot draws the curves. Everything lands in
--work and a rerun reuses what is finished (results.jsonl).

  python benchmarks/transfer.py --work /tmp/transfer --steps 1000,3000 --seeds 1,2,3 \\
      --tasks topic,mrpc --plot transfer.png
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recipes import DATA, build, train_vocab, wikitext_to_reference_layout  # noqa: E402

from bertmodel.data.synthetic import wiki_to_reference_layout  # noqa: E402

GLUE = DATA / "glue"
TASKS = {  # name -> (train, dev, classify options)
    "mrpc": (GLUE / "MRPC" / "train.tsv", GLUE / "MRPC" / "dev.tsv",
             ["--text-column", "#1 String", "--text-pair-column", "#2 String", "--label-column", "Quality"]),
    "rte": (GLUE / "RTE" / "train.tsv", GLUE / "RTE" / "dev.tsv",
            ["--text-column", "sentence1", "--text-pair-column", "sentence2", "--label-column", "label"]),
    "cola": (GLUE / "CoLA" / "in_domain_train.tsv", GLUE / "CoLA" / "in_domain_dev.tsv",
             ["--no-header", "--text-column", "3", "--label-column", "1"]),
}


def cli(*args, log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        subprocess.run([sys.executable, "-m", "bertmodel.cli", *map(str, args)], check=True, stdout=f,
                       stderr=subprocess.STDOUT)


def task_files(name: str, work: Path) -> tuple[Path, Path, list[str]]:
    if name == "topic":
        from bertmodel.demo.task import write_topic_task

        directory = work / "topic-task"
        if not (directory / "dev.tsv").is_file():
            write_topic_task(directory)
        return directory / "train.tsv", directory / "dev.tsv", []
    return TASKS[name]


def pretrain(args, work: Path) -> tuple[Path, Path, float]:
    """The pre-training run (checkpoints at every --steps point) and its minutes."""
    wiki = DATA / "enwiki_wikiextractor"
    text = [wiki_to_reference_layout([wiki / "wiki_00", wiki / "wiki_01", wiki / "wiki_02"], work / "wiki.txt"),
            wikitext_to_reference_layout(DATA / "wikitext-2-raw-train-head.txt", work / "wikitext.txt")]
    tokenizer = train_vocab(text, work / f"tokenizer-{args.vocab_size}", args.vocab_size)
    shards = build(text, work / f"shards-{args.vocab_size}", "nsp", 5, tokenizer)
    run = work / "pretrain"
    steps = sorted(args.steps)
    every = math.gcd(*steps)  # a checkpoint at every point, none pruned (--keep-last)
    done = run / "checkpoints" / f"step-{steps[-1]}"
    started = time.perf_counter()
    if not done.is_dir():
        cli("pretrain", "--data", shards, "--out", run, "--preset", args.preset, "--batch-size", 32,
            "--max-steps", steps[-1], "--lr", "1e-3", "--warmup-ratio", "0.05", "--save-every", every,
            "--keep-last", 1000, "--log-every", 100, "--seed", 1, "--masking", "dynamic", "--mask-rate", 0.3,
            "--objective", "mlm", "--device", "cpu", "--no-progress", log=work / "pretrain.log")
    minutes = (time.perf_counter() - started) / 60
    return run, tokenizer, minutes


def finetune(args, work: Path, task: str, point: int, seed: int, run: Path, tokenizer: Path) -> float:
    """Best dev accuracy of one fine-tune (point 0: random init of the same shape)."""
    train, dev, options = task_files(task, work)
    out = work / "finetune" / f"{task}-{point}-seed{seed}"
    source = ["--model", run / "checkpoints" / f"step-{point or min(args.steps)}"]
    if point == 0:
        source += ["--init", "random"]
    # Always run the command: a finished run says "nothing to do", a killed one resumes.
    cli("finetune", "classify", *source, "--train", train, "--validation", dev, *options, "--out", out,
        "--epochs", args.epochs, "--batch-size", 32, "--lr", args.lr, "--seed", seed, "--device", "cpu",
        "--no-progress", "--max-seq-length", 128, log=out.with_suffix(".log"))
    return json.loads((out / "best.json").read_text())["value"]


def summary(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bertmodel-transfer"))
    ap.add_argument("--steps", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 3000],
                    help="pre-training steps at which to fine-tune (comma-separated)")
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
    ap.add_argument("--tasks", type=lambda s: s.split(","), default=["topic", "mrpc"])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--lr", type=float, default=2e-4, help="fine-tuning learning rate (the demo's)")
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--plot", type=Path, help="write the curves to this PNG")
    args = ap.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    run, tokenizer, minutes = pretrain(args, work)
    per_step_minutes = minutes / max(args.steps) if minutes > 0.5 else None
    results_file = work / "results.jsonl"
    done = {}
    if results_file.is_file():
        for line in results_file.read_text().splitlines():
            r = json.loads(line)
            done[(r["task"], r["point"], r["seed"])] = r["accuracy"]
    points = [0, *sorted(args.steps)]
    started = time.perf_counter()
    for task in args.tasks:
        for point in points:
            for seed in args.seeds:
                if (task, point, seed) not in done:
                    accuracy = finetune(args, work, task, point, seed, run, tokenizer)
                    done[(task, point, seed)] = accuracy
                    with open(results_file, "a") as f:
                        f.write(json.dumps({"task": task, "point": point, "seed": seed, "accuracy": accuracy}) + "\n")
                    print(f"{task} {'random init' if point == 0 else f'step {point}'} seed {seed}: {accuracy:.3f} "
                          f"({(time.perf_counter() - started) / 60:.1f} min)", flush=True)
    print(f"\n{args.preset}, Wikipedia + WikiText, dynamic masking 0.3, MLM only, batch 32, lr 1e-3; fine-tuning "
          f"lr {args.lr:g}, {args.epochs:g} epochs, batch 32; best dev accuracy, mean ± sd over seeds "
          f"{','.join(map(str, args.seeds))}" + (f"; pre-training {per_step_minutes * 1000:.1f} CPU min per 1,000 steps"
                                                 if per_step_minutes else ""))
    header = f"{'pre-training':>14} | " + " | ".join(f"{t:^27}" for t in args.tasks)
    print(header + "\n" + "-" * len(header))
    table = {}
    for point in points:
        cells = []
        for task in args.tasks:
            mean, sd = summary([done[(task, point, s)] for s in args.seeds])
            table[(task, point)] = (mean, sd)
            if point == 0:
                cells.append(f"{mean:.3f} ± {sd:.3f}".center(27))
            else:
                base, base_sd = table[(task, 0)]
                gap = mean - base
                mark = "*" if gap > sd + base_sd else " "
                cells.append(f"{mean:.3f} ± {sd:.3f} ({gap:+.3f}{mark})".center(27))
        print(f"{'random init' if point == 0 else f'{point:,} steps':>14} | " + " | ".join(cells))
    print("(gap to random init in brackets; * where it exceeds the sum of both sds)")
    (work / "table.json").write_text(json.dumps({f"{t}@{p}": v for (t, p), v in table.items()}, indent=1))
    if args.plot:
        plot(args, table, points)


def plot(args, table, points) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    steps = points[1:]
    for i, task in enumerate(args.tasks):
        color = f"C{i}"
        means = [table[(task, p)][0] for p in steps]
        sds = [table[(task, p)][1] for p in steps]
        ax.errorbar(steps, means, yerr=sds, color=color, marker="o", capsize=3, label=f"{task}: pre-trained")
        base, base_sd = table[(task, 0)]
        ax.axhline(base, color=color, linestyle="--", label=f"{task}: random init")
        ax.axhspan(base - base_sd, base + base_sd, color=color, alpha=0.12)
    ax.set_xlabel("pre-training steps (batch 32)")
    ax.set_ylabel("best dev accuracy (mean ± sd over seeds)")
    ax.set_title(f"What pre-training buys: {args.preset} BERT, fine-tuned vs the same from random init")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=100)
    print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
