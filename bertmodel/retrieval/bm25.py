"""BM25 first stage over a BEIR collection, by bm25s (the `retrieval` extra).

bm25s with its defaults (Lucene's BM25 variant, k1=1.5, b=0.75) over bm25s.tokenize with
English stopwords, on the same passage text the dense encoders see (title + " " + text).
The index is bm25s's sparse score matrix, so memory grows with the corpus' tokens, not
with queries x passages; queries are retrieved `query_batch` at a time.
"""
from __future__ import annotations

from bertmodel.data.beir import BeirData
from bertmodel.errors import BertmodelError


def _bm25s():
    try:
        import bm25s
    except ImportError:  # the one optional dependency of this module
        raise BertmodelError("BM25 needs bm25s: pip install 'bertmodel[retrieval]'") from None
    return bm25s


def bm25_run(beir: BeirData, k: int = 100, stopwords: str = "en",
             query_batch: int = 1024) -> dict[str, dict[str, float]]:
    """query id -> {passage id: BM25 score} for each query's top k passages."""
    bm25s = _bm25s()
    passage_ids = list(beir.corpus)
    if not passage_ids:
        raise BertmodelError(f"{beir.source or 'corpus'}: the corpus is empty")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(beir.passage_texts(passage_ids), stopwords=stopwords, show_progress=False),
                    show_progress=False)
    k = min(k, len(passage_ids))
    query_ids = list(beir.queries)
    run: dict[str, dict[str, float]] = {}
    for begin in range(0, len(query_ids), query_batch):
        part = query_ids[begin:begin + query_batch]
        tokens = bm25s.tokenize([beir.queries[q] for q in part], stopwords=stopwords, show_progress=False)
        docs, scores = retriever.retrieve(tokens, k=k, show_progress=False)
        for qid, row, row_scores in zip(part, docs.tolist(), scores.tolist()):
            run[qid] = {passage_ids[d]: float(s) for d, s in zip(row, row_scores)}
    return run
