"""Token classification and multiple choice, whole command against whole script: ours
(`bertmodel finetune tokens|choice`, run as a user runs it) against a script that does
what transformers' run_ner.py / run_swag.py do with `Trainer` and
`BertForTokenClassification` / `BertForMultipleChoice`, on a CPU, from the same weights
(all-MiniLM-L6-v2 unless --model), on the same examples, hyperparameters and seeds.

Time: the wall time of each side's whole process, from its launch to its exit: Python's
start-up and imports, reading and tokenizing the data, building the model, training,
writing a resumable checkpoint (weights, optimizer, schedule, RNG) and the final model.
Each run is a fresh process; ours and the Trainer alternate per seed, so a busy machine
slows both. `--threads N` sets OMP_NUM_THREADS for both (default: torch's own choice).

Quality: scored on held-out data neither side trains or selects on (CoNLL-2003's dev set,
eng.testa; e-CARE's dev set), after the run and off the clock, by one scorer for both:
each side's saved model loaded with transformers (ours exports a transformers dir), the
same encoding (truncated at --max-seq-length; a word cut off stays O), predictions from
each word's first piece, bertmodel.metrics.entities (conlleval's entity F1) or accuracy.
Figures are the mean ± sample sd over --seeds; the difference of means comes with its
standard error, sqrt(sd_a^2 / n + sd_b^2 / n), which says whether a gap is more than seeds.

Both sides: the first --max-train-rows training examples (rounded down to a multiple of
--batch-size, so neither has a partial last batch), --epochs, AdamW lr --lr, eps 1e-6,
weight decay 0.01 off biases/LayerNorm, linear decay after round(10%) warmup steps from
lr 0, clipping at 1.0, dropout 0.1, batches padded to their longest row (ours computes
only the real tokens), fp32, labels on the first WordPiece of each word (run_ner with
label_all_tokens off). Multiple choice: the premise as the context, the ask-for word
("cause"/"effect") before each hypothesis, as run_swag's `f"{header} {end}"`.

Run:   .venv/bin/python benchmarks/bench_finetune_tasks.py --tasks ner,choice --seeds 1,2,3 --max-train-rows 3000
Quick: .venv/bin/python benchmarks/bench_finetune_tasks.py --seeds 1,2 --max-train-rows 200 --max-eval-rows 200
Needs: transformers and accelerate (the `bench` extra), ../shared/data, and
       ../shared/tools/fetch_minilm.sh (or --model DIR).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import statistics
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
CHOICES = ("hypothesis1", "hypothesis2")


def subset(task: str, rows: int, eval_rows: int | None, work: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, int, int]:
    """The first rows of the task's train split and of its held-out dev split (all of it
    for eval_rows None), as JSONL both sides read."""
    out = []
    for name, limit in (("train", rows), ("dev", eval_rows)):
        if task == "ner":
            from bertmodel.data.tagged import read_tagged

            data = read_tagged(CONLL / ("train.txt" if name == "train" else "valid.txt"))
            records = [{"tokens": w, "tags": t} for w, t in zip(data.words, data.tags)]
        else:
            lines = (ECARE / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
            records = [json.loads(line) for line in lines if line.strip()]
        records = records[:limit]
        target = work / f"{task}-{name}.jsonl"
        target.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        out.append((target, len(records)))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in pathlib.Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def tag_order(rows: list[dict]) -> list[str]:
    """Ours: O first, then by type, B- before I- (tasks/tokens.TagSet)."""
    return sorted({t for r in rows for t in r["tags"]}, key=lambda t: (t != "O", t[2:], t))


# -- the two commands -----------------------------------------------------------------------

def ours_command(spec: dict) -> list[str]:
    """`bertmodel finetune tokens|choice` as a user types it."""
    script = pathlib.Path(sys.executable).with_name("bertmodel")
    head = [str(script)] if script.is_file() else [sys.executable, "-m", "bertmodel.cli"]
    a = spec["args"]
    command = head + ["finetune", "tokens" if spec["task"] == "ner" else "choice", "--model", spec["model"],
                      "--train", spec["train"], "--out", spec["out"], "--epochs", str(a["epochs"]),
                      "--batch-size", str(a["batch_size"]), "--lr", str(a["lr"]), "--warmup-ratio", "0.1",
                      "--weight-decay", "0.01", "--max-seq-length", str(a["max_seq_length"]),
                      "--seed", str(spec["seed"]), "--device", "cpu", "--no-progress"]
    if spec["task"] == "choice":
        command += ["--context-column", "premise", "--question-column", "ask-for",
                    "--choice-columns", ",".join(CHOICES), "--label-column", "label"]
    return command


def trainer_script(spec: dict) -> None:
    """run_ner.py / run_swag.py in miniature: read, tokenize, Trainer.train(), save_model."""
    import torch
    from transformers import (AutoModelForMultipleChoice, AutoModelForTokenClassification, AutoTokenizer,
                              DataCollatorForTokenClassification, Trainer, TrainingArguments, set_seed)
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    a, task = spec["args"], spec["task"]
    tok = AutoTokenizer.from_pretrained(spec["model"])
    rows = read_jsonl(spec["train"])
    if task == "ner":
        tags = tag_order(rows)
        train, _ = encode_ner(tok, rows, {t: i for i, t in enumerate(tags)}, a["max_seq_length"])
        collate = DataCollatorForTokenClassification(tok)
    else:
        train = encode_choice(tok, rows, a["max_seq_length"])

        def collate(features):  # run_swag's DataCollatorForMultipleChoice
            labels = torch.tensor([f["labels"] for f in features])
            flat = [{k: f[k][c] for k in f if k != "labels"} for f in features for c in range(len(CHOICES))]
            batch = tok.pad(flat, return_tensors="pt")
            return {**{k: v.view(len(features), len(CHOICES), -1) for k, v in batch.items()}, "labels": labels}

    set_seed(spec["seed"])
    if task == "ner":
        net = AutoModelForTokenClassification.from_pretrained(spec["model"], num_labels=len(tags),
                                                              id2label=dict(enumerate(tags)),
                                                              label2id={t: i for i, t in enumerate(tags)})
    else:
        net = AutoModelForMultipleChoice.from_pretrained(spec["model"])
    args = TrainingArguments(output_dir=spec["out"], num_train_epochs=a["epochs"],
                             per_device_train_batch_size=a["batch_size"], learning_rate=a["lr"],
                             warmup_steps=a["warmup"], weight_decay=0.01, max_grad_norm=1.0, adam_epsilon=1e-6,
                             lr_scheduler_type="linear", seed=spec["seed"], save_strategy="epoch",
                             eval_strategy="no", logging_strategy="no", report_to="none", use_cpu=True,
                             disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=net, args=args, train_dataset=train, data_collator=collate)
    result = trainer.train()
    trainer.save_model(spec["out"])  # run_ner's last step: the model where --output_dir says
    tok.save_pretrained(spec["out"])
    print(json.dumps({"train_runtime": result.metrics["train_runtime"]}))


def encode_ner(tok, rows: list[dict], ids: dict[str, int], max_len: int):
    """run_ner.py's tokenize_and_align_labels, label_all_tokens off."""
    enc = tok([r["tokens"] for r in rows], is_split_into_words=True, truncation=True, max_length=max_len)
    out = []
    for i, r in enumerate(rows):
        labels, previous = [], None
        for word in enc.word_ids(i):
            labels.append(-100 if word is None or word == previous else ids.get(r["tags"][word], -100))
            previous = word
        out.append({**{k: enc[k][i] for k in enc}, "labels": labels})
    return out, enc


def encode_choice(tok, rows: list[dict], max_len: int) -> list[dict]:
    """[CLS] premise [SEP] ask-for + " " + hypothesis [SEP] per choice (run_swag's layout)."""
    firsts = [r["premise"] for r in rows for _ in CHOICES]
    seconds = [f"{r['ask-for']} {r[h]}" for r in rows for h in CHOICES]
    enc = tok(firsts, seconds, truncation=True, max_length=max_len)
    C = len(CHOICES)
    return [{**{k: [enc[k][C * i + c] for c in range(C)] for k in enc}, "labels": int(r["label"])}
            for i, r in enumerate(rows)]


# -- one scorer for both --------------------------------------------------------------------

def score(spec: dict) -> None:
    """The saved model of one run, on the held-out rows: entity F1 (and P/R, token
    accuracy) or accuracy, printed as JSON."""
    import numpy as np
    import torch
    from transformers import AutoModelForMultipleChoice, AutoModelForTokenClassification, AutoTokenizer

    path, rows, max_len = spec["saved"], read_jsonl(spec["dev"]), spec["args"]["max_seq_length"]
    tok = AutoTokenizer.from_pretrained(path)
    cls = AutoModelForTokenClassification if spec["task"] == "ner" else AutoModelForMultipleChoice
    net = cls.from_pretrained(path).eval()
    batch = 64
    if spec["task"] == "ner":
        from bertmodel.metrics.entities import entity_metrics

        tags = [net.config.id2label[i] for i in range(net.config.num_labels)]
        features, enc = encode_ner(tok, rows, {t: i for i, t in enumerate(tags)}, max_len)
        predicted = []
        for start in range(0, len(rows), batch):
            part = [{k: v for k, v in f.items() if k != "labels"} for f in features[start:start + batch]]
            with torch.no_grad():
                logits = net(**tok.pad(part, return_tensors="pt")).logits.numpy()
            for j, r in enumerate(rows[start:start + batch]):
                words, previous = ["O"] * len(r["tokens"]), None
                for position, word in enumerate(enc.word_ids(start + j)):
                    if word is not None and word != previous:
                        words[word] = tags[int(np.argmax(logits[j, position]))]
                    previous = word
                predicted.append(words)
        m = entity_metrics([r["tags"] for r in rows], predicted)
        print(json.dumps({k: m[k] for k in ("f1", "precision", "recall", "accuracy")}))
        return
    features = encode_choice(tok, rows, max_len)
    right = 0
    for start in range(0, len(rows), batch):
        part = features[start:start + batch]
        flat = [{k: f[k][c] for k in f if k != "labels"} for f in part for c in range(len(CHOICES))]
        inputs = {k: v.view(len(part), len(CHOICES), -1) for k, v in tok.pad(flat, return_tensors="pt").items()}
        with torch.no_grad():
            picked = net(**inputs).logits.argmax(-1).numpy()
        right += int((picked == np.array([f["labels"] for f in part])).sum())
    print(json.dumps({"accuracy": right / len(rows)}))


# -- the runs ---------------------------------------------------------------------------------

def run(side: str, task: str, model, train, dev, seed: int, args, work: pathlib.Path) -> dict:
    out = work / f"{side}-{task}-{seed}"
    spec = {"side": side, "task": task, "model": str(model), "train": str(train), "dev": str(dev), "seed": seed,
            "out": str(out), "args": {k: getattr(args, k) for k in ("epochs", "batch_size", "lr", "max_seq_length",
                                                                     "warmup")}}
    env = dict(os.environ)
    if args.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.threads)
    command = ours_command(spec) if side == "ours" else [sys.executable, __file__, "--trainer-script", json.dumps(spec)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{task} {side} seed {seed}: the run failed: {done.stderr.strip()[-2000:]}")
    figures = {"seconds": seconds}
    if side == "trainer":
        figures.update(json.loads(done.stdout.strip().splitlines()[-1]))
    spec["saved"] = str(out / "hf" if side == "ours" else out)
    scored = subprocess.run([sys.executable, __file__, "--score", json.dumps(spec)], capture_output=True, text=True,
                            env=env)
    if scored.returncode != 0:
        raise SystemExit(f"{task} {side} seed {seed}: scoring failed: {scored.stderr.strip()[-2000:]}")
    figures.update(json.loads(scored.stdout.strip().splitlines()[-1]))
    return figures


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(task: str, metric: str, runs: dict, n_train: int, n_dev: int, steps: int, args, seeds) -> dict:
    (m_ours, s_ours), (m_theirs, s_theirs) = (mean_sd([r[metric] for r in runs[side]]) for side in ("ours", "trainer"))
    (t_ours, ts_ours), (t_theirs, ts_theirs) = (mean_sd([r["seconds"] for r in runs[side]])
                                                for side in ("ours", "trainer"))
    n = len(seeds)
    stderr = math.sqrt((s_ours ** 2 + s_theirs ** 2) / n)
    ratio = t_ours / t_theirs
    per_seed = [o["seconds"] / t["seconds"] for o, t in zip(runs["ours"], runs["trainer"])]
    held_out = "CoNLL-2003 valid.txt" if task == "ner" else "e-CARE dev.jsonl"
    print(f"{task}: {n_train:,} train rows x {args.epochs:g} epoch(s) = {steps} steps; scored on {n_dev:,} held-out "
          f"rows ({held_out}); seeds {seeds}")
    print(f"  {metric:13s} ours {100 * m_ours:.2f} ± {100 * s_ours:.2f}  Trainer {100 * m_theirs:.2f} ± "
          f"{100 * s_theirs:.2f}  diff {100 * (m_ours - m_theirs):+.2f} ± {100 * stderr:.2f} points "
          "(target within 1)")
    print(f"  whole command ours {t_ours:.1f} ± {ts_ours:.1f} s  Trainer script {t_theirs:.1f} ± {ts_theirs:.1f} s  "
          f"ratio {ratio:.2f}x (per seed {', '.join(f'{r:.2f}' for r in per_seed)}; target <= 0.6x)")
    trained = [r["train_runtime"] for r in runs["trainer"]]
    print(f"  (the Trainer's own train_runtime: {statistics.fmean(trained):.1f} s of its "
          f"{t_theirs:.1f} s)", flush=True)
    return {"train_rows": n_train, "held_out_rows": n_dev, "steps": steps, "runs": runs,
            "mean": {"ours": {metric: m_ours, "seconds": t_ours}, "trainer": {metric: m_theirs, "seconds": t_theirs}},
            "sd": {"ours": {metric: s_ours, "seconds": ts_ours}, "trainer": {metric: s_theirs, "seconds": ts_theirs}},
            "diff_stderr": stderr, "time_ratio": ratio}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] in ("--trainer-script", "--score"):
        return (trainer_script if sys.argv[1] == "--trainer-script" else score)(json.loads(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="BERT dir to start from [default: all-MiniLM-L6-v2, fetched]")
    parser.add_argument("--tasks", default="ner,choice", help="comma-separated: ner, choice")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--max-train-rows", type=int, default=3000)
    parser.add_argument("--max-eval-rows", type=int, default=None, help="held-out rows scored [default: all]")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for both sides [default: unset]")
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
            args.warmup = round(0.1 * steps)  # what ours' --warmup-ratio 0.1 makes of it
            metric = "f1" if task == "ner" else "accuracy"
            runs = {"ours": [], "trainer": []}
            for seed in seeds:
                for side in runs:
                    r = run(side, task, model, train, dev, seed, args, work)
                    runs[side].append(r)
                    print(f"{task} seed {seed} {side:7s}: {r['seconds']:6.1f} s, {metric} {r[metric]:.4f}", flush=True)
            report["tasks"][task] = summarize(task, metric, runs, n_train, n_dev, steps, args, seeds)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
