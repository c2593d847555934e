"""`bertmodel predict` (texts, question/context, and --file in every table format) and
`evaluate`'s refusals that point at it, through the CLI on tiny fine-tuned runs: a pair
classifier, a single-text classifier, and SQuAD v1.1 / v2.0 models."""
import json
import random

import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from finetune_fixtures import sentence, write_tsv
from finetune_fixtures import tiny_bert as make_tiny_bert

FAST = ["--batch-size", "4", "--eval-batch-size", "8", "--device", "cpu", "--no-progress", "--log-every", "1"]


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def finetune(kind, model, out, *args):
    result = invoke("finetune", kind, "--model", model, "--out", out, *FAST, *args)
    assert result.exit_code == 0, result.output
    return out


def refused(result, message):
    """Exit 1, nothing on stdout, and exactly one error line."""
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", f"Error: {message}\n")


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def squad_file(path, rng, articles=2, questions=4, unanswerable=0):
    """SQuAD JSON over w-words; the first `unanswerable` questions have no answer (v2.0)."""
    data, n = [], 0
    for a in range(articles):
        context = sentence(rng, 20, 40)
        words = context.split()
        qas = []
        for _ in range(questions):
            i = rng.randrange(len(words) - 3)
            answer = " ".join(words[i:i + rng.randrange(1, 4)])
            start = len(" ".join(words[:i])) + (1 if i else 0)
            answers = [] if n < unanswerable else [{"text": answer, "answer_start": start}]
            qas.append({"id": f"q{n}", "question": sentence(rng, 2, 5), "answers": answers,
                        **({"is_impossible": True} if not answers else {})})
            n += 1
        data.append({"title": f"t{a}", "paragraphs": [{"context": context, "qas": qas}]})
    path.write_text(json.dumps({"version": "v2.0" if unanswerable else "1.1", "data": data}))
    return path


@pytest.fixture(scope="module")
def qa_run(tiny_bert, tmp_path_factory):
    """A SQuAD v1.1 model."""
    root = tmp_path_factory.mktemp("qa")
    rng = random.Random(4)
    train, dev = squad_file(root / "train.json", rng, articles=3), squad_file(root / "dev.json", rng)
    return finetune("qa", tiny_bert, root / "run", "--train", train, "--validation", dev, "--max-steps", "2",
                    "--max-seq-length", "32", "--doc-stride", "8", "--lr", "1e-3")


# -- evaluate's refusals -------------------------------------------------------------------

def test_evaluate_v2_data_with_a_v1_model_names_version_2(qa_run, tmp_path):
    v2 = squad_file(tmp_path / "dev-v2.json", random.Random(7), unanswerable=2)
    refused(invoke("evaluate", qa_run, "--data", v2, "--out", tmp_path / "eval"),
            f"{v2}: question q0 has no answer (SQuAD v2.0 data, 2 such questions); pass --version-2")
    scored = invoke("evaluate", qa_run, "--data", v2, "--version-2", "--out", tmp_path / "eval")
    assert scored.exit_code == 0, scored.output
    assert {"exact_match", "f1", "HasAns_f1", "NoAns_f1"} <= set(json.loads(scored.stdout))


@pytest.fixture(scope="module")
def qa_v2_run(tiny_bert, tmp_path_factory):
    """A SQuAD v2.0 model whose null threshold makes every answer "no answer"."""
    root = tmp_path_factory.mktemp("qa-v2")
    rng = random.Random(5)
    train = squad_file(root / "train.json", rng, articles=3, unanswerable=4)
    return finetune("qa", tiny_bert, root / "run", "--train", train, "--version-2", "--null-threshold", "-1000",
                    "--max-steps", "1", "--max-seq-length", "32", "--doc-stride", "8")


# -- predict on the command line -----------------------------------------------------------

def test_a_v2_no_answer_prints_no_answer_and_its_score(qa_v2_run):
    result = invoke("predict", qa_v2_run, "--question", "w1 w2", "--context", "w3 w4 w5 w6 w7")
    assert result.exit_code == 0, result.output
    answer, score = result.stdout.rstrip("\n").split("\t")
    assert answer == "(no answer)" and 0 < float(score) <= 1


# -- predict --file ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pair_run(tiny_bert, tmp_path_factory):
    """RTE-like: sentence1, sentence2 and a text label."""
    root = tmp_path_factory.mktemp("pairs")
    rng = random.Random(1)
    rows = []
    for i in range(16):
        a, b = sentence(rng), sentence(rng)
        rows.append((i, a, b, "entailment" if set(a.split()) & set(b.split()) else "not_entailment"))
    train = write_tsv(root / "train.tsv", ("index", "sentence1", "sentence2", "label"), rows)
    return finetune("classify", tiny_bert, root / "run", "--train", train, "--text-column", "sentence1",
                    "--text-pair-column", "sentence2", "--max-steps", "2", "--lr", "1e-3")


@pytest.fixture(scope="module")
def single_run(tiny_bert, tmp_path_factory):
    root = tmp_path_factory.mktemp("single")
    rng = random.Random(2)
    train = write_tsv(root / "train.tsv", ("sentence", "label"), [(sentence(rng), i % 2) for i in range(12)])
    return finetune("classify", tiny_bert, root / "run", "--train", train, "--max-steps", "1")


PAIRS = [("w1 w2 w3", "w4 w5"), ("w6", "w7 w8 w9 w1"), ("w10 w11, \"w12\"", "w13")]


def write_pairs(path, a="sentence1", b="sentence2"):
    """PAIRS in the format of path's suffix, with a column the run does not read."""
    rows = [{"id": i, a: x, b: y} for i, (x, y) in enumerate(PAIRS)]
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix in (".tsv", ".csv"):
        import csv

        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, list(rows[0]), delimiter="\t" if path.suffix == ".tsv" else ",",
                                    quoting=csv.QUOTE_NONE if path.suffix == ".tsv" else csv.QUOTE_MINIMAL,
                                    quotechar=None if path.suffix == ".tsv" else '"')
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def predicted(result):
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize("name", ["pairs.tsv", "pairs.csv", "pairs.parquet", "pairs.jsonl", "pairs.ndjson"])
def test_predict_file_reads_the_runs_columns_in_every_table_format(pair_run, tmp_path, name):
    records = predicted(invoke("predict", pair_run, "--file", write_pairs(tmp_path / name)))
    assert [(r["text"], r["text_pair"]) for r in records] == PAIRS
    # The same labels and probabilities as the command line and the JSONL of {"text", "text_pair"}.
    legacy = predicted(invoke("predict", pair_run, "--file", write_pairs(tmp_path / "legacy.jsonl", "text",
                                                                            "text_pair")))
    assert records == legacy
    lines = invoke("predict", pair_run, *[x for x, _ in PAIRS], *[a for _, y in PAIRS for a in ("--pair", y)])
    assert [line.split("\t")[0] for line in lines.stdout.splitlines()] == [r["label"] for r in records]


def test_predict_file_of_a_saved_dataset(pair_run, tmp_path):
    import datasets

    datasets.Dataset.from_dict({"sentence1": [x for x, _ in PAIRS], "sentence2": [y for _, y in PAIRS]}).save_to_disk(
        str(tmp_path / "ds"))
    records = predicted(invoke("predict", pair_run, "--file", tmp_path / "ds"))
    assert [(r["text"], r["text_pair"]) for r in records] == PAIRS


def test_predict_file_out_writes_jsonl_and_keeps_an_existing_file(pair_run, tmp_path):
    given, out = write_pairs(tmp_path / "pairs.tsv"), tmp_path / "predictions.jsonl"
    result = invoke("predict", pair_run, "--file", given, "--out", out, "--no-progress")
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == f"predictions: {out} (3 records)\n"
    assert [json.loads(line) for line in out.read_text().splitlines()] == predicted(
        invoke("predict", pair_run, "--file", given))
    before = out.read_bytes()
    refused(invoke("predict", pair_run, "--file", given, "--out", out, "--no-progress"),
            f"{out}: already exists; pass --overwrite to replace it")
    assert out.read_bytes() == before
    # refused before any prediction: a file it could not even read is not reached
    unreadable = tmp_path / "columns.tsv"
    unreadable.write_text("id\tscore\n1\t2\n")
    refused(invoke("predict", pair_run, "--file", unreadable, "--out", out, "--no-progress"),
            f"{out}: already exists; pass --overwrite to replace it")
    assert invoke("predict", pair_run, "--file", given, "--out", out, "--overwrite").exit_code == 0


def test_predict_file_bad_input_is_one_line_naming_the_file(pair_run, qa_run, tmp_path):
    other = write_pairs(tmp_path / "other.tsv", "a", "b")
    refused(invoke("predict", pair_run, "--file", other),
            f"{other}: no text column 'sentence1'; the columns are 'id', 'a', 'b' (predict reads the run's text "
            "column, 'sentence1', or the usual sentence1 + sentence2, question1 + question2, premise + hypothesis, "
            "question + sentence, question + context, text + text_pair, sentence, text)")
    refused(invoke("predict", qa_run, "--file", other),
            f"{other}: no question column 'question'; the columns are 'id', 'a', 'b' (predict reads the questions "
            "from 'question', their contexts from 'context')")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "w1"}\n{"text": "w2\n')
    refused(invoke("predict", pair_run, "--file", broken),
            f"{broken}: line 2: not valid JSON (Unterminated string starting at: column 10)")
    mixed = tmp_path / "mixed.csv"
    mixed.write_text("sentence1,sentence2\nw1,w2\n")
    assert invoke("predict", pair_run, "--file", mixed, "w3").exit_code == 2  # --file or texts, not both


def write_questions(dev, path, ids=True):
    """The questions of SQuAD JSON `dev` as rows of (id,) question, context."""
    rows = [{**({"id": q["id"]} if ids else {}), "question": q["question"], "context": p["context"]}
            for a in json.loads(dev.read_text())["data"] for p in a["paragraphs"] for q in p["qas"]]
    if path.suffix == ".csv":
        import csv

        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, rows


def without_answers(dev, path):
    squad = json.loads(dev.read_text())
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                del qa["answers"]
    path.write_text(json.dumps(squad, indent=1))
    return path


def test_predict_file_answers_the_questions_of_squad_json_and_tables(qa_run, tmp_path):
    dev = squad_file(tmp_path / "dev.json", random.Random(9))
    unlabelled = without_answers(dev, tmp_path / "questions.json")
    records = predicted(invoke("predict", qa_run, "--file", unlabelled))
    table, rows = write_questions(dev, tmp_path / "questions.csv")
    assert [(r["id"], r["question"]) for r in records] == [(row["id"], row["question"]) for row in rows]
    assert predicted(invoke("predict", qa_run, "--file", table)) == records
    anonymous = predicted(invoke("predict", qa_run, "--file", write_questions(dev, tmp_path / "q.jsonl", ids=False)[0]))
    assert anonymous == [{k: v for k, v in r.items() if k != "id"} for r in records]
    for row, record in list(zip(rows, records))[:2]:  # the answer the command line gives
        line = invoke("predict", qa_run, "--question", row["question"], "--context", row["context"]).stdout
        assert line == f"{record['answer'] or '(no answer)'}\t{record['score']:.4f}\n"


def test_evaluate_without_answers_points_at_predict_file(qa_run, tmp_path):
    dev = squad_file(tmp_path / "dev.json", random.Random(9))
    unlabelled = without_answers(dev, tmp_path / "questions.json")
    refused(invoke("evaluate", qa_run, "--data", unlabelled, "--out", tmp_path / "eval"),
            f"{unlabelled}: question q0: missing field 'answers' (unlabelled questions: predict their answers with "
            f"`bertmodel predict RUN --file {unlabelled}`)")


# -- pairs and single texts ----------------------------------------------------------------

def test_a_pair_model_given_single_texts_warns_and_the_reverse(pair_run, single_run, tmp_path):
    alone = invoke("predict", pair_run, "w1 w2")
    assert alone.exit_code == 0 and len(alone.stdout.splitlines()) == 1
    assert alone.stderr == (f"warning: {pair_run} was trained on text pairs ('sentence1' + 'sentence2') but is "
                            "given single texts; pass --pair for each text\n")
    texts = tmp_path / "texts.tsv"
    write_tsv(texts, ("sentence1",), [("w1 w2",)])
    assert invoke("predict", pair_run, "--file", texts, "--no-progress").stderr == (
        f"warning: {pair_run} was trained on text pairs ('sentence1' + 'sentence2') but is given single texts; "
        f"{texts} has no 'sentence2' column\n")
    paired = invoke("predict", single_run, "w1 w2", "--pair", "w3")
    assert paired.exit_code == 0 and paired.stderr == (
        f"warning: {single_run} was trained on single texts but is given text pairs; its predictions for a second "
        "segment it never saw mean little\n")
    assert invoke("predict", pair_run, "w1", "--pair", "w2").stderr == ""
    assert invoke("predict", single_run, "w1").stderr == ""
