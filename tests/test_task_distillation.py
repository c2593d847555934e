"""Task distillation (`finetune classify|qa|tokens|choice --teacher`, distill/kd_loss.py and
distill/teacher.py): loss = alpha x T^2 x KL(softmax(t/T) || softmax(s/T)) + (1 - alpha) x
the task's loss (Hinton et al. 2015), MSE to the teacher's value for a regression.

- The loss against its formula computed apart in numpy, float64.
- Step by step: our student and teacher in the module the trainer calls (TaskDistillation
  with each task's own choice of outputs and positions, the student packed as the CPU runs
  it) against transformers' classes of both with the loss written from the formula by hand;
  8 float64 steps, losses, gradient norms and weights within 1e-10 (tests/head_steps.py
  says why float64 and that bound).
- Through the CLI: a teacher fine-tuned, a 1-layer student shrunk from it, a distilling run
  that logs both parts of its loss, exports a ForSequenceClassification dir transformers
  loads, and resumes bit for bit; and the one-line refusals.
"""
from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertmodel.data.shards import tokenizer_info
from bertmodel.data.synthetic import small_shard_dir, write_small_vocab, write_tokenizer_files
from bertmodel.distill.kd_loss import TaskDistillation, kd_loss
from bertmodel.hf import export_hf
from bertmodel.model import (BertConfig, BertForMultipleChoice, BertForQuestionAnswering,
                             BertForSequenceClassification, BertForTokenClassification)
from bertmodel.model.heads import IGNORE_INDEX
from bertmodel.model.unpad import set_unpad
from bertmodel.tasks.choice import MultipleChoiceTask
from bertmodel.tasks.classification import ClassificationTask
from bertmodel.tasks.qa import QATask
from bertmodel.tasks.tokens import TokenClassificationTask
from bertmodel.training import checkpoint as ckpt
from finetune_fixtures import invoke, one_line_failure, sentence, tiny_bert, write_tsv
from qa_fixtures import tiny_tokenizer

transformers = pytest.importorskip("transformers")

from head_steps import (STEPS, choice_batches, classification_batches, qa_batches,  # noqa: E402
                        token_batches, train_both)


# -- the loss and its formula ------------------------------------------------------------

def formula(student: np.ndarray, teacher: np.ndarray, T: float) -> float:
    """T^2 x the mean over rows of KL(softmax(teacher/T) || softmax(student/T)), or the MSE
    for one output, in numpy float64."""
    if student.shape[-1] == 1:
        return float(np.mean((student - teacher) ** 2))

    def log_softmax(x):
        x = x / T
        shifted = x - x.max(-1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    log_p, log_q = log_softmax(teacher), log_softmax(student)
    return T * T * float(np.mean((np.exp(log_p) * (log_p - log_q)).sum(-1)))


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("T", [1.0, 2.5])
def test_the_loss_is_its_formula(alpha, T):
    rng = np.random.default_rng(0)
    task = float(rng.uniform(0.5, 2.0))
    start_s, start_t, end_s, end_t = (rng.normal(0, 3, (6, 11)) for _ in range(4))
    value_s, value_t = rng.normal(0, 1, (5, 1)), rng.normal(0, 1, (5, 1))
    cases = [[(start_s, start_t)],  # one distribution per row (classify, choice, tokens)
             [(start_s, start_t), (end_s, end_t)],  # QA's start and end, averaged
             [(value_s, value_t)]]  # a regression: MSE, T does not enter
    for pairs in cases:
        loss, kd = kd_loss([(torch.from_numpy(s), torch.from_numpy(t)) for s, t in pairs],
                           torch.tensor(task, dtype=torch.float64), alpha, T)
        expected_kd = np.mean([formula(s, t, T) for s, t in pairs])
        assert kd.item() == pytest.approx(expected_kd, rel=1e-12, abs=1e-15)
        assert loss.item() == pytest.approx(alpha * expected_kd + (1 - alpha) * task, rel=1e-12)
    # equal logits: nothing to learn from the teacher
    same = torch.from_numpy(start_s)
    assert kd_loss([(same, same.clone())], torch.tensor(0.0, dtype=torch.float64), 1.0, T)[1].item() == \
        pytest.approx(0.0, abs=1e-14)


# -- step by step against transformers ---------------------------------------------------

TARGETS = ("labels", "start_positions", "end_positions")


class HandDistillation(torch.nn.Module):
    """transformers' student and teacher with the loss written from the formula: the
    teacher in eval mode without gradients, the student's own loss as the task's."""

    def __init__(self, student, teacher, compared, alpha: float, T: float):
        super().__init__()
        self.student, self.teacher, self.compared, self.alpha, self.T = student, teacher, compared, alpha, T
        self.teacher.eval().requires_grad_(False)

    def train(self, mode: bool = True):
        self.student.train(mode)
        return self

    def forward(self, **batch):
        out = self.student(**batch)
        with torch.no_grad():
            taught = self.teacher(**{k: v for k, v in batch.items() if k not in TARGETS})
        terms = []
        for s, t in self.compared(out, taught, batch):
            if s.shape[-1] == 1:
                terms.append(((s - t) ** 2).mean())
            else:
                p = torch.softmax(t / self.T, -1)
                terms.append(self.T ** 2 * (p * (p.log() - torch.log_softmax(s / self.T, -1))).sum(-1).mean())
        kd = sum(terms) / len(terms)
        return SimpleNamespace(loss=self.alpha * kd + (1 - self.alpha) * out.loss)


def config(vocab: int, layers: int) -> BertConfig:
    # No dropout: ours and transformers' draw their masks differently.
    return BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)


def twin(ours, hf_class, **options):
    theirs = hf_class(transformers.BertConfig(**ours.config.to_hf_dict(), **options))
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    return theirs


def with_segments(batches):
    """Batches with all-zero token_type_ids where they have none (our BERT heads take them)."""
    for ours, theirs in batches:
        segments = torch.zeros_like(ours["input_ids"])
        yield {**ours, "token_type_ids": segments}, {**theirs, "token_type_ids": segments}


def steps_against_transformers(our_class, hf_class, batches, pairs, compared, alpha, T, packed, **head):
    """A 1-layer student and a 2-layer teacher (other seeds), ours and their twins."""
    vocab = 120
    torch.manual_seed(1)
    student = our_class(config(vocab, 1), **head)
    torch.manual_seed(2)
    teacher = our_class(config(vocab, 2), **head)
    options = {"num_labels": head["num_labels"]} if "num_labels" in head else {}
    theirs = HandDistillation(twin(student, hf_class, **options), twin(teacher, hf_class, **options), compared,
                              alpha, T)
    if packed:  # as the CPU trains these heads (model/unpad.py); the teacher follows the student
        set_unpad(student, "repad")
    ours = TaskDistillation(student, teacher, pairs, alpha, T)
    if packed:
        assert teacher.bert.unpad == "repad"
    train_both(ours, theirs, list(batches), clip=None)


def test_classification_steps_equal_transformers():
    steps_against_transformers(BertForSequenceClassification, transformers.BertForSequenceClassification,
                               classification_batches(120, regression=False), ClassificationTask.logit_pairs,
                               lambda out, taught, batch: [(out.logits, taught.logits)], alpha=0.3, T=2.0,
                               packed=True, num_labels=3)


def test_regression_steps_equal_transformers():
    """One output: the distillation term is the MSE to the teacher's prediction."""
    steps_against_transformers(BertForSequenceClassification, transformers.BertForSequenceClassification,
                               classification_batches(120, regression=True), ClassificationTask.logit_pairs,
                               lambda out, taught, batch: [(out.logits, taught.logits)], alpha=0.5, T=2.0,
                               packed=True, num_labels=1)


def test_token_classification_steps_equal_transformers():
    """Only the labelled pieces count, as in the task's loss."""
    def labelled(out, taught, batch):
        rows, cols = np.nonzero(batch["labels"].numpy() != IGNORE_INDEX)
        return [(out.logits[rows, cols], taught.logits[rows, cols])]
    steps_against_transformers(BertForTokenClassification, transformers.BertForTokenClassification,
                               with_segments(token_batches(120)), TokenClassificationTask.logit_pairs, labelled,
                               alpha=0.5, T=3.0, packed=True, num_labels=5)


def test_question_answering_steps_equal_transformers():
    """Start and end, each over the window's positions, averaged."""
    assert tiny_tokenizer().vocab_size <= 120
    steps_against_transformers(BertForQuestionAnswering, transformers.BertForQuestionAnswering, qa_batches(120),
                               QATask.logit_pairs,
                               lambda out, taught, batch: [(out.start_logits, taught.start_logits),
                                                           (out.end_logits, taught.end_logits)],
                               alpha=0.7, T=2.0, packed=False)


def test_multiple_choice_steps_equal_transformers():
    steps_against_transformers(BertForMultipleChoice, transformers.BertForMultipleChoice,
                               with_segments(choice_batches(120)), MultipleChoiceTask.logit_pairs,
                               lambda out, taught, batch: [(out.logits, taught.logits)], alpha=0.5, T=1.5,
                               packed=True)


# -- through the CLI ---------------------------------------------------------------------

FAST = ["--batch-size", "4", "--eval-batch-size", "8", "--device", "cpu", "--no-progress", "--log-every", "1",
        "--lr", "1e-3"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A tiny BERT, sentence-pair data with two labels, and a teacher fine-tuned on it."""
    root = tmp_path_factory.mktemp("kd")
    rng = random.Random(1)

    def rows(n, labels=("entailment", "not_entailment")):
        out = []
        for i in range(n):
            a, b = sentence(rng), sentence(rng)
            out.append((i, a, b, labels[0] if set(a.split()) & set(b.split()) else labels[1]))
        return out
    header = ("index", "sentence1", "sentence2", "label")
    work = SimpleNamespace(root=root, bert=tiny_bert(root), train=write_tsv(root / "train.tsv", header, rows(32)),
                           dev=write_tsv(root / "dev.tsv", header, rows(12)),
                           other=write_tsv(root / "other.tsv", header, rows(32, ("yes", "no"))))
    result = invoke(*classify(work, work.bert, root / "teacher", steps=6))
    assert result.exit_code == 0, result.output
    work.teacher = root / "teacher"
    return work


def classify(work, model, out, *extra, steps=6, train=None):
    return ("finetune", "classify", "--model", model, "--out", out, *FAST, "--train", train or work.train,
            "--validation", work.dev, "--text-column", "sentence1", "--text-pair-column", "sentence2",
            "--max-steps", steps, "--eval-every", "3", "--save-every", "3", *extra)


def train_records(run):
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_a_shrunk_student_distils_logs_both_losses_exports_and_resumes_bit_for_bit(work, tmp_path):
    student = tmp_path / "student"
    shrunk = invoke("shrink", work.teacher, "--layers", "1", "--out", student)
    assert shrunk.exit_code == 0, shrunk.output
    assert shrunk.output.startswith(f"wrote {student} (BertForSequenceClassification, layers 1 of 2: ")
    kd = ("--teacher", work.teacher, "--kd-alpha", "0.4", "--kd-temperature", "2")
    straight = invoke(*classify(work, student, tmp_path / "straight", *kd))
    assert straight.exit_code == 0, straight.output
    assert f"teacher: {work.teacher / 'hf'} (BertForSequenceClassification, 2 layers" in straight.output

    records = train_records(tmp_path / "straight")
    assert [r["step"] for r in records] == list(range(1, 7))
    for r in records:  # each step's loss is rounded to fp32 once before the float64 sums: 1e-6 covers it
        assert r["loss"] == pytest.approx(0.4 * r["kd_loss"] + 0.6 * r["task_loss"], rel=1e-6)
        assert r["kd_loss"] > 0 and r["task_loss"] > 0
    assert len({round(r["kd_loss"], 9) for r in records}) == len(records)

    model, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "straight" / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert model.config.num_hidden_layers == 1
    teacher_config = json.loads((work.teacher / "hf" / "config.json").read_text())
    assert model.config.id2label == {int(k): v for k, v in teacher_config["id2label"].items()}

    resumed = tmp_path / "resumed"
    for stop in ("--stop-at", "4"), ():
        result = invoke(*classify(work, student, resumed, *kd, *stop))
        assert result.exit_code == 0, result.output
    assert "resuming from" in result.output
    a = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "straight"))
    b = ckpt.load_checkpoint(ckpt.latest_checkpoint(resumed))
    assert a["step"] == b["step"] == 6
    assert a["model"].keys() == b["model"].keys() and all(torch.equal(a["model"][k], b["model"][k])
                                                          for k in a["model"])
    assert not any(k.startswith("teacher.") for k in a["model"])  # the teacher never enters a checkpoint
    assert [(r["loss"], r["kd_loss"], r["task_loss"]) for r in train_records(resumed)] == \
        [(r["loss"], r["kd_loss"], r["task_loss"]) for r in records]

    # The run recorded its teacher: another one (here the teacher run's latest checkpoint) is other data.
    again = invoke(*classify(work, student, resumed, "--teacher", ckpt.latest_checkpoint(work.teacher),
                             "--kd-alpha", "0.4",
                             "--kd-temperature", "2", steps=9))
    errors = [line for line in again.output.splitlines() if line.startswith("Error: ")]
    assert again.exit_code == 1 and len(errors) == 1 and "Traceback" not in again.output, again.output
    assert errors[0].startswith(f"Error: {resumed}: resuming on other data than the run was trained on (teacher: "
                                f"{work.teacher / 'hf'} (sha256 "), errors[0]


# -- refusals, each one line ------------------------------------------------------------

def exported(model, path, tok, architecture=None, labels=None):
    head = None if labels is None else {"num_labels": len(labels), "id2label": dict(enumerate(labels)),
                                        "label2id": {v: i for i, v in enumerate(labels)}}
    return export_hf(model, path, tokenizer=tok, architecture=architecture, head_config=head)


def test_a_teacher_with_other_labels_is_refused(work, tmp_path):
    out = tmp_path / "run"
    result = invoke(*classify(work, work.bert, out, "--teacher", work.teacher, train=work.other))
    line = one_line_failure(result, out, [work.teacher])
    assert "its labels (entailment, not_entailment) are not this run's (no, yes)" in line, line


def test_a_teacher_with_another_tokenizer_is_refused(work, tmp_path):
    vocab = write_small_vocab(tmp_path / "vocab.txt", 80)
    write_tokenizer_files(tmp_path / "tok", vocab)
    tok = tokenizer_info(tmp_path / "tok")
    teacher = exported(BertForSequenceClassification(BertConfig.preset("tiny", vocab_size=tok.vocab_size), 2),
                       tmp_path / "teacher", tok, labels=["entailment", "not_entailment"])
    out = tmp_path / "run"
    line = one_line_failure(invoke(*classify(work, work.bert, out, "--teacher", teacher)), out, [teacher])
    assert "its tokenizer is not the student's (vocab size 85 vs 65)" in line, line


def test_a_teacher_fine_tuned_for_another_task_is_refused(work, tmp_path):
    tok = tokenizer_info(work.bert)
    teacher = exported(BertForQuestionAnswering(BertConfig.preset("tiny", vocab_size=tok.vocab_size)),
                       tmp_path / "qa-teacher", tok)
    out = tmp_path / "run"
    line = one_line_failure(invoke(*classify(work, work.bert, out, "--teacher", teacher)), out, [teacher])
    assert "is a question-answering model (BertForQuestionAnswering); finetune classify distils from a fine-tuned " \
           "sequence classifier" in line, line


def test_a_pre_training_run_is_no_teacher(work, tmp_path):
    shards = small_shard_dir(tmp_path / "shards", rows=16, num_shards=1, max_seq_length=32)
    run = tmp_path / "pretrained"
    result = invoke("pretrain", "--data", shards, "--out", run, "--preset", "tiny", "--hidden", "32", "--heads", "2",
                    "--batch-size", "4", "--max-steps", "1", "--device", "cpu", "--no-progress")
    assert result.exit_code == 0, result.output
    out = tmp_path / "run"
    line = one_line_failure(invoke(*classify(work, work.bert, out, "--teacher", run)), out, [run])
    assert "is a pre-training run (BertForPreTraining: no task head); finetune classify distils from a fine-tuned " \
           "sequence classifier (a finetune classify run" in line, line


def test_shrink_layers_out_of_range_is_one_line(work, tmp_path):
    out = tmp_path / "student"
    line = one_line_failure(invoke("shrink", work.teacher, "--layers", "0,2", "--out", out), out)
    assert line == f"Error: --layers: {work.teacher} has 2 layers (0 to 1); 2 is out of range"
