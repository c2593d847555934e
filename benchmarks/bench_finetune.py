"""Classification fine-tuning: ours (`bertmodel.finetune.finetune`) against transformers'
`Trainer` with `BertForSequenceClassification`, same run, CPU, same starting weights
(all-MiniLM-L6-v2 unless --model), same rows, hyperparameters and seeds.

Both sides get: the first --max-train-rows training rows (a multiple of --batch-size, so
neither has a partial last batch), --epochs, AdamW lr --lr with weight decay 0.01 (not
on biases/LayerNorm), linear decay after round(10% of the steps) warmup steps, gradient
clipping at 1.0, dropout 0.1, batches padded to their longest row, fp32, the seed. The
label ids are the sorted label set for both. Quality is measured on the first
--max-eval-rows dev rows with the same metric code (bertmodel.metrics.classification) on
the final weights of each run. Time per epoch is the wall time from loading the model
and tokenizing to the end of training, divided by the epochs: both write a resumable
checkpoint (weights, optimizer, schedule, RNG) every epoch (ours also RUN/hf); also
the Trainer's own `train_runtime`. Every run is a fresh process with its imports done
before the clock starts (so neither inherits the other's heap or warm caches, and no run
pays the first imports); runs alternate ours/Trainer per seed, so a busy machine slows
both. Ours runs as `bertmodel finetune` does on a CPU, which tells glibc to keep freed
blocks for reuse (bertmodel/training/host_memory.py); the Trainer runs with glibc's defaults, as
in a transformers user's process, unless --trainer-keeps-memory gives it the same.

Optimizer: both use AdamW eps 1e-6 (BERT's and ours; the Trainer's own default is 1e-8).
Both warm up from lr 0 at the first step. With eps aligned, the two training loops are
the same computation (same batches and weights, dropout off: the losses agree to 6
decimals over 30 MRPC steps; tests/test_finetune_loop_matches_trainer.py for NER).

Tasks: rte and mrpc (sentence pairs), cola (single sentences, header-less TSV).
Run:   .venv/bin/python benchmarks/bench_finetune.py --epochs 1 --max-train-rows 480 --seeds 1,2,3
Needs: transformers and accelerate (the `bench` extra), ../shared/data/glue, and
       ../shared/tools/fetch_minilm.sh (or --model DIR).
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path.insert(0, str(REPO))

TASKS = {  # name: (train, dev, text, pair, label, header)
    "rte": ("glue/RTE/train.tsv", "glue/RTE/dev.tsv", "sentence1", "sentence2", "label", True),
    "mrpc": ("glue/MRPC/train.tsv", "glue/MRPC/dev.tsv", "#1 String", "#2 String", "Quality", True),
    "cola": ("glue/CoLA/in_domain_train.tsv", "glue/CoLA/in_domain_dev.tsv", 3, None, 1, False),
}


def model_dir(given: str | None) -> pathlib.Path:
    if given:
        return pathlib.Path(given)
    path = pathlib.Path(tempfile.gettempdir()) / "bertmodel-bench-minilm"
    subprocess.run(["bash", str(SHARED / "tools" / "fetch_minilm.sh"), str(path)], check=True,
                   stdout=subprocess.DEVNULL)
    return path


def subset(task: str, rows: int, eval_rows: int, work: pathlib.Path):
    """The task's first rows as header-ful TSVs both sides read (text, [pair,] label)."""
    from bertmodel.data.tables import read_table

    train_file, dev_file, text, pair, label, header = TASKS[task]
    out = []
    for name, path, limit in (("train", train_file, rows), ("dev", dev_file, eval_rows)):
        data = read_table(SHARED / "data" / path, text, pair, label, header=header)
        n = min(limit, len(data))
        cols = ["sentence"] + (["pair"] if pair is not None else []) + ["label"]
        lines = ["\t".join(cols)]
        for i in range(n):
            fields = [data.texts[i]] + ([data.pairs[i]] if pair is not None else []) + [str(data.labels[i])]
            lines.append("\t".join(f.replace("\t", " ").replace("\n", " ") for f in fields))
        target = work / f"{task}-{name}.tsv"
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out.append((target, n))
    return out, pair is not None


def read_rows(path: pathlib.Path):
    lines = path.read_text(encoding="utf-8").splitlines()
    cols = lines[0].split("\t")
    return [dict(zip(cols, line.split("\t"))) for line in lines[1:]]


def scores(predictions, labels, num_labels):
    from bertmodel.metrics.classification import classification_metrics

    return classification_metrics(predictions, labels, num_labels)


def run_ours(model, train, dev, pair, seed, args, work) -> dict:
    from bertmodel.inference.predict import evaluate_model
    from bertmodel.finetune import FinetuneConfig, finetune

    out = work / f"ours-{train.stem}-{seed}"
    start = time.perf_counter()
    finetune(FinetuneConfig(task="classify", model=str(model), train=str(train), out=str(out),
                            text_column="sentence", text_pair_column="pair" if pair else None,
                            epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup,
                            weight_decay=0.01, clip_grad=1.0, max_seq_length=args.max_seq_length, seed=seed,
                            device="cpu", progress=False, log_every=10_000), log=lambda *a, **k: None)
    elapsed = time.perf_counter() - start
    metrics, _ = evaluate_model(out, {"validation": str(dev)}, out_dir=out / "eval", device="cpu")
    return {"seconds": elapsed, **metrics}


def run_trainer(model, train, dev, pair, seed, args, work) -> dict:
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                              TrainingArguments, set_seed)

    start = time.perf_counter()
    train_rows, dev_rows = read_rows(train), read_rows(dev)
    names = sorted({r["label"] for r in train_rows})
    if all(n.lstrip("-").isdigit() for n in names):  # integer labels in numeric order, as ours
        names.sort(key=int)
    label2id = {n: i for i, n in enumerate(names)}
    from transformers.utils import logging

    logging.set_verbosity_error()  # its load report and progress bars, once per run
    logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(model)

    def encode(rows):
        enc = tok([r["sentence"] for r in rows], [r["pair"] for r in rows] if pair else None, truncation=True,
                  max_length=args.max_seq_length)
        return [{**{k: enc[k][i] for k in enc}, "labels": label2id[r["label"]]} for i, r in enumerate(rows)]
    train_set, dev_set = encode(train_rows), encode(dev_rows)
    set_seed(seed)  # the new head's initial weights, as run_glue.py seeds before loading the model
    net = AutoModelForSequenceClassification.from_pretrained(model, num_labels=len(names))
    targs = TrainingArguments(output_dir=str(work / f"trainer-{train.stem}-{seed}"), num_train_epochs=args.epochs,
                              per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=64,
                              learning_rate=args.lr, warmup_steps=args.warmup, weight_decay=0.01, max_grad_norm=1.0,
                              adam_epsilon=1e-6,
                              lr_scheduler_type="linear", seed=seed, save_strategy="epoch", eval_strategy="no",
                              logging_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
                              dataloader_num_workers=0)
    trainer = Trainer(model=net, args=targs, train_dataset=train_set, data_collator=DataCollatorWithPadding(tok))
    result = trainer.train()
    elapsed = time.perf_counter() - start
    logits = trainer.predict(dev_set).predictions
    labels = [r["labels"] for r in dev_set]
    return {"seconds": elapsed, "train_runtime": result.metrics["train_runtime"],
            **scores(logits.argmax(-1), labels, len(names))}


RUNNERS = {"ours": run_ours, "trainer": run_trainer}


def run_isolated(side, model, train, dev, pair, seed, args, work) -> dict:
    """One run in a fresh process (see the module docstring); its figures as a dict."""
    spec = {"side": side, "model": str(model), "train": str(train), "dev": str(dev), "pair": pair, "seed": seed,
            "work": str(work), "args": {k: getattr(args, k) for k in ("epochs", "batch_size", "lr", "max_seq_length",
                                                                       "warmup", "threads", "trainer_keeps_memory")}}
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{side} seed {seed}: the run failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def worker(spec: dict) -> None:
    import torch

    # torch.optim imports torch._dynamo the first time an optimizer is made (1.5 s here);
    # transformers' imports bring it in before the Trainer's clock starts, so import it
    # for both: no run pays a first import (see the module docstring).
    import torch._dynamo  # noqa: F401

    args = argparse.Namespace(**spec["args"])
    torch.set_num_threads(args.threads)
    if spec["side"] == "trainer" and args.trainer_keeps_memory:
        from bertmodel.training.host_memory import keep_freed_memory

        keep_freed_memory()
    r = RUNNERS[spec["side"]](pathlib.Path(spec["model"]), pathlib.Path(spec["train"]), pathlib.Path(spec["dev"]),
                              spec["pair"], spec["seed"], args, pathlib.Path(spec["work"]))
    print(json.dumps(r, default=float))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(json.loads(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="BERT dir to start from [default: all-MiniLM-L6-v2, fetched]")
    parser.add_argument("--tasks", default="rte,cola", help="comma-separated: " + ", ".join(TASKS))
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--max-train-rows", type=int, default=480)
    parser.add_argument("--max-eval-rows", type=int, default=277)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trainer-keeps-memory", action="store_true",
                        help="run the Trainer with our glibc heap setting too (bertmodel/training/host_memory.py)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    model = model_dir(args.model)
    seeds = [int(s) for s in args.seeds.split(",")]
    args.max_train_rows -= args.max_train_rows % args.batch_size
    report = {"options": vars(args), "tasks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        for task in args.tasks.split(","):
            ((train, n_train), (dev, n_dev)), pair = subset(task, args.max_train_rows, args.max_eval_rows, work)
            steps = math.ceil(n_train / args.batch_size * args.epochs)
            args.warmup = round(0.1 * steps)
            runs = {"ours": [], "trainer": []}
            for seed in seeds:
                for side in RUNNERS:
                    r = run_isolated(side, model, train, dev, pair, seed, args, work)
                    runs[side].append(r)
                    print(f"{task} seed {seed} {side:7s}: {r['seconds']:6.1f} s, accuracy {r['accuracy']:.4f}, "
                          f"f1 {r.get('f1', float('nan')):.4f}, mcc {r['mcc']:.4f}", flush=True)
            summary = {}
            for side, rs in runs.items():
                summary[side] = {k: sum(r[k] for r in rs) / len(rs) for k in ("seconds", "accuracy", "f1", "mcc")
                                 if all(k in r and r[k] is not None for r in rs)}
                summary[side]["seconds_per_epoch"] = summary[side]["seconds"] / args.epochs
            ours, theirs = summary["ours"], summary["trainer"]
            print(f"{task}: {n_train} train rows x {args.epochs:g} epoch(s) = {steps} steps, {n_dev} dev rows, "
                  f"seeds {seeds}")
            print(f"  mean accuracy  ours {100 * ours['accuracy']:.2f}  Trainer {100 * theirs['accuracy']:.2f}  "
                  f"diff {100 * (ours['accuracy'] - theirs['accuracy']):+.2f} points")
            if "f1" in ours:
                print(f"  mean F1        ours {100 * ours['f1']:.2f}  Trainer {100 * theirs['f1']:.2f}  "
                      f"diff {100 * (ours['f1'] - theirs['f1']):+.2f} points")
            print(f"  mean MCC       ours {ours['mcc']:.4f}  Trainer {theirs['mcc']:.4f}")
            ratio = ours["seconds_per_epoch"] / theirs["seconds_per_epoch"]
            print(f"  s/epoch        ours {ours['seconds_per_epoch']:.1f}  Trainer {theirs['seconds_per_epoch']:.1f}"
                  f"  ratio {ratio:.2f}x (target <= 0.6x)", flush=True)
            report["tasks"][task] = {"train_rows": n_train, "dev_rows": n_dev, "steps": steps, "runs": runs,
                                     "mean": summary, "time_ratio": ratio}
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
