"""Exact dense search and retrieval evaluation on a BEIR collection.

`exact_search` scores every query against every passage by matrix products, one passage
chunk at a time, and keeps a running top-k per query, so memory is bounded by
query block x (chunk + k), never by the corpus: a million passages are encoded and scored
chunk by chunk and never held as a matrix.

Why the result does not depend on the chunk size (and is the same on any CPU):
- Each chunk's scores are computed in float64 from the float32 embeddings (a float32
  product is exact in float64) and rounded to float32. A BLAS may sum a dot product in
  an order that depends on the matrix's shape, but in float64 such differences are
  ~d x 2^-53 relative, a billionth of a float32 step, so after rounding every chunking
  gives the same float32 score except in the rare case the exact value lies that close
  to a float32 rounding boundary.
- Ties are broken as trec_eval orders them, by passage id descending (metrics/ranking.py),
  through one integer key per (score, passage): the score's order-preserving 32 bits
  above the passage's rank among the sorted ids. Keys are distinct, so the top k is a
  unique set and `argpartition` cannot pick among equals arbitrarily.

`retrieval_eval` encodes a collection's queries and passages (title + " " + text, as BEIR
and sentence-transformers do) with the callables given, searches and scores the ranking
with trec_eval's measures; `rerank_eval` rescores a first stage's top k with a
cross-encoder's `score_pairs`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from bertmodel.data.beir import BeirData, passage_text
from bertmodel.errors import BertmodelError
from bertmodel.metrics.ranking import ranking_metrics, trec_order

DEFAULT_CHUNK_SIZE = 16_384  # passages encoded and scored at a time
QUERY_BLOCK = 1_024  # queries scored at a time: 1,024 x 16,384 x (8 + 4 + 8 + 8) bytes = 470 MB at most
Encoder = Callable[[list[str]], np.ndarray]


@dataclass
class SearchResult:
    indices: np.ndarray  # (Q, k) int64, passage positions, best first
    scores: np.ndarray   # (Q, k) float32

    def run(self, query_ids: Sequence[str], passage_ids: Sequence[str]) -> dict[str, dict[str, float]]:
        """{query id: {passage id: score}}, the form ranking_metrics takes."""
        return {qid: {passage_ids[j]: float(s) for j, s in zip(row, scores)}
                for qid, row, scores in zip(query_ids, self.indices.tolist(), self.scores)}


def tie_ranks(passage_ids: Sequence[str]) -> np.ndarray:
    """Each passage's position among the ids sorted ascending (uint64): the larger id wins
    a tie, as in trec_eval's ranking."""
    order = sorted(range(len(passage_ids)), key=passage_ids.__getitem__)
    ranks = np.empty(len(passage_ids), dtype=np.uint64)
    ranks[np.asarray(order, dtype=np.int64)] = np.arange(len(passage_ids), dtype=np.uint64)
    return ranks


def score_keys(scores: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """uint64 keys whose order is (score, then rank): the float32 score's bits mapped to
    an order-preserving unsigned integer (negatives flipped, positives with the sign bit
    set), shifted above the passage's rank."""
    scores = np.ascontiguousarray(scores, dtype=np.float32) + np.float32(0.0)  # -0.0 -> 0.0: trec_eval's ties
    bits = scores.view(np.uint32)
    ordered = np.where(bits >> 31 == 1, ~bits, bits | np.uint32(0x80000000)).astype(np.uint64)
    return (ordered << np.uint64(32)) | ranks


def _top(keys: np.ndarray, positions: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest keys of each row, largest first, with their passage positions."""
    if keys.shape[1] > k:
        part = np.argpartition(keys, keys.shape[1] - k, axis=1)[:, -k:]
        keys = np.take_along_axis(keys, part, axis=1)
        positions = np.take_along_axis(positions, part, axis=1)
    order = np.argsort(keys, axis=1)[:, ::-1]
    return np.take_along_axis(keys, order, axis=1), np.take_along_axis(positions, order, axis=1)


def _keys_to_scores(keys: np.ndarray) -> np.ndarray:
    ordered = (keys >> np.uint64(32)).astype(np.uint32)
    bits = np.where(ordered >> 31 == 1, ordered & np.uint32(0x7FFFFFFF), ~ordered)
    return bits.view(np.float32)


def exact_search(query_vectors: np.ndarray, passage_chunks: Iterable[np.ndarray], ranks: np.ndarray,
                 k: int = 100, on_chunk: Callable[[int], None] | None = None) -> SearchResult:
    """The k passages of highest inner product for each query (cosine for normalised
    vectors), exactly. `passage_chunks` yields (n_i, d) arrays in corpus order (an
    encoder's output, one chunk at a time); `ranks` are the passages' tie ranks
    (tie_ranks); `on_chunk(n)` hears each chunk's size. Fewer than k passages: all."""
    queries = np.asarray(query_vectors, dtype=np.float64)
    if queries.ndim != 2:
        raise ValueError(f"query vectors must be (queries, dim), got shape {queries.shape}")
    best_keys = np.zeros((len(queries), 0), dtype=np.uint64)
    best_positions = np.zeros((len(queries), 0), dtype=np.int64)
    start = 0
    for chunk in passage_chunks:
        chunk = np.asarray(chunk)
        if chunk.ndim != 2 or chunk.shape[1] != queries.shape[1]:
            raise ValueError(f"passage vectors must be (n, {queries.shape[1]}), got shape {chunk.shape}")
        passages = chunk.astype(np.float64).T  # (d, n)
        chunk_ranks = ranks[start:start + len(chunk)][None, :]
        merged_keys, merged_positions = [], []
        for begin in range(0, len(queries) if len(chunk) else 0, QUERY_BLOCK):
            scores = (queries[begin:begin + QUERY_BLOCK] @ passages).astype(np.float32)  # (q, n)
            if np.isnan(scores).any():
                raise BertmodelError("a passage or query embedding holds NaN: its scores cannot be ranked")
            keys = score_keys(scores, chunk_ranks)
            positions = np.broadcast_to(np.arange(start, start + len(chunk), dtype=np.int64), keys.shape)
            top = _top(np.concatenate([best_keys[begin:begin + QUERY_BLOCK], keys], axis=1),
                       np.concatenate([best_positions[begin:begin + QUERY_BLOCK], positions], axis=1), k)
            merged_keys.append(top[0])
            merged_positions.append(top[1])
        if merged_keys:
            best_keys, best_positions = np.concatenate(merged_keys), np.concatenate(merged_positions)
        start += len(chunk)
        if on_chunk is not None:
            on_chunk(len(chunk))
    if start != len(ranks):
        raise ValueError(f"{start} passage vectors for {len(ranks)} passages")
    return SearchResult(best_positions, _keys_to_scores(best_keys))


def encoded_chunks(encode: Encoder, texts: Sequence[str], chunk_size: int) -> Iterable[np.ndarray]:
    """encode(texts[i:i + chunk_size]) for each chunk, checked to be one row per text."""
    for begin in range(0, len(texts), chunk_size):
        part = list(texts[begin:begin + chunk_size])
        vectors = np.asarray(encode(part))
        if vectors.ndim != 2 or len(vectors) != len(part):
            raise ValueError(f"the encoder gave shape {vectors.shape} for {len(part)} texts")
        yield vectors


def dense_run(beir: BeirData, encode_queries: Encoder, encode_passages: Encoder, k: int = 100,
              chunk_size: int = DEFAULT_CHUNK_SIZE, on_batch: Callable[[int], None] | None = None
              ) -> dict[str, dict[str, float]]:
    """The top-k run of a bi-encoder on a collection: {query id: {passage id: score}}."""
    passage_ids = list(beir.corpus)
    query_ids = list(beir.queries)
    queries = np.asarray(encode_queries([beir.queries[q] for q in query_ids]))
    texts = [passage_text(beir.corpus[i]) for i in passage_ids]
    result = exact_search(queries, encoded_chunks(encode_passages, texts, chunk_size), tie_ranks(passage_ids),
                          k=k, on_chunk=on_batch)
    return result.run(query_ids, passage_ids)


def retrieval_eval(beir: BeirData, encode_queries: Encoder, encode_passages: Encoder, k: int = 100,
                   chunk_size: int = DEFAULT_CHUNK_SIZE, on_batch: Callable[[int], None] | None = None
                   ) -> dict[str, float]:
    """nDCG@10, MRR@10, recall at min(100, k) and MAP (trec_eval's) of exact search with the
    encoders (callables: texts -> (n, d) normalised float32) over the collection, the
    passages encoded `chunk_size` at a time (`on_batch(n)` after each)."""
    return ranking_metrics(dense_run(beir, encode_queries, encode_passages, k, chunk_size, on_batch), beir.qrels,
                           candidates=k)


def rerank_run(beir: BeirData, first_stage: dict[str, dict[str, float]],
               score_pairs: Callable[[list[tuple[str, str]]], np.ndarray], top_k: int = 100,
               batch_size: int = 1024, on_batch: Callable[[int], None] | None = None) -> dict[str, dict[str, float]]:
    """Each query's top_k passages of `first_stage` (trec_eval's order) rescored by
    `score_pairs([(query, passage text), ...])`; passages below top_k are dropped (as
    BEIR's reranking does). Pairs go to the scorer `batch_size` at a time."""
    pairs: list[tuple[str, str]] = []  # (query id, passage id) in scoring order
    for qid in beir.queries:
        for docid in trec_order(first_stage.get(qid, {}))[:top_k]:
            pairs.append((qid, docid))
    run: dict[str, dict[str, float]] = {qid: {} for qid in beir.queries}
    for begin in range(0, len(pairs), batch_size):
        part = pairs[begin:begin + batch_size]
        scores = np.asarray(score_pairs([(beir.queries[q], passage_text(beir.corpus[d])) for q, d in part]),
                            dtype=np.float64).reshape(-1)
        if len(scores) != len(part):
            raise ValueError(f"the scorer gave {len(scores)} scores for {len(part)} pairs")
        for (qid, docid), score in zip(part, scores.tolist()):
            run[qid][docid] = score
        if on_batch is not None:
            on_batch(len(part))
    return run


def rerank_eval(beir: BeirData, first_stage_run: dict[str, dict[str, float]],
                score_pairs: Callable[[list[tuple[str, str]]], np.ndarray], top_k: int = 100,
                batch_size: int = 1024, on_batch: Callable[[int], None] | None = None) -> dict[str, float]:
    """trec_eval's measures of the first stage's top_k reranked by `score_pairs`."""
    return ranking_metrics(rerank_run(beir, first_stage_run, score_pairs, top_k, batch_size, on_batch), beir.qrels,
                           candidates=top_k)
