"""Distillation on shared tasks, measured: a 3-layer student cut from all-MiniLM-L6-v2
(`bertmodel shrink --layers 0,2,4`, DistilBERT's initialisation) fine-tuned on labels alone
against the same student fine-tuned with the fine-tuned MiniLM as its teacher
(`finetune ... --teacher`); and, task-agnostic, a `mini` student distilled from MiniLM
(`pretrain --objective minilm`) against the same student pre-trained with MLM for the same
CPU time, both fine-tuned on the demo's topic task.

Task distillation (the default, --part tasks):
- mrpc: GLUE MRPC (3,668 training pairs, 408 dev), `finetune classify`; figure: best dev
  accuracy over the epochs (and the F1 of that evaluation);
- conll: CoNLL-2003 English (the first --conll-train-examples training sentences, the first
  --conll-eval-examples of valid), `finetune tokens`; figure: best entity F1 (conlleval's).
The teacher: MiniLM fine-tuned once per task (seed 1) with the students' settings. The
students: the shrunk MiniLM, lr --lr, batch 32, --epochs, seeds 1-3; KD with alpha
--kd-alpha and temperature --kd-temperature (Hinton et al. 2015). Then the speed each
model predicts the dev set at: `bertmodel predict RUN --file dev`, examples per second
with the command's start-up taken out (the same command on one example, subtracted).

Task-agnostic (--part agnostic):
- corpus: the shared Wikipedia articles and WikiText head, built once into FULL-SENTENCES
  shards of --row-length tokens with MiniLM's tokenizer (`build-shards --pairs none`);
- distilled: `pretrain --objective minilm --teacher MINILM --preset mini --relation-heads 8`
  for --agnostic-steps steps (MiniLMv2: Q-Q, K-K, V-V relations of MiniLM's last layer,
  in 8 relation heads: 12, MiniLM's heads, do not divide mini's width 256);
- mlm: the same `mini` student from scratch with MLM (dynamic masking 0.15) for as many
  steps as the distilled run's CPU time buys (the ratio of the two objectives' CPU seconds
  per step, from 20-step runs of each made back to back, so under the same load);
- each fine-tuned on the demo's topic task (1,920 training, 480 dev sentences; 64 tokens,
  3 epochs, lr 1e-4), seeds 1-3; figure: best dev accuracy.

Prints mean ± sd per arm, the gap and whether it exceeds the spread (the sum of both sds),
the CPU minutes of every stage (getrusage of the children), and writes table.json. Every
command's output lands in --work; a rerun reuses what is finished (results.jsonl).

  python benchmarks/bench_distill_tasks.py --work /tmp/distill-tasks
  python benchmarks/bench_distill_tasks.py --part agnostic --work /tmp/distill-agnostic
  python benchmarks/bench_distill_tasks.py --work /tmp/dt-smoke --seeds 1 --mrpc-train-examples 64 \\
      --conll-train-examples 64 --conll-eval-examples 64 --epochs 1              # a smoke run, a minute
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_embed import minilm_dir  # noqa: E402
from transfer import DATA, TASKS, cli, summary, task_files  # noqa: E402
from transfer_korean import Stages, cpu_seconds, finished_runs  # noqa: E402

CONLL = DATA / "ner" / "conll2003"
STUDENT_LAYERS = "0,2,4"


def shrink(work: Path, stages: Stages, minilm: Path) -> Path:
    out = work / f"minilm-layers-{STUDENT_LAYERS.replace(',', '')}"
    stages.run(out.name, out / "config.json", lambda: cli("shrink", minilm, "--layers", STUDENT_LAYERS, "--out", out,
                                                           log=work / f"{out.name}.log"))
    return out


def task_setup(args, name: str) -> dict:
    """How each task trains and what its figure is."""
    if name == "mrpc":
        train, dev, options = TASKS["mrpc"]
        return {"command": "classify", "train": train, "dev": dev, "options": options, "metric": "accuracy",
                "limit": args.mrpc_train_examples, "eval_limit": None, "length": 128}
    return {"command": "tokens", "train": CONLL / "train.txt", "dev": CONLL / "valid.txt", "options": [],
            "metric": "f1", "limit": args.conll_train_examples, "eval_limit": args.conll_eval_examples,
            "length": 128}


def finetune(args, work: Path, task: dict, model: Path, out: Path, seed: int, teacher: Path | None) -> dict:
    """One fine-tune; its best dev figure, that evaluation's other figures, CPU and wall minutes."""
    cpu, wall = cpu_seconds(), time.perf_counter()
    limits = (["--max-train-examples", task["limit"]] if task["limit"] else []) + \
             (["--max-eval-examples", task["eval_limit"]] if task["eval_limit"] else [])
    kd = ["--teacher", teacher, "--kd-alpha", args.kd_alpha, "--kd-temperature", args.kd_temperature] if teacher else []
    cli("finetune", task["command"], "--model", model, "--train", task["train"], "--validation", task["dev"],
        *task["options"], *limits, *kd, "--out", out, "--epochs", args.epochs, "--batch-size", 32, "--lr", args.lr,
        "--seed", seed, "--max-seq-length", task["length"], "--save-every", 1_000_000, "--device", "cpu",
        "--no-progress", log=out.parent / f"{out.name}.log")
    best = json.loads((out / "best.json").read_text())
    evaluation = next(json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
                      if json.loads(line).get("step") == best["step"] and f"eval_{best['metric']}" in line)
    return {"value": best["value"], "eval": {k: v for k, v in evaluation.items() if k.startswith("eval_")},
            "cpu_min": (cpu_seconds() - cpu) / 60, "wall_min": (time.perf_counter() - wall) / 60}


def predict_rate(work: Path, run: Path, task: dict, tag: str) -> dict:
    """Examples per second `bertmodel predict RUN --file DEV` reads at, start-up taken out:
    (n - 1) / (time on the whole dev set - time on its first example)."""
    dev_rows = dev_examples(task)
    one = work / f"predict-one-{task['command']}.{dev_suffix(task)}"
    one.write_text(first_example(task), encoding="utf-8")
    times = {}
    for name, data in (("one", one), ("all", task["dev"])):
        out = work / f"predict-{tag}-{name}.jsonl"
        best = float("inf")
        for _ in range(2):  # the faster of two: the first also warms the page cache
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "bertmodel.cli", "predict", run, "--file", data, "--out", out,
                            "--overwrite", "--device", "cpu", "--no-progress"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            best = min(best, time.perf_counter() - start)
        times[name] = best
    return {"examples": dev_rows, "seconds": times["all"], "startup_seconds": times["one"],
            "per_s": (dev_rows - 1) / max(1e-9, times["all"] - times["one"])}


def dev_suffix(task: dict) -> str:
    return "tsv" if task["command"] == "classify" else "txt"


def first_example(task: dict) -> str:
    text = Path(task["dev"]).read_text(encoding="utf-8-sig")
    if task["command"] == "classify":
        return "\n".join(text.splitlines()[:2]) + "\n"
    sentences = [s for s in text.split("\n\n") if s.strip() and not s.startswith("-DOCSTART-")]
    return sentences[0] + "\n"


def dev_examples(task: dict) -> int:
    text = Path(task["dev"]).read_text(encoding="utf-8-sig")
    if task["command"] == "classify":
        return len(text.splitlines()) - 1
    return sum(1 for s in text.split("\n\n") if s.strip() and not s.startswith("-DOCSTART-"))


def run_tasks(args, work: Path, stages: Stages) -> None:
    minilm = minilm_dir()
    student = shrink(work, stages, minilm)
    results_file = work / "results.jsonl"
    done = finished_runs(results_file)

    def record(key: str, fn) -> dict:
        if key not in done:
            done[key] = {"key": key, **fn()}
            with open(results_file, "a") as f:
                f.write(json.dumps(done[key]) + "\n")
            print(f"{key}: {done[key].get('value', done[key].get('per_s')):.4f}", flush=True)
        return done[key]

    setting = f"{args.epochs:g}ep-lr{args.lr:g}"
    table = {}
    for name in args.tasks:
        task = task_setup(args, name)
        size = f"{task['limit'] or 'all'}"
        teacher_run = work / f"{name}-teacher-{size}-{setting}"
        teacher = record(teacher_run.name, lambda: finetune(args, work, task, minilm, teacher_run, 1, None))
        arms = {"labels": [], "kd": []}
        for seed in args.seeds:
            for arm in arms:
                kd = f"-kd{args.kd_alpha:g}-t{args.kd_temperature:g}" if arm == "kd" else ""
                out = work / f"{name}-student-{arm}{kd}-{size}-{setting}-seed{seed}"
                arms[arm].append(record(out.name, lambda: finetune(args, work, task, student, out, seed,
                                                                   teacher_run if arm == "kd" else None)))
        speed = {"teacher": record(f"{name}-predict-teacher", lambda: predict_rate(work, teacher_run, task, "teacher"))}
        first_kd = work / f"{name}-student-kd-kd{args.kd_alpha:g}-t{args.kd_temperature:g}-{size}-{setting}-seed{args.seeds[0]}"
        speed["student"] = record(f"{name}-predict-student", lambda: predict_rate(work, first_kd, task, "student"))
        table[name] = {"teacher": teacher, "arms": arms, "speed": speed, "metric": task["metric"]}
    report_tasks(args, table)
    (work / "table.json").write_text(json.dumps(table, indent=1, default=str))


def report_tasks(args, table: dict) -> None:
    print(f"\nstudent: all-MiniLM-L6-v2's layers {STUDENT_LAYERS} (bertmodel shrink); teacher: MiniLM fine-tuned on "
          f"the task (seed 1); {args.epochs:g} epochs, batch 32, lr {args.lr:g}, 128 tokens; KD alpha "
          f"{args.kd_alpha:g}, T {args.kd_temperature:g}; figure: the best dev evaluation over the epochs")
    print(f"\n{'task':6} | {'metric':8} | {'teacher':>7} | {'labels alone':^15} | {'with teacher':^15} | {'gap':>8} | "
          f"{'CPU min (labels / kd)':^21} | {'predict/s teacher -> student':^30}")
    print("-" * 130)
    for name, row in table.items():
        labels, kd = ([r["value"] for r in row["arms"][arm]] for arm in ("labels", "kd"))
        (lm, ls), (km, ks) = summary(labels), summary(kd)
        gap = km - lm
        cpu = [sum(r["cpu_min"] for r in row["arms"][arm]) / len(row["arms"][arm]) for arm in ("labels", "kd")]
        speed = row["speed"]
        print(f"{name:6} | {row['metric']:8} | {row['teacher']['value']:7.3f} | {lm:.3f} ± {ls:.3f} | "
              f"{km:.3f} ± {ks:.3f} | {gap:+.3f}{'*' if abs(gap) > ls + ks else ' '} | "
              f"{cpu[0]:8.1f} / {cpu[1]:<8.1f} | {speed['teacher']['per_s']:9.1f} -> {speed['student']['per_s']:.1f} "
              f"({speed['student']['per_s'] / speed['teacher']['per_s']:.2f}x)")
        print(f"       seeds: labels {', '.join(f'{v:.3f}' for v in labels)}; kd {', '.join(f'{v:.3f}' for v in kd)}")
    print("(* where the gap exceeds the sum of both sds)")


def run_agnostic(args, work: Path, stages: Stages) -> None:
    minilm = minilm_dir()
    text = corpus_text(work)
    shards = work / f"shards-minilm-{args.row_length}"
    stages.run(shards.name, shards / "manifest.json", lambda: subprocess.run(
        [sys.executable, "-m", "bertprep", "build-shards", *map(str, text), "--tokenizer", str(minilm), "--out",
         str(shards), "--pairs", "none", "--max-seq-length", str(args.row_length), "--dupe-factor", "1",
         "--workers", "1", "--quiet"], check=True))
    common = ["--data", shards, "--preset", "mini", "--batch-size", 32, "--lr", args.agnostic_lr, "--warmup-ratio",
              0.05, "--log-every", 10, "--seed", 1, "--device", "cpu", "--no-progress", "--keep-last", 1]
    distilled = work / f"mini-minilm-{args.agnostic_steps}-r{args.relation_heads}-len{args.row_length}"
    cost = stages.run(distilled.name, distilled / "checkpoints" / f"step-{args.agnostic_steps}", lambda: cli(
        "pretrain", *common, "--objective", "minilm", "--teacher", minilm, "--relation-heads", args.relation_heads,
        "--max-steps", args.agnostic_steps,
        "--save-every", args.agnostic_steps, "--out", distilled, log=work / f"{distilled.name}.log"))
    mlm_common = [*common, "--objective", "mlm", "--masking", "dynamic", "--mask-rate", 0.15]
    # Each objective's CPU seconds per step from 20-step runs made back to back (so under
    # the same load: CPU time itself rises under contention), the MLM run given as many
    # steps as the distilled run's cost buys at that ratio.
    per_step = {}
    for objective, options in (("minilm", ["--objective", "minilm", "--teacher", minilm, "--relation-heads",
                                           args.relation_heads]), ("mlm", mlm_common[len(common):])):
        calibration = work / f"mini-{objective}-calibration-len{args.row_length}"
        calibrated = stages.run(calibration.name, calibration / "checkpoints" / "step-20", lambda: cli(
            "pretrain", *common, *options, "--max-steps", 20, "--save-every", 20, "--out", calibration,
            log=work / f"{calibration.name}.log"))
        per_step[objective] = calibrated["cpu_min"] / 20
    mlm_steps = max(10, round(args.agnostic_steps * per_step["minilm"] / per_step["mlm"] / 10) * 10)
    mlm = work / f"mini-mlm-{mlm_steps}-len{args.row_length}"
    mlm_cost = stages.run(mlm.name, mlm / "checkpoints" / f"step-{mlm_steps}", lambda: cli(
        "pretrain", *mlm_common, "--max-steps", mlm_steps, "--save-every", mlm_steps, "--out", mlm,
        log=work / f"{mlm.name}.log"))
    train, dev, options = task_files("topic", work)
    task = {"command": "classify", "train": train, "dev": dev, "options": options, "metric": "accuracy",
            "limit": None, "eval_limit": None, "length": 64}
    results_file = work / "results.jsonl"
    done = finished_runs(results_file)
    table = {}
    for arm, run, steps, stage in (("minilm", distilled, args.agnostic_steps, cost), ("mlm", mlm, mlm_steps, mlm_cost)):
        values = []
        for seed in args.seeds:
            out = work / f"topic-{run.name}-{args.epochs:g}ep-lr{args.finetune_lr:g}-seed{seed}"
            if out.name not in done:
                ft_args = argparse.Namespace(**{**vars(args), "lr": args.finetune_lr})
                done[out.name] = {"key": out.name, **finetune(ft_args, work, task, run / "hf", out, seed, None)}
                with open(results_file, "a") as f:
                    f.write(json.dumps(done[out.name]) + "\n")
            values.append(done[out.name]["value"])
        table[arm] = {"steps": steps, "pretrain_cpu_min": stage["cpu_min"], "pretrain_wall_min": stage["wall_min"],
                      "accuracies": values}
    print(f"\nmini (4 layers, hidden 256) on {', '.join(p.name for p in text)} in rows of {args.row_length}, batch 32, "
          f"lr {args.agnostic_lr:g}; then the topic task, 3 epochs, 64 tokens, lr {args.finetune_lr:g}")
    print(f"\n{'arm':28} | {'steps':>6} | {'CPU min (wall)':^15} | {'topic accuracy':^15} | seeds")
    print("-" * 90)
    for arm, row in table.items():
        mean, sd = summary(row["accuracies"])
        label = "MiniLMv2 from all-MiniLM-L6-v2" if arm == "minilm" else "MLM from scratch"
        print(f"{label:28} | {row['steps']:>6} | {row['pretrain_cpu_min']:6.1f} ({row['pretrain_wall_min']:5.1f}) | "
              f"{mean:.3f} ± {sd:.3f} | {', '.join(f'{v:.3f}' for v in row['accuracies'])}")
    (work / "table.json").write_text(json.dumps(table, indent=1))


def corpus_text(work: Path) -> list[Path]:
    from bertmodel.data.synthetic import wiki_to_reference_layout

    wiki = DATA / "enwiki_wikiextractor"
    return [wiki_to_reference_layout(sorted(p for p in wiki.iterdir() if p.name.startswith("wiki_")),
                                     work / "wiki.txt"), DATA / "google_sample_text.txt"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bertmodel-distill-tasks"))
    ap.add_argument("--part", choices=("tasks", "agnostic"), default="tasks")
    ap.add_argument("--tasks", type=lambda s: s.split(","), default=["mrpc", "conll"])
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--lr", type=float, default=1e-4, help="fine-tuning learning rate (teacher and students)")
    ap.add_argument("--kd-alpha", type=float, default=0.5)
    ap.add_argument("--kd-temperature", type=float, default=2.0)
    ap.add_argument("--mrpc-train-examples", type=int, default=None, help="[default: all 3,668]")
    ap.add_argument("--conll-train-examples", type=int, default=3000)
    ap.add_argument("--conll-eval-examples", type=int, default=1000)
    ap.add_argument("--row-length", type=int, default=64, help="agnostic: tokens per pre-training row")
    ap.add_argument("--agnostic-steps", type=int, default=200, help="agnostic: the distilled run's steps (batch 32)")
    ap.add_argument("--agnostic-lr", type=float, default=5e-4)
    ap.add_argument("--relation-heads", type=int, default=8, help="agnostic: MiniLMv2's relation heads (they must "
                    "divide MiniLM's 384 and mini's 256)")
    ap.add_argument("--finetune-lr", type=float, default=1e-4, help="agnostic: the topic task's learning rate")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    stages = Stages(args.work)
    (run_tasks if args.part == "tasks" else run_agnostic)(args, args.work, stages)


if __name__ == "__main__":
    main()
