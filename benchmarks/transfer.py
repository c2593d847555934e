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

--objectives mlm,rtd adds ELECTRA's replaced-token detection (`--objective rtd`, its
defaults: generator 1/3 of the width, lambda 50; dynamic masking at ELECTRA's 0.15; the
same shards, batch, lr and schedule shape) at equal training time: a short calibration
run measures RTD's training throughput, and the RTD run gets the steps that take the
MLM run's longest point's training time (the trainer's own step clock, start-up and
checkpoints left out), with checkpoints at 1/4, 1/2 and all of it. Both runs are timed
alone, one after the other. Each objective's FLOPs per step (the trainer's count) are
printed beside it.

  python benchmarks/transfer.py --work /tmp/transfer --steps 1000,3000 --seeds 1,2,3 \\
      --tasks topic,mrpc --plot transfer.png
  python benchmarks/transfer.py --work /tmp/transfer --objectives mlm,rtd --steps 3000 --tasks topic,mrpc
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
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


def corpus(args, work: Path) -> Path:
    """The shards every objective reads (and their tokenizer, trained on the same text)."""
    wiki = DATA / "enwiki_wikiextractor"
    text = [wiki_to_reference_layout([wiki / "wiki_00", wiki / "wiki_01", wiki / "wiki_02"], work / "wiki.txt"),
            wikitext_to_reference_layout(DATA / "wikitext-2-raw-train-head.txt", work / "wikitext.txt")]
    tokenizer = train_vocab(text, work / f"tokenizer-{args.vocab_size}", args.vocab_size)
    return build(text, work / f"shards-{args.vocab_size}", "nsp", 5, tokenizer)


MASK_RATES = {"mlm": 0.3, "rtd": 0.15}  # objective -> its dynamic masking rate (ModernBERT's; ELECTRA's)


def recipe(objective: str) -> list:
    """The objective's pre-training options beyond the shared ones."""
    return ["--masking", "dynamic", "--mask-rate", MASK_RATES[objective], "--objective", objective]


def run_pretraining(args, shards: Path, run: Path, objective: str, steps: list[int], log: Path,
                    extra: list[str] = ()) -> float:
    """One run with a checkpoint at every point of `steps`; its minutes (whole command)."""
    steps = sorted(steps)
    every = math.gcd(*steps)  # a checkpoint at every point, none pruned (--keep-last)
    done = run / "checkpoints" / f"step-{steps[-1]}"
    started = time.perf_counter()
    if not done.is_dir():
        cli("pretrain", "--data", shards, "--out", run, "--preset", args.preset, "--batch-size", 32,
            "--max-steps", steps[-1], "--lr", "1e-3", "--warmup-ratio", "0.05", "--save-every", every,
            "--keep-last", 1000, "--log-every", 100 if steps[-1] >= 200 else 10, "--seed", 1, *recipe(objective),
            "--device", "cpu", "--no-progress", *extra, log=log)  # click keeps an option's last value: extra wins
    return (time.perf_counter() - started) / 60


def step_seconds(run: Path) -> float:
    """Seconds per training step on the trainer's own clock (metrics.jsonl's samples_per_s
    over each logging interval; start-up, evaluations and checkpoints excluded)."""
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rates = [r["samples_per_s"] for r in records if "samples_per_s" in r][1:] or \
        [r["samples_per_s"] for r in records if "samples_per_s" in r]  # the first interval holds warm-up
    return 32 / statistics.median(rates)


def variant(args) -> str:
    """The RTD arm's name: rtd, or rtd[options] with --rtd-options."""
    return f"rtd[{' '.join(args.rtd_options)}]" if args.rtd_options else "rtd"


def slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in name).strip("_")


def pretrain(args, work: Path, shards: Path, objective: str = "mlm",
             budget_s: float | None = None) -> tuple[Path, list[int], float]:
    """The pre-training run of `objective` (checkpoints at every point) and its minutes.
    MLM's points are --steps; RTD's fill `budget_s` of training time (--rtd-points of it)."""
    if objective == "mlm":
        run, steps, extra = work / "pretrain", sorted(args.steps), []
        log = work / "pretrain.log"
    else:
        extra = args.rtd_options
        name = slug(variant(args))
        calibration = work / f"calibrate-{name}"
        run_pretraining(args, shards, calibration, objective, [60], work / f"calibrate-{name}.log", extra)
        total = max(4, round(budget_s / step_seconds(calibration) / 4) * 4)
        run, steps = work / f"pretrain-{name}", sorted({max(1, round(total * f)) for f in args.rtd_points})
        log = work / f"pretrain-{name}.log"
    minutes = run_pretraining(args, shards, run, objective, steps, log, extra)
    return run, steps, minutes


def flops_per_step(run: Path, objective: str, shards: Path) -> float:
    """The trainer's FLOP count of one step of 32 rows of the shards' length, their mean number of
    prediction slots at the objective's masking rate."""
    from bertmodel.model.config import config_from_dict
    from bertmodel.tasks.rtd import rtd_flops
    from bertmodel.training import checkpoint as ckpt
    from bertmodel.training.metrics import train_flops

    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(run))
    config = config_from_dict(state["config"])
    T = json.loads((shards / "manifest.json").read_text())["options"]["max_seq_length"]
    P = math.ceil(T * MASK_RATES[objective])
    if objective == "rtd":
        return rtd_flops(config, config_from_dict(state["task"]["generator_config"]), 32, T, P)
    return train_flops(config, 32, T, P, pair_head=False)


def finetune(args, work: Path, task: str, point: int, seed: int, run: Path, objective: str = "mlm") -> float:
    """Best dev accuracy of one fine-tune (point 0: random init of the same shape)."""
    train, dev, options = task_files(task, work)
    name = (f"{task}-{point}-seed{seed}" if objective == "mlm" or point == 0
            else f"{task}-{slug(objective)}-{point}-seed{seed}")
    out = work / "finetune" / name
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
                    help="MLM pre-training steps at which to fine-tune (comma-separated)")
    ap.add_argument("--objectives", type=lambda s: s.split(","), default=["mlm"],
                    help="mlm, or mlm,rtd: ELECTRA's replaced-token detection beside it at equal training time")
    ap.add_argument("--rtd-options", type=shlex.split, default=[],
                    help='more pretrain options for the RTD arm, its own run; with "=": --rtd-options="--lr 3e-3"')
    ap.add_argument("--rtd-points", type=lambda s: [float(x) for x in s.split(",")], default=[0.25, 0.5, 1.0],
                    help="where the RTD run is fine-tuned, as fractions of MLM's training time")
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
    ap.add_argument("--tasks", type=lambda s: s.split(","), default=["topic", "mrpc"])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--lr", type=float, default=2e-4, help="fine-tuning learning rate (the demo's)")
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--plot", type=Path, help="write the curves to this PNG")
    args = ap.parse_args()
    if args.objectives[0] != "mlm" or set(args.objectives) - set(MASK_RATES):
        ap.error("--objectives: mlm first (the time budget is its), then rtd")
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    shards = corpus(args, work)
    run, _, minutes = pretrain(args, work, shards)
    per_step_minutes = minutes / max(args.steps) if minutes > 0.5 else None
    step_s = {"mlm": step_seconds(run)}  # objective -> seconds per training step (its run's own clock)
    arms = {"mlm": (run, sorted(args.steps))}  # objective -> (run, points)
    for objective in args.objectives[1:]:
        rtd_run, rtd_steps, _ = pretrain(args, work, shards, objective, budget_s=max(args.steps) * step_s["mlm"])
        arms[variant(args)] = (rtd_run, rtd_steps)
        step_s[variant(args)] = step_seconds(rtd_run)
    results_file = work / "results.jsonl"
    done = {}
    if results_file.is_file():
        for line in results_file.read_text().splitlines():
            r = json.loads(line)
            done[(r["task"], r.get("objective", "mlm"), r["point"], r["seed"])] = r["accuracy"]
    rows = [("mlm", 0)] + [(objective, p) for objective, (_, points) in arms.items() for p in points]
    started = time.perf_counter()
    for task in args.tasks:
        for objective, point in rows:
            for seed in args.seeds:
                if (task, objective, point, seed) not in done:
                    accuracy = finetune(args, work, task, point, seed, arms[objective][0], objective)
                    done[(task, objective, point, seed)] = accuracy
                    with open(results_file, "a") as f:
                        f.write(json.dumps({"task": task, "objective": objective, "point": point, "seed": seed,
                                            "accuracy": accuracy}) + "\n")
                    what = "random init" if point == 0 else f"{objective} step {point}"
                    print(f"{task} {what} seed {seed}: {accuracy:.3f} ({(time.perf_counter() - started) / 60:.1f} min)",
                          flush=True)
    print(f"\n{args.preset}, Wikipedia + WikiText, batch 32, lr 1e-3; MLM: dynamic masking 0.3, MLM only; fine-tuning "
          f"lr {args.lr:g}, {args.epochs:g} epochs, batch 32; best dev accuracy, mean ± sd over seeds "
          f"{','.join(map(str, args.seeds))}" + (f"; pre-training {per_step_minutes * 1000:.1f} CPU min per 1,000 steps"
                                                 if per_step_minutes else ""))
    for objective, (arm_run, points) in arms.items():
        kind = objective.split("[")[0]
        print(f"{objective}: {step_s[objective] * 1000:.0f} ms/step ({32 / step_s[objective]:.0f} samples/s), "
              f"{flops_per_step(arm_run, kind, shards) / 1e9:.1f} GFLOP/step")
    width = max(22, *(len(o) + 16 for o in arms))
    header = f"{'pre-training':>{width}} | " + " | ".join(f"{t:^27}" for t in args.tasks)
    print(header + "\n" + "-" * len(header))
    table = {}
    for objective, point in rows:
        cells = []
        minutes_at = point * step_s[objective] / 60
        for task in args.tasks:
            mean, sd = summary([done[(task, objective, point, s)] for s in args.seeds])
            table[(task, objective, point)] = (mean, sd)
            if point == 0:
                cells.append(f"{mean:.3f} ± {sd:.3f}".center(27))
            else:
                base, base_sd = table[(task, "mlm", 0)]
                gap = mean - base
                mark = "*" if gap > sd + base_sd else " "
                cells.append(f"{mean:.3f} ± {sd:.3f} ({gap:+.3f}{mark})".center(27))
        label = "random init" if point == 0 else f"{objective} {point:,} ({minutes_at:.1f} min)"
        print(f"{label:>{width}} | " + " | ".join(cells))
    print("(gap to random init in brackets; * where it exceeds the sum of both sds; minutes of training time)")
    (work / "table.json").write_text(json.dumps({f"{t}@{o}@{p}": v for (t, o, p), v in table.items()}, indent=1))
    if args.plot:
        plot(args, {(t, p): v for (t, o, p), v in table.items() if o == "mlm"}, [0, *sorted(args.steps)])


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
