"""Reranking: a cross-encoder scoring (query, passage) pairs with one logit, read from the
pooled [CLS] (BERT) or the pooled sequence (ModernBERT) of `[CLS] query [SEP] passage
[SEP]`: the sequence-classification head with num_labels 1 (model/rerank_heads.py), so
RUN/hf loads as transformers' AutoModelForSequenceClassification and as
sentence-transformers' CrossEncoder.

Training (--loss):
  bce       labelled pairs (query, passage, label 1/0 or a graded float in [0, 1]):
            binary cross-entropy of the logit, batches of --batch-size pairs.
  listwise  each query's positive against its hard negatives, softmax cross-entropy over
            the query's candidates: (query, positive, negatives...) rows, or labelled pairs
            grouped by query (data/rerank.py); batches of --batch-size queries, every
            candidate of each in the same forward pass.
Evaluation (labelled validation pairs; a (query, positive, negatives) table counts its
positive 1 and its negatives 0): per-query MRR@10 and nDCG@10 over each query's
candidates, accuracy, ROC AUC and BCE over the pairs (metrics/pair_ranking.py); the best
model by --metric-for-best (default ndcg@10).
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from bertmodel.data.classification import EncodedExamples, encode_texts, pad_batch
from bertmodel.data.rerank import (RerankGroups, RerankPairs, groups_from_pairs, is_grouped, read_groups,
                                   read_pairs)
from bertmodel.data.tables import open_hub_table, open_table
from bertmodel.data.beir import beir_split, is_beir_dir, read_beir
from bertmodel.errors import BertmodelError
from bertmodel.metrics.pair_ranking import pair_metrics
from bertmodel.metrics.ranking import metric_names as ranking_metric_names
from bertmodel.metrics.ranking import ranking_metrics
from bertmodel.model.config import BertConfig, config_from_dict
from bertmodel.model.rerank_heads import RERANKERS
from bertmodel.training.metrics import encoder_flops
from bertmodel.training.batched_forward import forward_all
from bertmodel.tasks.finetuning import (FinetuningTask, IntervalStats, best_metric, split_identity, start_from)
from bertmodel.tasks.task_defaults import task_default

# What a CrossEncoder applies to the logit in predict(): nothing, so its scores are our
# logits (config.json's sentence_transformers.activation_fn; its default for one label
# would be a sigmoid).
CROSS_ENCODER_ACTIVATION = "torch.nn.modules.linear.Identity"
METRICS = ["ndcg@10", "mrr@10", "accuracy", "auc", "loss"]


def read_split(cfg, which: str, labels_required: bool = True) -> RerankPairs | RerankGroups | None:
    """The train or validation split the options name: labelled pairs, or groups where the
    table holds (query, positive, negatives) rows; None when none is given."""
    path, split = getattr(cfg, which), getattr(cfg, f"{which}_split")
    if path:
        table = open_table(path, split=split, header=not cfg.no_header)
    elif cfg.dataset:
        table = open_hub_table(cfg.dataset, config=cfg.dataset_config, split=split)
    else:
        return None
    if is_grouped(table, cfg.label_column, cfg.positive_column, cfg.negative_column):
        data = read_groups(table, cfg.query_column, cfg.positive_column, cfg.negative_column)
    else:
        data = read_pairs(table, cfg.query_column, cfg.passage_column, cfg.label_column, labels_required)
    return cfg.first(data, which)


class PairSet:
    """Encoded pairs (labels float32) + the padding policy: what the loader collates from."""

    def __init__(self, encoded: EncodedExamples, pad_id: int, multiple: int):
        self.encoded, self.pad_id, self.multiple = encoded, pad_id, multiple

    def __len__(self) -> int:
        return len(self.encoded)

    def collate(self, rows, max_len: int | None = None) -> dict[str, np.ndarray]:
        return pad_batch(self.encoded, rows, self.pad_id, self.multiple)


class GroupSet:
    """Encoded groups: every candidate a row (the positive first), `starts` where each
    query's rows begin. A batch of queries collates to all their candidate rows (N, T)
    and `candidates` (B, C): each query's rows in the batch, -1 past its last."""

    def __init__(self, encoded: EncodedExamples, sizes: np.ndarray, pad_id: int, multiple: int):
        self.encoded, self.pad_id, self.multiple = encoded, pad_id, multiple
        self.sizes = np.asarray(sizes, np.int64)
        self.starts = np.r_[0, np.cumsum(self.sizes)[:-1]]

    def __len__(self) -> int:
        return len(self.sizes)

    def collate(self, rows, max_len: int | None = None) -> dict[str, np.ndarray]:
        rows = np.asarray(rows, np.int64)
        sizes = self.sizes[rows]
        flat = np.concatenate([np.arange(s, s + n) for s, n in zip(self.starts[rows], sizes)]) if len(rows) \
            else np.zeros(0, np.int64)
        batch = pad_batch(self.encoded, flat, self.pad_id, self.multiple)
        batch.pop("labels", None)
        width = int(sizes.max()) if len(rows) else 0
        first = np.r_[0, np.cumsum(sizes)[:-1]]
        column = np.arange(width)
        batch["candidates"] = np.where(column < sizes[:, None], first[:, None] + column, -1).astype(np.int64)
        return batch


class RerankStats(IntervalStats):
    """Loss and accuracy per logging interval: for pairs, logit > 0 against label >= 0.5;
    for groups, the positive scored highest."""

    @torch.no_grad()
    def add(self, out, tensors: dict) -> None:
        if out.group_logits is not None:
            correct = (out.group_logits.argmax(-1) == 0).sum()
            count = out.group_logits.shape[0]
        else:
            correct = ((out.logits > 0) == (tensors["labels"] >= 0.5)).sum()
            count = tensors["labels"].numel()
        self.add_counts(out.loss, correct, count)

    def summarize(self, totals: torch.Tensor) -> dict:
        loss, accuracy = self.means(totals)
        return {"loss": loss, "accuracy": accuracy}


class RerankTask(FinetuningTask):
    name = "rerank"
    head_kind = "classify"  # the sequence-classification head; its reranking twin below

    def __init__(self, cfg, d, log, evaluation_only: bool = False):
        """evaluation_only: a trained model's evaluation or scoring, no training data read."""
        super().__init__(cfg, d, log)
        self.model_class = reranker_class(self.pre.config, cfg.model)
        self.architecture = self.model_class.hf_architecture
        self.listwise = cfg.rerank_loss == "listwise"
        train = None
        if not evaluation_only:
            train = read_split(cfg, "train")
            if train is None:
                raise BertmodelError("give the training data: --train FILE or --dataset NAME")
            train = self._training_form(train)
            self.train_set = self._encode_train(train)
        self.train_data = train
        self.collection = self.candidates = None
        if cfg.validation and is_beir_dir(cfg.validation):
            self._read_collection(cfg, log)
            validation = None
        else:
            validation = read_split(cfg, "validation", labels_required=True)
        if isinstance(validation, RerankGroups):
            validation = validation.as_pairs()
        self.validation_pairs = validation
        self.validation = None if validation is None else self.encode_pairs(validation)
        seen = ""
        if validation is not None:
            seen = (f"{len(validation):,} pairs of {int(validation.query_ids().max()) + 1:,} queries from "
                    f"{validation.source} ({self.validation.encoded.fit_note()})")
        if train is not None:
            what = (f"{len(train):,} queries ({int(self.train_set.sizes.sum()):,} candidates, listwise)"
                    if self.listwise else f"{len(train):,} pairs (bce)")
            log(f"train: {what} from {train.source} ({self.train_set.encoded.fit_note()})"
                + (f"; validation: {seen}" if seen else ""))
        elif seen:
            log(f"validation: {seen}")
        self.best_metric = best_metric(cfg.metric_for_best, task_default("metric_for_best", "rerank"),
                                       self.metric_names())

    def _read_collection(self, cfg, log) -> None:
        """A BEIR directory as validation: BM25's top --top-k of each query (computed once)
        reranked at every evaluation and scored with trec_eval's measures, as `bertmodel
        evaluate RUN --data DIR` scores the run."""
        from bertmodel.retrieval.bm25 import bm25_run
        from bertmodel.tasks.embed import first_queries

        self.collection = first_queries(read_beir(cfg.validation, beir_split(cfg.validation, cfg.validation_split)),
                                        cfg.max_eval_examples)
        self.candidates = bm25_run(self.collection, k=cfg.rerank_top_k)
        pairs = sum(len(c) for c in self.candidates.values())
        log(f"validation: {len(self.collection.queries):,} queries over {len(self.collection.corpus):,} passages "
            f"from {cfg.validation} (split {self.collection.split}), BM25's top {cfg.rerank_top_k} reranked "
            f"({pairs:,} pairs)")

    def _training_form(self, data):
        """The training data in the layout the loss takes: groups for listwise (labelled
        pairs grouped by query), labelled pairs for bce."""
        if self.listwise:
            return data if isinstance(data, RerankGroups) else groups_from_pairs(data)
        if isinstance(data, RerankGroups):
            raise BertmodelError(f"{data.source}: holds (query, positive, negatives) rows, which --loss listwise "
                                 "trains on; --loss bce takes labelled pairs (query, passage, label)")
        return data

    def _encode_train(self, train):
        if isinstance(train, RerankGroups):
            queries = [q for q, c in zip(train.queries, train.candidates) for _ in c]
            passages = [p for c in train.candidates for p in c]
            encoded = encode_texts(self.tok, queries, passages, self.cfg.max_seq_length)
            return GroupSet(encoded, [len(c) for c in train.candidates], self.pad, self.multiple)
        return self.encode_pairs(train)

    def encode_pairs(self, pairs: RerankPairs) -> PairSet:
        encoded = encode_texts(self.tok, pairs.queries, pairs.passages, self.cfg.max_seq_length)
        encoded.labels = pairs.labels
        return PairSet(encoded, self.pad, self.multiple)

    def metric_names(self) -> list[str]:
        """The eval_* metrics each evaluation reports (without the prefix): trec_eval's
        on a collection, the pairs' own on labelled pairs."""
        if self.collection is not None:  # recall at --top-k where that is under 100: all the candidates there are
            return list(ranking_metric_names(self.cfg.rerank_top_k))
        return list(METRICS)

    @property
    def has_eval(self) -> bool:
        return self.validation is not None or self.collection is not None

    # -- the model -------------------------------------------------------------------
    def fresh_model(self, log):
        return start_from(self.model_class, self.pre, log, init=self.cfg.init, num_labels=1)

    def model_for_checkpoint(self, resume: dict):
        model = self.model_class(config_from_dict(resume["config"]))
        model.load_state_dict(resume["model"])
        return model

    # -- per step ----------------------------------------------------------------------
    def new_stats(self, device: torch.device) -> RerankStats:
        return RerankStats(device)

    def flops(self, config: BertConfig, tensors: dict, extent: dict | None = None) -> float:
        """The encoder over every pair (the last layer at [CLS] only), then the pooler and
        the H -> 1 scorer."""
        N, T = tensors["input_ids"].shape
        head = 6 * N * (config.hidden_size ** 2 + config.hidden_size)
        return encoder_flops(config, N, T, last_layer_rows=1, **(extent or {})) + head

    def predict(self, model, data: PairSet, device, autocast, batch_size: int, on_batch=None) -> np.ndarray:
        """(N,) float32 logits for every pair of `data`, in order (on_batch: see forward_all)."""
        def batch_of(rows):
            batch = data.collate(rows)
            batch.pop("labels", None)
            return batch

        parts = [out.logits.float().cpu().numpy()
                 for _, out in forward_all(model, len(data), batch_of, batch_size, device, autocast, on_batch)]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def evaluate(self, model, d, autocast, logits: np.ndarray | None = None, on_batch=None) -> dict:
        """The metrics over the whole validation set (every rank computes them alike, so
        the best-model decision agrees across ranks)."""
        if self.collection is not None:
            return {f"eval_{k}": v for k, v in self.collection_metrics(model, on_batch).items()}
        if logits is None:
            logits = self.predict(model, self.validation, d.device, autocast, self.cfg.eval_batch_size, on_batch)
        pairs = self.validation_pairs
        return {f"eval_{k}": v for k, v in pair_metrics(pairs.query_ids(), pairs.labels, logits).items()}

    def collection_metrics(self, model, on_batch=None) -> dict:
        """trec_eval's measures of the BM25 candidates reranked by `model`."""
        from bertmodel.retrieval.search import rerank_run

        total = -(-sum(len(c) for c in self.candidates.values()) // self.cfg.eval_batch_size)
        done = [0]

        def score(pairs):
            hook = None if on_batch is None else (lambda n, _t: on_batch(done[0] + n, total))
            scores = self.score(model, [q for q, _ in pairs], [p for _, p in pairs], on_batch=hook)
            done[0] += -(-len(pairs) // self.cfg.eval_batch_size)
            return scores

        run = rerank_run(self.collection, self.candidates, score, top_k=self.cfg.rerank_top_k,
                         batch_size=self.cfg.eval_batch_size * 16)
        return ranking_metrics(run, self.collection.qrels, candidates=self.cfg.rerank_top_k)

    def prediction_records(self, logits: np.ndarray) -> list[dict]:
        """One record per validation pair: query, passage, score (the logit) and gold label."""
        pairs = self.validation_pairs
        return [{"query": q, "passage": p, "score": float(s), "gold": float(g)}
                for q, p, s, g in zip(pairs.queries, pairs.passages, logits.tolist(), pairs.labels.tolist())]

    def score(self, model, queries: list[str], passages: list[str], batch_size: int | None = None,
              on_batch=None) -> np.ndarray:
        """(N,) logits of (query, passage) pairs, in order, read as the run was trained."""
        pairs = RerankPairs(list(queries), list(passages), None, "pairs")
        data = self.encode_pairs(pairs)
        return self.predict(model, data, self.d.device, contextlib.nullcontext(),
                            batch_size or self.cfg.eval_batch_size, on_batch)

    def inputs(self) -> dict:
        """What this run trains and evaluates on (compared on resume: training/run_dir.py)."""
        cfg = self.cfg
        read = self.collection.split if self.collection is not None else None  # a BEIR directory's dev or test
        return {"train": split_identity(cfg, "train"), "validation": split_identity(cfg, "validation", read),
                "columns": {"query": cfg.query_column, "passage": cfg.passage_column, "label": cfg.label_column,
                            "positive": cfg.positive_column, "negative": cfg.negative_column,
                            "no_header": cfg.no_header},
                "loss": cfg.rerank_loss}

    def state(self) -> dict:
        return {"name": self.name, "architecture": self.architecture,
                "hf_config": cross_encoder_config(),
                "options": self.cfg.data_options()}


def reranker_class(config, source) -> type:
    """The reranking head on the model type of `config` (BERT, ModernBERT, RoBERTa or XLM-R)."""
    model_type = getattr(config, "model_type", config.architecture)
    if model_type not in RERANKERS:
        raise BertmodelError(f"{source}: rerank fine-tunes BERT, ModernBERT and RoBERTa models, not {model_type}")
    return RERANKERS[model_type]


def cross_encoder_config() -> dict:
    """config.json's head fields: one label (transformers reads the logit as a score) and
    the activation sentence-transformers' CrossEncoder applies in predict (none)."""
    return {"num_labels": 1, "id2label": {0: "LABEL_0"}, "label2id": {"LABEL_0": 0},
            "sentence_transformers": {"activation_fn": CROSS_ENCODER_ACTIVATION}}
