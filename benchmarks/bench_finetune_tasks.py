"""Token classification and multiple choice: ours (`bertmodel finetune tokens|choice`)
against transformers' `Trainer` with `BertForTokenClassification` /
`BertForMultipleChoice`, on a CPU, from the same weights (all-MiniLM-L6-v2 unless
--model), on the same examples, hyperparameters and seeds — the method of
bench_finetune.py (read its docstring): each run in a fresh process with its imports
done before the clock starts, ours and the Trainer alternating per seed, AdamW eps 1e-6,
weight decay 0.01 off biases/LayerNorm, linear decay after round(10%) warmup steps,
clipping at 1.0, dropout 0.1, batches padded to their longest row, fp32, a checkpoint
each epoch on both sides. Quality is measured on the final weights of each run with the
same metric code (bertmodel.eval.entities: conlleval's entity F1; accuracy for choice)
on the same dev examples; time per epoch is the wall time from loading the model and
encoding the data to the end of training, divided by the epochs.

Tasks:
  ner     CoNLL-2003 English (../shared/data/ner/conll2003): the first --max-train-rows
          training sentences, the first --max-eval-rows dev sentences; the first
          WordPiece of each word carries its tag, both sides (transformers' run_ner
          with label_all_tokens off), predictions read from first pieces.
  choice  e-CARE (../shared/data/multiple_choice/e-CARE): premise as the context, the
          ask-for word ("cause"/"effect") before each of the two hypotheses.

Run:   .venv/bin/python benchmarks/bench_finetune_tasks.py --tasks ner,choice --seeds 1,2,3
Needs: transformers and accelerate (the `bench` extra), ../shared/data, and
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

from bench_finetune import model_dir  # noqa: E402  (the same MiniLM, fetched once)

CONLL = SHARED / "data" / "ner" / "conll2003"
ECARE = SHARED / "data" / "multiple_choice" / "e-CARE"
CHOICE_COLUMNS = dict(context_column="premise", question_column="ask-for", choice_columns="hypothesis1,hypothesis2")


def subset(task: str, rows: int, eval_rows: int, work: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, int, int]:
    """The first rows of the task's train and dev data, as JSONL both sides read."""
    out = []
    for name, limit in (("train", rows), ("dev", eval_rows)):
        if task == "ner":
            from bertmodel.data.tagged import read_tagged

            data = read_tagged(CONLL / ("train.txt" if name == "train" else "valid.txt")).head(limit)
            records = [{"tokens": w, "tags": t} for w, t in zip(data.words, data.tags)]
        else:
            lines = (ECARE / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
            records = [json.loads(line) for line in lines if line.strip()][:limit]
        target = work / f"{task}-{name}.jsonl"
        target.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        out.append((target, len(records)))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def read_jsonl(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_ours(task, model, train, dev, seed, args, work) -> dict:
    from bertmodel.evaluation import evaluate_model
    from bertmodel.finetune import FinetuneConfig, finetune

    out = work / f"ours-{task}-{seed}"
    columns = CHOICE_COLUMNS if task == "choice" else {}
    start = time.perf_counter()
    finetune(FinetuneConfig(task="tokens" if task == "ner" else "choice", model=str(model), train=str(train),
                            out=str(out), epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                            warmup_steps=args.warmup, weight_decay=0.01, clip_grad=1.0,
                            max_seq_length=args.max_seq_length, seed=seed, device="cpu", progress=False,
                            log_every=10_000, **columns), log=lambda *a, **k: None)
    elapsed = time.perf_counter() - start
    metrics, _ = evaluate_model(out, {"validation": str(dev)}, out_dir=out / "eval", device="cpu")
    return {"seconds": elapsed, **metrics}


def _trainer_args(task, seed, args, work):
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(work / f"trainer-{task}-{seed}"), num_train_epochs=args.epochs,
                             per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=64,
                             learning_rate=args.lr, warmup_steps=args.warmup, weight_decay=0.01, max_grad_norm=1.0,
                             adam_epsilon=1e-6, lr_scheduler_type="linear", seed=seed, save_strategy="epoch",
                             eval_strategy="no", logging_strategy="no", report_to="none", use_cpu=True,
                             disable_tqdm=True, dataloader_num_workers=0)


def run_trainer_ner(model, train, dev, seed, args, work) -> dict:
    import numpy as np
    from transformers import (AutoModelForTokenClassification, AutoTokenizer, DataCollatorForTokenClassification,
                              Trainer, set_seed)
    from transformers.utils import logging

    from bertmodel.eval.entities import entity_metrics

    start = time.perf_counter()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    train_rows, dev_rows = read_jsonl(train), read_jsonl(dev)
    seen = {t for r in train_rows for t in r["tags"]}
    tags = sorted(seen, key=lambda t: (t != "O", t[2:], t))  # ours: O first, then by type, B- before I-
    ids = {t: i for i, t in enumerate(tags)}
    tok = AutoTokenizer.from_pretrained(model)

    def encode(rows):  # run_ner.py's tokenize_and_align_labels, label_all_tokens off
        enc = tok([r["tokens"] for r in rows], is_split_into_words=True, truncation=True,
                  max_length=args.max_seq_length)
        out = []
        for i, r in enumerate(rows):
            labels, previous = [], None
            for word in enc.word_ids(i):
                labels.append(-100 if word is None or word == previous else ids.get(r["tags"][word], -100))
                previous = word
            out.append({**{k: enc[k][i] for k in enc}, "labels": labels})
        return out, enc

    train_set, _ = encode(train_rows)
    dev_set, dev_enc = encode(dev_rows)
    set_seed(seed)
    net = AutoModelForTokenClassification.from_pretrained(model, num_labels=len(tags))
    trainer = Trainer(model=net, args=_trainer_args("ner", seed, args, work), train_dataset=train_set,
                      data_collator=DataCollatorForTokenClassification(tok))
    result = trainer.train()
    elapsed = time.perf_counter() - start
    logits = trainer.predict(dev_set).predictions
    predicted = []
    for i, r in enumerate(dev_rows):
        words = ["O"] * len(r["tokens"])  # a word cut by truncation stays O (none at 128 tokens here)
        previous = None
        for position, word in enumerate(dev_enc.word_ids(i)):
            if word is not None and word != previous:
                words[word] = tags[int(np.argmax(logits[i][position]))]
            previous = word
        predicted.append(words)
    m = entity_metrics([r["tags"] for r in dev_rows], predicted)
    return {"seconds": elapsed, "train_runtime": result.metrics["train_runtime"], "f1": m["f1"],
            "precision": m["precision"], "recall": m["recall"], "accuracy": m["accuracy"]}


def run_trainer_choice(model, train, dev, seed, args, work) -> dict:
    import torch
    from transformers import AutoModelForMultipleChoice, AutoTokenizer, Trainer, set_seed
    from transformers.utils import logging

    start = time.perf_counter()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(model)

    def encode(rows):  # [CLS] premise [SEP] ask-for + " " + hypothesis [SEP], as ours
        firsts = [r["premise"] for r in rows for _ in range(2)]
        seconds = [f"{r['ask-for']} {r[h]}" for r in rows for h in ("hypothesis1", "hypothesis2")]
        enc = tok(firsts, seconds, truncation=True, max_length=args.max_seq_length)
        return [{**{k: [enc[k][2 * i], enc[k][2 * i + 1]] for k in enc}, "labels": int(r["label"])}
                for i, r in enumerate(rows)]

    def collate(features):
        labels = torch.tensor([f["labels"] for f in features])
        flat = [{k: f[k][c] for k in f if k != "labels"} for f in features for c in range(2)]
        batch = tok.pad(flat, return_tensors="pt")
        return {**{k: v.view(len(features), 2, -1) for k, v in batch.items()}, "labels": labels}

    train_set, dev_set = encode(read_jsonl(train)), encode(read_jsonl(dev))
    set_seed(seed)
    net = AutoModelForMultipleChoice.from_pretrained(model)
    trainer = Trainer(model=net, args=_trainer_args("choice", seed, args, work), train_dataset=train_set,
                      data_collator=collate)
    result = trainer.train()
    elapsed = time.perf_counter() - start
    logits = trainer.predict(dev_set).predictions
    accuracy = float((logits.argmax(-1) == [f["labels"] for f in dev_set]).mean())
    return {"seconds": elapsed, "train_runtime": result.metrics["train_runtime"], "accuracy": accuracy}


def run_isolated(side, task, model, train, dev, seed, args, work) -> dict:
    spec = {"side": side, "task": task, "model": str(model), "train": str(train), "dev": str(dev), "seed": seed,
            "work": str(work), "args": {k: getattr(args, k) for k in ("epochs", "batch_size", "lr", "max_seq_length",
                                                                       "warmup", "threads")}}
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{task} {side} seed {seed}: the run failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def worker(spec: dict) -> None:
    import torch
    import torch._dynamo  # noqa: F401  (see bench_finetune.py: no run pays this first import)

    args = argparse.Namespace(**spec["args"])
    torch.set_num_threads(args.threads)
    paths = [pathlib.Path(spec[k]) for k in ("model", "train", "dev")]
    if spec["side"] == "ours":
        r = run_ours(spec["task"], *paths, spec["seed"], args, pathlib.Path(spec["work"]))
    else:
        runner = run_trainer_ner if spec["task"] == "ner" else run_trainer_choice
        r = runner(*paths, spec["seed"], args, pathlib.Path(spec["work"]))
    print(json.dumps(r, default=float))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(json.loads(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="BERT dir to start from [default: all-MiniLM-L6-v2, fetched]")
    parser.add_argument("--tasks", default="ner,choice", help="comma-separated: ner, choice")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--max-train-rows", type=int, default=1024)
    parser.add_argument("--max-eval-rows", type=int, default=1000)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    model = model_dir(args.model)
    seeds = [int(s) for s in args.seeds.split(",")]
    args.max_train_rows -= args.max_train_rows % args.batch_size
    report = {"options": vars(args), "tasks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        for task in args.tasks.split(","):
            train, dev, n_train, n_dev = subset(task, args.max_train_rows, args.max_eval_rows, work)
            steps = math.ceil(n_train / args.batch_size * args.epochs)
            args.warmup = round(0.1 * steps)
            metric = "f1" if task == "ner" else "accuracy"
            runs = {"ours": [], "trainer": []}
            for seed in seeds:
                for side in runs:
                    r = run_isolated(side, task, model, train, dev, seed, args, work)
                    runs[side].append(r)
                    print(f"{task} seed {seed} {side:7s}: {r['seconds']:6.1f} s, {metric} {r[metric]:.4f}", flush=True)
            mean = {side: {k: sum(r[k] for r in rs) / len(rs) for k in ("seconds", metric)} for side, rs in runs.items()}
            ours, theirs = mean["ours"], mean["trainer"]
            ratio = ours["seconds"] / theirs["seconds"]
            print(f"{task}: {n_train} train rows x {args.epochs:g} epoch(s) = {steps} steps, {n_dev} dev rows, "
                  f"seeds {seeds}")
            print(f"  mean {metric:9s} ours {100 * ours[metric]:.2f}  Trainer {100 * theirs[metric]:.2f}  "
                  f"diff {100 * (ours[metric] - theirs[metric]):+.2f} points (target within 1)")
            print(f"  s/epoch        ours {ours['seconds'] / args.epochs:.1f}  Trainer "
                  f"{theirs['seconds'] / args.epochs:.1f}  ratio {ratio:.2f}x (target <= 0.6x)", flush=True)
            report["tasks"][task] = {"train_rows": n_train, "dev_rows": n_dev, "steps": steps, "runs": runs,
                                     "mean": mean, "time_ratio": ratio}
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
