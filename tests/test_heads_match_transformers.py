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
in float64 (tests/head_steps.py says why and how closely): a head that reads the wrong
logits, a loss that ignores the wrong positions, or a wrong decay group shows up as
diverging numbers."""
from __future__ import annotations

import pytest
import torch

from bertmodel.model.config import BertConfig
from bertmodel.data import ShardDataset
from bertmodel.model import (BertForMaskedLM, BertForPreTraining, BertForQuestionAnswering,
                             BertForSequenceClassification)
from bertmodel.model.heads import IGNORE_INDEX
from bertmodel.model.linear import cpu_matmul
from bertmodel.model.unpad import resolve, set_unpad
from qa_fixtures import tiny_tokenizer

transformers = pytest.importorskip("transformers")

from head_steps import (FLOAT64_TOL, STEPS, classification_batches, first_step_in_fp32,  # noqa: E402
                        fp32_rounding, moved, pretraining_batches, qa_batches, step_shards, train_both)



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


# -- question answering ------------------------------------------------------------------

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
    with torch.no_grad():  # what the loss sees of the logits, the softmax over the window, is the same (float64)
        out, ref = ours(**batches[1][0]), theirs(**batches[1][1])
    for a, b in ((out.start_logits, ref.start_logits), (out.end_logits, ref.end_logits)):
        torch.testing.assert_close(a.log_softmax(-1), b.log_softmax(-1), atol=FLOAT64_TOL, rtol=FLOAT64_TOL)


def test_question_answering_ignores_positions_past_the_sequence_as_transformers():
    """The loss of a batch whose labels lie at or past T equals transformers' (the ones
    they clamp to T and ignore) and the loss of the same batch without those rows."""
    config = tiny(tiny_tokenizer().vocab_size)
    torch.manual_seed(0)
    ours = BertForQuestionAnswering(config)
    theirs = twin(ours, transformers.BertForQuestionAnswering)
    ours.eval().double(), theirs.eval().double()  # as the steps: head_steps.py says why
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, config.vocab_size, (4, 12), generator=g)
    inputs = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids)}
    starts, ends = torch.tensor([3, 12, 0, 40]), torch.tensor([5, 4, 13, 10_000])  # T = 12
    with torch.no_grad():
        out = ours(**inputs, start_positions=starts, end_positions=ends)
        ref = theirs(**inputs, start_positions=starts, end_positions=ends)
    assert out.loss.item() == pytest.approx(ref.loss.item(), rel=FLOAT64_TOL)
    ce = torch.nn.functional.cross_entropy
    kept_start, kept_end = [0, 2], [0, 1]  # rows whose label is inside 0..T-1
    expected = (ce(out.start_logits[kept_start], starts[kept_start])
                + ce(out.end_logits[kept_end], ends[kept_end])) / 2
    assert out.loss.item() == pytest.approx(expected.item(), rel=FLOAT64_TOL)


# -- pre-training ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> ShardDataset:
    return step_shards(tmp_path_factory.mktemp("shards"))


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
    ours.double(), theirs.double()  # as the steps: head_steps.py says why
    batch_ours, batch_theirs = next(pretraining_batches(shards, with_pair=True))
    with torch.no_grad():
        out, ref = ours(**batch_ours), theirs(**batch_theirs)
    ce = torch.nn.functional.cross_entropy
    mlm = ce(ref.prediction_logits.flatten(0, 1), batch_theirs["labels"].flatten(), ignore_index=IGNORE_INDEX)
    nsp = ce(ref.seq_relationship_logits, batch_theirs["next_sentence_label"])
    assert out.mlm_loss.item() == pytest.approx(mlm.item(), rel=FLOAT64_TOL)
    assert out.nsp_loss.item() == pytest.approx(nsp.item(), rel=FLOAT64_TOL)
    assert out.loss.item() == pytest.approx(ref.loss.item(), rel=FLOAT64_TOL)


def test_mlm_only_steps_equal_transformers(shards):
    config = tiny(shards.tokenizer.vocab_size)
    torch.manual_seed(0)
    ours = BertForMaskedLM(config)
    theirs = twin(ours, transformers.BertForMaskedLM)
    assert theirs.cls.predictions.decoder.weight is theirs.bert.embeddings.word_embeddings.weight
    train_both(ours, theirs, pretraining_batches(shards, with_pair=False), clip=1.48)


# -- sequence classification: regression, and the packed encoder -------------------------

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


def test_a_first_step_in_fp32_is_within_fp32_rounding_of_float64():
    """The steps above run in float64, where our linears are torch's: the oneDNN linear
    the CPU trains with is fp32 only (model/linear.py). One packed classification step
    in fp32, as --unpad auto trains it here, against transformers' in float64."""
    config = tiny(120)
    torch.manual_seed(0)
    ours = BertForSequenceClassification(config, 3)
    theirs = twin(ours, transformers.BertForSequenceClassification, num_labels=3)
    set_unpad(ours, "repad")
    assert cpu_matmul() == "onednn" or not torch.backends.mkldnn.is_available()
    batch_ours, batch_theirs = next(classification_batches(config.vocab_size, regression=False))
    (B, T), classes = batch_ours["input_ids"].shape, 3
    # A key bias b shifts every attention score of a query q alike (q.b): no gradient but rounding.
    key_biases = tuple(f"bert.encoder.layer.{i}.attention.self.key.bias" for i in range(config.num_hidden_layers))
    first_step_in_fp32(ours, theirs, batch_ours, batch_theirs, fp32_rounding(config, T, B, classes), key_biases)
