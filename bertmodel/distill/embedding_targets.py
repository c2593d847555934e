"""The teacher's side of embedding distillation: what the teacher is, what it says of the
training data, and that answer computed once per run and kept in the run directory.

A teacher is one of two kinds (`read_teacher`):
- an embedder: a sentence-transformers directory, an embed run (or its RUN/hf), or any
  encoder `retrieval.embedder.load_embedder` reads (a pre-training run, a transformers
  BertModel). Its targets are the vectors of the training texts, each read as the
  teacher reads a query or a passage (its own prefixes, pooling, projection and length),
  made unit length (sentence-transformers' Normalize: a teacher without one is
  normalised here), (N, D) float32;
- a cross-encoder: a sequence classifier with one logit (a rerank run, a transformers
  or sentence-transformers CrossEncoder directory). Its targets are its logits of each
  (query, positive) and (query, negative) pair, read with its own tokenizer and length
  (a rerank run's --max-seq-length, else its positions up to 512), (R, 1 + n) float32.
Anything else (a classifier with more labels, a QA or tagging head) is refused in one
line: it scores neither texts nor pairs.

The cache (`cached_targets`): RUN/teacher-targets/<fingerprint>.npy, the fingerprint a
sha256 of what decides the targets: the teacher's identity (its files' sha256), how it
reads (its settings), and the texts in order. A rerun or resume of the run finds the
file and reads it; another teacher, other texts or other settings give another name, so
they are computed anew (and the stale file goes). The file is written under a temporary
name and renamed, so a run killed while writing leaves no half of it.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from bertmodel.data.classification import encode_texts, pad_batch
from bertmodel.data.tokenizer_info import tokenizer_path
from bertmodel.errors import BertmodelError
from bertmodel.hf import load_into, load_pretrained, model_dir
from bertmodel.hf_tokenizer import reading_length
from bertmodel.model import HEAD_MODELS, KIND_OF
from bertmodel.retrieval.embedder import embedding_settings, load_embedder

TARGETS_DIR = "teacher-targets"
FORMAT = 1  # bump when what a cached file means changes
CLASSIFIER_KEYS = ("classifier.weight", "classifier.out_proj.weight")  # BERT/ModernBERT, RoBERTa/ELECTRA
TEACHER_KINDS = ("an embedder (a sentence-transformers directory, an embed run or an encoder: MSE to its vectors) "
                 "or a cross-encoder with one logit (a rerank run: MarginMSE to its score margins)")


@dataclass
class Teacher:
    kind: str  # "embedder" or "cross-encoder"
    source: str  # as given
    path: Path  # the directory read (a run's hf/ or checkpoint)
    dimension: int | None = None  # an embedder's vector width
    settings: dict = field(default_factory=dict)  # how it reads texts (or pairs): part of the fingerprint

    def describe(self) -> str:
        if self.kind == "embedder":
            s = self.settings
            return (f"embedder {self.source} ({self.dimension}-dimensional, {s['pooling']} pooling, queries "
                    f"{s['max_query_length']} / passages {s['max_passage_length']} tokens)")
        return f"cross-encoder {self.source} (pairs of {self.settings['max_seq_length']} tokens)"


def read_teacher(source) -> Teacher:
    """The teacher's kind and how it reads, from its files (weights are loaded, no model built)."""
    directory = model_dir(source)
    pre = load_pretrained(directory)
    kind = KIND_OF.get(pre.architecture)
    if kind == "classify":
        logits = next((int(v.shape[0]) for k, v in pre.state_dict.items() if k in CLASSIFIER_KEYS), None)
        if logits != 1:
            raise BertmodelError(f"{source}: a classifier with {logits} labels ({pre.architecture}); --teacher for "
                                 f"embed takes {TEACHER_KINDS}")
        length = reading_length(pre.head) or min(pre.config.max_sequence_length, 512)
        return Teacher("cross-encoder", str(source), Path(pre.source),
                       settings={"max_seq_length": min(int(length), pre.config.max_sequence_length),
                                 "architecture": pre.architecture})
    if kind in ("qa", "tokens", "choice"):
        raise BertmodelError(f"{source}: a {pre.architecture} model (a {kind} head); --teacher for embed takes "
                             f"{TEACHER_KINDS}")
    settings = embedding_settings(pre, Path(pre.source))
    for name in ("max_passage_length", "max_query_length"):
        settings[name] = min(int(settings[name]), pre.config.max_sequence_length)
    projection = pre.state_dict.get("projection.weight")
    dimension = pre.config.hidden_size if projection is None else int(projection.shape[0])
    return Teacher("embedder", str(source), Path(pre.source), dimension, settings)


def fingerprint(parts: dict) -> str:
    """sha256 of a JSON-able description of what decides the targets."""
    return hashlib.sha256(json.dumps({"format": FORMAT, **parts}, sort_keys=True).encode()).hexdigest()


def texts_digest(groups) -> str:
    """sha256 of texts in order (each a tuple of strings: a kind and its text, or a row's
    query, positive and negatives); lengths are hashed too, so no two lists collide by
    where their separators fall."""
    h = hashlib.sha256()
    for group in groups:
        for text in group:
            data = text.encode("utf-8")
            h.update(len(data).to_bytes(8, "little") + data)
        h.update(b"\xff" * 8)
    return h.hexdigest()


def cached_targets(run: Path, key: str, compute, log, describe: dict | None = None) -> np.ndarray:
    """The targets under `key` (a fingerprint) in RUN/teacher-targets: read where a
    file is there, else `compute()`d, written (with a JSON note of `describe` beside it)
    and returned; other fingerprints' files are removed once the new one is written.
    compute None: read only (another rank computes them)."""
    folder = Path(run) / TARGETS_DIR
    path = folder / f"{key[:32]}.npy"
    if path.is_file():
        values = np.load(path)
        log(f"teacher targets: {path} ({values.shape[0]:,} x {values.shape[1]:,}, computed earlier)")
        return values
    if compute is None:
        raise BertmodelError(f"{path}: missing; the first rank computes the teacher's targets and did not write them")
    values = np.ascontiguousarray(compute(), dtype=np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{path.name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            np.save(f, values)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    note = path.with_suffix(".json")
    note.write_text(json.dumps({"fingerprint": key, **(describe or {})}, indent=2, sort_keys=True) + "\n")
    for stale in folder.iterdir():
        if stale.stem != path.stem and stale.suffix in (".npy", ".json"):
            stale.unlink()
    log(f"teacher targets: {path} ({values.shape[0]:,} x {values.shape[1]:,}, computed now)")
    return values


def teacher_vectors(teacher: Teacher, texts: list[tuple[str, str]], device: torch.device,
                    batch_size: int) -> np.ndarray:
    """(N, D) unit vectors of (kind, text) items, kind "query" or "passage", in order."""
    embedder = load_embedder(teacher.source, device=str(device), batch_size=batch_size)
    out = np.empty((len(texts), embedder.dimension), np.float32)
    for kind in ("query", "passage"):
        rows = [i for i, (k, _) in enumerate(texts) if k == kind]
        if rows:
            vectors = embedder.encode([texts[i][1] for i in rows], kind).astype(np.float64)
            # sentence-transformers' Normalize (p=2, eps 1e-12), where the teacher has none
            out[rows] = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return out


@torch.no_grad()
def cross_encoder_scores(teacher: Teacher, queries: list[str], passages: list[list[str]], device: torch.device,
                         batch_size: int) -> np.ndarray:
    """(R, C) logits of each row's query with each of its C passages (the positive first)."""
    pre = load_pretrained(teacher.path)
    model = HEAD_MODELS[pre.architecture](pre.config, 1)
    load_into(model, pre)
    model.to(device).eval()
    C = len(passages[0])
    firsts = [q for q, row in zip(queries, passages) for _ in row]
    seconds = [p for row in passages for p in row]
    encoded = encode_texts(tokenizer_path(pre.tokenizer), firsts, seconds, teacher.settings["max_seq_length"])
    pad = pre.tokenizer.special_ids.get("pad", 0)
    order = np.argsort(-encoded.lengths, kind="stable")  # longest first: batches of like length
    scores = np.empty(len(firsts), np.float32)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        batch = {k: torch.from_numpy(v).to(device) for k, v in pad_batch(encoded, rows, pad, 1).items()
                 if k != "labels"}
        logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).logits
        scores[rows] = logits[:, 0].float().cpu().numpy()
    return scores.reshape(len(queries), C)
