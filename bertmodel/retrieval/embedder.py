"""Texts to vectors with a bi-encoder: what `finetune embed` evaluates with, and what
`bertmodel embed`, `search`, `evaluate` and the eval suite load.

`load_embedder(path)` reads an embed run (RUN, RUN/hf, a checkpoint), any
sentence-transformers directory (its pooling, a linear Dense projection, normalisation,
prompts, length and similarity), or any other encoder: a pre-training run or its export, a transformers
BERT, ModernBERT or ELECTRA directory (mean pooling, normalised: the usual
sentence-embedding reading of an encoder, so a starting model has a baseline); our
fine-tuned classifiers and the like are refused. `encode_queries` / `encode_passages` give
(n, D) float32 rows, each text with its prefix (the run's --query-prefix /
--passage-prefix, a sentence-transformers model's "query" / "document" prompt) and cut at
its length. Texts are encoded longest first, so a batch holds texts of like length and
little padding; the rows come back in the order given (padding does not change a text's
vector: attention and pooling skip it).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertmodel.errors import BertmodelError

DEFAULT_SETTINGS = {"pooling": "mean", "normalize": True, "query_prefix": "", "passage_prefix": "",
                    "max_query_length": 64, "max_passage_length": 256, "similarity": "cosine"}
# What load_embedder reads besides embed runs: the encoder of a pre-training run (a task
# file naming another task is a fine-tuned model, whose vectors were never trained).
ENCODER_TASKS = (None, "embed", "pretraining")


@dataclass
class Embedder:
    model: torch.nn.Module  # a model/bi_encoder.py bi-encoder
    tokenizer_path: Path
    settings: dict
    device: torch.device
    pad_id: int = 0
    batch_size: int = 64
    autocast: contextlib.AbstractContextManager | None = None

    @property
    def dimension(self) -> int:
        projection = getattr(self.model, "projection", None)  # a distilled student's Dense module
        return self.model.config.hidden_size if projection is None else projection.out_features

    def encode(self, texts: list[str], kind: str = "passage", on_batch=None) -> np.ndarray:
        """(n, D) float32 vectors of `texts` read as queries or passages (`kind`)."""
        from bertmodel.data.classification import encode_texts, pad_batch
        from bertmodel.training.batched_forward import forward_all

        prefix = self.settings.get(f"{kind}_prefix") or ""
        length = int(self.settings[f"max_{kind}_length"])
        if not len(texts):
            return np.zeros((0, self.dimension), np.float32)
        encoded = encode_texts(self.tokenizer_path, [prefix + t for t in texts], None, length)
        order = np.argsort(-encoded.lengths, kind="stable")  # longest first: batches of like length

        def batch_of(rows):
            batch = pad_batch(encoded, order[rows], self.pad_id, 1)
            batch.pop("labels", None)
            return batch

        out = np.empty((len(texts), self.dimension), np.float32)
        autocast = self.autocast or contextlib.nullcontext()
        for rows, result in forward_all(self.model, len(texts), batch_of, self.batch_size, self.device, autocast,
                                        on_batch):
            out[order[rows]] = result.query_embeddings.float().cpu().numpy()
        return out

    def encode_queries(self, texts: list[str], on_batch=None) -> np.ndarray:
        return self.encode(list(texts), "query", on_batch)

    def encode_passages(self, texts: list[str], on_batch=None) -> np.ndarray:
        return self.encode(list(texts), "passage", on_batch)

    def search_encoder(self, kind: str):
        """texts -> vectors whose dot products rank as the model's similarity does: a
        cosine model whose vectors are not unit length (a sentence-transformers directory
        without a Normalize module) is normalised here, in float64 (the search's own
        precision), and a dot-product model is left as it is."""
        if self.settings.get("similarity", "cosine") == "dot" or self.settings.get("normalize", True):
            return lambda texts: self.encode(list(texts), kind)

        def unit(texts):
            vectors = self.encode(list(texts), kind).astype(np.float64)
            return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return unit


def embedding_settings(pre, directory: Path) -> dict:
    """How the model was trained to read texts: an embed run's recorded settings, a
    sentence-transformers directory's modules, or the defaults."""
    from bertmodel.retrieval.sentence_files import read_sentence_settings

    settings = dict(DEFAULT_SETTINGS)
    recorded = pre.head.get("embedding")
    if recorded:
        settings.update(recorded)
        return settings
    found = read_sentence_settings(directory) if directory.is_dir() else None
    if found:
        settings.update(found)
    return settings


def check_embeds(path, task: dict, architecture: str | None) -> None:
    """Refuse a run of ours fine-tuned for another task (`task`: its task record): its
    encoder was trained for that task's head, not for vectors."""
    if task.get("name") not in ENCODER_TASKS and architecture not in ("BertModel", "ModernBertModel", "RobertaModel",
                                                                       "XLMRobertaModel"):
        raise BertmodelError(f"{path}: a {task.get('name')} run ({architecture}), not an embedding model; texts are "
                             "embedded by embed runs, pre-training runs, sentence-transformers directories and "
                             "transformers BERT, ModernBERT, RoBERTa, XLM-R and ELECTRA encoder directories")


def load_embedder(path, device: str = "cpu", batch_size: int = 64, max_passage_length: int | None = None,
                  max_query_length: int | None = None) -> Embedder:
    """An Embedder for an embed run, a sentence-transformers dir or any other encoder."""
    from bertmodel.hf import load_into, load_pretrained, model_dir
    from bertmodel.model.bi_encoder import ENCODER_READERS
    from bertmodel.data.shards import tokenizer_path
    from bertmodel.training import parallel

    directory = model_dir(path)
    pre = load_pretrained(directory)
    check_embeds(path, pre.head, pre.architecture)
    model_type = pre.config.model_type
    if model_type not in ENCODER_READERS:
        raise BertmodelError(f"{path}: a {model_type} model; embeddings are read from BERT, ModernBERT, RoBERTa, XLM-R "
                             "and ELECTRA encoders")
    if pre.tokenizer is None:
        raise BertmodelError(f"{path}: no tokenizer files (vocab.txt or tokenizer.json) stored with it")
    settings = embedding_settings(pre, Path(pre.source))
    for name, value in (("max_passage_length", max_passage_length), ("max_query_length", max_query_length)):
        if value is not None:
            settings[name] = value
    for name in ("max_passage_length", "max_query_length"):
        settings[name] = min(int(settings[name]), pre.config.max_sequence_length)
    projection = pre.state_dict.get("projection.weight")  # a Dense module (sentence_files.read_projection) or ours
    model = ENCODER_READERS[model_type](pre.config, pooling=settings["pooling"], normalize=settings["normalize"],
                                        projection_dim=None if projection is None else projection.shape[0])
    load_into(model, pre)
    dev = torch.device(parallel.resolve_device(device))
    return Embedder(model.to(dev).eval(), tokenizer_path(pre.tokenizer), settings, dev,
                    pre.tokenizer.special_ids.get("pad", 0), batch_size)
