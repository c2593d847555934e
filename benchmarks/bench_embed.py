"""Embedding fine-tuning: our `bertmodel finetune embed` command against sentence-transformers'
own trainer (SentenceTransformerTrainer + MultipleNegativesRankingLoss), same data, batch,
lr, epochs and seed, in one run, on the CPU.

Data: the shared SQuAD v1.1 head split by article as `bertmodel squad-to-beir` splits it.
Both train on the first --pairs (question, paragraph) pairs of the train articles and are
scored on the test articles' questions over every paragraph (543 queries, 583 passages:
questions neither trained on, about paragraphs neither saw as positives), by the same
code (exact search: bertmodel.retrieval; trec_eval's nDCG@10 / MRR@10 / Recall@100 / MAP:
bertmodel.metrics), on each side's final weights. A BEIR directory of that split is
written for the record.

Both sides: AdamW lr --lr, eps 1e-6, weight decay 0.01 (not on biases/LayerNorm), linear
decay after 10% warmup, gradient clipping at 1.0, batch --batch-size, fp32, one max length
(--max-length) for queries and passages (sentence-transformers has one), mean pooling,
scale 20, the seed. Duplicates: sentence-transformers' NO_DUPLICATES batch sampler keeps
a repeated text out of a batch; ours keeps it out of the loss's negatives (SQuAD's
paragraphs have several questions each, so both matter here).

Time: each side is one fresh process timed from its start to its exit, imports, model
loading, tokenising, training, saving and the final evaluation included: ours is the
whole `bertmodel finetune embed` command (it evaluates at the end of its epoch and exports
RUN/hf); theirs trains, saves the model and encodes the evaluation collection. Runs
alternate ours/theirs, so a busy machine slows both.

Models: all-MiniLM-L6-v2 (../shared/tools/fetch_minilm.sh), and a random ModernBERT
(--modern-preset, MiniLM's vocabulary) written once as a sentence-transformers directory
that both start from (random weights: its scores show the loops agree, not quality).

Run:   .venv/bin/python benchmarks/bench_embed.py            (~10 minutes on 2 cores)
Needs: sentence-transformers and accelerate (the `retrieval` and `bench` extras), ../shared/data/squad.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SQUAD = SHARED / "data" / "squad" / "squad-v1.1-train-head.json"
sys.path.insert(0, str(REPO))


def minilm_dir() -> pathlib.Path:
    path = pathlib.Path(tempfile.gettempdir()) / "bertmodel-bench-minilm"
    subprocess.run(["bash", str(SHARED / "tools" / "fetch_minilm.sh"), str(path)], check=True,
                   stdout=subprocess.DEVNULL)
    return path


def random_modernbert(tokenizer_dir: pathlib.Path, preset: str, out: pathlib.Path, max_length: int) -> pathlib.Path:
    """A random ModernBERT bi-encoder exported as an embed run exports it (the
    sentence-transformers files beside the transformers ones), seed 0."""
    import torch

    from bertmodel.data.shards import tokenizer_info
    from bertmodel.hf import export_hf
    from bertmodel.model.bi_encoder import ModernBertBiEncoder
    from bertmodel.model.config import ModernBertConfig, vocabulary_ids

    tok = tokenizer_info(tokenizer_dir)
    config = ModernBertConfig.preset(preset, **vocabulary_ids(tok, "modernbert"))
    torch.manual_seed(0)
    model = ModernBertBiEncoder(config)
    settings = {"pooling": "mean", "normalize": True, "dimension": config.hidden_size, "query_prefix": "",
                "passage_prefix": "", "max_seq_length": max_length}
    export_hf(model, out, tokenizer=tok, architecture="ModernBertModel",
              task={"name": "embed", "architecture": "ModernBertModel", "sentence_transformers": settings})
    return out


def split_data(pairs: int):
    """(train pairs [(question, paragraph)], the test split as BeirData)."""
    from bertmodel.data.beir import passage_text
    from bertmodel.data.squad_beir import squad_collection

    collection = squad_collection(SQUAD)
    train = collection.split("train", str(SQUAD))
    rows = [(train.queries[q], passage_text(train.corpus[d])) for q, judged in train.qrels.items() for d in judged]
    return rows[:pairs], collection.split("test", str(SQUAD))


def theirs(args) -> None:
    """The sentence-transformers side, in its own process: prints one JSON line."""
    import numpy as np
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer import losses
    from sentence_transformers.sentence_transformer.training_args import (BatchSamplers,
                                                                          SentenceTransformerTrainingArguments)

    from bertmodel.metrics.ranking import ranking_metrics
    from bertmodel.retrieval.search import dense_run

    start = time.perf_counter()
    rows, test = split_data(args.pairs)
    model = SentenceTransformer(args.model, device="cpu")
    model.max_seq_length = args.max_length
    train = Dataset.from_dict({"anchor": [q for q, _ in rows], "positive": [p for _, p in rows]})
    out = pathlib.Path(args.out)
    training = SentenceTransformerTrainingArguments(
        output_dir=str(out), num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr, warmup_ratio=0.1, lr_scheduler_type="linear", weight_decay=0.01, adam_epsilon=1e-6,
        max_grad_norm=1.0, seed=args.seed, data_seed=args.seed, batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="no", logging_steps=10, report_to=[], use_cpu=True, dataloader_num_workers=0,
        disable_tqdm=True)
    trainer = SentenceTransformerTrainer(model=model, args=training, train_dataset=train,
                                         loss=losses.MultipleNegativesRankingLoss(model, scale=20.0))
    trained = time.perf_counter()
    result = trainer.train()
    train_seconds = time.perf_counter() - trained
    model.save(str(out / "final"))
    run = dense_run(test, lambda t: model.encode(list(t), batch_size=64, convert_to_numpy=True,
                                                 normalize_embeddings=True),
                    lambda t: model.encode(list(t), batch_size=64, convert_to_numpy=True, normalize_embeddings=True))
    metrics = ranking_metrics(run, test.qrels)
    print(json.dumps({"metrics": metrics, "steps": int(result.global_step), "train_seconds": train_seconds,
                      "seconds": time.perf_counter() - start, "loss": float(np.float64(result.training_loss))}))


def ours(args, model: pathlib.Path, out: pathlib.Path) -> dict:
    command = [str(REPO / ".venv" / "bin" / "bertmodel") if (REPO / ".venv" / "bin" / "bertmodel").exists()
               else "bertmodel", "finetune", "embed", "--model", str(model), "--train", str(SQUAD),
               "--validation", str(SQUAD), "--validation-split", "test", "--max-train-examples", str(args.pairs),
               "--batch-size", str(args.batch_size), "--epochs", str(args.epochs), "--lr", str(args.lr),
               "--adam-eps", "1e-6", "--weight-decay", "0.01", "--warmup-ratio", "0.1", "--max-query-length",
               str(args.max_length), "--max-passage-length", str(args.max_length), "--pooling", "mean",
               "--seed", str(args.seed), "--device", "cpu", "--no-progress", "--out", str(out)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"ours failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    best = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in best if "eval_ndcg@10" in r]
    final = evals[-1]
    return {"metrics": {k.removeprefix("eval_"): v for k, v in final.items() if k.startswith("eval_")},
            "steps": final["step"], "seconds": seconds}


def their_run(args, model: pathlib.Path, out: pathlib.Path) -> dict:
    command = [sys.executable, __file__, "--theirs", "--model", str(model), "--out", str(out), "--pairs",
               str(args.pairs), "--batch-size", str(args.batch_size), "--epochs", str(args.epochs), "--lr",
               str(args.lr), "--max-length", str(args.max_length), "--seed", str(args.seed)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"theirs failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["seconds"] = seconds
    return result


def compare(name: str, args, model: pathlib.Path, root: pathlib.Path) -> dict:
    mine = ours(args, model, root / f"{name}-ours")
    them = their_run(args, model, root / f"{name}-theirs")
    ratio = mine["seconds"] / them["seconds"]
    gap = (mine["metrics"]["ndcg@10"] - them["metrics"]["ndcg@10"]) * 100
    print(f"{name}: ours {mine['seconds']:.1f}s ({mine['steps']} steps) nDCG@10 {mine['metrics']['ndcg@10']:.4f} "
          f"MRR@10 {mine['metrics']['mrr@10']:.4f} R@100 {mine['metrics']['recall@100']:.4f} | "
          f"sentence-transformers {them['seconds']:.1f}s ({them['steps']} steps, train {them['train_seconds']:.1f}s) "
          f"nDCG@10 {them['metrics']['ndcg@10']:.4f} MRR@10 {them['metrics']['mrr@10']:.4f} "
          f"R@100 {them['metrics']['recall@100']:.4f}", flush=True)
    print(f"{name}: time ratio ours/theirs {ratio:.2f} (target <= 0.60); nDCG@10 ours - theirs {gap:+.2f} points "
          f"(target >= -1)", flush=True)
    return {"name": name, "ours": mine, "theirs": them, "time_ratio": ratio, "ndcg_gap_points": gap}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--theirs", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--pairs", type=int, default=1024, help="Training pairs (train articles, in order).")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--modern-lr", type=float, default=5e-4, help="lr of the random ModernBERT runs.")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modern-preset", default="mini")
    parser.add_argument("--skip-modernbert", action="store_true")
    parser.add_argument("--json", help="Also write the results here.")
    args = parser.parse_args()
    if args.theirs:
        theirs(args)
        return
    if not SQUAD.is_file():
        raise SystemExit(f"{SQUAD} not found")
    root = pathlib.Path(tempfile.mkdtemp(prefix="bench-embed-"))
    from bertmodel.data.squad_beir import squad_to_beir

    summary = squad_to_beir(SQUAD, root / "beir-squad")
    print(f"data: {args.pairs} training pairs of {summary.queries['train']} (train articles); evaluated on "
          f"{summary.queries['test']} test questions over {summary.passages} passages ({root / 'beir-squad'})",
          flush=True)
    minilm = minilm_dir()
    results = [compare("MiniLM-L6", args, minilm, root)]
    if not args.skip_modernbert:
        modern = random_modernbert(minilm, args.modern_preset, root / "modernbert-random", args.max_length)
        modern_args = argparse.Namespace(**{**vars(args), "lr": args.modern_lr})
        results.append(compare(f"ModernBERT-{args.modern_preset} (random init)", modern_args, modern, root))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
