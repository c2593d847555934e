"""Every ModernBERT head computes and trains as its transformers class
(ModernBertForMaskedLM, ...ForSequenceClassification with cls and mean pooling and as
regression, ...ForQuestionAnswering, ...ForTokenClassification, ...ForMultipleChoice),
from the same weights on the same batches: equal logits (fp32, 1e-5) at mixed lengths
where the local window (here 8 tokens either side) is much shorter than the sequences,
padded and packed, with the banded local kernel and the dense mask; and the same steps
(loss, gradient norm, final weights; in float64) with our AdamW groups, schedule and
clipping against torch's AdamW with the Trainer's groups (tests/head_steps.py)."""
from __future__ import annotations

import pytest
import torch

from bertmodel.data import ShardDataset
from bertmodel.model import (HEADS, ModernBertConfig, ModernBertForMaskedLM, ModernBertForMultipleChoice,
                             ModernBertForQuestionAnswering, ModernBertForSequenceClassification,
                             ModernBertForTokenClassification)
from bertmodel.model.linear import cpu_matmul
from bertmodel.model.unpad import resolve, set_unpad
from qa_fixtures import tiny_tokenizer

transformers = pytest.importorskip("transformers")

from head_steps import (FLOAT64_TOL, STEPS, choice_batches, classification_batches,  # noqa: E402
                        first_step_in_fp32, fp32_rounding, in_float64, pretraining_batches, qa_batches, step_shards,
                        token_batches, train_both)

VOCAB = 120


def tiny(vocab_size: int = VOCAB, **overrides) -> ModernBertConfig:
    """4 layers: global, local, local, global; local window 16 (8 either side)."""
    return ModernBertConfig.preset("tiny", hidden_size=32, num_attention_heads=4, intermediate_size=48,
                                   vocab_size=vocab_size, local_attention=16, **overrides)


def twin(ours: torch.nn.Module, hf_class, **hf_options) -> torch.nn.Module:
    """The transformers model `hf_class` holding exactly our weights (no key missing or left over)."""
    fields = {k: v for k, v in ours.config.to_hf_dict().items() if k not in ("architectures", "dtype")}
    theirs = hf_class(transformers.ModernBertConfig(**fields, **hf_options))
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return theirs


def mixed_batch(B: int, T: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids and a right-padded mask: one row full, the others from 3 tokens up."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    return torch.randint(5, VOCAB, (B, T), generator=g) * mask, mask


def test_every_transformers_head_has_ours_with_its_names():
    names = {cls.hf_architecture for cls in HEADS["modernbert"].values()}
    assert names == {"ModernBertForMaskedLM", "ModernBertForSequenceClassification",
                     "ModernBertForQuestionAnswering", "ModernBertForTokenClassification",
                     "ModernBertForMultipleChoice"}
    assert tiny().layer_types == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    for name in names:
        ours = HEADS["modernbert"][{"ModernBertForMaskedLM": "mlm", "ModernBertForSequenceClassification": "classify",
                                    "ModernBertForQuestionAnswering": "qa", "ModernBertForTokenClassification":
                                    "tokens", "ModernBertForMultipleChoice": "choice"}[name]]
        args = (3,) if name.endswith(("SequenceClassification", "TokenClassification")) else ()
        model = ours(tiny(), *args)
        theirs = getattr(transformers, name)(transformers.ModernBertConfig(
            **{k: v for k, v in tiny().to_hf_dict().items() if k not in ("architectures", "dtype")},
            **({"num_labels": 3} if args else {})))
        ours_shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        theirs_shapes = {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
        assert ours_shapes == theirs_shapes, name
    assert "model.layers.0.attn_norm.weight" not in ours_shapes  # layer 0 reads the embedding norm


@pytest.mark.parametrize("kernel", [None, "repad"], ids=["padded", "packed"])
@pytest.mark.parametrize("T", [12, 40, 100], ids=["inside-window", "dense-mask", "banded"])
def test_logits_equal_transformers_at_mixed_lengths(T, kernel):
    """Eval-mode logits of every head at real tokens (and at padding where the head reads
    it: QA's softmax runs over the whole window). T 12: within one local window; 40: the
    local layers' dense mask; 100: their banded kernel (T > 2 x 16)."""
    torch.manual_seed(0)
    ids, mask = mixed_batch(4, T)
    real = mask.bool()
    for pooling in ("cls", "mean"):
        config = tiny(classifier_pooling=pooling)
        cases = [(ModernBertForMaskedLM(config), transformers.ModernBertForMaskedLM, {}),
                 (ModernBertForSequenceClassification(config, 3), transformers.ModernBertForSequenceClassification,
                  {"num_labels": 3}),
                 (ModernBertForTokenClassification(config, 5), transformers.ModernBertForTokenClassification,
                  {"num_labels": 5}),
                 (ModernBertForQuestionAnswering(config), transformers.ModernBertForQuestionAnswering, {})]
        for ours, hf_class, options in cases:
            theirs = twin(ours, hf_class, **options).eval()
            set_unpad(ours, kernel)
            ours.eval()
            with torch.no_grad():
                out, ref = ours(ids, None, mask), theirs(input_ids=ids, attention_mask=mask)
            name = type(ours).__name__
            if isinstance(ours, ModernBertForMaskedLM):
                torch.testing.assert_close(out.mlm_logits[real], ref.logits[real], atol=1e-5, rtol=1e-5, msg=name)
            elif isinstance(ours, ModernBertForQuestionAnswering):  # never packed: it reads padding
                torch.testing.assert_close(out.start_logits, ref.start_logits, atol=1e-5, rtol=1e-5, msg=name)
                torch.testing.assert_close(out.end_logits, ref.end_logits, atol=1e-5, rtol=1e-5, msg=name)
            elif isinstance(ours, ModernBertForTokenClassification):
                torch.testing.assert_close(out.logits[real], ref.logits[real], atol=1e-5, rtol=1e-5, msg=name)
            else:
                torch.testing.assert_close(out.logits, ref.logits, atol=1e-5, rtol=1e-5, msg=f"{name} {pooling}")


def test_sparse_mlm_logits_are_transformers_logits_at_the_slots():
    """Given the masked positions, only those rows reach the last layer and the head:
    the same logits there as transformers' dense ones (and as its sparse_prediction)."""
    torch.manual_seed(0)
    ours = ModernBertForMaskedLM(tiny()).eval()
    theirs = twin(ours, transformers.ModernBertForMaskedLM).eval()
    ids, mask = mixed_batch(3, 60)
    positions = torch.tensor([[0, 5, 33, 59], [1, 2, 3, 4], [0, 1, 2, 2]])
    with torch.no_grad():
        sparse = ours(ids, None, mask, positions).mlm_logits  # (B, P, V)
        dense = theirs(input_ids=ids, attention_mask=mask).logits
    expected = dense.gather(1, positions[..., None].expand(-1, -1, VOCAB))
    torch.testing.assert_close(sparse[:2], expected[:2], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sparse[2, :3], expected[2, :3], atol=1e-5, rtol=1e-5)  # row 2 is 3+ tokens long


def test_multiple_choice_logits_equal_transformers():
    torch.manual_seed(0)
    for pooling in ("cls", "mean"):
        ours = ModernBertForMultipleChoice(tiny(classifier_pooling=pooling)).eval()
        theirs = twin(ours, transformers.ModernBertForMultipleChoice).eval()
        ids, mask = mixed_batch(6, 40)
        ids, mask = ids.view(3, 2, 40), mask.view(3, 2, 40)
        for kernel in (None, "repad"):
            set_unpad(ours, kernel)
            with torch.no_grad():
                out, ref = ours(ids, None, mask), theirs(input_ids=ids, attention_mask=mask)
            torch.testing.assert_close(out.logits, ref.logits, atol=1e-5, rtol=1e-5, msg=f"{pooling} {kernel}")


# -- training steps ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> ShardDataset:
    return step_shards(tmp_path_factory.mktemp("shards"), max_seq_length=48, max_predictions=8)


def test_mlm_steps_equal_transformers(shards):
    """MLM on pre-training rows (a pair row read as one sequence: no segment ids), our
    sparse head against transformers' dense logits over the label map."""
    torch.manual_seed(0)
    ours = ModernBertForMaskedLM(tiny(shards.tokenizer.vocab_size))
    theirs = twin(ours, transformers.ModernBertForMaskedLM)
    assert theirs.decoder.weight is theirs.model.embeddings.tok_embeddings.weight  # tied, as ours
    assert ours.decoder.weight is ours.model.embeddings.tok_embeddings.weight
    batches = [(b, {k: v for k, v in t.items() if k != "token_type_ids"})
               for b, t in pretraining_batches(shards, with_pair=False)]
    assert max(b["input_ids"].shape[1] for b, _ in batches) > 2 * 8  # longer than a local window
    train_both(ours, theirs, batches, clip=None)


def test_mlm_steps_equal_transformers_with_wsd(shards):
    """The same with the warmup-stable-decay schedule ModernBERT trained with, against
    transformers' own (get_wsd_schedule, 1-sqrt decay)."""
    from bertmodel.training.optim import Schedule, build_optimizer, clip_and_step, set_lr

    torch.manual_seed(0)
    ours = ModernBertForMaskedLM(tiny(shards.tokenizer.vocab_size)).train()
    theirs = twin(ours, transformers.ModernBertForMaskedLM).train()
    batches = [(b, {k: v for k, v in t.items() if k != "token_type_ids"})
               for b, t in pretraining_batches(shards, with_pair=False)]
    with in_float64((ours, theirs), batches) as batches:  # as train_both: head_steps.py says why
        schedule = Schedule(3e-3, 2, STEPS, kind="wsd", decay_steps=3, decay_shape="1-sqrt")
        opt_ours = build_optimizer(ours, "adamw", 3e-3, 0.0, torch.device("cpu"), eps=1e-8)
        opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=3e-3, eps=1e-8, weight_decay=0.0)
        sched_theirs = transformers.get_wsd_schedule(opt_theirs, num_warmup_steps=2, num_decay_steps=3,
                                                     num_training_steps=STEPS, decay_type="1-sqrt", min_lr_ratio=0.0)
        for step, (batch_ours, batch_theirs) in enumerate(batches):
            assert schedule(step) == pytest.approx(sched_theirs.get_last_lr()[0], rel=1e-6, abs=1e-12), step
            set_lr(opt_ours, schedule(step))
            for group in opt_theirs.param_groups:
                group["lr"] = schedule(step)
            loss_ours, loss_theirs = ours(**batch_ours).loss, theirs(**batch_theirs).loss
            assert loss_ours.item() == pytest.approx(loss_theirs.item(), rel=FLOAT64_TOL), step
            loss_ours.backward(), loss_theirs.backward()
            clip_and_step(opt_ours, list(ours.parameters()), float("inf"))
            opt_theirs.step(), sched_theirs.step()
            opt_ours.zero_grad(set_to_none=True), opt_theirs.zero_grad(set_to_none=True)


@pytest.mark.parametrize("num_labels,pooling,kernel", [(3, "cls", None), (3, "mean", "repad"), (1, "cls", "repad")],
                         ids=["classification", "classification-mean-packed", "regression-packed"])
def test_sequence_classification_steps_equal_transformers(num_labels, pooling, kernel):
    config = tiny(classifier_pooling=pooling)
    torch.manual_seed(0)
    ours = ModernBertForSequenceClassification(config, num_labels)
    if kernel is not None:
        assert resolve("auto", torch.device("cpu"), ours) == kernel  # what --unpad auto trains it with here
    theirs = twin(ours, transformers.ModernBertForSequenceClassification, num_labels=num_labels)
    set_unpad(ours, kernel)
    train_both(ours, theirs, classification_batches(VOCAB, regression=num_labels == 1), clip=None)


def test_a_first_step_in_fp32_is_within_fp32_rounding_of_float64():
    """The steps run in float64, where our linears are torch's: the oneDNN linear the CPU
    trains with is fp32 only (model/linear.py). One packed classification step in fp32,
    as --unpad auto trains it here, against transformers' in float64."""
    config = tiny(classifier_pooling="mean")
    torch.manual_seed(0)
    ours = ModernBertForSequenceClassification(config, 3)
    theirs = twin(ours, transformers.ModernBertForSequenceClassification, num_labels=3)
    set_unpad(ours, "repad")
    assert cpu_matmul() == "onednn" or not torch.backends.mkldnn.is_available()
    batch_ours, batch_theirs = next(classification_batches(VOCAB, regression=False))
    (B, T), classes = batch_ours["input_ids"].shape, 3
    first_step_in_fp32(ours, theirs, batch_ours, batch_theirs, fp32_rounding(config, T, B, classes))


def test_question_answering_steps_equal_transformers():
    config = tiny(tiny_tokenizer().vocab_size)
    torch.manual_seed(0)
    ours = ModernBertForQuestionAnswering(config)
    theirs = twin(ours, transformers.ModernBertForQuestionAnswering)
    batches = [(b, {k: v for k, v in t.items() if k != "token_type_ids"})
               for b, t in qa_batches(config.vocab_size)]
    # classifier.bias shifts all T start (or end) logits alike: the softmax does not see it.
    train_both(ours, theirs, batches, clip=None, loss_free=("classifier.bias",))


@pytest.mark.parametrize("kernel", [None, "repad"], ids=["padded", "packed"])
def test_token_classification_steps_equal_transformers(kernel):
    torch.manual_seed(0)
    ours = ModernBertForTokenClassification(tiny(), 5)
    theirs = twin(ours, transformers.ModernBertForTokenClassification, num_labels=5)
    set_unpad(ours, kernel)
    train_both(ours, theirs, token_batches(VOCAB), clip=None)


@pytest.mark.parametrize("pooling,kernel", [("cls", "repad"), ("mean", None)])
def test_multiple_choice_steps_equal_transformers(pooling, kernel):
    torch.manual_seed(0)
    ours = ModernBertForMultipleChoice(tiny(classifier_pooling=pooling))
    theirs = twin(ours, transformers.ModernBertForMultipleChoice)
    set_unpad(ours, kernel)
    # classifier.bias shifts every choice's score alike: the softmax over choices does not see it.
    train_both(ours, theirs, choice_batches(VOCAB), clip=None, loss_free=("classifier.bias",))
