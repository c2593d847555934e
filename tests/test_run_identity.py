"""A run directory is known by its own record, never writes where it reads, and resumes
only on the data it was trained on: what a new user hit by fine-tuning into a project
folder, relabelling a file between two runs of one command, or typing --out wrong.

Also the fine-tuning options that silently meant nothing: a --metric-for-best the task
does not report, binary F1 of whichever text label sorted second, and the data that was
accepted without a word (blank texts, unlabelled evaluation data, SQuAD answers whose
every answer_start is wrong, questions cut to --max-query-length)."""
from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.metrics.classification import binary_f1
from bertmodel.data.synthetic import small_shard_dir
from finetune_fixtures import sentence, write_tsv
from finetune_fixtures import tiny_bert as make_tiny_bert

FAST = ["--batch-size", "4", "--eval-batch-size", "8", "--device", "cpu", "--no-progress", "--log-every", "1"]
LABELS3 = ("building", "harbour", "market")


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def finetune(kind, model, out, *args):
    return invoke("finetune", kind, "--model", model, "--out", out, *FAST, *args)


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def labelled_rows(rng, n, labels=LABELS3):
    # The label is a function of the first word, so a model can learn it.
    rows = []
    for i in range(n):
        text = sentence(rng)
        rows.append((i, text, labels[int(text.split()[0][1:]) % len(labels)]))
    return rows


@pytest.fixture(scope="module")
def topic_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("topics")
    rng = random.Random(3)
    header = ("index", "sentence", "label")
    return write_tsv(root / "train.tsv", header, labelled_rows(rng, 24)), \
        write_tsv(root / "dev.tsv", header, labelled_rows(rng, 9))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("shards") / "small", rows=48)


# -- 1. a folder that holds hf/ is not a run; --out never holds the model it reads ---------

def test_finetune_into_the_folder_of_its_own_model_is_refused_and_the_model_kept(tiny_bert, topic_files, tmp_path):
    proj = tmp_path / "proj"
    shutil.copytree(tiny_bert, proj / "hf")
    before = (proj / "hf" / "model.safetensors").read_bytes()
    result = finetune("classify", proj / "hf", proj, "--train", topic_files[0], "--max-steps", "1")
    assert "--out holds the --model this run reads" in one_line_error(result)
    assert (proj / "hf" / "model.safetensors").read_bytes() == before
    # and --out equal to --model (the easy typo)
    result = finetune("classify", proj / "hf", proj / "hf", "--train", topic_files[0], "--max-steps", "1")
    assert "--out is the --model this run reads" in one_line_error(result)
    assert sorted(p.name for p in (proj / "hf").iterdir()) == sorted(p.name for p in tiny_bert.iterdir())


@pytest.mark.parametrize("command", ["finetune", "pretrain"])
def test_a_folder_with_an_hf_subfolder_is_not_taken_for_a_run(command, tiny_bert, topic_files, shards, tmp_path):
    mine = tmp_path / "myproj" / "hf" / "mine.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("keep")
    if command == "finetune":
        result = finetune("classify", tiny_bert, tmp_path / "myproj", "--train", topic_files[0], "--max-steps", "1")
    else:
        result = invoke("pretrain", "--data", shards, "--out", tmp_path / "myproj", "--preset", "tiny",
                        "--batch-size", "4", "--max-steps", "1", "--no-progress")
    assert "exists and is not a run directory (no run.json or checkpoints)" in one_line_error(result)
    assert mine.read_text() == "keep"
    assert sorted(p.name for p in (tmp_path / "myproj").iterdir()) == ["hf"]


def test_pretrain_out_may_not_hold_its_shards(shards, tmp_path):
    data = tmp_path / "work" / "shards"
    shutil.copytree(shards, data)
    result = invoke("pretrain", "--data", data, "--out", tmp_path / "work", "--preset", "tiny", "--batch-size", "4",
                    "--max-steps", "1", "--no-progress")
    assert "--out holds the --data this run reads" in one_line_error(result)


def test_a_run_records_what_it_is(tiny_bert, topic_files, tmp_path):
    out = tmp_path / "run"
    assert finetune("classify", tiny_bert, out, "--train", topic_files[0], "--max-steps", "1").exit_code == 0
    record = json.loads((out / "run.json").read_text())
    assert record["task"] == "classification" and record["architecture"] == "BertForSequenceClassification"


# -- 7. another task's run directory: one line, not a state_dict traceback -----------------

def squad(path, rng, answer_start_offset=0, questions=6):
    context = sentence(rng, 20, 30)
    words = context.split()
    qas = []
    for n in range(questions):
        i = rng.randrange(len(words) - 2)
        start = len(" ".join(words[:i])) + (1 if i else 0)
        qas.append({"id": f"q{n}", "question": sentence(rng, 2, 4),
                    "answers": [{"text": words[i], "answer_start": start + answer_start_offset}]})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}))
    return path


@pytest.fixture(scope="module")
def qa_and_classify_runs(tiny_bert, topic_files, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    train = squad(root / "train.json", random.Random(5))
    qa = root / "qa"
    assert finetune("qa", tiny_bert, qa, "--train", train, "--max-steps", "1", "--max-seq-length", "48",
                    "--doc-stride", "16").exit_code == 0
    cls = root / "cls"
    assert finetune("classify", tiny_bert, cls, "--train", topic_files[0], "--max-steps", "1").exit_code == 0
    return qa, cls, train


def test_finetuning_into_another_tasks_run_is_one_line(qa_and_classify_runs, tiny_bert, topic_files, shards):
    qa, cls, train = qa_and_classify_runs
    result = finetune("classify", tiny_bert, qa, "--train", topic_files[0], "--max-steps", "2")
    assert one_line_error(result).endswith("holds a question-answering fine-tuning run (BertForQuestionAnswering), "
                                           "not a classification fine-tuning run; choose a new --out")
    result = finetune("qa", tiny_bert, cls, "--train", train, "--max-steps", "2", "--max-seq-length", "48")
    assert "holds a classification fine-tuning run" in one_line_error(result)
    result = invoke("pretrain", "--data", shards, "--out", cls, "--preset", "tiny", "--batch-size", "4",
                    "--max-steps", "2", "--no-progress")
    assert "not a pre-training run; choose a new --out" in one_line_error(result)


def test_a_run_without_run_json_is_still_known_by_its_checkpoints(qa_and_classify_runs, tiny_bert, topic_files,
                                                                  tmp_path):
    qa, _, _ = qa_and_classify_runs
    legacy = tmp_path / "legacy"
    shutil.copytree(qa, legacy)
    (legacy / "run.json").unlink()
    result = finetune("classify", tiny_bert, legacy, "--train", topic_files[0], "--max-steps", "2")
    assert "holds a question-answering fine-tuning run" in one_line_error(result)


def test_finetune_model_run_out_run_is_one_line(shards, tmp_path):
    run = tmp_path / "pre"
    assert invoke("pretrain", "--data", shards, "--out", run, "--preset", "tiny", "--batch-size", "4",
                  "--max-steps", "1", "--no-progress").exit_code == 0
    result = finetune("classify", run, run, "--train", shards / "manifest.json", "--max-steps", "1")
    assert "--out is the --model this run reads" in one_line_error(result)


# -- 2. resuming on other data -------------------------------------------------------------

@pytest.fixture()
def stopped_run(tiny_bert, topic_files, tmp_path):
    out = tmp_path / "relabel"
    args = ["--train", topic_files[0], "--validation", topic_files[1], "--max-steps", "6", "--save-every", "2"]
    result = finetune("classify", tiny_bert, out, *args, "--stop-at", "2")
    assert result.exit_code == 0, result.output
    return out, args


def relabelled(path, tmp_path, old="building", new="zoning"):
    copy = tmp_path / ("re-" + path.name)
    copy.write_text(path.read_text().replace(old, new))
    return copy


def test_resume_with_relabelled_data_is_refused_naming_the_labels(stopped_run, topic_files, tiny_bert, tmp_path):
    out, _ = stopped_run
    before = sorted(p.name for p in (out / "checkpoints").iterdir())
    train, dev = relabelled(topic_files[0], tmp_path), relabelled(topic_files[1], tmp_path)
    for extra in ([], ["--allow-changed-options"]):  # the head's classes cannot change, whatever is allowed
        result = finetune("classify", tiny_bert, out, "--train", train, "--validation", dev, "--max-steps", "6",
                          "--save-every", "2", *extra)
        line = one_line_error(result)
        assert "resuming with another label set (building, harbour, market -> harbour, market, zoning)" in line
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == before


def test_resume_with_changed_files_is_refused_unless_allowed(stopped_run, topic_files, tiny_bert, tmp_path):
    out, args = stopped_run
    # Same labels, other rows: the validation file loses its last example.
    dev = tmp_path / "dev-short.tsv"
    dev.write_text("".join(topic_files[1].read_text().splitlines(keepends=True)[:-1]))
    changed = ["--train", topic_files[0], "--validation", dev, "--max-steps", "6", "--save-every", "2"]
    line = one_line_error(finetune("classify", tiny_bert, out, *changed))
    assert "resuming on other data than the run was trained on (validation:" in line and str(dev) in line
    assert "train:" not in line
    # Another column is other data too.
    line = one_line_error(finetune("classify", tiny_bert, out, *args, "--text-column", "index"))
    assert "columns:" in line
    result = finetune("classify", tiny_bert, out, *changed, "--allow-changed-options")
    assert result.exit_code == 0, result.output
    assert "warning: resuming on changed data, as asked: validation:" in result.output
    # The same bytes under another name are the same data (the run now records dev-short).
    moved = tmp_path / "moved.tsv"
    shutil.copy(topic_files[0], moved)
    result = finetune("classify", tiny_bert, out, "--train", moved, "--validation", dev, "--max-steps", "6",
                      "--save-every", "2")
    assert result.exit_code == 0, result.output
    assert "already reached step 6" in result.output and "warning" not in result.output


def test_pretrain_resume_on_other_shards_is_refused(shards, tmp_path):
    other = small_shard_dir(tmp_path / "other", rows=48, seed=7)
    out = tmp_path / "run"
    base = ["--out", out, "--preset", "tiny", "--batch-size", "4", "--max-steps", "4", "--save-every", "2",
            "--no-progress"]
    assert invoke("pretrain", "--data", shards, *base, "--stop-at", "2").exit_code == 0
    line = one_line_error(invoke("pretrain", "--data", other, *base))
    assert "resuming on other data than the run was trained on (data:" in line and "sha256" in line
    result = invoke("pretrain", "--data", shards, *base)
    assert result.exit_code == 0, result.output


# -- 3, 4. the metric that picks the best model, and the class binary F1 is for -------------

@pytest.mark.parametrize("metric", ["f1", "acuracy"])
def test_a_metric_for_best_the_task_does_not_report_is_refused_before_training(metric, tiny_bert, topic_files,
                                                                              tmp_path):
    result = finetune("classify", tiny_bert, tmp_path / "run", "--train", topic_files[0], "--validation",
                      topic_files[1], "--metric-for-best", metric)
    assert one_line_error(result) == (f"Error: --metric-for-best {metric}: not a metric this task reports; "
                                      "choose one of accuracy, macro_f1, mcc, loss")
    assert not (tmp_path / "run").exists()


def test_qa_metric_for_best_is_checked_too(tiny_bert, tmp_path):
    train = squad(tmp_path / "train.json", random.Random(2))
    result = finetune("qa", tiny_bert, tmp_path / "run", "--train", train, "--metric-for-best", "accuracy",
                      "--max-seq-length", "48")
    assert one_line_error(result).endswith("choose one of exact_match, f1")


@pytest.fixture(scope="module")
def rte_like(tmp_path_factory):
    root = tmp_path_factory.mktemp("rte")
    rng = random.Random(8)
    header = ("index", "sentence", "label")
    return (write_tsv(root / "train.tsv", header, labelled_rows(rng, 16, ("entailment", "not_entailment"))),
            write_tsv(root / "dev.tsv", header, labelled_rows(rng, 12, ("entailment", "not_entailment"))))


@pytest.mark.parametrize("positive", [None, "entailment"])
def test_binary_f1_names_its_positive_label_and_can_be_chosen(positive, tiny_bert, rte_like, tmp_path):
    out = tmp_path / "run"
    extra = ["--positive-label", positive] if positive else []
    result = finetune("classify", tiny_bert, out, "--train", rte_like[0], "--validation", rte_like[1],
                      "--max-steps", "2", *extra)
    assert result.exit_code == 0, result.output
    chosen = positive or "not_entailment"
    assert f"f1 is the F1 of the positive label {chosen!r}" in result.output
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    f1 = [r["eval_f1"] for r in records if "eval_f1" in r][-1]
    result = invoke("evaluate", out, "--out", tmp_path / "eval")
    assert result.exit_code == 0, result.output
    predictions = [json.loads(line) for line in (tmp_path / "eval" / "predictions.jsonl").read_text().splitlines()]
    predicted = np.array([p["label"] == chosen for p in predictions])
    gold = np.array([p["gold"] == chosen for p in predictions])
    assert f1 == pytest.approx(binary_f1(predicted, gold, True))
    assert json.loads(result.stdout.splitlines()[0])["f1"] == pytest.approx(f1)


def test_a_positive_label_that_is_not_a_label_is_refused(tiny_bert, rte_like, topic_files, tmp_path):
    line = one_line_error(finetune("classify", tiny_bert, tmp_path / "a", "--train", rte_like[0],
                                   "--positive-label", "yes"))
    assert line == "Error: --positive-label yes: not a label of this run (its labels are entailment, not_entailment)"
    line = one_line_error(finetune("classify", tiny_bert, tmp_path / "b", "--train", topic_files[0],
                                   "--positive-label", "building"))
    assert "binary F1 needs two classes; this run has 3" in line


# -- 8, 9, 15. data accepted without a word ------------------------------------------------

def test_evaluate_on_a_file_without_labels_writes_predictions_and_no_metrics(stopped_run, topic_files, tmp_path):
    out, _ = stopped_run
    unlabelled = tmp_path / "new.tsv"
    unlabelled.write_text("".join(line.rsplit("\t", 1)[0] + "\n"
                                  for line in topic_files[1].read_text().splitlines()).replace("\tsentence\n",
                                                                                                "\tsentence\n"))
    header = topic_files[1].read_text().splitlines()[0].rsplit("\t", 1)[0]
    assert unlabelled.read_text().splitlines()[0] == header
    result = invoke("evaluate", out, "--data", unlabelled, "--out", tmp_path / "p")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "{}"
    assert f"no labels in {unlabelled}: predictions written, no metrics computed" in result.stderr
    records = [json.loads(line) for line in (tmp_path / "p" / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 9 and all(r["label"] in LABELS3 and "gold" not in r for r in records)


def test_blank_text_cells_are_reported_as_blank_labels_are(tiny_bert, topic_files, tmp_path):
    lines = topic_files[0].read_text().splitlines()
    lines[3] = "2\t \tbuilding"
    lines[7] = "6\t\tmarket"
    bad = tmp_path / "blank.tsv"
    bad.write_text("\n".join(lines) + "\n")
    line = one_line_error(finetune("classify", tiny_bert, tmp_path / "run", "--train", bad))
    assert line == f"Error: {bad}: line 4: text column 'sentence' is blank (2 blank texts in all)"


def test_squad_with_every_answer_start_wrong_says_why_nothing_is_left(tiny_bert, tmp_path):
    train = squad(tmp_path / "train.json", random.Random(6), answer_start_offset=1)
    line = one_line_error(finetune("qa", tiny_bert, tmp_path / "run", "--train", train, "--max-seq-length", "48"))
    assert line == (f"Error: {train}: no usable training examples: all 6 questions were skipped (6 whose "
                    "answer_start does not point at the answer text, 0 whose answer no token covers); "
                    "answer_start must be the answer's character offset in its context")
    assert not (tmp_path / "run").exists()


def test_questions_cut_to_max_query_length_are_reported(tiny_bert, tmp_path):
    train = squad(tmp_path / "train.json", random.Random(6))
    data = json.loads(train.read_text())
    data["data"][0]["paragraphs"][0]["qas"][0]["question"] = sentence(random.Random(1), 12, 13)
    train.write_text(json.dumps(data))
    result = finetune("qa", tiny_bert, tmp_path / "run", "--train", train, "--max-seq-length", "48",
                      "--max-query-length", "8", "--max-steps", "1")
    assert result.exit_code == 0, result.output
    assert "warning: train: 1 questions longer than --max-query-length 8 tokens were cut to it" in result.output


def test_another_split_of_the_same_saved_dataset_is_other_data(tiny_bert, tmp_path):
    import datasets

    rng = random.Random(4)
    rows = labelled_rows(rng, 24)
    split = {"sentence": [r[1] for r in rows], "label": [r[2] for r in rows]}
    other = {"sentence": split["sentence"][::-1], "label": split["label"][::-1]}
    saved = tmp_path / "ds"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(split),
                          "validation": datasets.Dataset.from_dict(split),
                          "other": datasets.Dataset.from_dict(other)}).save_to_disk(str(saved))
    out = tmp_path / "run"
    base = ["--train", saved, "--validation", saved, "--max-steps", "4", "--save-every", "2"]
    assert finetune("classify", tiny_bert, out, *base, "--stop-at", "2").exit_code == 0
    line = one_line_error(finetune("classify", tiny_bert, out, *base, "--validation-split", "other"))
    assert f"(validation: {saved} split validation (sha256" in line and f"-> {saved} split other (sha256" in line


def test_out_inside_a_directory_the_run_reads_is_refused(tiny_bert, topic_files, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(topic_files[0], data / "train.tsv")
    line = one_line_error(finetune("classify", tiny_bert, data / "run", "--train", data, "--max-steps", "1"))
    assert line == f"Error: {data / 'run'}: --out is inside the --train this run reads ({data}); choose an --out " \
        "outside it"
    assert sorted(p.name for p in data.iterdir()) == ["train.tsv"]


def test_v2_metrics_of_a_kind_of_question_the_validation_data_lacks_are_refused(tiny_bert, tmp_path):
    data = squad(tmp_path / "train.json", random.Random(2))  # every question answerable
    args = ["--train", data, "--validation", data, "--version-2", "--max-seq-length", "48", "--max-steps", "1"]
    line = one_line_error(finetune("qa", tiny_bert, tmp_path / "a", *args, "--metric-for-best", "NoAns_f1"))
    assert line.endswith("choose one of exact_match, f1, HasAns_exact, HasAns_f1")
    result = finetune("qa", tiny_bert, tmp_path / "b", *args, "--metric-for-best", "HasAns_f1")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "b" / "best.json").read_text())["metric"] == "HasAns_f1"
