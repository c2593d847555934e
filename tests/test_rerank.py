"""`bertmodel finetune rerank` end to end on real SQuAD pairs (a question's paragraph its
positive, other paragraphs of its article hard negatives): a few steps from
all-MiniLM-L6-v2 with --loss bce (labelled pairs) and --loss listwise (query, positive,
negatives rows), and from a random ModernBERT; RUN/hf loads as sentence-transformers'
CrossEncoder and transformers' AutoModelForSequenceClassification, and the
CrossEncoder's scores are ours. A user's mistake in the data is one line naming the file
and the problem, and no RUN/hf is written."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data.rerank import groups_from_pairs, read_pairs
from bertmodel.data.tables import open_table
from bertmodel.inference.predict import load_task_model
from embed_fixtures import minilm_path
from rerank_fixtures import as_pairs, needs_squad, squad_groups, write_jsonl
from shared_data import SHARED_DATA

st = pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")
from sentence_transformers.cross_encoder import CrossEncoder  # noqa: E402

pytestmark = needs_squad
VOCAB = SHARED_DATA / "bert-base-uncased-vocab.txt"  # MiniLM's vocabulary
WORDS = 16  # of each paragraph: real text, short rows
# Float32 scores of the same weights through two implementations (ours: oneDNN linears
# over the packed real tokens; transformers: padded rows through SDPA) round differently:
# measured, the largest gap is 5e-8 for MiniLM's logits (|x| < 1 after 2 steps) and 4.8e-7
# for the random ModernBERT's (|x| ~ 5: one float32 ulp, 2^-21). 1e-5 absolute + 1e-4
# relative is 20x and more that, and far below what a real difference (a missing pooler,
# another token, a wrong type id or pooling) moves a score by, 1e-2 and more.
SCORE_TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def minilm():
    return minilm_path()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Train: 12 queries (48 labelled pairs, and the same as groups); dev: 6 queries."""
    root = tmp_path_factory.mktemp("rerank-data")
    groups = squad_groups(18, negatives=3, words=WORDS)
    return {"pairs": write_jsonl(root / "train-pairs.jsonl", as_pairs(groups[:12])),
            "groups": write_jsonl(root / "train-groups.jsonl", groups[:12]),
            "dev": write_jsonl(root / "dev-pairs.jsonl", as_pairs(groups[12:])),
            "dev_rows": as_pairs(groups[12:]), "root": root}


def invoke(*args):
    return CliRunner().invoke(main, ["finetune", "rerank", *[str(a) for a in args]])


def train(run, model, train_file, dev, *extra):
    result = invoke("--model", model, "--train", train_file, "--validation", dev, "--out", run, "--max-steps", 2,
                    "--seed", 0, "--no-progress", "--device", "cpu", *extra)
    assert result.exit_code == 0, result.output
    return result


def assert_cross_encoder_scores_ours(run, rows) -> float:
    """CrossEncoder(RUN/hf).predict, with the activation config.json names (none), equals
    our scores of the same pairs (read as the run reads them); returns the largest gap."""
    queries, passages = [r["query"] for r in rows], [r["passage"] for r in rows]
    task, net, _ = load_task_model(run / "hf", {}, "cpu", read_validation=False)
    ours = task.score(net, queries, passages)
    cross_encoder = CrossEncoder(str(run / "hf"), device="cpu")
    theirs = cross_encoder.predict(list(zip(queries, passages)), batch_size=8, convert_to_numpy=True)
    assert ours.shape == theirs.shape == (len(rows),)
    np.testing.assert_allclose(theirs, ours, **SCORE_TOL)
    assert np.ptp(ours) > 1e-3  # the pairs are scored apart: a comparison of constants would prove nothing
    return float(np.abs(theirs - ours).max())


def assert_transformers_loads(run, architecture: str) -> None:
    model, info = transformers.AutoModelForSequenceClassification.from_pretrained(run / "hf",
                                                                                 output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert type(model).__name__ == architecture and model.config.num_labels == 1
    config = json.loads((run / "hf" / "config.json").read_text())
    assert config["sentence_transformers"] == {"activation_fn": "torch.nn.modules.linear.Identity"}


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["bce", "listwise"])
def test_minilm_run_loads_as_a_cross_encoder_that_scores_as_ours(minilm, data, tmp_path, loss):
    run = tmp_path / loss
    result = train(run, minilm, data["pairs" if loss == "bce" else "groups"], data["dev"], "--loss", loss,
                   "--batch-size", 8 if loss == "bce" else 3)
    what = "48 pairs (bce)" if loss == "bce" else "12 queries (48 candidates, listwise)"
    assert f"train: {what} from {data['pairs' if loss == 'bce' else 'groups']}" in result.output
    assert "validation: 24 pairs of 6 queries" in result.output
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"eval_ndcg@10", "eval_mrr@10", "eval_accuracy", "eval_auc", "eval_loss"} <= set(last)
    assert json.loads((run / "best.json").read_text())["metric"] == "ndcg@10"
    assert_transformers_loads(run, "BertForSequenceClassification")
    gap = assert_cross_encoder_scores_ours(run, data["dev_rows"])
    print(f"{loss}: max |CrossEncoder - ours| = {gap:.2e}")
    assert_evaluate_repeats_the_runs_evaluation(run, last, data["dev_rows"])


def assert_evaluate_repeats_the_runs_evaluation(run, logged: dict, rows) -> None:
    """`bertmodel evaluate RUN` (RUN/hf, the best model: the last step's here) reports the
    metrics the run logged at its last evaluation, and writes a score per validation pair
    in the file's order."""
    result = CliRunner().invoke(main, ["evaluate", str(run), "--no-progress"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(next(line for line in result.output.splitlines() if line.startswith("{")))
    assert metrics == pytest.approx({k.removeprefix("eval_"): v for k, v in logged.items()
                                     if k.startswith("eval_")}, rel=1e-5, abs=1e-6)
    predictions = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    assert [(p["query"], p["passage"], p["gold"]) for p in predictions] == [
        (r["query"], r["passage"], r["label"]) for r in rows]


def test_listwise_groups_labelled_pairs_by_query(data):
    """Labelled pairs train listwise as groups: each positive with all of its query's
    negatives, queries in file order (what the (query, positive, negatives) rows give)."""
    pairs = read_pairs(open_table(str(data["pairs"])))
    groups = groups_from_pairs(pairs)
    rows = [json.loads(line) for line in data["groups"].read_text().splitlines()]
    assert groups.queries == [r["query"] for r in rows]
    assert groups.candidates == [[r["positive"], *r["negatives"]] for r in rows]


def test_random_modernbert_run_loads_as_a_cross_encoder_that_scores_as_ours(data, tmp_path):
    """Mean pooling (the step tests use ModernBERT's default, cls): the mean over the real
    tokens only, as transformers computes it from the attention mask."""
    run = tmp_path / "modernbert"
    train(run, "random:tiny", data["pairs"], data["dev"], "--architecture", "modernbert", "--tokenizer", VOCAB,
          "--batch-size", 8, "--lr", "1e-3", "--classifier-pooling", "mean")
    assert_transformers_loads(run, "ModernBertForSequenceClassification")
    assert json.loads((run / "hf" / "config.json").read_text())["classifier_pooling"] == "mean"
    gap = assert_cross_encoder_scores_ours(run, data["dev_rows"])
    print(f"modernbert: max |CrossEncoder - ours| = {gap:.2e}")


def refused(tmp_path, rows, *extra):
    """The run's one-line error (exit 1), with nothing exported."""
    bad = write_jsonl(tmp_path / "bad.jsonl", rows)
    run = tmp_path / "run"
    result = invoke("--model", "random:tiny", "--tokenizer", VOCAB, "--train", bad, "--out", run, "--no-progress",
                    "--device", "cpu", *extra)
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {bad}: ") and result.output.count("\n") == 1, result.output
    assert not (run / "hf").exists()
    return result.output.removeprefix(f"Error: {bad}: ").strip()


def test_bce_pairs_without_labels_are_refused(tmp_path):
    rows = [{"query": "who", "passage": "a passage"}, {"query": "when", "passage": "another"}]
    assert refused(tmp_path, rows) == ("no label column 'label' (a relevance per pair: 1, 0 or a float in [0, 1]; "
                                       "--label-column names another); the columns are 'query', 'passage'")


def test_pairs_without_a_query_column_are_refused(tmp_path):
    rows = [{"q": "who", "passage": "a passage", "label": 1}, {"q": "when", "passage": "another", "label": 0}]
    assert refused(tmp_path, rows) == ("no query column (query, question, anchor; --query-column names another); "
                                       "the columns are 'q', 'passage', 'label'")


def test_listwise_rows_without_a_positive_are_refused(tmp_path):
    rows = [{"query": "who", "negatives": ["a", "b"]}, {"query": "when", "negatives": ["c", "d"]}]
    assert refused(tmp_path, rows, "--loss", "listwise") == (
        "no positive column (positive; --positive-column names another); the columns are 'query', 'negatives'")


def test_graded_labels_out_of_range_are_refused(tmp_path):
    rows = [{"query": "who", "passage": "a passage", "label": 1}, {"query": "when", "passage": "b", "label": 2}]
    assert refused(tmp_path, rows) == ("line 2: label 2 in 'label' is not a relevance in [0, 1] (1 relevant, 0 not, "
                                       "or a graded float between)")


# --- the validation metrics against their references ----------------------------------------

def test_pair_metrics_equal_pytrec_eval_sklearn_and_torch():
    """Per-query nDCG@10 and MRR@10 against pytrec_eval (trec_eval's C code: ndcg_cut.10,
    and recip_rank of the top 10), grades 0, 0.5, 1 handed to it as 0, 1, 2 (linear gains:
    nDCG is unchanged by scaling them; relevant >= 0.5 is trec_eval's level 1); ROC AUC
    against sklearn, BCE against torch's BCEWithLogitsLoss, on 30 queries of 1 to 14
    candidates, a query without a relevant one among them (left out of the means). Scores
    are distinct (ties: the next test), so both sides rank alike."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    import torch

    from bertmodel.metrics.pair_ranking import pair_metrics, per_query_ranking

    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 15, 30)
    query_ids = np.repeat(np.arange(30), sizes)
    labels = rng.choice([0.0, 0.0, 0.5, 1.0], len(query_ids))
    labels[query_ids == 3] = 0.0
    scores = rng.normal(size=len(query_ids)) * 3
    qrels = {f"q{q}": {f"d{i}": int(labels[i] * 2) for i in np.flatnonzero(query_ids == q)} for q in range(30)}
    run = {f"q{q}": {f"d{i}": float(scores[i]) for i in np.flatnonzero(query_ids == q)} for q in range(30)}
    top10 = {q: dict(sorted(docs.items(), key=lambda kv: -kv[1])[:10]) for q, docs in run.items()}
    ndcg = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    mrr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    judged = [q for q in range(30) if (labels[query_ids == q] >= 0.5).any()]
    assert 3 not in judged and len(judged) > 20
    for q in judged:
        rows = query_ids == q
        ours = per_query_ranking(np.zeros(rows.sum(), np.int64), labels[rows], scores[rows])
        assert ours["ndcg@10"] == pytest.approx(ndcg[f"q{q}"]["ndcg_cut_10"], abs=1e-12)
        assert ours["mrr@10"] == pytest.approx(mrr[f"q{q}"]["recip_rank"], abs=1e-12)
    means = pair_metrics(query_ids, labels, scores)
    assert means["ndcg@10"] == pytest.approx(np.mean([ndcg[f"q{q}"]["ndcg_cut_10"] for q in judged]), abs=1e-12)
    assert means["mrr@10"] == pytest.approx(np.mean([mrr[f"q{q}"]["recip_rank"] for q in judged]), abs=1e-12)
    assert means["auc"] == pytest.approx(sklearn_metrics.roc_auc_score(labels >= 0.5, scores), abs=1e-12)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(torch.from_numpy(scores), torch.from_numpy(labels))
    assert means["loss"] == pytest.approx(bce.item(), rel=1e-12)
    assert means["accuracy"] == pytest.approx(((scores > 0) == (labels >= 0.5)).mean(), abs=0)


def test_tied_scores_keep_the_data_order_and_auc_counts_ties_a_half():
    from bertmodel.metrics.pair_ranking import pair_metrics

    query_ids = np.array([0, 0, 0, 1, 1])
    labels = np.array([0.0, 1.0, 0.0, 1.0, 0.0])
    flat = pair_metrics(query_ids, labels, np.zeros(5))  # every score alike: the file's order
    assert flat["mrr@10"] == pytest.approx((1 / 2 + 1) / 2)
    assert flat["auc"] == 0.5 and flat["accuracy"] == pytest.approx(3 / 5)
    assert pair_metrics(query_ids, labels, np.array([0.0, 0.0, -1.0, 2.0, 2.0]))["auc"] == pytest.approx(
        sklearn_auc(labels >= 0.5, [0.0, 0.0, -1.0, 2.0, 2.0]))


def sklearn_auc(relevant, scores) -> float:
    return pytest.importorskip("sklearn.metrics").roc_auc_score(relevant, scores)
