"""Every head that trains takes the same steps as its transformers class: question
answering (BertForQuestionAnswering), pre-training (BertForPreTraining, MLM + NSP),
MLM alone (BertForMaskedLM) and regression (BertForSequenceClassification with
num_labels=1; classification with 3 labels is tests/test_finetune_matches_transformers.py,
here also through the packed encoder the CPU trains it with). Each runs our model, our
AdamW over its own decay groups, our schedule (linear; poly for pre-training too) and the
loop's clip_and_step against the transformers class with the Trainer's decay groups,
torch's AdamW, transformers' schedule and clip_grad_norm_, from the same weights on the
same batches (the batches our data code collates: QA windows from prepare_qa_features,
pre-training rows from a shard directory). Dropout is 0, both in train mode as the loop
runs them. The loss of every step, the gradient norm and the final weights must agree
to fp32 tolerance: a head that reads the wrong logits, a loss that ignores the wrong
positions, or a wrong decay group shows up as diverging numbers."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from bertmodel.model.config import BertConfig
from bertmodel.data import ShardDataset
from bertmodel.data.qa_features import prepare_qa_features
from bertmodel.data.shards import open_shard_dir
from bertmodel.model import (BertForMaskedLM, BertForPreTraining, BertForQuestionAnswering,
                             BertForSequenceClassification)
from bertmodel.model.heads import IGNORE_INDEX
from bertmodel.model.unpad import resolve, set_unpad
from bertmodel.training.optim import Schedule, build_optimizer, clip_and_step, set_lr
from bertmodel.tasks.qa import WindowSet
from bertmodel.data.synthetic import small_shard_dir
from qa_fixtures import example, tiny_tokenizer

transformers = pytest.importorskip("transformers")

STEPS, LR, DECAY = 8, 3e-3, 0.01


def tiny(vocab_size: int) -> BertConfig:
    # No dropout: the two draw their masks differently. Train mode as the loop runs them.
    return BertConfig.preset("tiny", hidden_size=32, num_attention_heads=4, intermediate_size=64,
                             vocab_size=vocab_size, max_position_embeddings=64, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)


def twin(ours: torch.nn.Module, hf_class, **hf_options) -> torch.nn.Module:
    """The transformers model `hf_class` holding exactly our weights."""
    theirs = hf_class(transformers.BertConfig(**ours.config.to_hf_dict(), **hf_options))
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    return theirs


def train_both(ours, theirs, batches, clip: float, schedule: str = "linear", loss_free: tuple[str, ...] = ()) -> None:
    """STEPS steps of each on (our batch, their batch) pairs; asserts the learning rate,
    the loss and the gradient norm of every step and the final weights equal, and that
    ours learnt (its loss on the first batch fell).

    clip: the global norm to clip to; it must lie between the smallest and the largest
    norm of the run, so that some steps are clipped and some not (AdamW is blind to a
    gradient scale that is the same at every step, so clipping every step or none
    would not test it).

    loss_free: parameters the loss does not depend on (a bias that shifts every logit of
    a softmax alike). Their gradient is 0 up to rounding, which Adam scales to steps of
    ~lr whose sign is the rounding's, so they drift apart; asserted gradient-free in
    transformers at every step, and left out of the weight comparison."""
    batches = list(batches)
    ours.train(), theirs.train()
    # Ours as the trainer builds it (AdamW over the model's own decay groups; eps as the
    # Trainer's default) and as the loop steps it (set_lr, clip_and_step). No warmup:
    # ours starts warmup one step ahead of transformers' schedules.
    opt_ours = build_optimizer(ours, "adamw", LR, DECAY, torch.device("cpu"), eps=1e-8)
    ours_schedule = Schedule(LR, 0, STEPS, kind=schedule)
    params_ours = [p for p in ours.parameters() if p.requires_grad]
    decay = set(transformers.Trainer.get_decay_parameter_names(None, theirs))  # uses no Trainer state
    named = dict(theirs.named_parameters())  # tied weights once, as the Trainer sees them
    opt_theirs = torch.optim.AdamW([
        {"params": [p for n, p in named.items() if n in decay], "weight_decay": DECAY},
        {"params": [p for n, p in named.items() if n not in decay], "weight_decay": 0.0}], lr=LR, eps=1e-8)
    if schedule == "linear":
        sched_theirs = transformers.get_linear_schedule_with_warmup(opt_theirs, 0, STEPS)
    else:  # NVIDIA's BERT recipe: power 0.5 down to 0
        sched_theirs = transformers.get_polynomial_decay_schedule_with_warmup(opt_theirs, 0, STEPS, lr_end=0.0,
                                                                              power=0.5)
    losses, norms = [], []
    for step, (batch_ours, batch_theirs) in enumerate(batches):
        lr = ours_schedule(step)
        assert lr == pytest.approx(sched_theirs.get_last_lr()[0], rel=1e-6), step
        set_lr(opt_ours, lr)
        loss_ours, loss_theirs = ours(**batch_ours).loss, theirs(**batch_theirs).loss
        assert loss_ours.item() == pytest.approx(loss_theirs.item(), abs=1e-5), f"step {step}"
        losses.append((loss_ours.item(), loss_theirs.item()))
        loss_ours.backward(), loss_theirs.backward()
        for name in loss_free:
            assert float(named[name].grad.abs().max()) < 1e-6, (name, step)
        norm_ours = clip_and_step(opt_ours, params_ours, clip)
        norm_theirs = float(torch.nn.utils.clip_grad_norm_(list(named.values()), clip))
        norms.append(norm_theirs)
        opt_theirs.step(), sched_theirs.step()
        assert norm_ours == pytest.approx(norm_theirs, rel=1e-4), f"step {step}"
        opt_ours.zero_grad(set_to_none=True), opt_theirs.zero_grad(set_to_none=True)
    assert len(losses) == STEPS
    assert min(norms) < clip < max(norms), norms
    theirs_state = theirs.state_dict()
    for name, weight in ours.state_dict().items():
        if name not in loss_free:
            torch.testing.assert_close(weight, theirs_state[name], atol=1e-5, rtol=1e-4,
                                       msg=lambda m, name=name: f"{name}: {m}")
    with torch.no_grad():  # it trained: not a comparison of two idle models
        assert ours(**batches[0][0]).loss.item() < losses[0][0] - 0.01


def moved(ours, before: dict, name: str) -> float:
    return float((ours.state_dict()[name] - before[name]).abs().max())


# -- question answering ------------------------------------------------------------------

QA_EXAMPLES = [
    ("the cat sat on the mat in istanbul . a cafe hosted the muller cat in the angstrom mat .",
     "where did the cat sat?", "istanbul"),
    ("a cat sat on a mat . the mat sat on the cat . the cafe in istanbul hosted an angstrom .",
     "what hosted an angstrom?", "the cafe in istanbul"),
    ("who sat on the mat ? the muller cat did . the cafe hosted a cat . the mat sat in istanbul .",
     "who sat?", "the muller cat"),
    ("in istanbul the cafe hosted the cat . on the mat sat a muller . what sat on an angstrom ? the mat .",
     "what sat on an angstrom?", "the mat"),
]


def qa_batches(vocab_size: int):
    """STEPS batches of 6 windows collated as QATask collates them: windows of 24 tokens
    with stride 6, so most do not hold their answer (labelled 0, [CLS], as our features
    label them); in every other batch some labels lie at or past the padded length,
    which transformers clamps to T and ignores."""
    tok = tiny_tokenizer()
    assert tok.vocab_size <= vocab_size
    examples = [example(context, question, answer, qid=f"q{i}")
                for i, (context, question, answer) in enumerate(QA_EXAMPLES)]
    features = prepare_qa_features(examples, tok, max_seq_length=24, doc_stride=6, max_query_length=8)
    windows = WindowSet(features, tok.special.pad, 1)
    rng = np.random.default_rng(0)
    outside = inside = beyond = 0
    for step in range(STEPS):
        batch = {k: torch.from_numpy(v) for k, v in windows.collate(rng.choice(len(windows), 6, False)).items()}
        T = batch["input_ids"].shape[1]
        starts, ends = batch["start_positions"], batch["end_positions"]
        outside += int(((starts == 0) & (ends == 0)).sum())
        inside += int((starts > 0).sum())
        if step % 2:  # rows 0 and 1 past the sequence: ignored; rows 2.. still count
            starts[0], ends[0], ends[1] = T, T + 7, 10_000
            beyond += 1
        assert ((starts < T) & (starts >= 0)).any() and ((ends < T) & (ends >= 0)).any()  # a loss to take
        yield batch, dict(batch)
    assert outside and inside and beyond  # the batches hold every kind of label


def test_question_answering_steps_equal_transformers():
    config = tiny(tiny_tokenizer().vocab_size)
    torch.manual_seed(0)
    ours = BertForQuestionAnswering(config)
    theirs = twin(ours, transformers.BertForQuestionAnswering)
    # Each shifts all T start (or end) logits of a window alike: the softmax does not see it.
    shifts = ("qa_outputs.bias", f"bert.encoder.layer.{config.num_hidden_layers - 1}.output.LayerNorm.bias")
    batches = list(qa_batches(config.vocab_size))
    # Padded windows: the softmax runs over their [PAD] positions too, so the [PAD] row of
    # the word embeddings must stay out of training as transformers' padding_idx keeps it.
    assert any(not bool(b["attention_mask"].all()) for b, _ in batches)
    train_both(ours, theirs, batches, clip=3.0, loss_free=shifts)
    with torch.no_grad():  # what the loss sees of the logits, the softmax over the window, is the same
        out, ref = ours(**batches[1][0]), theirs(**batches[1][1])
    for a, b in ((out.start_logits, ref.start_logits), (out.end_logits, ref.end_logits)):
        torch.testing.assert_close(a.log_softmax(-1), b.log_softmax(-1), atol=1e-5, rtol=1e-4)


def test_question_answering_ignores_positions_past_the_sequence_as_transformers():
    """The loss of a batch whose labels lie at or past T equals transformers' (the ones
    they clamp to T and ignore) and the loss of the same batch without those rows."""
    config = tiny(tiny_tokenizer().vocab_size)
    torch.manual_seed(0)
    ours = BertForQuestionAnswering(config)
    theirs = twin(ours, transformers.BertForQuestionAnswering)
    ours.eval(), theirs.eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, config.vocab_size, (4, 12), generator=g)
    inputs = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids)}
    starts, ends = torch.tensor([3, 12, 0, 40]), torch.tensor([5, 4, 13, 10_000])  # T = 12
    with torch.no_grad():
        out = ours(**inputs, start_positions=starts, end_positions=ends)
        ref = theirs(**inputs, start_positions=starts, end_positions=ends)
    assert out.loss.item() == pytest.approx(ref.loss.item(), abs=1e-6)
    ce = torch.nn.functional.cross_entropy
    kept_start, kept_end = [0, 2], [0, 1]  # rows whose label is inside 0..T-1
    expected = (ce(out.start_logits[kept_start], starts[kept_start])
                + ce(out.end_logits[kept_end], ends[kept_end])) / 2
    assert out.loss.item() == pytest.approx(expected.item(), abs=1e-6)


# -- pre-training ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> ShardDataset:
    path = small_shard_dir(tmp_path_factory.mktemp("shards") / "data", rows=STEPS * 8, words=120, num_shards=1,
                           max_seq_length=32, max_predictions=5, batch_rows=8)
    return ShardDataset([open_shard_dir(path)])


def pretraining_batches(shards: ShardDataset, with_pair: bool):
    """The loader's collated rows (8 a batch), and for transformers the same with the
    (B, P) slot labels spread over a (B, T) label map, -100 elsewhere."""
    for step in range(STEPS):
        arrays = shards.collate(np.arange(step * 8, step * 8 + 8))
        ours = {k: torch.from_numpy(v) for k, v in arrays.items()}
        positions, labels = ours["masked_lm_positions"], ours["masked_lm_labels"]
        real = labels != IGNORE_INDEX
        rows = torch.arange(len(labels))[:, None].expand_as(labels)
        assert len(set(zip(rows[real].tolist(), positions[real].tolist()))) == int(real.sum())  # distinct slots
        full = torch.full_like(ours["input_ids"], IGNORE_INDEX)
        full[rows[real], positions[real]] = labels[real]
        theirs = {k: ours[k] for k in ("input_ids", "token_type_ids", "attention_mask")} | {"labels": full}
        if with_pair:
            theirs["next_sentence_label"] = ours["next_sentence_label"]
        yield ours, theirs


@pytest.mark.parametrize("schedule", ["linear", "poly"])
def test_pretraining_mlm_and_nsp_steps_equal_transformers(shards, schedule):
    config = tiny(shards.tokenizer.vocab_size)
    torch.manual_seed(0)
    ours = BertForPreTraining(config)
    theirs = twin(ours, transformers.BertForPreTraining)
    assert theirs.cls.predictions.decoder.weight is theirs.bert.embeddings.word_embeddings.weight  # tied, as ours
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    batches = list(pretraining_batches(shards, with_pair=True))
    assert any(not bool(b["attention_mask"].all()) for b, _ in batches)  # some rows are padded
    assert {int(v) for b, _ in batches for v in b["next_sentence_label"]} == {0, 1}
    train_both(ours, theirs, batches, 1.65, schedule)
    assert moved(ours, before, "cls.seq_relationship.weight") > 1e-3  # the pair head trained too


def test_pretraining_mlm_and_nsp_losses_are_the_parts_transformers_sums(shards):
    """Our mlm_loss and nsp_loss are the two cross-entropies transformers adds up."""
    config = tiny(shards.tokenizer.vocab_size)
    torch.manual_seed(0)
    ours = BertForPreTraining(config).eval()
    theirs = twin(ours, transformers.BertForPreTraining).eval()
    batch_ours, batch_theirs = next(pretraining_batches(shards, with_pair=True))
    with torch.no_grad():
        out, ref = ours(**batch_ours), theirs(**batch_theirs)
    ce = torch.nn.functional.cross_entropy
    mlm = ce(ref.prediction_logits.flatten(0, 1), batch_theirs["labels"].flatten(), ignore_index=IGNORE_INDEX)
    nsp = ce(ref.seq_relationship_logits, batch_theirs["next_sentence_label"])
    assert out.mlm_loss.item() == pytest.approx(mlm.item(), abs=1e-5)
    assert out.nsp_loss.item() == pytest.approx(nsp.item(), abs=1e-5)
    assert out.loss.item() == pytest.approx(ref.loss.item(), abs=1e-5)


def test_mlm_only_steps_equal_transformers(shards):
    config = tiny(shards.tokenizer.vocab_size)
    torch.manual_seed(0)
    ours = BertForMaskedLM(config)
    theirs = twin(ours, transformers.BertForMaskedLM)
    assert theirs.cls.predictions.decoder.weight is theirs.bert.embeddings.word_embeddings.weight
    train_both(ours, theirs, pretraining_batches(shards, with_pair=False), clip=1.48)


# -- sequence classification: regression, and the packed encoder -------------------------

def classification_batches(vocab: int, regression: bool):
    rng = np.random.default_rng(0)
    for _ in range(STEPS):
        lengths = rng.integers(4, 17, 8)
        T = int(lengths.max())
        mask = (np.arange(T)[None] < lengths[:, None]).astype(np.int64)
        ids = rng.integers(5, vocab, (8, T)) * mask
        segments = (np.arange(T)[None] >= lengths[:, None] // 2).astype(np.int64) * mask
        # As pad_batch gives them: float32 targets for regression, int64 ids otherwise.
        labels = rng.normal(1.0, 2.0, 8).astype(np.float32) if regression else rng.integers(0, 3, 8)
        batch = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(segments),
                 "attention_mask": torch.from_numpy(mask), "labels": torch.from_numpy(labels)}
        yield batch, dict(batch)


@pytest.mark.parametrize("num_labels,kernel", [(1, None), (1, "repad"), (3, "repad")],
                         ids=["regression", "regression-packed", "classification-packed"])
def test_sequence_classification_steps_equal_transformers(num_labels, kernel):
    """Regression (num_labels 1: MSE, as transformers' problem_type "regression"), and
    both kinds through the packed encoder that --unpad auto picks on the CPU."""
    if kernel is not None:
        assert resolve("auto", torch.device("cpu"), BertForSequenceClassification(tiny(120), 2)) == kernel
    config = tiny(120)
    torch.manual_seed(0)
    ours = BertForSequenceClassification(config, num_labels)
    theirs = twin(ours, transformers.BertForSequenceClassification, num_labels=num_labels)
    set_unpad(ours, kernel)
    train_both(ours, theirs, classification_batches(config.vocab_size, regression=num_labels == 1),
               clip=4.5 if num_labels == 1 else 0.5)
    if num_labels == 1:
        assert theirs.config.problem_type == "regression"
