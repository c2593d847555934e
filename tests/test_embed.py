"""`bertmodel finetune embed` end to end on real data (the shared SQuAD head as a BEIR
directory, all-MiniLM-L6-v2's weights; a random ModernBERT with MiniLM's vocabulary): the
run trains, evaluates with trec_eval's measures, resumes, and exports a directory that
sentence-transformers and transformers load, whose vectors equal ours; the pair formats
sentence-transformers users have are read; bad input is one line naming the file."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data.beir import read_beir
from bertmodel.data.pairs import read_pairs
from bertmodel.data.squad_beir import squad_to_beir
from bertmodel.retrieval.embedder import load_embedder
from embed_fixtures import SQUAD, distinct_rows, minilm_path, needs_squad
from finetune_fixtures import invoke, one_line_failure

st = pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")
# One worker runs the module: its module-scoped runs (MiniLM fine-tuned) are built once.
pytestmark = [needs_squad, pytest.mark.slow, pytest.mark.xdist_group("embed")]

# float32 on both sides, the same weights and tokens; what differs is the order of
# reductions (our attention and pooling kernels against transformers'), a few float32
# ulps per layer: cosines of 1 - 1e-6 at worst here. 0.9999 is the bar, and
# a wrong pooling, prefix or truncation moves the cosine far below it.
COSINE = 0.9999
FAST = ["--device", "cpu", "--no-progress", "--log-every", "1", "--eval-batch-size", "64"]


@pytest.fixture(scope="module")
def minilm():
    return minilm_path()


@pytest.fixture(scope="module")
def beir_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("embed-beir") / "squad"
    squad_to_beir(SQUAD, out)
    return out


def mixed_texts(beir_dir) -> tuple[list[str], list[str]]:
    """Real dev questions (short and long) and passages (most past 64 tokens, so cut)."""
    dev = read_beir(beir_dir, "dev")
    queries = sorted(dev.queries.values(), key=len)
    queries = queries[:4] + queries[len(queries) // 2:len(queries) // 2 + 4] + queries[-4:]
    passages = dev.passage_texts(sorted(dev.corpus)[:10]) + ["A short passage.", "Yes."]
    return queries, passages


def assert_sentence_transformers_equal(run, beir_dir, query_prefix="", passage_prefix=""):
    """SentenceTransformer(RUN/hf) encodes real texts of mixed lengths (padded together)
    as our embedder does: row by row cosine >= COSINE, and the prompts are the run's."""
    queries, passages = mixed_texts(beir_dir)
    theirs = st.SentenceTransformer(str(run / "hf"), device="cpu")
    assert theirs.prompts == {"query": query_prefix, "document": passage_prefix}
    ours = load_embedder(run, device="cpu", batch_size=8)
    for mine, their in ((ours.encode_queries(queries), theirs.encode_query(queries, batch_size=8)),
                        (ours.encode_passages(passages), theirs.encode_document(passages, batch_size=8))):
        mine, their = np.asarray(mine, np.float64), np.asarray(their, np.float64)
        assert mine.shape == their.shape
        cosine = (mine * their).sum(1) / np.linalg.norm(mine, axis=1) / np.linalg.norm(their, axis=1)
        assert cosine.min() >= COSINE, cosine
        np.testing.assert_allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-5)  # normalised


@pytest.fixture(scope="module")
def minilm_run(minilm, beir_dir, tmp_path_factory):
    """MiniLM on the BEIR directory's train qrels, evaluated on 40 dev queries over the
    whole corpus, with prefixes; stopped at step 1 of 2 and rerun (resumes), then run a
    third time (nothing to do)."""
    out = tmp_path_factory.mktemp("embed-run") / "run"
    command = ["finetune", "embed", "--model", minilm, "--train", beir_dir, "--validation", beir_dir,
               "--out", out, *FAST, "--max-train-examples", "32", "--max-eval-examples", "40", "--batch-size", "16",
               "--max-steps", "2", "--eval-every", "1", "--save-every", "1", "--max-query-length", "64",
               "--max-passage-length", "64", "--query-prefix", "query: ", "--passage-prefix", "passage: "]
    first = invoke(*command, "--stop-at", "1")
    assert first.exit_code == 0, first.output
    assert "train: 32 pairs from" in first.output, first.output
    assert "validation: 40 queries over 583 passages" in first.output and "(split dev)" in first.output
    second = invoke(*command)
    assert second.exit_code == 0 and "resuming from" in second.output, second.output
    third = invoke(*command)
    assert third.exit_code == 0 and "already reached step 2 of 2; nothing to do" in third.output, third.output
    return out


def test_embed_run_evaluates_with_trec_eval_measures(minilm_run):
    records = [json.loads(line) for line in (minilm_run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval_ndcg@10" in r]
    assert [r["step"] for r in evals] == [1, 2]
    for r in evals:
        assert {"eval_mrr@10", "eval_recall@100", "eval_map"} <= set(r)
        # MiniLM already retrieves SQuAD paragraphs well: a real model, not chance (1/583).
        assert 0.5 < r["eval_ndcg@10"] <= 1 and r["eval_recall@100"] >= r["eval_mrr@10"]
    assert json.loads((minilm_run / "run.json").read_text())["task"] == "embed"
    assert json.loads((minilm_run / "best.json").read_text())["metric"] == "ndcg@10"


def test_bert_export_loads_in_sentence_transformers_and_transformers(minilm_run, beir_dir):
    hf = minilm_run / "hf"
    assert {"modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling",
            "2_Normalize"} <= {p.name for p in hf.iterdir()}
    assert json.loads((hf / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "mean"
    assert json.loads((hf / "tokenizer_config.json").read_text())["model_max_length"] == 64  # ST's max_seq_length
    assert_sentence_transformers_equal(minilm_run, beir_dir, "query: ", "passage: ")
    model, info = transformers.AutoModel.from_pretrained(hf, output_loading_info=True)
    assert type(model).__name__ == "BertModel"
    assert not info["missing_keys"] and not info["unexpected_keys"], info


def test_modernbert_run_from_pairs_exports_a_sentence_transformers_dir(minilm, beir_dir, tmp_path):
    """A random ModernBERT (the tiny preset, MiniLM's vocabulary) on JSONL triples in
    sentence-transformers' anchor/positive/negative columns, validated on pairs."""
    rows = distinct_rows(40)
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"anchor": r["query"], "positive": r["positive"],
                                         "negative": r["negatives"][0]}) + "\n" for r in rows[:32]))
    dev = tmp_path / "dev.jsonl"
    dev.write_text("".join(json.dumps({"anchor": r["query"], "positive": r["positive"]}) + "\n" for r in rows[32:]))
    out = tmp_path / "run"
    result = invoke("finetune", "embed", "--model", "random:tiny", "--architecture", "modernbert", "--tokenizer",
                    minilm, "--train", train, "--validation", dev, "--out", out, *FAST, "--batch-size", "8",
                    "--max-steps", "2", "--pooling", "cls", "--max-query-length", "48", "--max-passage-length", "48")
    assert result.exit_code == 0, result.output
    assert "train: 32 pairs, 1 hard negatives each from" in result.output, result.output
    assert "validation: 8 queries over 8 passages" in result.output
    assert json.loads((out / "hf" / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "cls"
    assert_sentence_transformers_equal(out, beir_dir)
    model, info = transformers.AutoModel.from_pretrained(out / "hf", output_loading_info=True)
    assert type(model).__name__ == "ModernBertModel"
    assert not info["missing_keys"] and not info["unexpected_keys"], info


# --- the pair formats ------------------------------------------------------------------------

def test_pair_tables_in_sentence_transformers_columns(tmp_path):
    rows = distinct_rows(6, negatives=2)
    csv = tmp_path / "triples.csv"
    import csv as csv_module
    with csv.open("w", newline="") as f:
        writer = csv_module.writer(f)
        writer.writerow(["query", "positive", "negative_1", "negative_2"])
        writer.writerows([r["query"], r["positive"], *r["negatives"]] for r in rows)
    pairs = read_pairs(csv)
    assert pairs.queries == [r["query"] for r in rows] and pairs.num_negatives == 2
    assert pairs.negatives == [r["negatives"] for r in rows]
    import pyarrow as pa
    import pyarrow.parquet as pq
    parquet = tmp_path / "lists.parquet"
    pq.write_table(pa.table({"question": [r["query"] for r in rows], "answer": [r["positive"] for r in rows],
                             "hard": [r["negatives"] for r in rows]}), parquet)
    named = read_pairs(parquet, query_column="question", positive_column="answer", negative_column="hard")
    assert named.queries == pairs.queries and named.positives == pairs.positives and named.negatives == pairs.negatives


def test_squad_and_beir_train_split_as_pairs(beir_dir):
    squad = read_pairs(SQUAD)
    articles = json.loads(SQUAD.read_text())["data"]
    answerable = [(qa["question"], p["context"]) for a in articles for p in a["paragraphs"] for qa in p["qas"]]
    assert list(zip(squad.queries, squad.positives)) == answerable and squad.num_negatives == 0
    beir = read_pairs(beir_dir)  # its train qrels: one pair per relevant judgement
    train = read_beir(beir_dir, "train")
    assert len(beir) == sum(1 for judged in train.qrels.values() for grade in judged.values() if grade > 0)
    assert set(beir.queries) <= set(train.queries.values())


# --- bad input ---------------------------------------------------------------------------------

def fails(tmp_path, *args, names=()):
    """exit 1, one `Error:` line holding each of `names`, and no run directory left."""
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["finetune", "embed", *map(str, args), "--out", str(out), *FAST,
                                       "--max-steps", "1", "--batch-size", "4"])
    return one_line_failure(result, out, names)


def small_beir(root, corpus, queries, qrels) -> str:
    root.mkdir()
    (root / "qrels").mkdir()
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (root / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    for split, lines in qrels.items():
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            "\t".join(map(str, line)) + "\n" for line in lines))
    return root


CORPUS = [{"_id": "d1", "title": "", "text": "Paris is in France."}, {"_id": "d2", "text": "Rome is in Italy."}]
QUERIES = [{"_id": "q1", "text": "Where is Paris?"}, {"_id": "q2", "text": "Where is Rome?"}]


def test_pairs_without_a_positive_column(minilm, tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"anchor": "a question", "answer": "a passage"}) + "\n")
    line = fails(tmp_path, "--model", minilm, "--train", path, names=(path, "positive"))
    assert "--positive-column" in line


@pytest.mark.parametrize("case", ["qrels-id-missing", "empty-corpus", "duplicated-id", "split-missing"])
def test_broken_beir_directories(minilm, tmp_path, case):
    qrels = {"train": [("q1", "d1", 1), ("q2", "d2", 1)], "dev": [("q1", "d1", 1)]}
    corpus, queries, args = CORPUS, QUERIES, []
    if case == "qrels-id-missing":
        qrels["train"].append(("q2", "d9", 1))
        names = ["qrels/train.tsv", "line 4", "'d9'", "corpus.jsonl"]
    elif case == "empty-corpus":
        corpus, names = [], ["corpus.jsonl", "empty corpus"]
    elif case == "duplicated-id":
        queries, names = QUERIES + [{"_id": "q1", "text": "again"}], ["queries.jsonl", "line 3", "duplicated id 'q1'"]
    else:
        args, names = ["--validation-split", "test"], ["no split 'test'", "dev, train"]
    beir = small_beir(tmp_path / "beir", corpus, queries, qrels)
    fails(tmp_path, "--model", minilm, "--train", beir, "--validation", beir, *args, names=[beir, *names])


def test_a_finished_run_refuses_other_training_data(minilm_run, beir_dir, minilm, tmp_path):
    """The run records its data's fingerprint: the same --out with other pairs is refused
    in one line, and the run is left as it was."""
    before = (minilm_run / "metrics.jsonl").read_bytes()
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"query": r["query"], "positive": r["positive"]}) + "\n"
                             for r in distinct_rows(8)))
    result = CliRunner().invoke(main, ["finetune", "embed", "--model", str(minilm), "--train", str(other),
                                       "--out", str(minilm_run), *FAST, "--max-steps", "2", "--batch-size", "16"])
    assert result.exit_code == 1, result.output
    # Beside the one error, only the log of what was read (as every task logs its data).
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    others = [line for line in result.output.strip().splitlines() if line not in errors]
    assert len(errors) == 1 and all(line.startswith("train: 8 pairs from") for line in others), result.output
    assert errors[0].startswith(f"Error: {minilm_run}: resuming on other data than the run was trained on")
    assert str(other) in errors[0]
    assert (minilm_run / "metrics.jsonl").read_bytes() == before


def test_the_run_records_the_beir_split_it_read(minilm_run, beir_dir, minilm):
    """The run evaluated on the BEIR directory's dev split (its log says so; no
    --validation-split was given): naming that split on resume is the same run, and
    another split is refused as dev -> test, the split read, not the option's placeholder."""
    command = ["finetune", "embed", "--model", minilm, "--train", beir_dir, "--validation", beir_dir,
               "--out", minilm_run, *FAST, "--max-train-examples", "32", "--max-eval-examples", "40",
               "--batch-size", "16", "--max-steps", "2", "--eval-every", "1", "--save-every", "1",
               "--max-query-length", "64", "--max-passage-length", "64", "--query-prefix", "query: ",
               "--passage-prefix", "passage: "]
    same = invoke(*command, "--validation-split", "dev")
    assert same.exit_code == 0 and "nothing to do" in same.output, same.output
    other = invoke(*command, "--validation-split", "test")
    assert other.exit_code == 1, other.output
    error = next(line for line in other.output.splitlines() if line.startswith("Error:"))
    assert f"validation: {beir_dir} split dev (sha256 " in error and f"-> {beir_dir} split test (sha256 " in error


def test_gradcache_run_equals_the_plain_run(minilm, tmp_path):
    """--mini-batch-size changes the memory, not the training: the same losses (float32 on the CPU: the same kernels on chunks of
    other sizes, so equal to a few ulps, not bit for bit)."""
    # Dropout off (MiniLM's config with 0 rates): chunks of 3 draw other masks than the
    # whole batch does (test_embed_steps.py checks the replay with dropout on).
    source = tmp_path / "minilm-no-dropout"
    shutil.copytree(minilm, source)
    config = json.loads((source / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (source / "config.json").write_text(json.dumps(config))
    rows = distinct_rows(16)
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"query": r["query"], "positive": r["positive"]}) + "\n" for r in rows))
    losses = []
    for name, extra in (("plain", []), ("cached", ["--mini-batch-size", "3"])):
        out = tmp_path / name
        result = invoke("finetune", "embed", "--model", source, "--train", train, "--out", out, *FAST,
                        "--batch-size", "8", "--max-steps", "2", "--max-passage-length", "48", "--lr", "1e-4", *extra)
        assert result.exit_code == 0, result.output
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        losses.append([r["loss"] for r in records if "loss" in r])
    assert len(losses[0]) == 2
    # 1e-4 relative: float32 sums over 8-row and 3-row chunks differ by ~1e-7 per layer;
    # a gradient that missed a chunk or replayed other dropout masks moves step 2 by >1e-2.
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-4, atol=0)


def test_an_eval_suite_scores_a_retrieval_task(minilm, tmp_path):
    """A suite with an embed task on one SQuAD file (five articles), split by article:
    the run trains on the train articles and its nDCG@10 on the test articles' questions
    is the task's score in results.json."""
    squad = json.loads(SQUAD.read_text(encoding="utf-8"))
    squad["data"] = [squad["data"][i] for i in (0, 2, 3, 4, 8)]
    (tmp_path / "squad.json").write_text(json.dumps(squad))
    suite = tmp_path / "suite.toml"
    suite.write_text("""
name = "retrieval"
seeds = [1]
data_dir = "."
[defaults]
device = "cpu"
[[task]]
name = "squad-retrieval"
command = "embed"
train = "squad.json"
validation = "squad.json"
options = { validation_split = "test", max_train_examples = 32, max_passage_length = 48, max_query_length = 32 }
grid = { lr = [1e-4], epochs = [1], batch_size = [16] }
""")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["eval-suite", "--model", str(minilm), "--suite", str(suite), "--out", str(out)])
    assert result.exit_code == 0, result.output + (out / "squad-retrieval").joinpath("lr=0.0001,epochs=1,batch_size=16",
                                                                                      "seed-1.log").read_text()
    results = json.loads((out / "results.json").read_text())
    [task] = [t for t in results["tasks"] if t["name"] == "squad-retrieval"]
    assert task["metric"] == "ndcg@10" and task["scale"] == 100 and 30 < task["mean"] <= 100, task  # x100 as GLUE's
    [run] = task["points"][0]["runs"]
    assert run["status"] == "ok" and run["value"] == json.loads((next(out.rglob("best.json"))).read_text())["value"]
    log = next(out.rglob("*.log")).read_text()
    assert "validation: 269 queries over 183 passages from" in log and "(split test)" in log
    assert "SQuAD file's by-article split 'train'" in log
