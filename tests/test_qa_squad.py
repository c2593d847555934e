"""SQuAD readers: the official nested JSON (v1.1, v2.0), squad-layout JSONL and datasets,
and one-line errors for bad files."""
import json

import pytest

from bertmodel.data.squad import SquadExample, read_squad
from bertmodel.errors import BertmodelError
from shared_data import SHARED_DATA

ARTICLE = {"title": "Cats", "paragraphs": [{"context": "The cat sat on the mat.", "qas": [
    {"id": "a1", "question": "Who sat?", "answers": [{"text": "The cat", "answer_start": 0}]},
    {"id": "a2", "question": "Where?", "answers": [{"text": "the mat", "answer_start": 15},
                                                    {"text": "on the mat", "answer_start": 12}]},
    {"id": "a3", "question": "Why?", "answers": [], "is_impossible": True,
     "plausible_answers": [{"text": "cat", "answer_start": 4}]},
]}]}
EXPECTED = [
    SquadExample("a1", "Cats", "Who sat?", "The cat sat on the mat.", [("The cat", 0)], False),
    SquadExample("a2", "Cats", "Where?", "The cat sat on the mat.", [("the mat", 15), ("on the mat", 12)], False),
    SquadExample("a3", "Cats", "Why?", "The cat sat on the mat.", [], True),
]


def _rows():
    return [{"id": e.id, "title": e.title, "context": e.context, "question": e.question,
             "answers": {"text": [t for t, _ in e.answers], "answer_start": [s for _, s in e.answers]}}
            for e in EXPECTED]


def test_nested_json(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"version": "v2.0", "data": [ARTICLE]}))
    examples = read_squad(path)
    assert examples == EXPECTED
    assert {e.source for e in examples} == {str(path)}


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.json"])  # Dataset.to_json writes lines under .json
def test_jsonl_rows(tmp_path, name):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    assert read_squad(path) == EXPECTED


def test_saved_dataset_directory(tmp_path):
    import datasets

    datasets.DatasetDict({"validation": datasets.Dataset.from_list(_rows())}).save_to_disk(str(tmp_path / "ds"))
    assert read_squad(tmp_path / "ds", split="validation") == EXPECTED
    with pytest.raises(BertmodelError, match=r"ds: has no split 'train' \(splits: validation\)$"):
        read_squad(tmp_path / "ds", split="train")


def test_dataset_by_name_that_cannot_load_is_one_line(monkeypatch):
    import datasets
    import huggingface_hub

    # Offline, so the test does not wait on network retries; the error path is the same.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(BertmodelError) as err:
        read_squad("no-such-owner-xyz/no-such-squad-dataset")
    assert str(err.value).startswith("dataset no-such-owner-xyz/no-such-squad-dataset: cannot load (")
    assert "\n" not in str(err.value)


def _bad(tmp_path, text, name="bad.json"):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(BertmodelError) as err:
        read_squad(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(path) + ": ")
    return message[len(str(path)) + 2:]


def test_bad_files(tmp_path):
    assert _bad(tmp_path, "") == "empty file"
    assert _bad(tmp_path, '{"data": [{"title": "x", "paragraphs": [') == \
        "not valid JSON (line 1 column 41: Expecting value)"
    assert _bad(tmp_path, '{"version": "1.1"}') == "not SQuAD JSON: expected an object with a 'data' list of articles"
    assert _bad(tmp_path, '{"data": []}') == "no questions"
    article = json.loads(json.dumps(ARTICLE))
    del article["paragraphs"][0]["qas"][1]["question"]
    assert _bad(tmp_path, json.dumps({"data": [article]})) == "question a2: missing field 'question'"
    article = json.loads(json.dumps(ARTICLE))
    del article["paragraphs"][0]["context"]
    assert _bad(tmp_path, json.dumps({"data": [article]})) == "article 0 paragraph 0: missing field 'context'"
    article = json.loads(json.dumps(ARTICLE))
    article["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = "0"
    assert _bad(tmp_path, json.dumps({"data": [article]})) == \
        "question a1 answer: field 'answer_start' must be int, got str"
    article = json.loads(json.dumps(ARTICLE))
    article["paragraphs"][0]["qas"][1]["id"] = "a1"
    assert _bad(tmp_path, json.dumps({"data": [article]})) == "duplicate question id a1"


def test_bad_rows(tmp_path):
    rows = _rows()
    lines = [json.dumps(r) for r in rows]
    assert _bad(tmp_path, lines[0] + "\n{oops\n", "r.jsonl") == \
        "line 2: not valid JSON (Expecting property name enclosed in double quotes: column 2)"
    del rows[1]["context"]
    assert _bad(tmp_path, "\n".join(json.dumps(r) for r in rows), "r.jsonl") == "question a2: missing field 'context'"
    assert _bad(tmp_path, lines[0] + '\n{"id": "a2", "context": "x\n', "r.jsonl") == \
        "line 2: not valid JSON (Unterminated string starting at: column 25)"  # not "starting at at"
    rows = _rows()
    rows[1]["answers"]["answer_start"] = [15]
    assert _bad(tmp_path, "\n".join(json.dumps(r) for r in rows), "r.jsonl") == \
        "question a2: answers has 2 texts but 1 answer_start values"


def test_missing_file(tmp_path):
    with pytest.raises(BertmodelError, match=r"nope\.json: no such file or directory$"):
        read_squad(tmp_path / "nope.json")


@pytest.mark.skipif(not (SHARED_DATA / "squad").is_dir(), reason=f"{SHARED_DATA}/squad is absent")
def test_shared_squad_heads():
    v1 = read_squad(SHARED_DATA / "squad" / "squad-v1.1-train-head.json")
    v2 = read_squad(SHARED_DATA / "squad" / "squad-v2.0-train-head.json")
    assert (len(v1), sum(e.is_impossible for e in v1)) == (3807, 0)
    assert (len(v2), sum(e.is_impossible for e in v2)) == (4719, 348)
    first = v1[0]
    assert (first.id, first.answers) == ("5733be284776f41900661182", [("Saint Bernadette Soubirous", 515)])
    assert all(e.context[s:s + len(t)] == t for e in v1 + v2 for t, s in e.answers)
