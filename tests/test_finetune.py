"""`bertmodel finetune classify|qa`, `evaluate` and `predict` end to end through the CLI,
on a tiny random BERT exported as a transformers directory and small files written here:
labels of every kind, pairs, regression, resume and seed exactness, and the export
checked against transformers (Auto classes, logits, pipelines)."""
import json
import math
import random

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.hf import load_into, load_pretrained
from bertmodel.model import BertForQuestionAnswering, BertForSequenceClassification
from finetune_fixtures import sentence, write_tsv
from finetune_fixtures import tiny_bert as make_tiny_bert

FAST = ["--batch-size", "4", "--eval-batch-size", "8", "--device", "cpu", "--no-progress", "--log-every", "1"]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A random tiny BertForPreTraining in transformers' layout, with its tokenizer."""
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def finetune(kind, model, out, *args):
    result = invoke("finetune", kind, "--model", model, "--out", out, *FAST, *args)
    assert result.exit_code == 0, result.output
    return result


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def eval_records(run):
    return [r for r in read_jsonl(run / "metrics.jsonl") if any(k.startswith("eval_") for k in r)]


def final_state(run):
    steps = sorted((run / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    return torch.load(steps[-1] / "state.pt", map_location="cpu", weights_only=False)


# -- classification data -----------------------------------------------------------------

@pytest.fixture(scope="module")
def pair_files(tmp_path_factory):
    """RTE-like: sentence1, sentence2, string label (entailment / not_entailment)."""
    root = tmp_path_factory.mktemp("pairs")
    rng = random.Random(1)

    def rows(n):
        out = []
        for i in range(n):
            a, b = sentence(rng), sentence(rng)
            out.append((i, a, b, "entailment" if set(a.split()) & set(b.split()) else "not_entailment"))
        return out
    header = ("index", "sentence1", "sentence2", "label")
    return write_tsv(root / "train.tsv", header, rows(32)), write_tsv(root / "dev.tsv", header, rows(12))


@pytest.fixture(scope="module")
def pair_run(tiny_bert, pair_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("pair-run") / "run"
    finetune("classify", tiny_bert, out, "--train", pair_files[0], "--validation", pair_files[1],
             "--text-column", "sentence1", "--text-pair-column", "sentence2", "--max-steps", "4",
             "--eval-every", "2", "--lr", "1e-3")
    return out


def test_classify_pairs_writes_metrics_best_model_and_labels(pair_run, pair_files):
    evals = eval_records(pair_run)
    assert [r["step"] for r in evals] == [2, 4]
    for r in evals:
        assert 0 <= r["eval_accuracy"] <= 1 and 0 <= r["eval_macro_f1"] <= 1 and -1 <= r["eval_mcc"] <= 1
    best = json.loads((pair_run / "best.json").read_text())
    assert best["metric"] == "accuracy"
    assert best["value"] == max(r["eval_accuracy"] for r in evals)
    tied = [r for r in evals if r["eval_accuracy"] == best["value"]]  # a tie goes to the lower eval loss
    assert best["step"] == min(r["step"] for r in tied if r["eval_loss"] == min(t["eval_loss"] for t in tied))
    config = json.loads((pair_run / "hf" / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "entailment", "1": "not_entailment"}  # sorted, as run_glue
    assert config["label2id"] == {"entailment": 0, "not_entailment": 1}


def test_evaluate_prints_one_json_object_that_matches_its_predictions(pair_run, pair_files, tmp_path):
    result = invoke("evaluate", pair_run, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)  # one JSON object, nothing else on stdout
    assert {"accuracy", "macro_f1", "mcc"} <= set(metrics)
    records = read_jsonl(tmp_path / "predictions.jsonl")
    dev = pair_files[1].read_text().splitlines()[1:]
    assert [(r["text"], r["text_pair"], r["gold"]) for r in records] == [tuple(x.split("\t")[1:]) for x in dev]
    accuracy = sum(r["label"] == r["gold"] for r in records) / len(records)
    assert metrics["accuracy"] == pytest.approx(accuracy)
    # The best model in RUN/hf is the one evaluated: its accuracy is best.json's.
    assert metrics["accuracy"] == pytest.approx(json.loads((pair_run / "best.json").read_text())["value"])
    # predict on the same pairs gives the same labels and probabilities.
    texts = [r["text"] for r in records[:3]]
    pairs = [a for r in records[:3] for a in ("--pair", r["text_pair"])]
    lines = invoke("predict", pair_run, *texts, *pairs).stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == [r["label"] for r in records[:3]]
    assert [float(line.split("\t")[1]) for line in lines] == pytest.approx([r["probability"] for r in records[:3]],
                                                                          abs=1e-4)


def test_predict_file_labels_each_record_as_the_command_line_does(pair_run, tmp_path):
    records = [{"text": "w1 w2 w3", "text_pair": "w4 w5"}, {"text": "w6", "text_pair": "w7 w8 w9 w1"}]
    given = tmp_path / "pairs.jsonl"
    given.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = invoke("predict", pair_run, "--file", given)
    assert result.exit_code == 0, result.output
    out = [json.loads(line) for line in result.stdout.splitlines()]
    assert [{k: r[k] for k in ("text", "text_pair")} for r in out] == records
    assert all(sum(r["probabilities"].values()) == pytest.approx(1) for r in out)
    lines = invoke("predict", pair_run, "w1 w2 w3", "w6", "--pair", "w4 w5", "--pair", "w7 w8 w9 w1").stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == [r["label"] for r in out]
    assert [float(line.split("\t")[1]) for line in lines] == pytest.approx([r["probability"] for r in out], abs=1e-4)
    # A pair on some lines only is refused, naming both lines, rather than dropped.
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps(records[0]) + "\n" + json.dumps({"text": "w6"}) + "\n")
    refused = invoke("predict", pair_run, "--file", mixed)
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr == (f"Error: {mixed}: line 2 has no \"text_pair\" string, but line 1 has one; "
                              "give every record a text_pair, or none\n")


def test_evaluate_keeps_earlier_predictions_without_overwrite(pair_run, pair_files, tmp_path):
    # Predictions of another data set (here: the first dev rows only) are the user's:
    # a second evaluation into the same place refuses before any work, and replaces
    # them with --overwrite.
    subset = tmp_path / "dev-head.tsv"
    subset.write_text("\n".join(pair_files[1].read_text().splitlines()[:4]) + "\n")
    out = tmp_path / "eval"
    assert invoke("evaluate", pair_run, "--data", subset, "--out", out).exit_code == 0
    first = (out / "predictions.jsonl").read_bytes()
    assert len(read_jsonl(out / "predictions.jsonl")) == 3
    again = invoke("evaluate", pair_run, "--out", out)
    assert again.exit_code == 1 and again.stdout == ""
    assert again.stderr == (f"Error: {out / 'predictions.jsonl'}: already exists (an earlier evaluation's predictions); "
                            "pass --overwrite to replace it, or --out DIR\n")
    assert (out / "predictions.jsonl").read_bytes() == first
    replaced = invoke("evaluate", pair_run, "--out", out, "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert len(read_jsonl(out / "predictions.jsonl")) == len(pair_files[1].read_text().splitlines()) - 1


def test_evaluate_and_predict_take_unpad_and_agree_across_it(pair_run, tmp_path):
    from bertmodel.inference.predict import _setup

    kernels = {mode: _setup(pair_run, {}, "cpu", read_validation=False, unpad=mode)[1].bert.unpad
               for mode in ("on", "off", "auto")}
    assert kernels == {"on": "repad", "off": None, "auto": "repad"}  # auto: packed for classification on the CPU
    probabilities = {}
    for mode in ("on", "off"):
        result = invoke("evaluate", pair_run, "--out", tmp_path / mode, "--unpad", mode)
        assert result.exit_code == 0, result.output
        probabilities[mode] = [r["probability"] for r in read_jsonl(tmp_path / mode / "predictions.jsonl")]
        assert invoke("predict", pair_run, "w1 w2", "--pair", "w3 w4 w5", "--unpad", mode).exit_code == 0
    assert probabilities["on"] == pytest.approx(probabilities["off"], abs=1e-5)


def test_hf_export_loads_in_transformers_with_equal_logits(pair_run, pair_files):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    hf, info = AutoModelForSequenceClassification.from_pretrained(pair_run / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert hf.config.id2label == {0: "entailment", 1: "not_entailment"}
    assert hf.config.label2id == {"entailment": 0, "not_entailment": 1}
    pre = load_pretrained(pair_run / "hf")
    ours = BertForSequenceClassification(pre.config, 2)
    assert not [n for n in load_into(ours, pre) if "newly" in n]
    dev = [line.split("\t") for line in pair_files[1].read_text().splitlines()[1:]]
    tok = AutoTokenizer.from_pretrained(pair_run / "hf")
    batch = tok([r[1] for r in dev], [r[2] for r in dev], padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = hf.eval()(**batch).logits
        mine = ours.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).logits
    torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
    assert theirs.std() > 0  # not a constant head


def test_text_classification_pipeline_agrees_with_predict(pair_run, pair_files):
    from transformers import pipeline

    dev = [line.split("\t") for line in pair_files[1].read_text().splitlines()[1:]][:5]
    classify = pipeline("text-classification", model=str(pair_run / "hf"), device="cpu")
    theirs = [classify({"text": r[1], "text_pair": r[2]}) for r in dev]
    theirs = [t[0] if isinstance(t, list) else t for t in theirs]
    lines = invoke("predict", pair_run, *[r[1] for r in dev], *[a for r in dev for a in ("--pair", r[2])]).stdout
    ours = [line.split("\t") for line in lines.splitlines()]
    assert [o[0] for o in ours] == [t["label"] for t in theirs]
    assert [float(o[1]) for o in ours] == pytest.approx([t["score"] for t in theirs], abs=1e-4)


def test_the_pair_reaches_the_model(pair_run):
    """The second text is segment B: the same first text with another pair scores differently."""
    one = invoke("predict", pair_run, "w1 w2 w3", "--pair", "w1 w2 w3").stdout
    other = invoke("predict", pair_run, "w1 w2 w3", "--pair", "w40 w41 w42 w43").stdout
    alone = invoke("predict", pair_run, "w1 w2 w3").stdout
    assert len({one.split("\t")[1], other.split("\t")[1], alone.split("\t")[1]}) == 3


def test_evaluate_reads_data_as_the_run_did_without_a_header(tiny_bert, tmp_path):
    """CoLA's layout (no header; label in column 1, text in 3): evaluate, given no data
    options, reads the run's validation file with the run's --no-header."""
    rng = random.Random(6)
    train = tmp_path / "train.tsv"
    train.write_text("".join(f"src\t{i % 2}\t\t{sentence(rng)}\n" for i in range(12)))
    out = tmp_path / "run"
    finetune("classify", tiny_bert, out, "--train", train, "--validation", train, "--no-header",
             "--text-column", "3", "--label-column", "1", "--max-steps", "1")
    result = invoke("evaluate", out, "--out", tmp_path / "eval")
    assert result.exit_code == 0, result.output
    assert len(read_jsonl(tmp_path / "eval" / "predictions.jsonl")) == 12


# -- labels of each kind -----------------------------------------------------------------

def test_integer_labels_from_jsonl_keep_their_values(tiny_bert, tmp_path):
    rng = random.Random(2)
    lines = [json.dumps({"sentence": sentence(rng), "label": i % 3 * 5}) for i in range(24)]  # 0, 5, 10
    (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "dev.jsonl").write_text("\n".join(lines[:9]) + "\n")
    out = tmp_path / "run"
    finetune("classify", tiny_bert, out, "--train", tmp_path / "train.jsonl", "--validation",
             tmp_path / "dev.jsonl", "--max-steps", "2")
    config = json.loads((out / "hf" / "config.json").read_text())
    assert config["id2label"] == {"0": "0", "1": "5", "2": "10"}  # numeric order, not "10" < "5"
    assert config["num_labels"] == 3
    metrics = json.loads(invoke("evaluate", out).stdout)
    records = read_jsonl(out / "predictions.jsonl")
    assert {type(r["gold"]) for r in records} == {int} and {r["label"] for r in records} <= {0, 5, 10}
    assert metrics["accuracy"] == pytest.approx(sum(r["label"] == r["gold"] for r in records) / len(records))
    assert {"accuracy", "macro_f1", "mcc"} <= set(metrics)


def test_regression_trains_on_mse_and_reports_correlations(tiny_bert, tmp_path):
    rng = random.Random(3)
    rows = [(sentence(rng), f"{rng.uniform(0, 5):.3f}") for _ in range(24)]
    write_tsv(tmp_path / "train.tsv", ("sentence", "score"), rows)
    write_tsv(tmp_path / "dev.tsv", ("sentence", "score"), rows[:10])
    out = tmp_path / "run"
    finetune("classify", tiny_bert, out, "--train", tmp_path / "train.tsv", "--validation", tmp_path / "dev.tsv",
             "--label-column", "score", "--num-labels", "1", "--max-steps", "2", "--eval-every", "1")
    evals = eval_records(out)
    assert {"eval_pearson", "eval_spearman", "eval_mse"} <= set(evals[-1])
    assert "eval_accuracy" not in evals[-1]
    assert json.loads((out / "best.json").read_text())["metric"] == "pearson"
    config = json.loads((out / "hf" / "config.json").read_text())
    assert config["num_labels"] == 1 and config["problem_type"] == "regression"
    # The reported MSE is that of the predictions written, against the gold values.
    metrics = json.loads(invoke("evaluate", out).stdout)
    records = read_jsonl(out / "predictions.jsonl")
    mse = np.mean([(r["prediction"] - float(r["gold"])) ** 2 for r in records])
    assert metrics["mse"] == pytest.approx(mse, rel=1e-5)
    assert -1 <= metrics["pearson"] <= 1 and -1 <= metrics["spearman"] <= 1
    # The training loss is the MSE of the batch (step 1 ran on the initial weights, dropout on):
    # with targets in 0..5 and a head starting near 0, it must be near E[y^2], not a cross-entropy.
    first = read_jsonl(out / "metrics.jsonl")[0]
    targets = np.array([float(s) for _, s in rows])
    assert first["loss"] > 2 and first["loss"] == pytest.approx(np.mean(targets ** 2), rel=0.6)


# -- exactness ---------------------------------------------------------------------------

def _classify_args(tiny_bert, pair_files, out, *extra, steps=6):
    return ("finetune", "classify", "--model", tiny_bert, "--out", out, *FAST, "--train", pair_files[0],
            "--validation", pair_files[1], "--text-column", "sentence1", "--text-pair-column", "sentence2",
            "--max-steps", steps, "--eval-every", "2", "--save-every", "2", "--lr", "1e-3", *extra)


def _same_state(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_resume_after_stop_at_equals_the_uninterrupted_run(tiny_bert, pair_files, tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert invoke(*_classify_args(tiny_bert, pair_files, straight)).exit_code == 0
    first = invoke(*_classify_args(tiny_bert, pair_files, resumed, "--stop-at", "3"))
    assert first.exit_code == 0, first.output
    assert final_state(resumed)["step"] == 3
    second = invoke(*_classify_args(tiny_bert, pair_files, resumed))
    assert second.exit_code == 0 and "resuming from" in second.output
    a, b = final_state(straight), final_state(resumed)
    assert a["step"] == b["step"] == 6
    _same_state(a["model"], b["model"])
    assert [r for r in eval_records(straight)] == [r for r in eval_records(resumed)]
    assert json.loads((straight / "best.json").read_text()) == json.loads((resumed / "best.json").read_text())


def test_the_seed_makes_a_cpu_run_exactly_repeatable(tiny_bert, pair_files, tmp_path):
    runs = {}
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        assert invoke(*_classify_args(tiny_bert, pair_files, tmp_path / name, "--seed", seed, steps=3)).exit_code == 0
        runs[name] = final_state(tmp_path / name)["model"]
    _same_state(runs["a"], runs["b"])
    assert not torch.equal(runs["a"]["classifier.weight"], runs["c"]["classifier.weight"])


# -- question answering ------------------------------------------------------------------

def squad_file(path, rng, articles=3, questions=4):
    """SQuAD v1.1 JSON: contexts of w-words, each answer a span of them found by its start."""
    data, n = [], 0
    for a in range(articles):
        context = sentence(rng, 20, 40)
        words = context.split()
        qas = []
        for _ in range(questions):
            i = rng.randrange(len(words) - 3)
            answer = " ".join(words[i:i + rng.randrange(1, 4)])
            start = len(" ".join(words[:i])) + (1 if i else 0)
            assert context[start:start + len(answer)] == answer
            qas.append({"id": f"q{n}", "question": sentence(rng, 2, 5),
                        "answers": [{"text": answer, "answer_start": start}]})
            n += 1
        data.append({"title": f"t{a}", "paragraphs": [{"context": context, "qas": qas}]})
    path.write_text(json.dumps({"version": "1.1", "data": data}))
    return path


@pytest.fixture(scope="module")
def qa_run(tiny_bert, tmp_path_factory):
    root = tmp_path_factory.mktemp("qa")
    rng = random.Random(4)
    train, dev = squad_file(root / "train.json", rng), squad_file(root / "dev.json", rng, articles=2)
    out = root / "run"
    finetune("qa", tiny_bert, out, "--train", train, "--validation", dev, "--max-steps", "3",
             "--max-seq-length", "32", "--doc-stride", "8", "--lr", "1e-3")
    return out, dev


def test_qa_end_to_end_writes_official_predictions_and_scores(qa_run, tmp_path):
    out, dev = qa_run
    evals = eval_records(out)
    assert {"eval_exact_match", "eval_f1"} <= set(evals[-1])
    result = invoke("evaluate", out, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    assert 0 <= metrics["exact_match"] <= 100 and metrics["exact_match"] <= metrics["f1"] <= 100
    again = invoke("evaluate", out, "--out", tmp_path)  # SQuAD's two files are kept as well
    assert again.exit_code == 1 and f"{tmp_path / 'predictions.json'}: already exists" in again.stderr
    assert metrics["f1"] == pytest.approx(evals[-1]["eval_f1"])
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    nbest = json.loads((tmp_path / "nbest_predictions.json").read_text())
    squad = json.loads(dev.read_text())["data"]
    gold = {q["id"]: (p["context"], q["answers"][0]["text"]) for a in squad for p in a["paragraphs"]
            for q in p["qas"]}
    assert set(predictions) == set(nbest) == set(gold)
    for qid, text in predictions.items():
        assert text and text in gold[qid][0]  # an exact span of the context
        assert nbest[qid][0]["text"] == text
    exact = 100 * sum(predictions[q] == gold[q][1] for q in gold) / len(gold)  # w-words need no normalising
    assert metrics["exact_match"] == pytest.approx(exact)


def test_qa_export_and_pipeline_agree_with_predict(qa_run):
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    out, dev = qa_run
    hf, info = AutoModelForQuestionAnswering.from_pretrained(out / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    pre = load_pretrained(out / "hf")
    ours = BertForQuestionAnswering(pre.config)
    load_into(ours, pre)
    tok = AutoTokenizer.from_pretrained(out / "hf")
    batch = tok(["w1 w2", "w3"], ["w4 w5 w6 w7", "w8 w9"], padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = hf.eval()(**batch)
        mine = ours.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    torch.testing.assert_close(mine.start_logits, theirs.start_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mine.end_logits, theirs.end_logits, atol=1e-5, rtol=1e-5)
    # One window per context, so the best span is the same whatever the windowing.
    rng = random.Random(5)
    for _ in range(6):
        question, context = sentence(rng, 2, 4), sentence(rng, 8, 14)
        line = invoke("predict", out, "--question", question, "--context", context).stdout
        assert line.split("\t")[0] == reference_answer(hf, tok, question, context), (question, context)
        assert 0 < float(line.split("\t")[1]) <= 1
        if QA_PIPELINE:  # transformers 5 dropped the question-answering pipeline
            theirs = QA_PIPELINE(model=str(out / "hf"), device="cpu")(question=question, context=context,
                                                                         max_answer_len=30, max_seq_len=64)
            assert line.split("\t")[0] == theirs["answer"]


def _qa_pipeline():
    from transformers import pipeline
    from transformers.pipelines import SUPPORTED_TASKS

    return (lambda **kw: pipeline("question-answering", **kw)) if "question-answering" in SUPPORTED_TASKS else None


QA_PIPELINE = _qa_pipeline()


def reference_answer(hf, tok, question, context, max_answer_length=30):
    """The best span by start + end logit over context tokens, cut from the context by the
    fast tokenizer's offsets: what the question-answering pipeline does for one window."""
    enc = tok(question, context, return_offsets_mapping=True, return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0].tolist()
    with torch.no_grad():
        out = hf(**enc)
    start, end = out.start_logits[0], out.end_logits[0]
    in_context = [i for i, s in enumerate(enc.sequence_ids(0)) if s == 1]
    best = max(((start[i] + end[j]).item(), i, j) for i in in_context for j in in_context
               if i <= j < i + max_answer_length)
    return context[offsets[best[1]][0]:offsets[best[2]][1]]
