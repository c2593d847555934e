"""Multiple choice (`bertmodel finetune choice`): reading SWAG's CSV, e-CARE's JSONL and
list columns (and refusing bad records in one line), the encoding against transformers'
tokenizer as run_swag.py calls it, training steps equal to transformers'
BertForMultipleChoice on our collated batches, FLOPs, and the CLI end to end on e-CARE
with a tiny model: the export loads in transformers and gives our logits, evaluate and
predict work, and a rerun resumes and then has nothing to do."""
from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
import torch

from bertmodel.data.choice import encode_choices, pad_choices, read_choices
from bertmodel.data.shards import tokenizer_info
from bertmodel.data.synthetic import write_small_vocab, write_tokenizer_files
from bertmodel.data.tables import open_table
from bertmodel.errors import BertmodelError
from bertmodel.hf import export_hf, load_into, load_pretrained
from bertmodel.model import BertForMultipleChoice, BertForPreTraining
from bertmodel.model.config import BertConfig
from bertmodel.model.unpad import set_unpad
from bertmodel.tasks.choice import ChoiceSet, MultipleChoiceTask
from finetune_fixtures import WORDS, invoke, sentence
from shared_data import SHARED_DATA
from test_heads_match_transformers import STEPS, tiny, train_both, twin

transformers = pytest.importorskip("transformers")

ECARE = SHARED_DATA / "multiple_choice" / "e-CARE"
VOCAB = SHARED_DATA / "bert-base-uncased-vocab.txt"
ECARE_COLUMNS = ["--context-column", "premise", "--question-column", "ask-for",
                 "--choice-columns", "hypothesis1,hypothesis2"]
needs_ecare = pytest.mark.skipif(not (ECARE / "dev.jsonl").is_file() or not VOCAB.is_file(),
                                 reason=f"e-CARE or the BERT vocabulary not found under {SHARED_DATA}")


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def ecare(split="dev"):
    return read_choices(open_table(ECARE / f"{split}.jsonl"), "premise", "ask-for",
                        choice_columns="hypothesis1,hypothesis2")


# -- reading ---------------------------------------------------------------------------

SWAG_HEADER = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"


def test_swag_csv_is_read_as_run_swag_reads_it(tmp_path):
    path = tmp_path / "val.csv"
    path.write_text(SWAG_HEADER
                    + 'anetv_1,5,"Students lower. She","Students lower.",She,gold,"runs.","sits, then waits.",'
                      'jumps.,sleeps.,1\n'
                    + "lsmdc_2,9,Someone opens. He,Someone opens.,He,gen,smiles.,cries.,laughs.,leaves.,3\n",
                    encoding="utf-8")
    examples = read_choices(open_table(path))  # no columns named: SWAG's, known by its header
    assert examples.contexts == ["Students lower.", "Someone opens."]
    assert examples.questions == ["She", "He"]
    assert examples.choices == [["runs.", "sits, then waits.", "jumps.", "sleeps."],
                                ["smiles.", "cries.", "laughs.", "leaves."]]
    assert examples.labels.tolist() == [1, 3] and examples.num_choices == 4
    assert examples.columns["choices"] == ["ending0", "ending1", "ending2", "ending3"]
    # run_swag's second segment: f"{header} {end}"
    assert examples.seconds()[:2] == ["She runs.", "She sits, then waits."]
    assert examples.head(1).choices == examples.choices[:1] and examples.record(1) == "line 3"


@needs_ecare
def test_ecare_is_read_by_its_columns_and_encoded_as_transformers_tokenizer(tmp_path):
    examples = ecare()
    raw = [json.loads(line) for line in (ECARE / "dev.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(examples) == len(raw) == 2132 and examples.num_choices == 2
    assert examples.labels.tolist() == [r["label"] for r in raw]
    assert examples.choices[5] == [raw[5]["hypothesis1"], raw[5]["hypothesis2"]]
    assert examples.questions[5] == raw[5]["ask-for"]
    # As run_swag tokenizes: tokenizer(firsts, seconds, truncation=True, max_length=...)
    first = examples.head(300)
    encoded = encode_choices(VOCAB, first, max_seq_length=24)
    tok = transformers.BertTokenizerFast(str(VOCAB))
    contexts = [c for c in first.contexts for _ in range(2)]
    ref = tok(contexts, first.seconds(), truncation=True, max_length=24)
    for i in range(len(contexts)):
        ids, segments = encoded.sequences.row(i)
        assert ids.tolist() == ref["input_ids"][i] and segments.tolist() == ref["token_type_ids"][i], i
    whole = tok(contexts, first.seconds())["input_ids"]
    cut = np.array([len(ids) > 24 for ids in whole]).reshape(-1, 2).any(1)
    assert encoded.truncated == int(cut.sum()) > 0  # examples with a choice cut, not choices
    batch = pad_choices(encoded, [0, 7, 3], pad_id=0, pad_multiple=8)
    assert {k: v.shape for k, v in batch.items()} == {"input_ids": (3, 2, 24), "token_type_ids": (3, 2, 24),
                                                      "attention_mask": (3, 2, 24), "labels": (3,)}
    row = np.asarray(ref["input_ids"][14 + 1])  # example 7, choice 1
    assert batch["input_ids"][1, 1, :len(row)].tolist() == row.tolist()
    assert batch["attention_mask"][1, 1].sum() == len(row)
    assert batch["labels"].tolist() == [raw[i]["label"] for i in (0, 7, 3)]


def test_a_list_column_a_default_question_and_unlabelled_data(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"context": "w1 w2", "question": "w3", "choices": ["w4", "w5 w6", "w7"], "label": 2},
        {"context": "w8", "question": "", "choices": ["w9", "w10", "w11 w12"], "label": "0"}])
    examples = read_choices(open_table(path))
    assert examples.questions == ["w3", ""] and examples.labels.tolist() == [2, 0]
    assert examples.seconds() == ["w3 w4", "w3 w5 w6", "w3 w7", "w9", "w10", "w11 w12"]  # a blank question: none
    vocab = write_small_vocab(tmp_path / "vocab.txt", 20)
    encoded = encode_choices(vocab, examples, max_seq_length=16)
    batch = pad_choices(encoded, [1, 0], pad_id=0, pad_multiple=1)
    assert batch["input_ids"].shape == (2, 3, 8)  # [CLS] w1 w2 [SEP] w3 w5 w6 [SEP] is the longest
    # w<i> is id i + 5 (after the five specials); [CLS] 2, [SEP] 3, [PAD] 0
    assert batch["input_ids"][1, 1].tolist() == [2, 6, 7, 3, 8, 10, 11, 3]
    assert batch["token_type_ids"][1, 1].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert batch["input_ids"][0, 0].tolist() == [2, 13, 3, 14, 3, 0, 0, 0]
    assert batch["attention_mask"][0, 0].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert batch["labels"].tolist() == [0, 2]
    unlabelled = write_jsonl(tmp_path / "u.jsonl", [{"context": "w1", "choices": ["w2", "w3"]}])
    assert read_choices(open_table(unlabelled), labels_required=False).labels is None


def test_a_saved_dataset_in_swag_layout_with_classlabel_ids(tmp_path):
    """The hub's SWAG ("regular") as save_to_disk keeps it: its label a ClassLabel whose
    ids are the choice indices; the test split's -1 ("no label") reads as unlabelled."""
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"sent1": datasets.Value("string"), "sent2": datasets.Value("string"),
                                  **{f"ending{i}": datasets.Value("string") for i in range(4)},
                                  "label": datasets.ClassLabel(names=["0", "1", "2", "3"])})
    rows = {"sent1": ["a b", "c"], "sent2": ["d", "e"], "ending0": ["f", "g"], "ending1": ["h", "i"],
            "ending2": ["j", "k"], "ending3": ["l", "m"]}
    saved = datasets.DatasetDict({"validation": datasets.Dataset.from_dict({**rows, "label": [3, 0]}, features),
                                  "test": datasets.Dataset.from_dict({**rows, "label": [-1, -1]}, features)})
    saved.save_to_disk(str(tmp_path / "swag"))
    examples = read_choices(open_table(tmp_path / "swag", split="validation"))
    assert examples.labels.tolist() == [3, 0] and examples.choices[1] == ["g", "i", "k", "m"]
    assert examples.seconds()[:2] == ["d f", "d h"] and examples.record(1) == "row 1"
    assert read_choices(open_table(tmp_path / "swag", split="test"), labels_required=False).labels is None
    with pytest.raises(BertmodelError, match=r"swag: row 0: label -1 is out of range for 4 choices"):
        read_choices(open_table(tmp_path / "swag", split="test"))


@pytest.mark.parametrize("records,message", [
    ([{"context": "a", "choices": ["b", "c"], "label": 0}, {"context": "d", "choices": ["e", "f", "g"], "label": 1}],
     "d.jsonl: line 2: 3 choices in 'choices', but line 1 has 2; every record needs the same number of choices"),
    ([{"context": "a", "choices": ["b", "c"], "label": 2}],
     "d.jsonl: line 1: label 2 is out of range for 2 choices (0 to 1)"),
    ([{"context": "a", "choices": ["b", "c"], "label": "first"}],
     "d.jsonl: line 1: label column 'label' is 'first', not an integer (the 0-based index of the right choice)"),
    ([{"context": "a", "choices": ["b", "c"], "label": 0.5}],
     "d.jsonl: line 1: label column 'label' is 0.5, not an integer (the 0-based index of the right choice)"),
    ([{"premise": "a", "choices": ["b", "c"], "label": 0}],
     "d.jsonl: no context column 'context'; the columns are 'premise', 'choices', 'label' (multiple choice: "
     "name them with --context-column, --question-column and --choices-column or --choice-columns)"),
    ([{"context": "a", "choices": ["b", " "], "label": 0}], "d.jsonl: line 1: choice 1 in 'choices' is blank"),
    ([{"context": "a", "choices": ["b"], "label": 0}],
     "d.jsonl: line 1: 1 choice(s) in 'choices'; multiple choice needs at least 2"),
    ([{"context": "a", "choices": "b", "label": 0}],
     "d.jsonl: line 1: choices column 'choices' holds str 'b', not a list of choices (one column per choice: "
     "--choice-columns)"),
], ids=["ragged", "out-of-range", "text-label", "fractional-label", "missing-column", "blank", "one-choice",
        "not-a-list"])
def test_bad_records_are_one_line_naming_the_file(tmp_path, records, message):
    path = write_jsonl(tmp_path / "d.jsonl", records)
    with pytest.raises(BertmodelError) as caught:
        read_choices(open_table(path))
    assert str(caught.value) == f"{tmp_path}/{message}"


def test_ragged_choice_columns_are_refused(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"p": "a", "h1": "b", "h2": "c", "label": 0},
                                              {"p": "d", "h1": "e", "label": 1}])
    with pytest.raises(BertmodelError, match=r"d\.jsonl: line 2: text column 'h2' is missing$"):
        read_choices(open_table(path), "p", choice_columns="h1,h2")


# -- the same steps as transformers ----------------------------------------------------

def choice_batches(tmp_path, steps: int):
    """`steps` batches of 6 examples of 3 choices collated as MultipleChoiceTask collates
    them (ChoiceSet over encode_choices): ragged lengths, so every batch is padded."""
    rng = random.Random(0)
    records = [{"context": sentence(rng, 1, 4), "question": sentence(rng, 1, 2),
                "choices": [sentence(rng, 3, 14) for _ in range(3)], "label": rng.randrange(3)} for _ in range(24)]
    vocab = write_small_vocab(tmp_path / "vocab.txt", WORDS)
    encoded = encode_choices(vocab, read_choices(open_table(write_jsonl(tmp_path / "d.jsonl", records))), 24)
    data, order = ChoiceSet(encoded, 0, 1), np.random.default_rng(0)
    for _ in range(steps):
        batch = {k: torch.from_numpy(v) for k, v in data.collate(order.choice(len(data), 6, False)).items()}
        assert batch["input_ids"].shape[:2] == (6, 3) and not bool(batch["attention_mask"].all())
        yield batch, dict(batch)


@pytest.mark.parametrize("kernel", [None, "repad"], ids=["padded", "packed"])
def test_multiple_choice_steps_equal_transformers(tmp_path, kernel):
    """As tests/test_heads_match_transformers.py does it for the other heads: the loss,
    learning rate and gradient norm of every step and the final weights; the padded
    encoder and the packed one --unpad auto picks on the CPU."""
    config = dataclasses.replace(tiny(WORDS + 5), initializer_range=0.1)
    torch.manual_seed(0)
    ours = BertForMultipleChoice(config)
    # Weights that tell choices apart from the start (init std 0.1, a scorer of std 1). At
    # the default 0.02 every choice scores alike, so each gradient is the difference of C
    # nearly equal ones; its rounding is then a large part of it, and Adam's first step
    # (lr times the gradient's sign) turns that into 2 lr where an entry is near 0.
    torch.nn.init.normal_(ours.classifier.weight, std=1.0)
    theirs = twin(ours, transformers.BertForMultipleChoice)
    set_unpad(ours, kernel)
    # The scorer's bias shifts every choice's logit alike, and a key bias b every attention
    # score of a query q alike (q.b): the softmaxes do not see them.
    shifts = ("classifier.bias", *(f"bert.encoder.layer.{i}.attention.self.key.bias"
                                   for i in range(config.num_hidden_layers)))
    train_both(ours, theirs, choice_batches(tmp_path, STEPS), clip=1.6, loss_free=shifts)


# -- FLOPs -----------------------------------------------------------------------------

def test_flops_of_a_step_are_positive_and_grow_with_the_choices():
    config = BertConfig.preset("tiny", vocab_size=100)
    flops = MultipleChoiceTask.flops

    def step(choices: int) -> float:
        ids = torch.zeros(4, choices, 16, dtype=torch.long)
        return flops(None, config, {"input_ids": ids})

    assert step(2) > 0
    assert step(4) == pytest.approx(2 * step(2), rel=1e-12)  # C sequences of T per example
    packed = flops(None, config, {"input_ids": torch.zeros(4, 2, 16, dtype=torch.long)},
                   {"tokens": 4 * 2 * 10, "attention_pairs": 4 * 2 * 100})
    assert 0 < packed < step(2)  # only the real tokens of the B * C rows


# -- end to end ------------------------------------------------------------------------

FAST = ["--batch-size", "16", "--eval-batch-size", "32", "--device", "cpu", "--no-progress", "--log-every", "1",
        "--max-seq-length", "48"]


@pytest.fixture(scope="module")
def tiny_english_bert(tmp_path_factory):
    """A random tiny BERT (hidden 32) over bert-base-uncased's vocabulary, so e-CARE's
    text tokenizes into words, in transformers' layout."""
    root = tmp_path_factory.mktemp("tiny-english-bert")
    write_tokenizer_files(root / "tok", VOCAB)
    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=30522, hidden_size=32, num_attention_heads=4,
                               intermediate_size=64, max_position_embeddings=64)
    return export_hf(BertForPreTraining(config), root / "bert", tokenizer=tokenizer_info(root / "tok"))


@pytest.fixture(scope="module")
def ecare_run(tiny_english_bert, tmp_path_factory):
    """Stopped at step 4 of 8, then the same command again: it resumes and finishes."""
    out = tmp_path_factory.mktemp("ecare") / "run"
    command = ["finetune", "choice", "--model", tiny_english_bert, "--train", ECARE / "train.jsonl",
               "--validation", ECARE / "dev.jsonl", *ECARE_COLUMNS, "--out", out, *FAST,
               "--max-train-examples", "64", "--max-eval-examples", "64", "--max-steps", "8", "--eval-every", "4",
               "--save-every", "4", "--lr", "1e-3", "--seed", "1"]
    first = invoke(*command, "--stop-at", "4")
    assert first.exit_code == 0, first.output
    assert "train: 64 examples from" in first.output and "(2 choices;" in first.output
    second = invoke(*command)
    assert second.exit_code == 0 and "resuming from" in second.output, second.output
    third = invoke(*command)
    assert third.exit_code == 0 and "already reached step 8 of 8; nothing to do" in third.output, third.output
    return out


@needs_ecare
@pytest.mark.slow
def test_finetune_choice_on_ecare_exports_a_transformers_model(ecare_run):
    evals = [r for r in map(json.loads, (ecare_run / "metrics.jsonl").read_text().splitlines()) if "eval_loss" in r]
    assert [r["step"] for r in evals] == [4, 8]
    assert all(0.0 <= r["eval_accuracy"] <= 1.0 and r["eval_loss"] > 0 for r in evals)
    trained = [r for r in map(json.loads, (ecare_run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert trained and all("accuracy" in r for r in trained)
    assert json.loads((ecare_run / "run.json").read_text())["task"] == "multiple_choice"

    theirs, info = transformers.AutoModelForMultipleChoice.from_pretrained(ecare_run / "hf",
                                                                           output_loading_info=True)
    assert type(theirs).__name__ == "BertForMultipleChoice"
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    pre = load_pretrained(ecare_run / "hf")
    ours = BertForMultipleChoice(pre.config)
    assert load_into(ours, pre) == []
    batch = pad_choices(encode_choices(ecare_run / "hf", ecare().head(12), 48), np.arange(12), 0, 1)
    inputs = {k: torch.from_numpy(v) for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(**inputs).logits, theirs.eval()(**inputs).logits,
                                   atol=1e-5, rtol=1e-5)


@needs_ecare
@pytest.mark.slow
def test_evaluate_and_predict_a_choice_run(ecare_run, tmp_path):
    done = invoke("evaluate", ecare_run, "--out", tmp_path, "--device", "cpu")
    assert done.exit_code == 0, done.output
    metrics = json.loads(done.stdout)
    assert sorted(metrics) == ["accuracy", "loss"]
    last = [r for r in map(json.loads, (ecare_run / "metrics.jsonl").read_text().splitlines())
            if "eval_accuracy" in r][-1]
    best = json.loads((ecare_run / "best.json").read_text())
    assert metrics["accuracy"] == pytest.approx(best["value"]) and 0 <= last["eval_accuracy"] <= 1
    records = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    raw = [json.loads(line) for line in (ECARE / "dev.jsonl").read_text(encoding="utf-8").splitlines()[:64]]
    assert len(records) == 64  # the run's --max-eval-examples
    assert records[3]["context"] == raw[3]["premise"] and records[3]["question"] == raw[3]["ask-for"]
    assert records[3]["choices"] == [raw[3]["hypothesis1"], raw[3]["hypothesis2"]]
    assert [r["gold"] for r in records] == [r["label"] for r in raw]
    assert all(r["label"] in (0, 1) and r["probability"] == max(r["probabilities"])
               and sum(r["probabilities"]) == pytest.approx(1.0) for r in records)
    assert metrics["accuracy"] == pytest.approx(np.mean([r["label"] == r["gold"] for r in records]))

    unlabelled = write_jsonl(tmp_path / "new.jsonl", [{k: v for k, v in r.items() if k != "label"} for r in raw[:5]])
    predicted = invoke("predict", ecare_run, "--file", unlabelled, "--device", "cpu")
    assert predicted.exit_code == 0, predicted.output
    lines = [json.loads(line) for line in predicted.stdout.splitlines()]
    assert [r["choices"] for r in lines] == [r["choices"] for r in records[:5]]
    assert [r["label"] for r in lines] == [r["label"] for r in records[:5]]
    np.testing.assert_allclose([r["probabilities"] for r in lines], [r["probabilities"] for r in records[:5]],
                               atol=1e-5)
    assert all("gold" not in r for r in lines)

    refused = invoke("predict", ecare_run, "Some text.", "--device", "cpu")
    assert refused.exit_code == 1
    assert refused.stderr == (f"Error: {ecare_run}: a multiple-choice model; pass --file with a context and the "
                              "choices of each record (in the run's columns)\n")
