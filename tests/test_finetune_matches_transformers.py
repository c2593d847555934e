"""Fine-tuning is the same computation as transformers' on the same hyperparameters:
our classification model, its weight-decay groups, our AdamW and linear schedule, and
global-norm clipping against transformers' BertForSequenceClassification with the
Trainer's decay groups, torch's AdamW and its linear schedule, from the same weights on
the same batches (dropout off, so nothing random is drawn), warmup included. Any
difference in the loss, the head, the groups, the optimizer or the schedule shows up as
diverging weights. In float64, as tests/head_steps.py says why."""
import numpy as np
import pytest
import torch

from bertmodel.model.config import BertConfig
from bertmodel.model import BertForSequenceClassification
from bertmodel.training.optim import Schedule, build_optimizer, set_lr

transformers = pytest.importorskip("transformers")

from head_steps import FLOAT64_TOL  # noqa: E402

STEPS, WARMUP, LR = 12, 3, 3e-3


def batches(vocab: int, n: int):
    rng = np.random.default_rng(0)
    for _ in range(n):
        lengths = rng.integers(4, 17, 8)
        T = int(lengths.max())
        mask = (np.arange(T)[None] < lengths[:, None]).astype(np.int64)
        ids = rng.integers(5, vocab, (8, T)) * mask
        segments = (np.arange(T)[None] >= lengths[:, None] // 2).astype(np.int64) * mask
        yield {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(segments),
               "attention_mask": torch.from_numpy(mask)}, torch.from_numpy(rng.integers(0, 3, 8))


def test_training_steps_equal_transformers_on_the_same_hyperparameters():
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    ours = BertForSequenceClassification(config, 3)
    hf_config = transformers.BertConfig(**config.to_hf_dict(), num_labels=3)
    theirs = transformers.BertForSequenceClassification(hf_config)
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and all("position_ids" in k for k in missing)
    ours.eval(), theirs.eval()  # dropout off: the two draw random numbers differently
    ours.double(), theirs.double()

    # Ours as the trainer builds it (AdamW over the model's own decay groups); eps as the
    # Trainer's default.
    opt_ours = build_optimizer(ours, "adamw", LR, 0.01, torch.device("cpu"), eps=1e-8)
    schedule = Schedule(LR, WARMUP, STEPS)
    no_decay = [n for n in dict(theirs.named_parameters()) if n.endswith("bias") or "LayerNorm" in n]
    opt_theirs = torch.optim.AdamW([
        {"params": [p for n, p in theirs.named_parameters() if n not in no_decay], "weight_decay": 0.01},
        {"params": [p for n, p in theirs.named_parameters() if n in no_decay], "weight_decay": 0.0}], lr=LR, eps=1e-8)
    sched_theirs = transformers.get_linear_schedule_with_warmup(opt_theirs, WARMUP, STEPS)

    losses = []
    for step, (inputs, labels) in enumerate(batches(config.vocab_size, STEPS)):
        loss_ours = ours(**inputs, labels=labels).loss
        loss_theirs = theirs(**inputs, labels=labels).loss
        losses.append((loss_ours.item(), loss_theirs.item()))
        loss_ours.backward(), loss_theirs.backward()
        norm_ours = torch.nn.utils.clip_grad_norm_(list(ours.parameters()), 1.0)
        norm_theirs = torch.nn.utils.clip_grad_norm_(list(theirs.parameters()), 1.0)
        assert float(norm_ours) == pytest.approx(float(norm_theirs), rel=FLOAT64_TOL)
        set_lr(opt_ours, schedule(step))
        assert schedule(step) == pytest.approx(sched_theirs.get_last_lr()[0], rel=1e-6)
        opt_ours.step(), opt_theirs.step(), sched_theirs.step()
        opt_ours.zero_grad(), opt_theirs.zero_grad()

    for a, b in losses:
        assert a == pytest.approx(b, rel=FLOAT64_TOL)
    assert losses[-1][0] < losses[0][0]  # it trained: the comparison is not of two idle models
    theirs_state = theirs.state_dict()
    for name, weight in ours.state_dict().items():
        torch.testing.assert_close(weight, theirs_state[name], atol=FLOAT64_TOL, rtol=FLOAT64_TOL, msg=name)
