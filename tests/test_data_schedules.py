"""Schedules over a pre-training run (data/schedules.py): --batch-size-warmup (the global
batch grows linearly in steps; the cursor after step s is the sum of the batches before
it, so a run interrupted mid-warmup resumes bit for bit) and --mask-rate-schedule (its
grammar, the rate per step in metrics.jsonl, exact resume across a phase change), with
their one-line refusals."""
from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from bertmodel.cli import main
from bertmodel.data.schedules import (BatchSchedule, BatchWarmup, MaskRateSchedule, parse_batch_warmup,
                                      parse_mask_rate_schedule)
from bertmodel.data.synthetic import small_shard_dir
from bertmodel.errors import BertmodelError
from bertmodel.train import TrainConfig, train
from bertmodel.training import checkpoint as ckpt


@pytest.mark.parametrize("text, want", [
    ("768:50B", BatchWarmup(768, 50e9, "tokens")),
    ("768:50_000_000_000tokens", BatchWarmup(768, 50e9, "tokens")),
    ("32:1.5M", BatchWarmup(32, 1.5e6, "tokens")),
    ("8:2000steps", BatchWarmup(8, 2000, "steps")),
    ("8:3ksteps", BatchWarmup(8, 3000, "steps")),
])
def test_batch_warmup_forms(text, want):
    assert parse_batch_warmup(text) == want


@pytest.mark.parametrize("text", ["768", "768:", ":50B", "768:50X", "0:100", "8:2.5steps", "768:50Bsamples"])
def test_batch_warmup_refuses_other_forms_in_one_line(text):
    with pytest.raises(BertmodelError) as info:
        parse_batch_warmup(text)
    assert str(info.value).startswith(f"--batch-size-warmup {text!r}: ") and "\n" not in str(info.value)


def expected_batch(start: int, full: int, steps: int, unit: int, step: int) -> int:
    """The definition, written out in exact fractions: start + (full - start) * step /
    steps, to the nearest multiple of unit (halves up; at least one unit), and full from
    the warmup's last step on."""
    if step >= steps:
        return full
    raw = Fraction(start) + Fraction(full - start) * step / steps
    return max(unit, math.floor(raw / unit + Fraction(1, 2)) * unit)


@given(st.integers(1, 4), st.integers(1, 8), st.integers(1, 64), st.integers(1, 40), st.data())
@settings(max_examples=200, deadline=None)
def test_the_batch_grows_linearly_and_the_cursor_is_its_cumulative_sum(unit, per_unit, start, steps, data):
    full = unit * per_unit * 4
    start = min(start, full)
    schedule = BatchSchedule.build(BatchWarmup(start, steps, "steps"), full, unit, tokens_per_sample=128)
    batches = [schedule.global_batch(s) for s in range(steps + 5)]
    want = [expected_batch(max(unit, start // unit * unit), full, steps, unit, s) for s in range(steps + 5)]
    assert batches == want
    assert batches == sorted(batches) and all(b % unit == 0 and b <= full for b in batches)
    assert batches[steps:] == [full] * 5
    at = data.draw(st.integers(0, steps + 5))
    assert schedule.cursor_after(at) == sum(batches[:at])
    assert schedule.micro_batch(at) * unit == schedule.global_batch(at)


@pytest.mark.parametrize("start, full, unit, tokens, length", [(768, 4608, 8, 50e9, 1024), (32, 256, 4, 3e6, 128),
                                                               (4, 64, 1, 20_000, 64)])
def test_a_warmup_in_tokens_consumes_those_tokens(start, full, unit, tokens, length):
    # Each batch is held for as many steps (ModernBERT's scheduler): the warmup's steps
    # are those that consume its samples, to whole steps (one full batch either way) and
    # each batch to the nearest whole unit (half a unit a step either way; on a linear
    # ramp the roundings up and down nearly cancel, so a few units in all).
    schedule = BatchSchedule.build(BatchWarmup(start, tokens, "tokens"), full, unit, length)
    samples = math.ceil(tokens / length)
    consumed = schedule.cursor_after(schedule.steps)
    assert abs(consumed - samples) <= full + unit * schedule.steps / 2
    assert abs(consumed - samples) <= full + 4 * unit


def test_a_start_above_the_global_batch_is_refused():
    with pytest.raises(BertmodelError, match="^--batch-size-warmup starts at 64 samples, above the global batch "
                                             r"\(32\); the warmup grows the batch to it$"):
        BatchSchedule.build(BatchWarmup(64, 10, "steps"), 32, 4, 128)


@pytest.mark.parametrize("text, linear, points", [
    ("0.3:0.15@80%", False, ((0, 0.3), (80, 0.15))),
    ("0.3@0,0.15@60%,0.05@90%", False, ((0, 0.3), (60, 0.15), (90, 0.05))),
    ("linear:0.3@0,0.15@100%", True, ((0, 0.3), (100, 0.15))),
    ("0.4@0, 0.2@25", False, ((0, 0.4), (25, 0.2))),
    ("0.3:0.15@12.5%", False, ((0, 0.3), (12, 0.15))),  # 12.5 rounds to even
])
def test_the_mask_rate_grammar(text, linear, points):
    assert parse_mask_rate_schedule(text, 100) == MaskRateSchedule(points, linear)


def test_rates_per_step():
    step = parse_mask_rate_schedule("0.3@0,0.15@6,0.05@9", 10)
    assert [step(s) for s in range(12)] == [0.3] * 6 + [0.15] * 3 + [0.05] * 3
    linear = parse_mask_rate_schedule("linear:0.3@0,0.1@4,0.2@8", 10)
    assert [linear(s) for s in range(10)] == pytest.approx([0.3, 0.25, 0.2, 0.15, 0.1, 0.125, 0.15, 0.175, 0.2, 0.2],
                                                           rel=1e-12)
    assert linear.max_rate == 0.3


@pytest.mark.parametrize("text, why", [
    ("0.3", "'0.3' is not RATE@STEP or RATE@N%"),
    ("0.3@0", "one rate is --mask-rate; a schedule has two or more"),
    ("0.3@5,0.15@10", "the first rate must start at step 0 (RATE@0)"),
    ("0.3@0,0.15@50%,0.1@40%", "its steps must increase (0, 50, 40 at --max-steps 100)"),
    ("0.3:1.2@50%", "rate 1.2 is not strictly between 0 and 1"),
    ("0.3:0.15@150%", "150% is past --max-steps 100"),
])
def test_the_mask_rate_grammar_refuses_in_one_line(text, why):
    with pytest.raises(BertmodelError) as info:
        parse_mask_rate_schedule(text, 100)
    assert str(info.value).startswith(f"--mask-rate-schedule {text!r}: {why}")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("schedules") / "small", rows=96)


def config(shards, out, **kw) -> TrainConfig:
    base = dict(data=[str(shards)], out=str(out), preset="tiny", batch_size=4, grad_accum=2, max_steps=10, lr=1e-3,
                warmup_steps=2, log_every=1, save_every=100, progress=False, seed=5)
    base.update(kw)
    return TrainConfig(**base)


def records(run) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def assert_same_final_state(a_run, b_run):
    a = ckpt.load_checkpoint(ckpt.latest_checkpoint(a_run))
    b = ckpt.load_checkpoint(ckpt.latest_checkpoint(b_run))
    assert a["step"] == b["step"] and a["data"] == b["data"]
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k  # bitwise
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    return a


def test_a_run_interrupted_mid_warmup_resumes_bit_exactly(shards, tmp_path):
    # 2 micro-batches a step: the batch grows from 2 to 8 in steps of 2 over 5 steps;
    # the run stops at step 3 (batches 2, 4, 4 so far) and resumes.
    kw = dict(batch_size_warmup="2:5steps", max_steps=7)
    train(config(shards, tmp_path / "straight", **kw), log=lambda *a: None)
    train(config(shards, tmp_path / "resumed", stop_at=3, **kw), log=lambda *a: None)
    assert ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "resumed"))["data"]["cursor"] == 2 + 4 + 4
    train(config(shards, tmp_path / "resumed", **kw), log=lambda *a: None)
    state = assert_same_final_state(tmp_path / "straight", tmp_path / "resumed")
    want = [expected_batch(2, 8, 5, 2, s) for s in range(7)]
    assert want == [2, 4, 4, 6, 6, 8, 8]  # 2, 3.2, 4.4, 5.6, 6.8 to the nearest even, then 8
    for run in ("straight", "resumed"):
        logged = [r for r in records(tmp_path / run) if "loss" in r]
        assert [r["step"] for r in logged] == list(range(1, 8))
        assert [r["batch_size"] for r in logged] == want
        assert [r["samples"] for r in logged] == [sum(want[:s + 1]) for s in range(7)]
    assert state["data"]["cursor"] == sum(want)


def test_the_batch_warmup_is_refused_when_it_starts_above_the_batch(shards, tmp_path):
    result = CliRunner().invoke(main, ["pretrain", "--data", str(shards), "--out", str(tmp_path / "run"),
                                       "--preset", "tiny", "--batch-size", "4", "--max-steps", "2", "--no-progress",
                                       "--batch-size-warmup", "16:10steps"])
    assert result.exit_code == 1 and result.output == ("Error: --batch-size-warmup starts at 16 samples, above the "
                                                       "global batch (4); the warmup grows the batch to it\n")


def test_mask_rates_are_logged_per_step_and_resume_across_a_phase_change(shards, tmp_path):
    kw = dict(masking="dynamic", mask_rate_schedule="0.4:0.15@50%", max_steps=6)
    train(config(shards, tmp_path / "straight", **kw), log=lambda *a: None)
    train(config(shards, tmp_path / "resumed", stop_at=2, **kw), log=lambda *a: None)  # before the change at step 3
    train(config(shards, tmp_path / "resumed", **kw), log=lambda *a: None)
    assert_same_final_state(tmp_path / "straight", tmp_path / "resumed")
    for run in ("straight", "resumed"):
        assert [r["mask_rate"] for r in records(tmp_path / run) if "loss" in r] == [0.4] * 3 + [0.15] * 3


@pytest.mark.parametrize("extra, message", [
    (["--mask-rate-schedule", "0.3:0.15@50%"], "Error: --mask-rate-schedule masks rows afresh at each step's rate, "
                                               "and static shards have their masks baked in: add --masking dynamic\n"),
    (["--masking", "dynamic", "--mask-rate", "0.3", "--mask-rate-schedule", "0.3:0.15@50%"],
     "Error: --mask-rate and --mask-rate-schedule both set the rate; give one\n"),
    (["--masking", "dynamic", "--mask-rate-schedule", "0.3:0.15@5"],
     "Error: --mask-rate-schedule '0.3:0.15@5': 5 is past --max-steps 2\n"),
])
def test_mask_rate_schedule_refusals_are_one_line(shards, tmp_path, extra, message):
    result = CliRunner().invoke(main, ["pretrain", "--data", str(shards), "--out", str(tmp_path / "run"),
                                       "--preset", "tiny", "--max-steps", "2", "--no-progress", *extra])
    assert (result.exit_code, result.output) == (1, message)
    assert not (tmp_path / "run").exists()


def test_resume_refuses_a_changed_schedule(shards, tmp_path):
    train(config(shards, tmp_path / "run", max_steps=2, batch_size_warmup="2:2steps"), log=lambda *a: None)
    with pytest.raises(BertmodelError, match=r"resuming with changed options \(--max-steps 2 -> 4, "
                                             r"--batch-size-warmup 2:2steps -> 4:2steps\)"):
        train(config(shards, tmp_path / "run", max_steps=4, batch_size_warmup="4:2steps"), log=lambda *a: None)


# --- mask rates against their definition, and the step that reaches the masks ---------------

def rate_by_definition(points: list[tuple[int, str]], linear: bool, step: int) -> Fraction:
    """The schedule's rate at `step` in exact fractions: the rate of the last point at or
    before the step, or (joined linearly) the straight line to the next point; the last
    rate held from its point on."""
    at = max(i for i, (first, _) in enumerate(points) if first <= step)
    first, rate = points[at][0], Fraction(points[at][1])
    if not linear or at == len(points) - 1:
        return rate
    end, following = points[at + 1][0], Fraction(points[at + 1][1])
    return rate + (following - rate) * Fraction(step - first, end - first)


@pytest.mark.parametrize("text, max_steps, points", [
    ("linear:0.3@0,0.15@7", 7, [(0, "0.3"), (7, "0.15")]),  # falls by 0.15 / 7 a step: no step lands evenly
    ("linear:0.1@0,0.4@30%", 10, [(0, "0.1"), (3, "0.4")]),  # rises, then is held
    ("linear:0.15@0,0.3@3,0.05@100%", 7, [(0, "0.15"), (3, "0.3"), (7, "0.05")]),  # up, then down
    ("0.3:0.15@50%", 7, [(0, "0.3"), (4, "0.15")]),  # 3.5 to the even 4
    ("0.3:0.15@50%", 5, [(0, "0.3"), (2, "0.15")]),  # 2.5 to the even 2
    ("0.05@0,0.3@2,0.1@5", 6, [(0, "0.05"), (2, "0.3"), (5, "0.1")]),  # phases up and down
])
def test_mask_rates_equal_their_definition_at_every_step(text, max_steps, points):
    schedule = parse_mask_rate_schedule(text, max_steps)
    assert [first for first, _ in schedule.points] == [first for first, _ in points]
    linear = text.startswith("linear:")
    for step in range(max_steps + 3):
        exact = rate_by_definition(points, linear, step)
        got = schedule(step)
        # float64: two roundings of the line's terms (a few ulps); a point's own rate exactly
        assert abs(Fraction(got) - exact) <= 4 * Fraction(math.ulp(float(exact))), (step, got, float(exact))
        if any(first == step for first, _ in points) or step >= points[-1][0]:
            assert got == float(exact), step
    assert schedule(0) == float(points[0][1]) and schedule(max_steps + 50) == float(points[-1][1])
    assert schedule.max_rate == max(float(r) for _, r in points)


@pytest.mark.parametrize("percent, max_steps, step", [("35", 90, 32), ("35", 170, 60), ("7", 150, 10),
                                                      ("55", 110, 60), ("12.5", 100, 12), ("33.3", 10, 3)])
def test_a_percent_of_the_steps_rounds_its_exact_value_half_to_even(percent, max_steps, step):
    # 35% of 90 is 31.5 exactly (to the even 32), though 0.35 x 90 in binary floats is
    # 31.499999999999996; a user's "N%" is a decimal, and its half-way cases round alike.
    schedule = parse_mask_rate_schedule(f"0.3:0.15@{percent}%", max_steps)
    assert schedule.points == ((0, 0.3), (step, 0.15))


def test_the_masks_of_each_step_follow_its_rate_and_a_resumed_loader_draws_the_same(shards):
    """Batches as the trainer's loader makes them (2 micro-batches a step): each row of a
    micro-batch of step s masks the count its length gives at rate(s) (never at s + 1's or
    the micro-batch's index), so a loader started at step 3 from the cursor after 3 steps
    yields the uninterrupted loader's batches from there on, byte for byte."""
    from bertmodel.data import ShardDataset
    from bertmodel.data.loader import BatchLoader, SampleOrder
    from bertmodel.data.recipes import DynamicMasking, masking_vocabulary, restore_originals
    from bertmodel.data.shards import open_shard_dir
    from bertprep.instances import MaskingConfig

    schedule = parse_mask_rate_schedule("linear:0.1@0,0.45@5", 8)  # rises 0.07 a step: each step its own counts
    data = ShardDataset([open_shard_dir(shards)])
    cap, seed, micro_batch, accum = 32, 11, 4, 2
    dyn = DynamicMasking(data, seed, MaskingConfig(cap, schedule(0)), masking_vocabulary(data.tokenizer), schedule)
    special = [data.tokenizer.special_ids["cls"], data.tokenizer.special_ids["sep"]]

    def micro_batches(cursor: int, step: int, count: int) -> list[dict]:
        loader = BatchLoader(dyn, SampleOrder(len(data), seed), micro_batch, cursor, step=step, grad_accum=accum)
        try:
            return [{k: v.numpy() for k, v in next(loader).tensors.items()} for _ in range(count)]
        finally:
            loader.close()

    straight = micro_batches(0, 0, 8 * accum)
    for k, arrays in enumerate(straight):
        rate = float(rate_by_definition([(0, "0.1"), (5, "0.45")], True, k // accum))
        lengths = arrays["attention_mask"].sum(1)
        original = restore_originals(arrays)
        candidates = lengths - (np.isin(original, special) & (arrays["attention_mask"] == 1)).sum(1)
        want = np.minimum(np.minimum(cap, np.maximum(1, np.rint(rate * lengths))), candidates)
        assert np.array_equal((arrays["masked_lm_labels"] != -100).sum(1), want), (k, rate)
    resumed = micro_batches(3 * accum * micro_batch, 3, 5 * accum)
    for a, b in zip(straight[3 * accum:], resumed):
        assert a.keys() == b.keys() and all(np.array_equal(a[key], b[key]) for key in a)
