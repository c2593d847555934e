"""Sentence embeddings: a bi-encoder (model/bi_encoder.py) trained with in-batch
negatives (model/contrastive.py) on (query, positive[, negatives...]) data
(data/pairs.py: tables with sentence-transformers' column names, a BEIR directory's
train qrels, SQuAD's (question, paragraph) pairs).

A batch is --batch-size queries with their positives and hard negatives: queries cut at
--max-query-length, passages at --max-passage-length, each with its prefix
(--query-prefix / --passage-prefix, e.g. "query: " / "passage: "), padded per batch; the
passages column-major (every positive, then every first negative, ...), as the loss lays
its candidates out. Duplicated texts in a batch are kept out of each other's negatives
(the loss's duplicate rule), so the trainer's shuffled, resumable order is used as is.

Evaluation is retrieval, as trec_eval scores it (metrics/ranking.py): on a BEIR directory
(--validation DIR: its --validation-split if it has one, else dev, else test), or on
validation pairs made into a collection (every distinct positive and negative a passage,
each query's positives its relevant ones); one SQuAD file given as both --train and
--validation is split by article as `squad-to-beir` splits it (train articles train, dev
or --validation-split validate, every paragraph in the corpus). The corpus encoded in batches and searched
exactly (retrieval/search.py): nDCG@10 (the default --metric-for-best), MRR@10, Recall@100,
MAP. RUN/hf is the encoder (BertModel / ModernBertModel) with the sentence-transformers
files (retrieval/sentence_files.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bertmodel.data.beir import BeirData, beir_split, is_beir_dir, read_beir
from bertmodel.data.classification import EncodedExamples, encode_texts, pad_batch
from bertmodel.data.pairs import Pairs, beir_pairs, is_squad_file, pairs_collection, read_hub_pairs, read_pairs
from bertmodel.data.squad_beir import read_squad_beir
from bertmodel.retrieval.embedder import Embedder
from bertmodel.errors import BertmodelError
from bertmodel.metrics.ranking import METRICS, ranking_metrics
from bertmodel.retrieval.search import dense_run
from bertmodel.retrieval.sentence_files import read_sentence_settings
from bertmodel.model.bi_encoder import BI_ENCODERS
from bertmodel.model.contrastive import duplicate_mask
from bertmodel.model.config import BertConfig, config_from_dict
from bertmodel.training.metrics import encoder_flops
from bertmodel.tasks.finetuning import FinetuningTask, IntervalStats, best_metric, split_identity, start_from
from bertmodel.tasks.task_defaults import task_default


def read_split(cfg, which: str) -> Pairs | BeirData | None:
    """Training pairs, or the validation collection (a BEIR directory's split, or pairs)."""
    path, split = getattr(cfg, which), getattr(cfg, f"{which}_split")
    columns = dict(query_column=cfg.query_column, positive_column=cfg.positive_column,
                   negative_column=cfg.negative_column)
    if path:
        if which == "validation" and is_beir_dir(path):
            return first_queries(read_beir(path, beir_split(path, split)), cfg.max_eval_examples)
        if split_squad_file(cfg):
            # One SQuAD file as both: split by article as squad-to-beir splits it, so no
            # paragraph the model trained on is a validation query's positive.
            asked = split if split not in (None, which) else ("train" if which == "train" else "dev")
            collection = read_squad_beir(path, asked)
            if which == "validation":
                return first_queries(collection, cfg.max_eval_examples)
            return cfg.first(beir_pairs(collection, path, "SQuAD file's by-article split"), which)
        return cfg.first(read_pairs(path, split=split, **columns), which)
    if cfg.dataset:
        return cfg.first(read_hub_pairs(cfg.dataset, config=cfg.dataset_config, split=split, **columns), which)
    return None


def split_squad_file(cfg) -> bool:
    """--train and --validation are the same SQuAD file (read as its by-article splits)."""
    if not (cfg.train and cfg.validation) or not is_squad_file(Path(cfg.train)):
        return False
    return Path(cfg.train).resolve() == Path(cfg.validation).resolve()


def first_queries(data: BeirData, limit: int | None) -> BeirData:
    """--max-eval-examples on a collection: its first `limit` judged queries (in the order
    of the split's qrels), searched over the whole corpus."""
    if limit is None or limit >= len(data.queries):
        return data
    kept = list(data.queries)[:limit]
    return BeirData(data.corpus, {q: data.queries[q] for q in kept}, {q: data.qrels[q] for q in kept},
                    data.split, data.source)


class PairSet:
    """Encoded queries and passages (row i's positive, then its negatives), with the text
    ids of the duplicate rule; collates a batch of rows as the bi-encoder takes it."""

    def __init__(self, queries: EncodedExamples, passages: EncodedExamples, text_ids: np.ndarray, pad_id: int,
                 multiple: int):
        self.queries, self.passages, self.text_ids = queries, passages, text_ids
        self.per_row = text_ids.shape[1] - 1  # the positive + the hard negatives
        self.pad_id, self.multiple = pad_id, multiple

    def __len__(self) -> int:
        return len(self.queries)

    def collate(self, rows, max_len: int | None = None) -> dict[str, np.ndarray]:
        rows = np.asarray(rows, np.int64)
        batch = pad_batch(self.queries, rows, self.pad_id, self.multiple)
        batch.pop("labels", None)
        column_major = (rows[None, :] * self.per_row + np.arange(self.per_row)[:, None]).reshape(-1)
        passages = pad_batch(self.passages, column_major, self.pad_id, self.multiple)
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            batch[f"passage_{key}"] = passages[key]
        batch["text_ids"] = self.text_ids[rows]
        return batch


class EmbedStats(IntervalStats):
    """Loss, and in-batch accuracy: the share of queries whose own positive scores
    highest among the batch's candidates (the loss's: duplicates left out)."""

    @torch.no_grad()
    def add(self, out, tensors: dict) -> None:
        scores = out.query_embeddings.float() @ out.passage_embeddings.float().T
        scores = scores.masked_fill(duplicate_mask(tensors["text_ids"]), float("-inf"))  # the loss's candidates
        B = scores.shape[0]
        correct = (scores.argmax(-1) == torch.arange(B, device=scores.device)).sum()
        self.add_counts(out.loss, correct, B)

    def summarize(self, totals: torch.Tensor) -> dict:
        loss, accuracy = self.means(totals)
        return {"loss": loss, "accuracy": accuracy}


class EmbedTask(FinetuningTask):
    name = "embed"
    head_kind = "classify"  # replaced below: the bi-encoder of the model's architecture

    def __init__(self, cfg, d, log, evaluation_only: bool = False):
        super().__init__(cfg, d, log)
        if self.pre.config.model_type not in BI_ENCODERS:
            raise BertmodelError(f"{cfg.model}: a {self.pre.config.model_type} model; embed trains BERT, "
                                 "ModernBERT and RoBERTa encoders")
        self.model_class = BI_ENCODERS[self.pre.config.model_type]
        self.architecture = self.model_class.hf_architecture
        self.settings = self._settings()
        for name in ("max_query_length", "max_passage_length"):
            if self.settings[name] > self.pre.config.max_sequence_length:
                raise BertmodelError(f"--{name.replace('_', '-')} {self.settings[name]} is longer than {cfg.model}'s "
                                     f"{self.pre.config.max_sequence_length} positions")
        if cfg.matryoshka_dims and max(cfg.matryoshka_dims) > self.pre.config.hidden_size:
            raise BertmodelError(f"--matryoshka-dims {max(cfg.matryoshka_dims)} is wider than {cfg.model}'s "
                                 f"{self.pre.config.hidden_size}-dimensional embeddings")
        if cfg.mini_batch_size and d.ddp:
            raise BertmodelError("--mini-batch-size (GradCache) runs on one process: its second backward pass "
                                 "would all-reduce every mini-batch's gradients; drop it under torchrun, or run "
                                 "on one device")
        self.train_pairs = None
        if not evaluation_only:
            train = read_split(cfg, "train")
            if train is None:
                raise BertmodelError("give the training data: --train FILE|DIR or --dataset NAME")
            self.train_pairs = train
            self.train_set = self.encode_pairs(train)
        validation = read_split(cfg, "validation")
        self.validation = validation if isinstance(validation, BeirData) or validation is None \
            else pairs_collection(validation)
        if self.train_pairs is not None:
            t = self.train_pairs
            negatives = f", {t.num_negatives} hard negatives each" if t.num_negatives else ""
            log(f"train: {len(t):,} pairs{negatives} from {t.source} ({t.describe()}); queries "
                f"{self.train_set.queries.fit_note()}, passages {self.train_set.passages.fit_note()}")
        if self.validation is not None:
            v = self.validation
            log(f"validation: {len(v.queries):,} queries over {len(v.corpus):,} passages from {v.source}"
                + (f" (split {v.split})" if v.split != "validation" else " (pairs as a collection)"))
        self.best_metric = best_metric(cfg.metric_for_best, task_default("metric_for_best", "embed"),
                                       self.metric_names())

    def _settings(self) -> dict:
        """How texts are read: the options, else the source's own (a sentence-transformers
        directory's pooling and prompts, an embed run's settings), else the defaults."""
        cfg = self.cfg
        source = dict(self.pre.head.get("embedding") or {})
        if not source and Path(cfg.model).is_dir():
            source = read_sentence_settings(Path(cfg.model)) or {}
        return {"pooling": cfg.pooling or source.get("pooling") or "mean", "normalize": True,
                "query_prefix": cfg.query_prefix if cfg.query_prefix is not None else source.get("query_prefix", ""),
                "passage_prefix": (cfg.passage_prefix if cfg.passage_prefix is not None
                                   else source.get("passage_prefix", "")),
                "max_query_length": cfg.max_query_length, "max_passage_length": cfg.max_passage_length,
                "scale": cfg.scale, "matryoshka_dims": list(cfg.matryoshka_dims or []) or None}

    def encode_pairs(self, pairs: Pairs) -> PairSet:
        s = self.settings
        queries = encode_texts(self.tok, [s["query_prefix"] + q for q in pairs.queries], None, s["max_query_length"])
        texts = [s["passage_prefix"] + t for p, n in zip(pairs.positives, pairs.negatives) for t in (p, *n)]
        passages = encode_texts(self.tok, texts, None, s["max_passage_length"])
        return PairSet(queries, passages, pairs.text_ids(), self.pad, self.multiple)

    def metric_names(self) -> list[str]:
        return list(METRICS)

    @property
    def has_eval(self) -> bool:
        return self.validation is not None

    # -- the model -------------------------------------------------------------------
    def model_options(self) -> dict:
        s = self.settings
        return {"pooling": s["pooling"], "scale": s["scale"], "mini_batch_size": self.cfg.mini_batch_size,
                "matryoshka_dims": tuple(s["matryoshka_dims"] or ()) or None}

    def fresh_model(self, log):
        return start_from(self.model_class, self.pre, log, init=self.cfg.init, **self.model_options())

    def model_for_checkpoint(self, resume: dict):
        model = self.model_class(config_from_dict(resume["config"]), **self.model_options())
        model.load_state_dict(resume["model"])
        return model

    # -- per step ----------------------------------------------------------------------
    def new_stats(self, device: torch.device) -> EmbedStats:
        return EmbedStats(device)

    def flops(self, config: BertConfig, tensors: dict, extent: dict | None = None) -> float:
        """The encoder over the queries and over the passages (padded; a GradCache run
        does one more forward pass, 8/6 of this)."""
        B, Tq = tensors["input_ids"].shape
        N, Tp = tensors["passage_input_ids"].shape
        work = encoder_flops(config, B, Tq) + encoder_flops(config, N, Tp)
        return work * (8 / 6 if self.cfg.mini_batch_size else 1.0)

    def embedder(self, model, d, autocast=None) -> Embedder:
        """The model being trained, as an Embedder (no copy)."""
        return Embedder(model, self.tok, self.settings, d.device, self.pad, self.cfg.eval_batch_size, autocast)

    def evaluate(self, model, d, autocast, on_batch=None) -> dict:
        """trec_eval's measures of exact search over the validation collection."""
        return {f"eval_{k}": v for k, v in self.retrieval_metrics(model, d, autocast, on_batch).items()}

    def retrieval_metrics(self, model, d, autocast=None, on_batch=None, per_query: dict | None = None) -> dict:
        beir = self.validation
        embedder = self.embedder(model, d, autocast)
        size = embedder.batch_size
        total = -(-len(beir.queries) // size) + -(-len(beir.corpus) // size)
        if on_batch is not None:
            on_batch(0, total)
        offset = [0]  # batches encoded so far: the queries, then each chunk of passages

        def encoder(kind):
            def encode(texts):
                base = offset[0]
                hook = None if on_batch is None else (lambda done, _total: on_batch(base + done, total))
                vectors = embedder.encode(texts, kind, hook)
                offset[0] += -(-len(texts) // size)
                return vectors
            return encode

        run = dense_run(beir, encoder("query"), encoder("passage"), k=100)
        return ranking_metrics(run, beir.qrels, per_query)

    def inputs(self) -> dict:
        cfg = self.cfg
        # A BEIR directory's split as read (dev or test), not the option's "validation"
        read = self.validation.split if cfg.validation and is_beir_dir(cfg.validation) else None
        return {"train": split_identity(cfg, "train"), "validation": split_identity(cfg, "validation", read),
                "columns": {"query": cfg.query_column, "positive": cfg.positive_column,
                            "negative": cfg.negative_column},
                "reading": {k: self.settings[k] for k in ("query_prefix", "passage_prefix", "max_query_length",
                                                          "max_passage_length", "pooling")}}

    def state(self) -> dict:
        s = self.settings
        return {"name": self.name, "architecture": self.architecture, "hf_config": {},
                "options": self.cfg.data_options(), "embedding": dict(s),
                "sentence_transformers": {"pooling": s["pooling"], "normalize": s["normalize"],
                                          "dimension": self.pre.config.hidden_size,
                                          "query_prefix": s["query_prefix"], "passage_prefix": s["passage_prefix"],
                                          "max_seq_length": s["max_passage_length"]}}

