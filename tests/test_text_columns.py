"""Which columns a classifier reads when --text-column is not given: the usual names
(GLUE's pairs as transformers' run_glue names them, SQuAD-style question/context,
transformers' text/text_pair, then a single sentence or text), one function shared by
finetune, evaluate and predict --file, and the columns used said in one line."""
from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data.tables import open_table, read_table, text_columns
from bertmodel.errors import BertmodelError
from finetune_fixtures import sentence, tiny_bert

USUAL = ("sentence1 + sentence2, question1 + question2, premise + hypothesis, question + sentence, "
         "question + context, text + text_pair, sentence, text")


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("columns, found", [
    (("idx", "sentence1", "sentence2", "label"), ("sentence1", "sentence2")),  # MRPC, RTE, STS-B, WNLI
    (("question1", "question2", "label", "idx"), ("question1", "question2")),  # QQP
    (("premise", "hypothesis", "label"), ("premise", "hypothesis")),  # MNLI
    (("question", "sentence", "label"), ("question", "sentence")),  # QNLI: a pair, not the sentence alone
    (("id", "question", "context", "label"), ("question", "context")),
    (("text", "text_pair", "label"), ("text", "text_pair")),
    (("sentence", "label", "idx"), ("sentence", None)),  # SST-2, CoLA
    (("label", "text"), ("text", None)),  # IMDb, AG News
    (("text", "sentence2", "label"), ("text", None)),  # half a pair is not a pair
])
def test_the_usual_names_are_found_pairs_first(tmp_path, columns, found):
    table = open_table(jsonl(tmp_path / "t.jsonl", [{c: "w1" for c in columns}]))
    chosen = text_columns(table)
    assert (chosen.text, chosen.pair, chosen.found) == (*found, True)


def test_given_columns_win_and_a_table_without_the_usual_names_is_one_line(tmp_path):
    path = jsonl(tmp_path / "t.jsonl", [{"a": "w1", "b": "w2", "text": "w3", "label": 1}])
    table = open_table(path)
    given = text_columns(table, "a", "b")
    assert (given.text, given.pair, given.found) == ("a", "b", False)
    # A run's own columns (evaluate, predict --file) are read where the table has them, else the usual names.
    assert (text_columns(table, "a", None, fallback=True).text, text_columns(table, "z", "y", fallback=True).text) \
        == ("a", "text")
    other = jsonl(tmp_path / "other.jsonl", [{"a": "w1", "b": "w2", "label": 1}])
    with pytest.raises(BertmodelError) as error:
        read_table(other)
    assert str(error.value) == (f"{other}: no --text-column given and none of the usual text columns ({USUAL}); "
                                "the columns are 'a', 'b', 'label'")
    headerless = tmp_path / "cola.tsv"
    headerless.write_text("gj04\t1\t\tw1 w2\n")
    with pytest.raises(BertmodelError, match=r"cola\.tsv: no --text-column given and a file without a header has "
                                             r"no column names; give --text-column as a 0-based index$"):
        read_table(headerless, header=False)


@pytest.fixture(scope="module")
def text_pair_run(tmp_path_factory):
    """finetune classify on JSONL of text/text_pair (what predict --file reads), no column options."""
    root = tmp_path_factory.mktemp("columns")
    rng = random.Random(4)
    rows = [{"text": sentence(rng), "text_pair": sentence(rng), "label": "yes" if i % 2 else "no"}
            for i in range(24)]
    train = jsonl(root / "train.jsonl", rows)
    result = CliRunner().invoke(main, ["finetune", "classify", "--model", str(tiny_bert(root)), "--train", str(train),
                                       "--validation", str(train), "--out", str(root / "run"), "--max-steps", "2",
                                       "--batch-size", "8", "--device", "cpu", "--no-progress"])
    return root, rows, train, result


def test_finetune_finds_text_and_text_pair_and_says_so(text_pair_run):
    root, rows, train, result = text_pair_run
    assert result.exit_code == 0, result.output  # it was: no text column 'sentence'
    assert f"{train}: read text columns 'text' + 'text_pair' (found by name; --text-column chooses others)" \
        in result.output.splitlines()
    options = json.loads((root / "run" / "hf" / "bertmodel_task.json").read_text())["options"]
    assert (options["text_column"], options["text_pair_column"]) == ("text", "text_pair")  # what a resume compares


def test_evaluate_and_predict_file_read_other_usual_names_alike(text_pair_run, tmp_path):
    """The run's own columns where the file has them, else the usual names: the same
    texts under GLUE's sentence1/sentence2 give the same metrics and predictions."""
    root, rows, train, result = text_pair_run
    run = root / "run"
    glue = jsonl(tmp_path / "glue.jsonl", [{"sentence1": r["text"], "sentence2": r["text_pair"], "label": r["label"]}
                                           for r in rows])
    scores = []
    for data in (train, glue):
        evaluated = CliRunner().invoke(main, ["evaluate", str(run), "--data", str(data), "--out",
                                              str(tmp_path / data.stem), "--no-progress"])
        assert evaluated.exit_code == 0, evaluated.output
        scores.append(evaluated.stdout)
    assert scores[0] == scores[1]
    predicted = [CliRunner().invoke(main, ["predict", str(run), "--file", str(data), "--no-progress"]).stdout
                 for data in (train, glue)]
    assert predicted[0] == predicted[1] and len(predicted[0].splitlines()) == len(rows)
