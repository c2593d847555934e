"""squad-to-beir (the CLI) and the BM25 first stage (retrieval/bm25.py) on the shared SQuAD head,
BM25 checked against bm25s used directly."""
import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data.beir import read_beir
from shared_data import SHARED_DATA

SQUAD = SHARED_DATA / "squad" / "squad-v1.1-train-head.json"
pytestmark = pytest.mark.skipif(not SQUAD.exists(), reason=f"shared SQuAD head absent: {SQUAD}")


@pytest.fixture(scope="module")
def beir_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("beir") / "squad"
    result = CliRunner().invoke(main, ["squad-to-beir", str(SQUAD), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "passages" in result.output
    return out


def test_squad_to_beir_cli_writes_a_readable_dir(beir_dir):
    test = read_beir(beir_dir, "test")
    assert test.queries and test.corpus
    assert all(d in test.corpus for judged in test.qrels.values() for d in judged)


def test_squad_to_beir_refuses_to_overwrite(beir_dir):
    result = CliRunner().invoke(main, ["squad-to-beir", str(SQUAD), "--out", str(beir_dir)])
    assert result.exit_code != 0
    assert len(result.output.strip().splitlines()) == 1 and str(beir_dir.name) in result.output


def test_bm25_run_equals_bm25s(beir_dir):
    import bm25s

    from bertmodel.retrieval.bm25 import bm25_run
    from bertmodel.metrics.ranking import ranking_metrics
    data = read_beir(beir_dir, "test")
    run = bm25_run(data, k=10)
    ids = list(data.corpus)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(data.passage_texts(ids), stopwords="en", show_progress=False), show_progress=False)
    qids = list(data.queries)[:50]
    docs, scores = retriever.retrieve(bm25s.tokenize([data.queries[q] for q in qids], stopwords="en",
                                                     show_progress=False), k=10, show_progress=False)
    for qid, row, row_scores in zip(qids, docs.tolist(), scores.tolist()):
        assert run[qid] == pytest.approx({ids[d]: s for d, s in zip(row, row_scores)}, rel=1e-6)
    # BM25 on SQuAD questions (written against their paragraph, so lexically close) is strong.
    assert ranking_metrics(run, data.qrels)["ndcg@10"] > 0.5
