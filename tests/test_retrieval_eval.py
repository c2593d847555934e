"""`bertmodel evaluate RUN --data BEIR_DIR` for an embed run, `bertmodel embed` and
`bertmodel search`, on the shared SQuAD head as a BEIR directory and a MiniLM embed run
(one step from all-MiniLM-L6-v2's weights): the measures are trec_eval's on the ranking
the command writes (pytrec_eval reads it back), the embeddings are the embedder's, the
search finds real questions' own paragraphs, and nothing is written over."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data.beir import read_beir
from bertmodel.data.squad_beir import squad_to_beir
from bertmodel.metrics.ranking import trec_order
from bertmodel.retrieval.embedder import load_embedder
from embed_fixtures import SQUAD, minilm_path, needs_squad, squad_articles
from finetune_fixtures import invoke

pytrec_eval = pytest.importorskip("pytrec_eval")
# One worker runs the module: its module-scoped runs (MiniLM fine-tuned) are built once.
pytestmark = [needs_squad, pytest.mark.slow, pytest.mark.xdist_group("retrieval_eval")]
FAST = ["--device", "cpu", "--no-progress"]


@pytest.fixture(scope="module")
def beir_dir(tmp_path_factory):
    """Five articles of the SQuAD head as BEIR: 183 passages; train, dev, test by article."""
    root = tmp_path_factory.mktemp("retrieval-beir")
    squad_to_beir(squad_articles(root / "squad.json"), root / "squad", dev_fraction=0.2, test_fraction=0.2)
    return root / "squad"


@pytest.fixture(scope="module")
def embed_run(beir_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("retrieval-run") / "run"
    result = invoke("finetune", "embed", "--model", minilm_path(), "--train", beir_dir, "--out", out, *FAST,
                    "--max-train-examples", "16", "--batch-size", "16", "--max-steps", "1",
                    "--max-query-length", "32", "--max-passage-length", "64", "--query-prefix", "query: ")
    assert result.exit_code == 0, result.output
    return out


def read_trec_run(path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        qid, q0, docid, rank, score, tag = line.split(" ")
        assert q0 == "Q0" and tag == "bertmodel"
        run.setdefault(qid, {})[docid] = float(score)
    return run


def test_evaluate_an_embed_run_reports_trec_eval_on_its_ranking(embed_run, beir_dir, tmp_path):
    result = invoke("evaluate", embed_run, "--data", beir_dir, "--validation-split", "test", "--out", tmp_path,
                    *FAST)
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout.strip().splitlines()[0])
    assert set(metrics) == {"ndcg@10", "mrr@10", "recall@100", "map"}
    test = read_beir(beir_dir, "test")
    run = read_trec_run(tmp_path / "run.trec")
    assert set(run) == set(test.queries) and all(len(r) == 100 for r in run.values())
    # Ranks in the file are trec_eval's order of the scores.
    lines = (tmp_path / "run.trec").read_text().splitlines()
    first = [line.split(" ") for line in lines if line.startswith(sorted(run)[0] + " ")]
    assert [d for _, _, d, *_ in first] == trec_order(run[sorted(run)[0]])
    assert [int(r) for _, _, _, r, *_ in first] == list(range(1, 101))
    # pytrec_eval (trec_eval's C code) on the file; the scores are float32 values, which
    # survive its cast to C float, so the ranking it sees is the one written. 1e-12: the
    # same integers summed in another order (tests/test_ranking.py's docstring).
    evaluator = pytrec_eval.RelevanceEvaluator(test.qrels, {"ndcg_cut.10", "recall.100", "map", "recip_rank"})
    full = evaluator.evaluate(run)
    cut = evaluator.evaluate({q: {d: s[d] for d in trec_order(s)[:10]} for q, s in run.items()})
    n = len(test.qrels)
    expected = {"ndcg@10": sum(v["ndcg_cut_10"] for v in full.values()) / n,
                "recall@100": sum(v["recall_100"] for v in full.values()) / n,
                "map": sum(v["map"] for v in full.values()) / n,
                "mrr@10": sum(v["recip_rank"] for v in cut.values()) / n}
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, abs=1e-12), name
    assert 0.5 < metrics["ndcg@10"] < 1  # MiniLM retrieves SQuAD paragraphs: a real ranking


def test_evaluate_refuses_to_write_over_an_earlier_ranking(embed_run, beir_dir, tmp_path):
    """Here on pairs (query, positive) made into a collection: 5 queries over 5 passages."""
    rows = [json.loads(line) for line in (beir_dir / "queries.jsonl").read_text().splitlines()][:5]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": r["text"], "positive": f"passage {i}: {r['text']}"}) + "\n"
                             for i, r in enumerate(rows)))
    args = ["evaluate", embed_run, "--data", pairs, "--out", tmp_path, *FAST]
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    assert "5 queries over 5 passages (pairs as a collection)" in first.stderr
    assert json.loads(first.stdout.splitlines()[0])["mrr@10"] == 1.0  # each query's own text is its passage
    before = (tmp_path / "run.trec").read_bytes()
    again = CliRunner().invoke(main, [str(a) for a in args])
    assert again.exit_code == 1
    assert again.output.strip() == (f"Error: {tmp_path / 'run.trec'}: already exists (an earlier evaluation's "
                                    "ranking); pass --overwrite to replace it, or --out DIR")
    assert (tmp_path / "run.trec").read_bytes() == before
    assert invoke(*args, "--overwrite").exit_code == 0


def test_evaluate_without_data_uses_the_runs_validation_or_says_so(embed_run):
    result = CliRunner().invoke(main, ["evaluate", str(embed_run), *FAST])
    assert result.exit_code == 1
    assert result.output.strip() == (f"Error: {embed_run}: no evaluation data; pass --data BEIR_DIR "
                                     "(or a pairs file)")


def test_embed_writes_the_embedders_vectors_with_the_files_ids(embed_run, beir_dir, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "corpus.parquet"
    result = invoke("embed", embed_run, "--file", beir_dir / "corpus.jsonl", "--out", out, *FAST)
    assert result.exit_code == 0, result.output
    assert f"{out}: 183 embeddings of dimension 384" in result.stdout
    table = pq.read_table(out)
    corpus = read_beir(beir_dir, "test").corpus
    assert table.column("id").to_pylist() == list(corpus)
    vectors = np.asarray(table.column("embedding").to_pylist(), np.float32)
    embedder = load_embedder(embed_run, device="cpu")
    texts = [(d.get("title", "") + " " + d["text"]).strip() for d in corpus.values()]
    # The same code and batches: equal to float32 rounding of the batch's padding length.
    np.testing.assert_allclose(vectors, embedder.encode_passages(texts), rtol=0, atol=1e-5)
    # --kind query: the query prefix and length (a different vector for the same text).
    rows = [json.loads(line) for line in (beir_dir / "queries.jsonl").read_text().splitlines()][:8]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    queries = tmp_path / "queries.parquet"
    assert invoke("embed", embed_run, "--file", tmp_path / "queries.jsonl", "--out", queries, "--kind", "query",
                  *FAST).exit_code == 0
    assert pq.read_table(queries).column("id").to_pylist() == [r["_id"] for r in rows]
    got = np.asarray(pq.read_table(queries).column("embedding").to_pylist(), np.float32)
    np.testing.assert_allclose(got, embedder.encode_queries([r["text"] for r in rows[:8]]), rtol=0, atol=1e-5)
    assert not np.allclose(got, embedder.encode_passages([r["text"] for r in rows[:8]]), atol=1e-3)


def test_embed_never_writes_over_a_file_or_its_input(embed_run, beir_dir, tmp_path):
    out = tmp_path / "x.parquet"
    out.write_text("mine")
    result = CliRunner().invoke(main, ["embed", str(embed_run), "--file", str(beir_dir / "corpus.jsonl"), "--out",
                                       str(out), *FAST])
    assert result.exit_code == 1 and result.output.strip() == (f"Error: {out}: already exists; pass --overwrite "
                                                               "to replace it")
    assert out.read_text() == "mine"
    source = tmp_path / "texts.jsonl"
    source.write_text(json.dumps({"text": "a"}) + "\n")
    result = CliRunner().invoke(main, ["embed", str(embed_run), "--file", str(source), "--out", str(source),
                                       "--overwrite", *FAST])
    assert result.exit_code == 1 and result.output.strip() == (f"Error: {source}: is the input; write the "
                                                               "embeddings elsewhere")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"body": "a"}) + "\n")
    result = CliRunner().invoke(main, ["embed", str(embed_run), "--file", str(bad), "--out", str(tmp_path / "b.pq"),
                                       *FAST])
    assert result.exit_code == 1 and result.output.startswith(f"Error: {bad}: no text column")
    assert not (tmp_path / "b.pq").exists()


def test_search_finds_real_questions_own_paragraphs(embed_run, beir_dir):
    dev = read_beir(beir_dir, "dev")
    qids = list(dev.queries)[:12]
    args = ["search", embed_run, "--corpus", beir_dir, "--top-k", "3", *FAST]
    for qid in qids:
        args += ["--query", dev.queries[qid]]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(hits) == 3 * len(qids)
    assert all(h["rank"] == i % 3 + 1 for i, h in enumerate(hits))
    assert all(a["score"] >= b["score"] for a, b in zip(hits[::3], hits[1::3]))
    found = sum(hits[3 * i]["id"] in dev.qrels[q] for i, q in enumerate(qids))
    assert found >= len(qids) // 2, found  # MiniLM's MRR@10 here is ~0.8


def test_search_a_file_corpus_uses_its_ids(embed_run, tmp_path):
    corpus = tmp_path / "notes.csv"
    corpus.write_text("id,text\nn1,The Eiffel tower is in Paris.\nn2,Bananas are yellow fruit.\n"
                      "n3,A cat sleeps on the sofa.\n")
    result = invoke("search", embed_run, "--corpus", corpus, "--query", "Which fruit is yellow?", "--top-k", "1",
                    *FAST)
    assert result.exit_code == 0, result.output
    [hit] = [json.loads(line) for line in result.stdout.splitlines()]
    assert hit["id"] == "n2" and hit["text"] == "Bananas are yellow fruit." and hit["rank"] == 1


# --- a rerank run on a collection: a first stage's top k rescored ---------------------------

@pytest.fixture(scope="module")
def rerank_run(beir_dir, tmp_path_factory):
    """MiniLM as a cross-encoder, two steps on labelled pairs of the train articles (each
    question's paragraph 1, two other paragraphs of its article 0)."""
    from bertmodel.data.beir import passage_text

    root = tmp_path_factory.mktemp("rerank-run")
    train = read_beir(beir_dir, "train")
    rows = []
    for qid in list(train.qrels)[:24]:
        [positive] = train.qrels[qid]
        article = positive.rsplit("-", 1)[0]
        others = [d for d in train.corpus if d.startswith(article + "-") and d != positive][:2]
        rows.append({"query": train.queries[qid], "passage": passage_text(train.corpus[positive]), "label": 1})
        rows += [{"query": train.queries[qid], "passage": passage_text(train.corpus[d]), "label": 0} for d in others]
    (root / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = root / "run"
    result = invoke("finetune", "rerank", "--model", minilm_path(), "--train", root / "pairs.jsonl", "--out", out,
                    *FAST, "--batch-size", "24", "--max-steps", "2", "--max-seq-length", "96")
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def small_test_split(beir_dir, tmp_path_factory):
    """The collection with its test qrels cut to 30 queries (the reranker reads 30 x k pairs)."""
    import shutil

    out = tmp_path_factory.mktemp("small-split") / "beir"
    shutil.copytree(beir_dir, out)
    lines = (out / "qrels" / "test.tsv").read_text().splitlines()
    (out / "qrels" / "test.tsv").write_text("\n".join(lines[:31]) + "\n")
    return out


def test_evaluate_a_rerank_run_rescores_bm25s_top_k(rerank_run, small_test_split, tmp_path):
    from bertmodel.retrieval.bm25 import bm25_run
    from bertmodel.metrics.ranking import ranking_metrics

    result = invoke("evaluate", rerank_run, "--data", small_test_split, "--validation-split", "test", "--top-k", "5",
                    "--out", tmp_path, *FAST)
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout.splitlines()[0])
    test = read_beir(small_test_split, "test")
    assert len(test.queries) == 30
    first = bm25_run(test, k=5)
    # The first stage's own measures, beside the reranked ones (recall over its 5 candidates).
    assert {f"first_stage_{k}": v for k, v in ranking_metrics(first, test.qrels, candidates=5).items()} == {
        k: v for k, v in metrics.items() if k.startswith("first_stage_")}
    run = read_trec_run(tmp_path / "run.trec")
    assert all(set(run[q]) == set(first[q]) for q in test.queries)  # only BM25's candidates, all of them
    # The reranked order is the cross-encoder's: scores equal CrossEncoder(RUN/hf)'s.
    from sentence_transformers.cross_encoder import CrossEncoder

    qid = next(iter(test.queries))
    docs = list(run[qid])
    passages = [(test.corpus[d].get("title", "") + " " + test.corpus[d]["text"]).strip() for d in docs]
    theirs = CrossEncoder(str(rerank_run / "hf"), device="cpu", max_length=96).predict(
        [(test.queries[qid], p) for p in passages])
    # float32 on both sides, the same tokens: their kernels' rounding (1e-4 of a logit ~1).
    np.testing.assert_allclose([run[qid][d] for d in docs], theirs, rtol=0, atol=1e-4)
    evaluator = pytrec_eval.RelevanceEvaluator(test.qrels, {"ndcg_cut.10"})
    expected = sum(v["ndcg_cut_10"] for v in evaluator.evaluate(run).values()) / len(test.qrels)
    assert metrics["ndcg@10"] == pytest.approx(expected, abs=1e-12)


def test_evaluate_a_rerank_run_over_an_embed_runs_candidates(rerank_run, embed_run, small_test_split, tmp_path):
    from bertmodel.inference.rank import embed_retrieval

    result = invoke("evaluate", rerank_run, "--data", small_test_split, "--validation-split", "test", "--top-k", "3",
                    "--first-stage", embed_run, "--out", tmp_path, *FAST)
    assert result.exit_code == 0, result.output
    assert f"first stage: {embed_run} (exact search) top 3" in result.stderr
    test = read_beir(small_test_split, "test")
    dense = embed_retrieval(embed_run, test, k=3).run
    run = read_trec_run(tmp_path / "run.trec")
    assert all(set(run[q]) == set(dense[q]) for q in test.queries)


def test_evaluate_a_rerank_run_on_labelled_pairs(rerank_run, beir_dir, tmp_path):
    """Labelled pairs (no collection): the task's own pair metrics and a line per pair."""
    dev = read_beir(beir_dir, "dev")
    rows = []
    for qid in list(dev.qrels)[:6]:
        [positive] = dev.qrels[qid]
        negative = next(d for d in dev.corpus if d != positive)
        for docid, label in ((positive, 1), (negative, 0)):
            rows.append({"query": dev.queries[qid], "passage": dev.corpus[docid]["text"], "label": label})
    pairs = tmp_path / "dev.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = invoke("evaluate", rerank_run, "--data", pairs, "--out", tmp_path, *FAST)
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout.splitlines()[0])
    assert {"ndcg@10", "mrr@10", "accuracy", "auc", "loss"} <= set(metrics)
    predictions = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [(p["query"], p["gold"]) for p in predictions] == [(r["query"], r["label"]) for r in rows]


def test_search_with_a_rerank_run(rerank_run, tmp_path):
    corpus = tmp_path / "notes.jsonl"
    texts = ["The Eiffel tower is in Paris.", "Bananas are a yellow fruit.", "A cat sleeps on the sofa."]
    corpus.write_text("".join(json.dumps({"id": f"n{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    result = invoke("search", rerank_run, "--corpus", corpus, "--query", "Where is the Eiffel tower?", "--top-k",
                    "3", *FAST)
    assert result.exit_code == 0, result.output
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    # BM25 finds only passages sharing a word; the reranker orders what it found.
    assert hits and hits[0]["id"] == "n0" and all(a["score"] >= b["score"] for a, b in zip(hits, hits[1:]))


def test_predict_on_an_embed_run_points_to_embed_and_search(embed_run):
    result = CliRunner().invoke(main, ["predict", str(embed_run), "a text", *FAST])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {embed_run}") and "bertmodel embed" in lines[0]


@pytest.fixture(scope="module")
def deep_split(tmp_path_factory):
    """The whole SQuAD head as BEIR (583 paragraphs), its test qrels cut to 30 questions
    (the 271st to 300th, where BM25's top 20 misses some questions' paragraphs: on the
    five articles it misses none)."""
    out = tmp_path_factory.mktemp("deep-split") / "beir"
    squad_to_beir(SQUAD, out)
    header, *lines = (out / "qrels" / "test.tsv").read_text().splitlines()
    (out / "qrels" / "test.tsv").write_text("\n".join([header, *lines[270:300]]) + "\n")
    return out


def recall_by_count(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> float:
    """Each judged query's relevant passages found anywhere in its run, over its relevant
    ones, averaged over the judged queries: recall at the run's whole depth."""
    return sum(sum(1 for d in run.get(q, {}) if judged.get(d, 0) >= 1) / sum(1 for r in judged.values() if r >= 1)
               for q, judged in qrels.items()) / len(qrels)


def test_a_rerank_run_validated_on_a_collection(rerank_run, deep_split, tmp_path):
    """--validation BEIR_DIR: BM25's top --top-k reranked at each evaluation, trec_eval's
    measures logged and the best by nDCG@10; `evaluate RUN` repeats the last one. With
    --top-k 20 recall is counted over the 20 candidates there are, and named so."""
    pairs = rerank_run.parent / "pairs.jsonl"
    out = tmp_path / "run"
    args = ["finetune", "rerank", "--model", minilm_path(), "--train", pairs, "--validation", deep_split,
            "--validation-split", "test", "--top-k", "20", *FAST, "--batch-size", "24", "--max-steps", "2",
            "--eval-every", "2", "--max-seq-length", "96"]
    refused = invoke(*args, "--out", tmp_path / "refused", "--metric-for-best", "recall@100")
    assert refused.exit_code == 1
    assert ("Error: --metric-for-best recall@100: not a metric this task reports; choose one of ndcg@10, mrr@10, "
            "recall@20, map") in refused.output.splitlines()
    result = invoke(*args, "--out", out)
    assert result.exit_code == 0, result.output
    assert "validation: 30 queries over 583 passages" in result.output and "BM25's top 20 reranked (600 pairs)" \
        in result.output
    [last] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "eval_map" in line]
    assert {"eval_ndcg@10", "eval_mrr@10", "eval_recall@20", "eval_map"} <= set(last)
    assert not any(k.startswith("eval_recall@") and k != "eval_recall@20" for k in last)
    assert json.loads((out / "best.json").read_text())["metric"] == "ndcg@10"
    again = invoke("evaluate", out, *FAST)
    assert again.exit_code == 0, again.output
    metrics = json.loads(again.stdout.splitlines()[0])
    assert set(metrics) == {"ndcg@10", "mrr@10", "recall@20", "map", "first_stage_ndcg@10", "first_stage_mrr@10",
                            "first_stage_recall@20", "first_stage_map"}
    for name in ("ndcg@10", "mrr@10", "recall@20", "map"):
        # the same model, pairs and batches: the same float32 scores, so the same ranking
        assert metrics[name] == pytest.approx(last[f"eval_{name}"], abs=1e-9), name
    run = read_trec_run(out / "run.trec")
    assert len(run) == 30 and all(len(r) == 20 for r in run.values())
    # The reranker reorders BM25's 20: both hold the same passages, so one count is both recalls.
    test = read_beir(deep_split, "test")
    assert metrics["recall@20"] == metrics["first_stage_recall@20"] == pytest.approx(
        recall_by_count(run, test.qrels), abs=1e-12)
    assert 0 < metrics["recall@20"] < 1  # some questions' paragraphs are past BM25's top 20, most within
