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
from bertmodel.eval.ranking import trec_order
from bertmodel.retrieval.embedder import load_embedder
from embed_fixtures import SQUAD, minilm_path, needs_squad

pytrec_eval = pytest.importorskip("pytrec_eval")
pytestmark = needs_squad
FAST = ["--device", "cpu", "--no-progress"]


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


ARTICLES = (0, 2, 3, 4, 8)  # 183 paragraphs: a corpus the CPU encodes in seconds


@pytest.fixture(scope="module")
def beir_dir(tmp_path_factory):
    """Five articles of the SQuAD head as BEIR: 183 passages; train, dev, test by article."""
    root = tmp_path_factory.mktemp("retrieval-beir")
    squad = json.loads(SQUAD.read_text(encoding="utf-8"))
    squad["data"] = [squad["data"][i] for i in ARTICLES]
    (root / "squad.json").write_text(json.dumps(squad))
    squad_to_beir(root / "squad.json", root / "squad", dev_fraction=0.2, test_fraction=0.2)
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
