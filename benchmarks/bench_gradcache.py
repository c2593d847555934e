"""GradCache's cost: one training step of the bi-encoder with `--mini-batch-size` against
the uncached step on the same batch, and sentence-transformers' CachedMultipleNegatives-
RankingLoss against its MultipleNegativesRankingLoss as the baseline for what caching costs.

The batch is real: --batch-size SQuAD questions, each with its paragraph and --negatives
hard negatives (the article's next paragraphs), encoded at --max-length, on
all-MiniLM-L6-v2 (dropout on, as training runs), with Matryoshka widths (--matryoshka-dims).
A step is forward, loss, backward, clipping and the AdamW step, with the trainer's
allocator setting (training/host_memory.py). Arms alternate within each
repeat so a busy machine slows all of them alike; the figure is the median step time.

What GradCache should cost: the uncached step is a forward (F) and a backward (~2F); the
cached step adds a forward without a graph, so about (F + F + 2F) / 3F = 1.33x, a little
more for the smaller matrix products of a mini-batch. The step is also broken into its
parts (first pass, loss and its gradient, replay) so a cost beyond that says where it is.

Run:   .venv/bin/python benchmarks/bench_gradcache.py          (~3 minutes on 2 cores)
Needs: sentence-transformers (the `retrieval` extra), ../shared/data/squad, and
       ../shared/tools/fetch_minilm.sh.
"""
from __future__ import annotations

import argparse
import copy
import json
import pathlib
import statistics
import sys
import time

import numpy as np
import torch

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_embed import SQUAD, minilm_dir  # noqa: E402  (the same MiniLM, fetched once)
from bertmodel.data.classification import encode_texts  # noqa: E402
from bertmodel.data.pairs import Pairs  # noqa: E402
from bertmodel.hf import load_into, load_pretrained  # noqa: E402
from bertmodel.model.bi_encoder import BertBiEncoder  # noqa: E402
from bertmodel.tasks.embed import PairSet  # noqa: E402
from bertmodel.training.host_memory import keep_freed_memory  # noqa: E402
from bertmodel.training.optim import build_optimizer, clip_and_step  # noqa: E402


def squad_rows(count: int, negatives: int) -> list[dict]:
    """A paragraph's first question, the paragraph, and the article's next paragraphs."""
    rows = []
    for article in json.loads(SQUAD.read_text(encoding="utf-8"))["data"]:
        paragraphs = article["paragraphs"]
        for i in range(0, len(paragraphs) - negatives, negatives + 1):
            if paragraphs[i]["qas"]:
                rows.append({"query": paragraphs[i]["qas"][0]["question"], "positive": paragraphs[i]["context"],
                             "negatives": [paragraphs[i + k]["context"] for k in range(1, negatives + 1)]})
    return rows[:count]


def real_batch(model_dir, rows, max_length: int) -> dict:
    pairs = Pairs([r["query"] for r in rows], [r["positive"] for r in rows], [r["negatives"] for r in rows], "squad")
    queries = encode_texts(model_dir, pairs.queries, None, max_length)
    passages = encode_texts(model_dir, [t for p, n in zip(pairs.positives, pairs.negatives) for t in (p, *n)],
                            None, max_length)
    data = PairSet(queries, passages, pairs.text_ids(), 0, len(rows[0]["negatives"]))
    return {k: torch.from_numpy(v) for k, v in data.collate(np.arange(len(rows))).items()}


class Ours:
    """Our bi-encoder's whole training step, GradCache or not."""

    def __init__(self, pre, mini_batch_size, dims):
        self.model = BertBiEncoder(pre.config, mini_batch_size=mini_batch_size, matryoshka_dims=dims)
        load_into(self.model, pre)
        self.model.train()
        self.optimizer = build_optimizer(self.model, "adamw", 1e-5, 0.01, torch.device("cpu"))
        self.params = [p for p in self.model.parameters() if p.requires_grad]

    def step(self, batch) -> float:
        loss = self.model(**batch).loss
        loss.backward()
        clip_and_step(self.optimizer, self.params, 1.0)
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


class Theirs:
    """sentence-transformers' loss over the same batch (its features per column)."""

    def __init__(self, model_dir, cached: bool, mini_batch_size: int, dims):
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer import losses

        self.model = SentenceTransformer(str(model_dir), device="cpu")
        self.model.train()
        loss = (losses.CachedMultipleNegativesRankingLoss(self.model, mini_batch_size=mini_batch_size,
                                                          show_progress_bar=False)
                if cached else losses.MultipleNegativesRankingLoss(self.model))
        self.loss = losses.MatryoshkaLoss(self.model, loss, list(dims)) if dims else loss
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-5)

    def step(self, batch) -> float:
        b = batch["input_ids"].shape[0]
        features = [{"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                     "token_type_ids": batch["token_type_ids"]}]
        for c in range(batch["passage_input_ids"].shape[0] // b):
            rows = slice(c * b, (c + 1) * b)
            features.append({"input_ids": batch["passage_input_ids"][rows],
                             "attention_mask": batch["passage_attention_mask"][rows],
                             "token_type_ids": batch["passage_token_type_ids"][rows]})
        loss = self.loss(features, None)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


def parts_of_cached_step(arm: Ours, batch) -> dict:
    """The cached step's pieces, each timed on its own: the first pass (no graph), the
    loss and its gradient at the embeddings, and the replay (forward with a graph +
    backward, per mini-batch); beside them the plain forward and backward."""
    model = arm.model
    inputs = [(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]),
              (batch["passage_input_ids"], batch["passage_attention_mask"], batch["passage_token_type_ids"])]
    t0 = time.perf_counter()
    with torch.no_grad():
        parts = ([], [])
        for tensors, which, rows in model._chunks(inputs):
            parts[which].append(model.embed(*tensors))
    t1 = time.perf_counter()
    queries, passages = torch.cat(parts[0]).requires_grad_(), torch.cat(parts[1]).requires_grad_()
    loss = model.loss_of(queries, passages, batch.get("text_ids"))
    cached = torch.autograd.grad(loss, (queries, passages))
    t2 = time.perf_counter()
    for tensors, which, rows in model._chunks(inputs):
        vectors = model.embed(*tensors)
        (vectors * cached[which][rows]).sum().backward()
    t3 = time.perf_counter()
    model.zero_grad(set_to_none=True)
    t4 = time.perf_counter()
    q, p = model.embed(*inputs[0]), model.embed(*inputs[1])
    plain_loss = model.loss_of(q, p, batch.get("text_ids"))
    t5 = time.perf_counter()
    plain_loss.backward()
    t6 = time.perf_counter()
    model.zero_grad(set_to_none=True)
    return {"first pass (no graph)": t1 - t0, "loss + its gradient": t2 - t1, "replay (forward + backward)": t3 - t2,
            "plain forward + loss": t5 - t4, "plain backward": t6 - t5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--negatives", type=int, default=1, help="hard negatives per query")
    parser.add_argument("--mini-batch-sizes", default="8,32", help="GradCache mini-batches to time")
    parser.add_argument("--matryoshka-dims", default="384,128,64", help="empty for none")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per arm (after one warm-up)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: torch's]")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    keep_freed_memory()  # as the trainer does on the CPU: without it a whole batch's large blocks are
    # page-faulted in again every step, which costs the uncached step more than the mini-batches
    dims = tuple(int(d) for d in args.matryoshka_dims.split(",") if d) or None
    sizes = [int(s) for s in args.mini_batch_sizes.split(",")]
    model_dir = minilm_dir()
    pre = load_pretrained(model_dir)
    batch = real_batch(model_dir, squad_rows(args.batch_size, args.negatives), args.max_length)
    texts = batch["input_ids"].shape[0] + batch["passage_input_ids"].shape[0]
    print(f"batch: {args.batch_size} queries (padded to {batch['input_ids'].shape[1]}), "
          f"{batch['passage_input_ids'].shape[0]} passages (padded to {batch['passage_input_ids'].shape[1]}); "
          f"Matryoshka {dims}; torch threads {torch.get_num_threads()}")
    arms = {"ours, uncached": Ours(pre, None, dims)}
    arms.update({f"ours, --mini-batch-size {m}": Ours(pre, m, dims) for m in sizes})
    arms["sentence-transformers, MNRL"] = Theirs(model_dir, False, 0, dims)
    arms.update({f"sentence-transformers, CachedMNRL {m}": Theirs(model_dir, True, m, dims) for m in sizes})
    times = {name: [] for name in arms}
    for repeat in range(args.repeats + 1):
        for name, arm in arms.items():
            start = time.perf_counter()
            arm.step(batch)
            if repeat:  # the first round warms every arm up
                times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    base_ours, base_theirs = median["ours, uncached"], median["sentence-transformers, MNRL"]
    print(f"\n{'arm':<40} {'s/step':>8} {'texts/s':>8} {'x uncached':>11}")
    for name, t in median.items():
        base = base_ours if name.startswith("ours") else base_theirs
        print(f"{name:<40} {t:>8.3f} {texts / t:>8.1f} {t / base:>10.2f}x")
    parts = {m: [parts_of_cached_step(copy.deepcopy(arms[f"ours, --mini-batch-size {m}"]), batch)
                 for _ in range(3)] for m in sizes}
    print("\nthe cached step's parts (median of 3, seconds):")
    for m, runs in parts.items():
        print(f"  mini-batch {m}: " + "; ".join(f"{k} {statistics.median(r[k] for r in runs):.3f}" for k in runs[0]))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"median_step_s": median, "texts": texts, "parts": {
            m: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for m, runs in parts.items()}}, indent=1))


if __name__ == "__main__":
    main()
