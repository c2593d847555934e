"""An embed or rerank run ranks a collection: scored against its judgements (what
`bertmodel evaluate RUN --data BEIR_DIR` and the eval suite's retrieval and reranking
tasks run), or answering a few queries (`bertmodel search`).

An embed run encodes the queries and the whole corpus (in batches, longest texts first)
and searches exactly (retrieval/search.py: chunked matrix products, the top k merged, so
memory is bounded by the chunk, not the corpus). A rerank run rescores each query's top k of a
first stage: BM25 (bm25s) or an embed run's exact search; the first stage's own measures
are reported beside (`first_stage_*`), so the reranker's gain is in the same output. The
measures are trec_eval's nDCG@10, MRR@10, Recall@100 and MAP, averaged over the split's
judged queries (metrics/ranking.py); a reranker's recall is counted and named at its
candidates' depth where that is under 100 (--top-k 20: recall@20, first_stage_recall@20).

The ranking goes to RUN/run.trec (or --out DIR), in TREC's run format (`query Q0 passage
rank score tag`), written whole or not at all; an earlier one is replaced only with
overwrite."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from bertmodel.data.beir import BeirData, beir_split, is_beir_dir, passage_text, read_beir
from bertmodel.errors import BertmodelError
from bertmodel.metrics.ranking import ranking_metrics, trec_order
from bertmodel.hf import TASK_FILE, model_dir
from bertmodel.retrieval.search import dense_run, rerank_run
from bertmodel.retrieval.texts import read_corpus

RUN_FILE = "run.trec"
RETRIEVAL_TASKS = ("embed", "rerank")


def task_file(model) -> dict:
    """A run's exported task file (bertmodel_task.json), or {} where it has none."""
    try:
        return json.loads((model_dir(model) / TASK_FILE).read_text())
    except (OSError, ValueError):
        return {}


def retrieval_kind(model) -> str | None:
    """"embed" or "rerank" for such a run (by its exported task file), else None."""
    name = task_file(model).get("name")
    return name if name in RETRIEVAL_TASKS else None


def run_validation(model) -> str | None:
    """The validation data a run was trained with (its exported task file's options)."""
    return (task_file(model).get("options") or {}).get("validation")


def read_collection(data, split: str | None = None) -> BeirData:
    """A BEIR directory's split (default dev, else test), a SQuAD file's by-article split
    when one is named (squad-to-beir's), or (query, positive[, negatives]) pairs made
    into a collection (data/pairs.py's pairs_collection; a SQuAD file's every question)."""
    from bertmodel.data.pairs import is_squad_file, pairs_collection, read_pairs
    from bertmodel.data.squad_beir import read_squad_beir

    if is_beir_dir(data):
        return read_beir(data, beir_split(data, split))
    if is_squad_file(Path(data)) and split not in (None, "validation"):  # one split of its by-article split
        return read_squad_beir(data, split)
    return pairs_collection(read_pairs(data, split=split))


@dataclass
class RetrievalResult:
    metrics: dict[str, float]
    run: dict[str, dict[str, float]]
    queries: int
    passages: int


def embed_retrieval(model, beir: BeirData, device: str = "cpu", batch_size: int = 64, k: int = 100,
                    log=None, judged: bool = True, max_length: int | None = None) -> RetrievalResult:
    """Exact search with an embed run (or any encoder load_embedder reads) over the
    collection, queries and passages cut at `max_length` tokens where given (else the
    model's own lengths); its measures unless not `judged` (a search without qrels)."""
    from bertmodel.retrieval.embedder import load_embedder

    embedder = load_embedder(model, device=device, batch_size=batch_size, max_passage_length=max_length,
                             max_query_length=max_length)
    if log:
        s = embedder.settings
        log(f"encoding {len(beir.queries):,} queries and {len(beir.corpus):,} passages with {model} ({s['pooling']} "
            f"pooling, {s['similarity']}, queries cut at {s['max_query_length']} tokens, passages at "
            f"{s['max_passage_length']})")
    run = dense_run(beir, embedder.search_encoder("query"), embedder.search_encoder("passage"), k=k)
    return RetrievalResult(ranking_metrics(run, beir.qrels, candidates=k) if judged else {}, run, len(beir.queries),
                           len(beir.corpus))


def first_stage_run(beir: BeirData, first_stage: str, top_k: int, device: str, batch_size: int,
                    log=None) -> dict[str, dict[str, float]]:
    """The candidates a reranker rescores: BM25's top k, or an embed run's."""
    if first_stage == "bm25":
        from bertmodel.retrieval.bm25 import bm25_run

        if log:
            log(f"first stage: BM25 (bm25s) top {top_k} of {len(beir.corpus):,} passages")
        return bm25_run(beir, k=top_k)
    if not Path(first_stage).exists():
        raise BertmodelError(f"{first_stage}: no such first stage (bm25, or an embed run's directory)")
    if log:
        log(f"first stage: {first_stage} (exact search) top {top_k} of {len(beir.corpus):,} passages")
    return embed_retrieval(first_stage, beir, device, batch_size, k=top_k, judged=False).run


def rerank_retrieval(model, beir: BeirData, first_stage: str = "bm25", top_k: int = 100, device: str = "cpu",
                     batch_size: int = 64, log=None, judged: bool = True,
                     max_length: int | None = None) -> RetrievalResult:
    """The first stage's top k of each query rescored by a rerank run (its pairs cut at
    `max_length` where given, else at the run's length); its own measures come back as
    first_stage_* (no measures unless `judged`)."""
    from bertmodel.inference.predict import load_task_model

    task, net, d = load_task_model(model, {"max_seq_length": max_length}, device, read_validation=False)
    if task.name != "rerank":
        raise BertmodelError(f"{model}: a {task.name} run, not a reranker")
    candidates = first_stage_run(beir, first_stage, top_k, device, batch_size, log)

    def score(pairs):
        return task.score(net, [q for q, _ in pairs], [p for _, p in pairs], batch_size)

    if log:
        log(f"reranking {sum(min(len(c), top_k) for c in candidates.values()):,} (query, passage) pairs")
    run = rerank_run(beir, candidates, score, top_k=top_k, batch_size=max(batch_size * 16, 1024))
    metrics = {}
    if judged:
        # Recall at top_k where that is under 100: the candidates are all either run holds.
        metrics = ranking_metrics(run, beir.qrels, candidates=top_k)
        metrics.update({f"first_stage_{k}": v
                        for k, v in ranking_metrics(candidates, beir.qrels, candidates=top_k).items()})
    return RetrievalResult(metrics, run, len(beir.queries), len(beir.corpus))


def check_run_file(out_dir, overwrite: bool) -> Path:
    path = Path(out_dir) / RUN_FILE
    if path.exists() and not overwrite:
        raise BertmodelError(f"{path}: already exists (an earlier evaluation's ranking); pass --overwrite to "
                             "replace it, or --out DIR")
    return path


def write_trec_run(path: Path, run: dict[str, dict[str, float]], tag: str = "bertmodel") -> Path:
    """TREC's run format, each query's passages in trec_eval's order (score, then id);
    passage ids hold no whitespace in a run file, so such an id is refused."""
    spaced = next((i for qid, scores in run.items() for i in (qid, *scores) if any(c.isspace() for c in i)), None)
    if spaced is not None:
        raise BertmodelError(f"{path}: id {spaced!r} holds whitespace, which TREC's run format cannot carry")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as f:
        for qid in sorted(run):
            scores = run[qid]
            for rank, docid in enumerate(trec_order(scores), 1):
                # repr: the shortest text that reads back as the same double (no new ties)
                f.write(f"{qid} Q0 {docid} {rank} {float(scores[docid])!r} {tag}\n")
    tmp.replace(path)
    return path


def evaluate_retrieval(model, data, split: str | None = None, first_stage: str = "bm25", top_k: int | None = None,
                       out_dir=None, device: str = "cpu", batch_size: int = 64, overwrite: bool = False,
                       log=None, max_length: int | None = None) -> tuple[dict, list[Path]]:
    """(metrics, [the run file]) of an embed or rerank run on `data` (a BEIR directory or
    pairs; None: the run's validation data), or of any other encoder read as an embedder
    (a starting model's baseline: a pre-training run, a transformers or sentence-transformers
    directory; load_embedder refuses what is none); a reranker's `top_k` defaults to the
    run's own; the earlier run file is refused before any work unless `overwrite`."""
    from bertmodel.retrieval.embedder import check_embeds

    saved = task_file(model)
    kind = saved.get("name") if saved.get("name") in RETRIEVAL_TASKS else "embed"
    if kind == "embed":
        check_embeds(model, saved, saved.get("architecture"))  # before any data is read
    path = check_run_file(Path(out_dir) if out_dir else Path(model), overwrite)
    options = saved.get("options") or {}
    top_k = top_k or options.get("rerank_top_k") or 100
    if data is None:  # the run's own validation data
        data, split = options.get("validation"), split or options.get("validation_split")
        if not data:
            raise BertmodelError(f"{model}: no evaluation data; pass --data BEIR_DIR (or a pairs file)")
    beir = read_collection(data, split)
    if log:
        log(f"{data}: {len(beir.queries):,} queries over {len(beir.corpus):,} passages"
            + (f" (split {beir.split})" if is_beir_dir(data) else " (pairs as a collection)"))
    if kind == "embed":
        result = embed_retrieval(model, beir, device, batch_size, k=max(top_k, 100), log=log, max_length=max_length)
    else:
        result = rerank_retrieval(model, beir, first_stage, top_k, device, batch_size, log=log,
                                  max_length=max_length)
    check_run_file(path.parent, overwrite)  # again: nothing arrived there while it ran
    return result.metrics, [write_trec_run(path, result.run)]


def search(model, corpus, queries: list[str], top_k: int = 10, column: str | None = None, device: str = "cpu",
           batch_size: int = 64, candidates: int = 100) -> list[dict]:
    """Each query's top_k passages of `corpus`: [{query, rank, id, score, text}, ...], best
    first. An embed run: exact search; a rerank run: BM25's top `candidates`, rescored."""
    if not queries:
        raise BertmodelError("give at least one --query")
    collection = read_corpus(corpus, column)
    beir = BeirData(collection.corpus, {f"q{i}": q for i, q in enumerate(queries)}, {}, "search", collection.source)
    kind = retrieval_kind(model) or "embed"  # a sentence-transformers or transformers dir embeds
    if kind == "embed":
        run = embed_retrieval(model, beir, device, batch_size, k=top_k, judged=False).run
    else:
        run = rerank_retrieval(model, beir, "bm25", max(candidates, top_k), device, batch_size, judged=False).run
    hits = []
    for qid, query in beir.queries.items():
        for rank, docid in enumerate(trec_order(run.get(qid, {}))[:top_k], 1):
            hits.append({"query": query, "rank": rank, "id": docid, "score": run[qid][docid],
                         "text": passage_text(beir.corpus[docid])})
    return hits
