"""The warmup-stable-decay (wsd, trapezoidal) schedule: exact values at its phase
boundaries for both decay shapes, its options on LoopConfig and both CLIs, a resume that
refuses a changed --decay-ratio, and a real pretrain run whose logged lr follows it."""
from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data.synthetic import small_shard_dir
from bertmodel.errors import BertmodelError
from bertmodel.training.optim import Schedule
from bertmodel.training.options import MEANINGFUL, LoopConfig


def lrs(schedule: Schedule) -> list[float]:
    return [schedule(step) for step in range(schedule.max_steps + 1)]  # max_steps itself: where decay ends


def test_linear_decay_phase_boundaries():
    # warmup steps 0-1, stable 2-5, decay 6-9 (4 steps), 0 at step 10
    s = Schedule(1.0, 2, 10, kind="wsd", decay_steps=4, decay_shape="linear")
    assert lrs(s) == [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0]


def test_1_sqrt_decay_phase_boundaries():
    s = Schedule(1.0, 2, 10, kind="wsd", decay_steps=4, decay_shape="1-sqrt")
    assert lrs(s) == [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 1 - math.sqrt(0.5), 1 - math.sqrt(0.75), 0.0]
    assert s(10_000) == 0.0  # past the end, as the linear schedule


def test_linear_wsd_decaying_all_the_way_is_the_linear_schedule():
    wsd = Schedule(3e-4, 3, 20, kind="wsd", decay_steps=17, decay_shape="linear")
    assert lrs(wsd) == pytest.approx(lrs(Schedule(3e-4, 3, 20, kind="linear")), rel=1e-12, abs=0)


def test_no_warmup_and_no_decay_steps():
    assert lrs(Schedule(1.0, 0, 4, kind="wsd", decay_steps=2, decay_shape="linear")) == [1.0, 1.0, 1.0, 0.5, 0.0]
    assert lrs(Schedule(1.0, 2, 4, kind="wsd", decay_steps=0))[:4] == [0.0, 0.5, 1.0, 1.0]  # constant after warmup


def config(**kw) -> LoopConfig:
    return LoopConfig(out="unused", lr=1.0, **kw)


def test_loop_config_defaults_and_decay_ratio_one():
    cfg = config(max_steps=1000, schedule="wsd")
    assert (cfg.decay_ratio, cfg.decay_shape) == (0.1, "1-sqrt")
    assert cfg.lr_schedule() == Schedule(1.0, 10, 1000, kind="wsd", decay_steps=100, decay_shape="1-sqrt")
    whole = config(max_steps=8, warmup_steps=0, schedule="wsd", decay_ratio=1.0, decay_shape="linear").lr_schedule()
    assert lrs(whole) == [1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0.0]
    assert config(max_steps=4, schedule="wsd").lr_schedule().decay_steps == 1  # 0.4 rounds to 0: one step still decays
    # 0.3 x 5 and 0.7 x 5 round to 2 and 4: the decay gives way so the ratios that fit still fit
    assert config(max_steps=5, warmup_ratio=0.3, schedule="wsd", decay_ratio=0.7).lr_schedule().decay_steps == 3
    assert {"decay_ratio", "decay_shape"} <= set(MEANINGFUL)
    assert (config(schedule="linear").decay_ratio, config(schedule="linear").decay_shape) == (None, None)


NOT_WSD = "--decay-ratio and --decay-shape shape the wsd schedule's decay; drop them or use --schedule wsd, not "


@pytest.mark.parametrize("kw, message", [
    (dict(schedule="linear", decay_ratio=0.2), NOT_WSD + "linear"),
    (dict(schedule="poly", decay_shape="linear"), NOT_WSD + "poly"),
    (dict(schedule="wsd", decay_ratio=0.0), "decay ratio must be above 0 and at most 1, got 0.0"),
    (dict(schedule="wsd", decay_ratio=1.5), "decay ratio must be above 0 and at most 1, got 1.5"),
    (dict(schedule="wsd", decay_shape="cosine"), "decay shape must be 1-sqrt or linear, got 'cosine'"),
    (dict(schedule="cosine"), "schedule must be linear, poly or wsd, got 'cosine'"),
    (dict(schedule="wsd", warmup_ratio=0.5, decay_ratio=0.6),
     "warmup ratio 0.5 + decay ratio 0.6 exceed the run; lower one of them"),
    (dict(schedule="wsd", max_steps=100, warmup_steps=95),
     "--decay-ratio 0.1 (10 steps) does not fit after the 95 warmup steps of --max-steps 100; lower one of them"),
])
def test_loop_config_refuses_bad_values(kw, message):
    with pytest.raises(BertmodelError) as info:
        config(**kw)
    assert str(info.value) == message


def test_schedule_refuses_bad_values():
    with pytest.raises(BertmodelError, match="^decay steps 9 must fit after the 2 warmup steps, within max steps 10$"):
        Schedule(1.0, 2, 10, kind="wsd", decay_steps=9)
    with pytest.raises(BertmodelError, match="^unknown decay shape 'cosine'; choose 1-sqrt or linear$"):
        Schedule(1.0, 2, 10, kind="wsd", decay_steps=2, decay_shape="cosine")
    with pytest.raises(BertmodelError, match="^unknown schedule 'cos'; choose linear, poly or wsd$"):
        Schedule(1.0, 2, 10, kind="cos")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("wsd") / "small", rows=48)


def pretrain(shards, out, *extra):
    args = ["pretrain", "--data", str(shards), "--out", str(out), "--preset", "tiny", "--batch-size", "4",
            "--max-steps", "5", "--warmup-steps", "2", "--lr", "0.001", "--log-every", "1", "--save-every", "5",
            "--no-progress", *map(str, extra)]
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize("extra, message", [
    (["--decay-ratio", "0.2"], f"Error: {NOT_WSD}linear\n"),
    (["--schedule", "wsd", "--decay-ratio", "0.8"],
     "Error: --decay-ratio 0.8 (4 steps) does not fit after the 2 warmup steps of --max-steps 5; lower one of them\n"),
])
def test_pretrain_refuses_bad_combinations_in_one_line(shards, tmp_path, extra, message):
    result = pretrain(shards, tmp_path / "run", *extra)
    assert (result.exit_code, result.output) == (1, message)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["0", "1.5"])
def test_the_cli_refuses_a_decay_ratio_out_of_range(shards, tmp_path, value):
    result = pretrain(shards, tmp_path / "run", "--schedule", "wsd", "--decay-ratio", value)
    assert result.exit_code == 2 and "Invalid value for '--decay-ratio'" in result.output
    result = pretrain(shards, tmp_path / "run", "--schedule", "wsd", "--decay-shape", "cosine")
    assert result.exit_code == 2 and "Invalid value for '--decay-shape'" in result.output


def test_finetune_takes_the_schedule_options(tmp_path):
    group = main.commands["finetune"]
    params = group.commands["classify"].make_context("classify", ["--model", ".", "--out", "x", "--schedule", "wsd",
                                                                  "--decay-ratio", "0.3", "--decay-shape",
                                                                  "linear"]).params
    assert (params["schedule"], params["decay_ratio"], params["decay_shape"]) == ("wsd", 0.3, "linear")
    result = CliRunner().invoke(main, ["finetune", "qa", "--model", str(tmp_path), "--out", str(tmp_path / "run"),
                                       "--decay-shape", "linear"])
    assert (result.exit_code, result.output) == (1, f"Error: {NOT_WSD}linear\n")


@pytest.fixture(scope="module")
def wsd_run(shards, tmp_path_factory):
    out = tmp_path_factory.mktemp("wsd-run") / "run"
    result = pretrain(shards, out, "--schedule", "wsd", "--decay-ratio", "0.4")
    assert result.exit_code == 0, result.output
    return out


def test_a_pretrain_run_logs_the_wsd_schedule(wsd_run):
    records = [json.loads(line) for line in (wsd_run / "metrics.jsonl").read_text().splitlines()]
    logged = {r["step"]: r["lr"] for r in records if "loss" in r}
    # the record of step N holds the lr of step N - 1 (0-based): warmup 0-1, stable 2, decay 3-4 (0.4 x 5 = 2 steps)
    assert logged == {1: 0.0, 2: 0.0005, 3: 0.001, 4: 0.001, 5: 0.001 * (1 - math.sqrt(0.5))}


def test_resume_refuses_a_changed_decay_ratio(shards, wsd_run):
    result = pretrain(shards, wsd_run, "--schedule", "wsd", "--decay-ratio", "0.6")
    assert result.exit_code == 1
    assert "resuming with changed options (--decay-ratio 0.4 -> 0.6)" in result.output
    assert len(result.output.splitlines()) == 1
