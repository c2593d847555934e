"""Embedding distillation: `finetune embed --teacher DIR`, the embed task (tasks/embed.py:
its student, settings, validation, evaluation and export) with a teacher's targets in
place of the in-batch-negatives loss (sentence-transformers' distillation recipes).

- An embedder teacher (distill/embedding_targets.py): the training data are plain texts,
  --train as a text file (one text per line, blank lines skipped), a table's column
  (--text-column; default the first of text, passage, document, sentence, ...; a
  title + text table as BEIR joins them) or a BEIR directory (every corpus passage, and
  the queries of --train-split where it has that split's qrels). A text is read as a
  passage (a BEIR query as a query) by both sides, each with its own prefix and length.
  Loss: MSE between the student's and the teacher's unit vectors (distill/
  embedding_losses.py). Where the teacher's width is not the student's hidden size the
  student learns a projection to it (the export's Dense module, before Normalize).
- A cross-encoder teacher: the data are the embed task's (query, positive, negatives)
  rows, at least one hard negative each; loss: MarginMSE to the teacher's logit margins.

The teacher's targets are computed once, before the first step, and kept in
RUN/teacher-targets under a fingerprint of the teacher, its settings and the data, so a
resume or rerun reads them back (the run's recorded inputs include the fingerprint: a
resume with another teacher or other texts is refused as other data is, unless
--allow-changed-options, and then computed anew). RUN/hf is the student, exported as
every embed run is: `SentenceTransformer("RUN/hf")` gives the vectors the loss trained.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bertmodel.data.beir import QRELS, is_beir_dir, passage_text, read_beir, read_beir_corpus
from bertmodel.data.classification import EncodedExamples, encode_texts, pad_batch
from bertmodel.data.tables import SUFFIX_FORMATS
from bertmodel.distill.embedding_losses import EmbeddingMSE, MarginMSE
from bertmodel.distill.embedding_targets import (Teacher, cached_targets, cross_encoder_scores, fingerprint,
                                                 read_teacher, teacher_vectors, texts_digest)
from bertmodel.errors import BertmodelError
from bertmodel.retrieval.texts import read_texts
from bertmodel.tasks.embed import EmbedTask, PairSet, read_split
from bertmodel.tasks.finetuning import IntervalStats
from bertmodel.training import parallel
from bertmodel.training.metrics import encoder_flops
from bertmodel.training.run_dir import source_identity


class TextSet:
    """Encoded texts with the teacher's unit vectors of them; a batch is the texts
    padded and their vectors (float32, (B, D)). `order`: the row of each text among the
    teacher's targets (set_targets), which come in the order the texts were read."""

    def __init__(self, encoded: EncodedExamples, order: np.ndarray, pad_id: int, multiple: int):
        self.encoded, self.order, self.pad_id, self.multiple = encoded, order, pad_id, multiple
        self.targets = None

    def set_targets(self, vectors: np.ndarray) -> None:
        self.targets = vectors[self.order]

    def __len__(self) -> int:
        return len(self.encoded)

    def collate(self, rows, max_len: int | None = None) -> dict[str, np.ndarray]:
        rows = np.asarray(rows, np.int64)
        batch = pad_batch(self.encoded, rows, self.pad_id, self.multiple)
        batch.pop("labels", None)
        batch["teacher_embeddings"] = self.targets[rows]
        return batch


class MarginSet(PairSet):
    """The embed task's rows (query, positive, negatives) with the teacher's margins
    t(q, p) - t(q, n_i) (float32, (B, n))."""

    def __init__(self, pairs: PairSet):
        super().__init__(pairs.queries, pairs.passages, pairs.text_ids, pairs.pad_id, pairs.multiple)
        self.margins = None

    def set_targets(self, scores: np.ndarray) -> None:
        """scores: (R, 1 + n) the teacher's logits of each row's positive, then its negatives."""
        self.margins = scores[:, :1] - scores[:, 1:]

    def collate(self, rows, max_len: int | None = None) -> dict[str, np.ndarray]:
        batch = super().collate(rows, max_len)
        batch["teacher_margins"] = self.margins[np.asarray(rows, np.int64)]
        return batch


class DistillStats(IntervalStats):
    """Loss, and how close the student is: the mean cosine of its vectors to the
    teacher's (MSE), or the share of margins whose sign agrees with the teacher's
    (which of positive and negative ranks first: MarginMSE)."""

    def __init__(self, device: torch.device, margins: bool):
        super().__init__(device)
        self.margins = margins

    @torch.no_grad()
    def add(self, out, tensors: dict) -> None:
        if self.margins:
            teacher = tensors["teacher_margins"]
            agree = ((out.student > 0) == (teacher > 0)).sum()
            self.add_counts(out.loss, agree, teacher.numel())
        else:
            cosine = (out.student.double() * tensors["teacher_embeddings"].double()).sum()  # both unit vectors
            self.add_counts(out.loss, cosine, out.student.shape[0])

    def summarize(self, totals: torch.Tensor) -> dict:
        loss, closeness = self.means(totals)
        return {"loss": loss, "agreement" if self.margins else "cosine": closeness}


class EmbedDistillTask(EmbedTask):
    def __init__(self, cfg, d, log):
        if cfg.mini_batch_size or cfg.matryoshka_dims:
            raise BertmodelError("--mini-batch-size and --matryoshka-dims shape the in-batch-negatives loss; with "
                                 "--teacher the loss is the teacher's (MSE or MarginMSE), which takes neither")
        self.teacher: Teacher = read_teacher(cfg.teacher)
        self.projection_dim = None
        super().__init__(cfg, d, log, evaluation_only=True)  # the student, its settings, the validation data
        self.teacher_identity = source_identity(self.teacher.path)
        if self.teacher.kind == "embedder":
            self._read_texts(cfg, log)
        else:
            self._read_rows(cfg, log)
        log(f"teacher: {self.teacher.describe()}")
        if self.projection_dim:
            log(f"the student's {self.pre.config.hidden_size}-dimensional vectors are projected to the teacher's "
                f"{self.projection_dim} (a learnt linear map, exported as a Dense module)")

    # -- the training data and the teacher's targets ------------------------------------
    def _read_texts(self, cfg, log) -> None:
        texts = cfg.first(training_texts(cfg), "train")
        if self.teacher.dimension != self.pre.config.hidden_size:
            self.projection_dim = self.teacher.dimension
        s = self.settings
        encoded = {kind: encode_texts(self.tok, [s[f"{kind}_prefix"] + t for k, t in texts if k == kind], None,
                                      s[f"max_{kind}_length"]) for kind in ("query", "passage")}
        order = np.concatenate([np.flatnonzero([k == kind for k, _ in texts]) for kind in ("query", "passage")])
        self.train_set = TextSet(concatenated(encoded["query"], encoded["passage"]), order, self.pad, self.multiple)
        self.targets_key = self._fingerprint(texts)
        self._compute = lambda device: teacher_vectors(self.teacher, texts, device, cfg.eval_batch_size)
        read = "; ".join(f"{len(encoded[kind]):,} read as {plural} ({encoded[kind].fit_note()})"
                         for kind, plural in (("query", "queries"), ("passage", "passages")) if len(encoded[kind]))
        log(f"train: {len(texts):,} texts from {cfg.train}: {read}")

    def _read_rows(self, cfg, log) -> None:
        pairs = read_split(cfg, "train")
        if pairs is None:
            raise BertmodelError("give the training data: --train FILE|DIR or --dataset NAME")
        if not pairs.num_negatives:
            raise BertmodelError(f"{pairs.source}: rows without hard negatives; MarginMSE from a cross-encoder "
                                 "learns the teacher's margin between a query's positive and its negatives, so give "
                                 "(query, positive, negative...) rows (--negative-column)")
        self.train_pairs = pairs
        self.train_set = MarginSet(self.encode_pairs(pairs))
        self.targets_key = self._fingerprint([(q, p, *n) for q, p, n in zip(pairs.queries, pairs.positives,
                                                                               pairs.negatives)])
        self._compute = lambda device: cross_encoder_scores(
            self.teacher, pairs.queries, [[p, *n] for p, n in zip(pairs.positives, pairs.negatives)], device,
            cfg.eval_batch_size)
        log(f"train: {len(pairs):,} rows, {pairs.num_negatives} hard negatives each, from {pairs.source} "
            f"({pairs.describe()}); queries {self.train_set.queries.fit_note()}, passages "
            f"{self.train_set.passages.fit_note()}")

    def _fingerprint(self, groups) -> str:
        self.targets_parts = {"teacher": self.teacher_identity, "kind": self.teacher.kind,
                              "settings": self.teacher.settings, "texts": texts_digest(groups), "count": len(groups)}
        return fingerprint(self.targets_parts)

    def _targets(self, device) -> np.ndarray:
        """The teacher's targets, from RUN/teacher-targets or computed (by the first rank;
        the others wait, then read its file)."""
        d, run, log = self.d, Path(self.cfg.out), self.log

        def compute():
            # Building the teacher draws initial weights: from a copy of the RNGs, so the student's
            # dropout is the same whether the targets were computed now or read back
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                return self._compute(device)

        values, error = None, None
        if d.is_main:
            try:
                values = cached_targets(run, self.targets_key, compute, log,
                                        {**self.targets_parts, "teacher_source": self.teacher.source})
            except BertmodelError as exc:  # raised after the barrier: the other ranks wait there for this one
                error = exc
        parallel.barrier(d)
        if error is not None:
            raise error
        return values if values is not None else cached_targets(run, self.targets_key, None, log)

    # -- the model and its steps ------------------------------------------------------
    def model_options(self) -> dict:
        return {**super().model_options(), "projection_dim": self.projection_dim}

    def training_module(self, model, device) -> torch.nn.Module:
        """The student under its loss, the teacher's targets in the training set: computed
        here, once the run has passed its start-up checks and is recorded as a run (a
        refused start computes nothing and leaves no cache behind), or read back."""
        self.train_set.set_targets(self._targets(device))
        return EmbeddingMSE(model) if self.teacher.kind == "embedder" else MarginMSE(model)

    def new_stats(self, device: torch.device) -> DistillStats:
        return DistillStats(device, margins=self.teacher.kind == "cross-encoder")

    def flops(self, config, tensors: dict, extent: dict | None = None) -> float:
        if "passage_input_ids" in tensors:  # MarginMSE: queries and passages, as the embed task
            return super().flops(config, tensors, extent)
        B, T = tensors["input_ids"].shape
        return encoder_flops(config, B, T)

    def inputs(self) -> dict:
        return {**super().inputs(), "text_column": self.cfg.text_column,
                "teacher": {**(self.teacher_identity or {}), "targets": self.targets_key}}

    def state(self) -> dict:
        loss = "mse" if self.teacher.kind == "embedder" else "margin_mse"
        return {**super().state(), "distillation": {"teacher": self.teacher.source, "kind": self.teacher.kind,
                                                    "loss": loss, "projection_dim": self.projection_dim}}


def concatenated(first: EncodedExamples, second: EncodedExamples) -> EncodedExamples:
    """One set of rows: `first`'s, then `second`'s (each cut at its own length)."""
    offsets = np.concatenate([first.offsets[:-1], second.offsets + first.offsets[-1]])
    return EncodedExamples(np.concatenate([first.input_ids, second.input_ids]),
                           np.concatenate([first.token_type_ids, second.token_type_ids]), offsets, None,
                           max(first.max_seq_length, second.max_seq_length), first.truncated + second.truncated,
                           "tokenizers" if "tokenizers" in (first.engine, second.engine) else first.engine)


def training_texts(cfg) -> list[tuple[str, str]]:
    """(kind, text) of --train: a BEIR directory's queries (of --train-split, where it has
    that split's qrels) and corpus, a table's text column, or a text file's lines."""
    if not cfg.train:
        raise BertmodelError("--teacher with an embedder distils on texts: give --train (a text file, a table or a "
                             "BEIR directory)")
    path = Path(cfg.train)
    if is_beir_dir(path):
        split = cfg.train_split or "train"
        queries = read_beir(path, split).queries.values() if (path / QRELS / f"{split}.tsv").is_file() else ()
        return [("query", q) for q in queries] + [("passage", passage_text(doc))
                                                   for doc in read_beir_corpus(path).values()]
    if path.is_dir() or path.suffix.lower() in SUFFIX_FORMATS:
        return [("passage", t) for t in read_texts(path, cfg.text_column, cfg.train_split, "--text-column").texts]
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise BertmodelError(f"{path}: not valid UTF-8 text (byte offset {exc.start:,}); give one text per "
                             "line") from None
    texts = [("passage", line.strip()) for line in lines if line.strip()]
    if not texts:
        raise BertmodelError(f"{path}: no texts (one text per line)")
    return texts
