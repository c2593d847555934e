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
