"""Pre-training recipes at train time: dynamic masking (bertprep's rules on restored
rows), other mask rates and their schedules, MLM alone and SOP, and the checks on what
shards can serve."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertmodel.training import checkpoint as ckpt
from bertmodel.data import ShardDataset
from bertmodel.data.recipes import DynamicMasking, masking_vocabulary, restore_originals
from bertmodel.data.schedules import parse_mask_rate_schedule
from bertmodel.data.shards import open_shard_dir
from bertmodel.errors import BertmodelError
from bertmodel.data.synthetic import build_corpus_shards, small_shard_dir, wiki_to_reference_layout
from bertmodel.train import TrainConfig, train
from bertprep.instances import MaskingConfig
from shared_data import SHARED_DATA

WIKI = SHARED_DATA / "enwiki_wikiextractor" / "wiki_00"
VOCAB = SHARED_DATA / "bert-base-uncased-vocab.txt"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Real shards of one Wikipedia file: NSP, SOP and FULL-SENTENCES builds."""
    if not WIKI.exists():
        pytest.skip(f"shared data absent ({WIKI})")
    tmp = tmp_path_factory.mktemp("recipes")
    corpus = wiki_to_reference_layout([WIKI], tmp / "wiki.txt")
    return {p: build_corpus_shards(corpus, VOCAB, tmp / p, dupe_factor=1, pairs=p) for p in ("nsp", "sop", "none")}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("recipes-small") / "small", rows=96)


def dataset(path) -> ShardDataset:
    return ShardDataset([open_shard_dir(path)])


def dynamic(path, rate=0.15, cap=20, seed=3) -> DynamicMasking:
    data = dataset(path)
    return DynamicMasking(data, seed, MaskingConfig(cap, rate), masking_vocabulary(data.tokenizer))


def split_counts(arrays, original, mask_id):
    """[MASK] / kept / random counted from the output tokens, as bertprep's validator does."""
    real = arrays["masked_lm_labels"] != -100
    shown = np.take_along_axis(arrays["input_ids"], arrays["masked_lm_positions"], 1)[real]
    labels = arrays["masked_lm_labels"][real]
    assert np.array_equal(labels, np.take_along_axis(original, arrays["masked_lm_positions"], 1)[real])
    as_mask = shown == mask_id
    kept = ~as_mask & (shown == labels)
    return int(as_mask.sum()), int(kept.sum()), int((~as_mask & ~kept).sum())


@pytest.mark.parametrize("pairs", ["nsp", "none"])
def test_dynamic_masks_obey_the_static_statistics(real, pairs):
    static = dataset(real[pairs])
    dyn = dynamic(real[pairs])
    rows = np.arange(len(static))
    fixed = static.collate(rows)
    original = restore_originals(fixed)
    fresh = dyn.collate_at(rows, None, 0, 0)
    tok = static.tokenizer.special_ids
    # The same tokens underneath: only masked positions differ from the originals.
    assert np.array_equal(restore_originals(fresh), original)
    lengths = fixed["attention_mask"].sum(1)
    specials = np.isin(original, [tok["cls"], tok["sep"]]) & (fixed["attention_mask"] == 1)
    want = np.minimum(np.minimum(20, np.maximum(1, np.rint(0.15 * lengths))), lengths - specials.sum(1))
    for arrays in (fixed, fresh):
        count = (arrays["masked_lm_labels"] != -100).sum(1)
        assert np.array_equal(count, want)  # the same count formula, row by row
        chosen = np.take_along_axis(specials, arrays["masked_lm_positions"], 1) & (arrays["masked_lm_labels"] != -100)
        assert not chosen.any()  # never a special
    # 80/10/10, each within 6 sigma over ~40,000 positions (+-0.012 on the 0.8 share).
    n_static = split_counts(fixed, original, tok["mask"])
    n_fresh = split_counts(fresh, original, tok["mask"])
    n = sum(n_fresh)
    for k, p in zip(n_fresh, (0.8, 0.1, 0.1)):
        assert abs(k / n - p) < 6 * math.sqrt(p * (1 - p) / n)
    # and they are other masks than the shards' (same positions would be 1 in C(L, k))
    assert not np.array_equal(fresh["masked_lm_positions"], fixed["masked_lm_positions"])
    assert abs(sum(n_static) - n) == 0


def test_random_replacements_come_from_the_ordinary_vocabulary(real):
    dyn = dynamic(real["nsp"], rate=0.5, cap=64)
    arrays = dyn.collate_at(np.arange(len(dyn)), None, 0, 0)
    original = restore_originals(arrays)
    real_slot = arrays["masked_lm_labels"] != -100
    shown = np.take_along_axis(arrays["input_ids"], arrays["masked_lm_positions"], 1)[real_slot]
    labels = np.take_along_axis(original, arrays["masked_lm_positions"], 1)[real_slot]
    replaced = shown[(shown != labels) & (shown != dyn.tokenizer.special_ids["mask"])]
    assert len(replaced) > 1000
    assert np.isin(replaced, dyn.vocab.ordinary_ids).all()


@given(st.integers(0, 2**31), st.integers(0, 10_000), st.sampled_from([0.15, 0.3, 0.5]))
@settings(max_examples=25, deadline=None)
def test_dynamic_masks_are_a_function_of_their_coordinates(small_data, seed, first, rate):
    dyn = DynamicMasking(small_data, seed, MaskingConfig(40, rate), masking_vocabulary(small_data.tokenizer))
    rows = np.arange(8)
    a = dyn.collate_at(rows, None, first, 0)
    b = dyn.collate_at(rows, None, first, 0)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    later = dyn.collate_at(rows, None, first + len(small_data), 0)  # the same rows one epoch later
    assert not np.array_equal(a["input_ids"], later["input_ids"])
    count = (a["masked_lm_labels"] != -100).sum(1)
    lengths = a["attention_mask"].sum(1)
    assert np.array_equal(count, np.minimum(np.minimum(40, np.maximum(1, np.rint(rate * lengths))), lengths - 3))


@pytest.fixture(scope="module")
def small_data(small):
    return dataset(small)


def config(data, out, **kw) -> TrainConfig:
    base = dict(data=[str(data)], out=str(out), preset="tiny", batch_size=4, max_steps=6, lr=1e-3, warmup_steps=2,
                log_every=1, save_every=100, progress=False, seed=5, grad_accum=2)
    base.update(kw)
    return TrainConfig(**base)


def test_dynamic_masking_resumes_bit_exactly_across_an_epoch(small, tmp_path):
    kw = dict(max_steps=13, masking="dynamic", mask_rate=0.3)  # 8 samples a step over 96 rows: 12 an epoch
    train(config(small, tmp_path / "straight", **kw), log=lambda *a: None)
    train(config(small, tmp_path / "resumed", stop_at=11, **kw), log=lambda *a: None)
    train(config(small, tmp_path / "resumed", **kw), log=lambda *a: None)
    a = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "straight"))
    b = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "resumed"))
    assert a["step"] == b["step"] == 13
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_mlm_only_exports_a_bert_for_masked_lm(small, tmp_path):
    from transformers import BertForMaskedLM

    last = train(config(small, tmp_path / "run", objective="mlm", max_steps=2), log=lambda *a: None)
    assert "nsp_acc" not in last and "mlm_acc" in last
    config_json = json.loads((tmp_path / "run" / "hf" / "config.json").read_text())
    assert config_json["architectures"] == ["BertForMaskedLM"]
    model, info = BertForMaskedLM.from_pretrained(tmp_path / "run" / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info


def test_sop_trains_the_pair_head_on_sentence_order(real, tmp_path):
    last = train(config(real["sop"], tmp_path / "sop", max_steps=2, eval_data=[str(real["sop"])], eval_batches=1),
                 log=lambda *a: None)
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "sop"))
    assert state["task"]["objective"] == "mlm+sop" and state["task"]["architecture"] == "BertForPreTraining"
    # The pair figures are named for what the head learns: sentence order.
    assert {"sop_acc", "sop_loss", "eval_sop_acc", "eval_sop_loss"} <= set(last)
    assert not any(key.startswith(("nsp_", "eval_nsp_")) for key in last)
    records = [json.loads(line) for line in (tmp_path / "sop" / "metrics.jsonl").read_text().splitlines()]
    assert all("nsp_acc" not in r for r in records) and any("sop_acc" in r for r in records)


@pytest.mark.parametrize("objective, data, held_out", [("mlm+sop", "sop", ["nsp"]), ("mlm+nsp", "nsp", ["sop"]),
                                                       ("mlm+nsp", "nsp", ["none"]), ("mlm+nsp", "nsp", ["nsp", "none"])])
def test_held_out_rows_of_another_pairing_score_mlm_only(real, tmp_path, objective, data, held_out):
    # A pair head read against another pairing's labels measures nothing (nor against a
    # mix with them); MLM is measured the same way whatever the held-out rows are.
    logged = []
    last = train(config(real[data], tmp_path / "run", objective=objective, max_steps=2,
                        eval_data=[str(real[k]) for k in held_out], eval_batches=2), log=logged.append)
    pair = objective.removeprefix("mlm+")
    assert f"{pair}_acc" in last and "eval_mlm_acc" in last
    assert not any(key.startswith(("eval_nsp", "eval_sop")) for key in last)
    assert last["eval_loss"] == last["eval_mlm_loss"]  # no pair loss added in
    assert any("held-out figures are MLM only" in line for line in logged)
    same = train(config(real[data], tmp_path / "same", objective=objective, max_steps=2, eval_data=[str(real[data])],
                        eval_batches=2), log=lambda *a: None)
    assert f"eval_{pair}_acc" in same and same["eval_loss"] > same["eval_mlm_loss"]


@pytest.mark.parametrize("pairs, objective, needs", [("nsp", "mlm+sop", "--pairs sop"),
                                                      ("none", "mlm+nsp", "--pairs nsp"),
                                                      ("sop", "mlm+nsp", "--pairs nsp")])
def test_an_objective_the_shards_cannot_serve_is_refused_in_one_line(real, tmp_path, pairs, objective, needs):
    with pytest.raises(BertmodelError) as err:
        train(config(real[pairs], tmp_path / "run", objective=objective), log=lambda *a: None)
    message = str(err.value)
    assert "\n" not in message and needs in message and str(real[pairs]) in message
    assert not (tmp_path / "run").exists()


def test_static_masking_refuses_a_mask_rate(small, tmp_path):
    with pytest.raises(BertmodelError, match="--masking dynamic"):
        config(small, tmp_path / "run", mask_rate=0.3)


@given(st.lists(st.sampled_from([0.05, 0.1, 0.15, 0.3, 0.5]), min_size=2, max_size=3, unique=True),
       st.booleans(), st.integers(0, 2**31), st.data())
@settings(max_examples=8, deadline=None)
def test_each_phase_of_a_mask_rate_schedule_masks_at_its_rate_80_10_10(real, rates, linear, seed, data):
    # A schedule over 100 steps, phases starting at drawn steps; a batch of every row at a
    # drawn step inside each phase is masked at that step's rate (the count formula row
    # by row, never a special) with the 80/10/10 split, each share within 6 sigma.
    starts = [0] + sorted(data.draw(st.lists(st.integers(1, 99), min_size=len(rates) - 1, max_size=len(rates) - 1,
                                             unique=True)))
    text = ("linear:" if linear else "") + ",".join(f"{r}@{w}" for r, w in zip(rates, starts))
    schedule = parse_mask_rate_schedule(text, 100)
    static = dataset(real["nsp"])
    dyn = DynamicMasking(static, seed, MaskingConfig(64, rates[0]), masking_vocabulary(static.tokenizer), schedule)
    rows = np.arange(len(static))
    fixed = static.collate(rows)
    original = restore_originals(fixed)
    lengths = fixed["attention_mask"].sum(1)
    tok = static.tokenizer.special_ids
    specials = np.isin(original, [tok["cls"], tok["sep"]]) & (fixed["attention_mask"] == 1)
    for phase, (first, end) in enumerate(zip(starts, starts[1:] + [100])):
        step = data.draw(st.integers(first, end - 1))
        rate = schedule(step)
        # the phase's rate; joined linearly, the straight line between its points
        assert rate == (rates[phase] if not linear else pytest.approx(np.interp(step, starts, rates), rel=1e-12))
        arrays = dyn.collate_at(rows, None, step * len(rows), 0, step)
        assert np.array_equal(restore_originals(arrays), original)
        count = (arrays["masked_lm_labels"] != -100).sum(1)
        assert np.array_equal(count, np.minimum(np.minimum(64, np.maximum(1, np.rint(rate * lengths))),
                                                lengths - specials.sum(1)))
        chosen = np.take_along_axis(specials, arrays["masked_lm_positions"], 1) & (arrays["masked_lm_labels"] != -100)
        assert not chosen.any()
        split = split_counts(arrays, original, tok["mask"])
        n = sum(split)
        for k, p in zip(split, (0.8, 0.1, 0.1)):
            assert abs(k / n - p) < 6 * math.sqrt(p * (1 - p) / n), (rate, split)
