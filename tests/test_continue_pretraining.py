"""Continued pre-training of released models (`pretrain --init-from DIR`), as a user runs it:
`bertprep build-shards TEXT --tokenizer DIR` -> `bertmodel pretrain --init-from DIR` ->
RUN/hf read by transformers.

The released layouts are built here the way a hub download holds them: transformers'
ModernBertForMaskedLM and RobertaForMaskedLM at a small width (random weights; ModernBERT's
vocabulary size and special ids from ModernBERT-base's own config.json), save_pretrained,
and the real ModernBERT-base / roberta-base tokenizer files beside them. A BERT without an
MLM head is the real all-MiniLM-L6-v2 (../shared/tools/fetch_minilm.sh).

Shown: the export is the source's class and gives our logits (float64); the MLM head
loads bit for bit and tied as the source ties it; a run stopped at step 10 and resumed
ends bitwise where the uninterrupted one does; --decay-only's lr per step is its formula;
MiniLM gets a fresh head in one line and --head-warmup-steps K keeps its encoder bit for
bit for K steps (resumed inside them too), then moves it; bad sources are one line."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from bertmodel.cli import main as bertmodel_main
from bertmodel.hf import load_pretrained
from bertmodel.model import HEAD_MODELS
from bertmodel.tasks.pretraining import PretrainingTask
from bertmodel.train import TrainConfig
from bertmodel.training.parallel import Dist
from bertprep.cli import main as bertprep_main
from embed_fixtures import minilm_path
from head_steps import FLOAT64_TOL, in_float64
from shared_data import SHARED_DATA, TOKENIZERS

transformers = pytest.importorskip("transformers")
TEXT = SHARED_DATA / "wikitext-2-raw-train-head.txt"
if not (TOKENIZERS.is_dir() and TEXT.is_file()):
    pytest.skip(f"shared tokenizer files or WikiText-2 not found under {SHARED_DATA}", allow_module_level=True)
pytestmark = pytest.mark.slow  # shard builds and short runs: about 60 s in all

STEPS = 20
RUN = ("--batch-size", 4, "--max-steps", STEPS, "--log-every", 1, "--save-every", 10, "--keep-last", 5,
       "--decay-only", "--no-progress", "--seed", 7)
# The source's MLM head (as the start-up line names it), its decoder and the table that is tied to.
HEADS = {"modernbert-base": ("decoder.bias, head.dense.*, head.norm.*", "decoder.weight",
                             "model.embeddings.tok_embeddings.weight"),
         "roberta-base": ("lm_head.bias, lm_head.dense.*, lm_head.layer_norm.*", "lm_head.decoder.weight",
                          "roberta.embeddings.word_embeddings.weight")}
LR = {"modernbert-base": (1e-3, "1-sqrt"), "roberta-base": (2e-3, "linear")}


def invoke(main, *args):
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(main, *args):
    result = invoke(main, *args)
    assert result.exit_code == 0, result.output
    return result


def released(family: str, out, **config):
    """transformers' MLM model of `family` at a small width, saved with the family's
    tokenizer files beside it. The weights are drawn with std 0.5, not 0.02: at 0.02 a
    tiny random model's logits are nearly flat and a comparison of them could not fail."""
    real = json.loads((TOKENIZERS / family / "config.json").read_text())
    ids = {k: real[k] for k in ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id")}
    if family == "modernbert-base":
        ids.update(cls_token_id=real["cls_token_id"], sep_token_id=real["sep_token_id"])
        hf = transformers.ModernBertConfig(**ids, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                           num_attention_heads=2, max_position_embeddings=512,
                                           global_attn_every_n_layers=2, local_attention=64, initializer_range=0.5,
                                           **config)
        model = transformers.ModernBertForMaskedLM
    else:
        hf = transformers.RobertaConfig(**ids, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, max_position_embeddings=130, type_vocab_size=1,
                                        initializer_range=0.5, **config)
        model = transformers.RobertaForMaskedLM
    torch.manual_seed(0)
    model(hf).save_pretrained(out)
    for path in (TOKENIZERS / family).iterdir():
        if path.name != "config.json":
            shutil.copyfile(path, out / path.name)
    return out


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    out = tmp_path_factory.mktemp("text") / "wiki.txt"
    out.write_text("".join(TEXT.read_text(encoding="utf-8").splitlines(keepends=True)[:300]), encoding="utf-8")
    return out


def build_shards(text, tokenizer, out, *options):
    ok(bertprep_main, "build-shards", text, "--tokenizer", tokenizer, "--out", out, "--max-seq-length", 64,
       "--max-predictions-per-seq", 10, "--dupe-factor", 1, "--no-progress", *options)
    return out


@pytest.fixture(scope="module")
def sources(text, tmp_path_factory):
    """family -> (its released-layout dir, FULL-SENTENCES shards built with its tokenizer)."""
    out = {}
    for family in HEADS:
        root = tmp_path_factory.mktemp(family)
        source = released(family, root / "source")
        out[family] = source, build_shards(text, source, root / "shards", "--pairs", "none")
    return out


@pytest.fixture(scope="module", params=list(HEADS))
def continued(request, sources, tmp_path_factory):
    """(family, source dir, shards, run of 20 steps, run stopped at 10 and resumed, outputs)."""
    family = request.param
    root = tmp_path_factory.mktemp(f"{family}-runs")
    source, shards = sources[family]
    lr, shape = LR[family]
    options = ("--init-from", source, "--data", shards, *RUN, "--lr", lr, "--decay-shape", shape)
    whole = ok(bertmodel_main, "pretrain", *options, "--out", root / "whole")
    ok(bertmodel_main, "pretrain", *options, "--out", root / "halves", "--stop-at", 10)
    ok(bertmodel_main, "pretrain", *options, "--out", root / "halves")
    return family, source, shards, root / "whole", root / "halves", whole.output


def test_the_export_is_the_sources_class_and_gives_our_logits(continued):
    """AutoModelForMaskedLM reads RUN/hf as the source's class, nothing missing or left
    over, and its logits on real text through the exported tokenizer are ours (the run's
    checkpoint in our model) in float64 (head_steps.py: FLOAT64_TOL)."""
    family, source, _, run, _, _ = continued
    theirs, info = transformers.AutoModelForMaskedLM.from_pretrained(run / "hf", output_loading_info=True)
    assert not any(info.values()), info
    assert type(theirs).__name__ == json.loads((source / "config.json").read_text())["architectures"][0]
    pre = load_pretrained(run)
    assert pre.step == STEPS
    ours = HEAD_MODELS[pre.architecture](pre.config)
    ours.load_state_dict(pre.state_dict)
    tokenizer = transformers.AutoTokenizer.from_pretrained(run / "hf")
    lines = [line for line in text_lines() if line.strip()][:2]
    batch = tokenizer(lines, padding=True, truncation=True, max_length=64, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    B, T = ids.shape
    ours.eval(), theirs.eval()
    with in_float64((ours, theirs), []), torch.no_grad():  # transformers' ModernBERT RoPE kept in float64 too
        a = ours(ids, torch.zeros_like(ids), mask, torch.arange(T).expand(B, T)).mlm_logits
        b = theirs(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    assert a.shape == b.shape == (B, T, pre.config.vocab_size)
    torch.testing.assert_close(a[real], b[real], atol=FLOAT64_TOL, rtol=FLOAT64_TOL)
    assert not torch.allclose(a[real], a[real][:1].expand_as(a[real]))  # the positions' logits differ


def text_lines() -> list[str]:
    return TEXT.read_text(encoding="utf-8").splitlines()[:40]


def test_a_resumed_run_ends_bitwise_where_the_uninterrupted_one_does(continued):
    _, _, _, whole, halves, _ = continued
    a = torch.load(whole / "checkpoints" / f"step-{STEPS}" / "state.pt", weights_only=False)
    b = torch.load(halves / "checkpoints" / f"step-{STEPS}" / "state.pt", weights_only=False)
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    assert losses(whole) == losses(halves) and len(losses(whole)) == STEPS


def losses(run) -> list[float]:
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


def test_decay_only_lr_per_step_is_its_formula(continued):
    """--decay-only: step s (0-based) trains at lr x (1 - sqrt(s / N)) (1-sqrt) or lr x (1 - s / N)
    (linear), N = --max-steps: the peak at step 0, no warmup, no stable phase."""
    family, _, _, run, _, _ = continued
    lr, shape = LR[family]
    logged = [r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]
    decay = (lambda p: 1 - math.sqrt(p)) if shape == "1-sqrt" else (lambda p: 1 - p)
    assert logged == [lr * decay(s / STEPS) for s in range(STEPS)]


def test_the_mlm_head_at_step_0_is_the_sources_and_tied_as_there(continued, tmp_path):
    """The model the run starts from (the task's fresh_model): every tensor the source's
    file holds, bit for bit, and the decoder one parameter with the word table, as
    transformers ties it (the file carries no decoder of its own)."""
    family, source, shards, _, _, output = continued
    names, decoder, table = HEADS[family]
    lines = []
    cfg = TrainConfig(out=str(tmp_path / "unused"), data=[str(shards)], init_from=str(source), batch_size=4)
    model = PretrainingTask(cfg, Dist(), lines.append).fresh_model(lines.append)
    file = load_file(str(source / "model.safetensors"))
    assert decoder not in file  # the source ties it
    ours = model.state_dict()
    head = [key for key in file if not key.startswith(("model.", "roberta."))]
    assert len(head) >= 3 and all(torch.equal(ours[key], file[key]) for key in file)
    assert model.get_parameter(decoder) is model.get_parameter(table)
    architecture = json.loads((source / "config.json").read_text())["architectures"][0]
    said = [line for line in output.splitlines() if line.startswith("initialised from")]
    assert said == [f"initialised from {source} ({architecture}): its encoder and MLM head ({names}), the decoder "
                    "tied to the word embeddings as there"]


@pytest.fixture(scope="module")
def minilm(text, tmp_path_factory):
    """all-MiniLM-L6-v2 (a BertModel: no MLM head) and shards of its own vocabulary."""
    model = minilm_path()
    return model, build_shards(text, model, tmp_path_factory.mktemp("minilm") / "shards")


MINILM_RUN = ("--batch-size", 2, "--max-steps", 3, "--head-warmup-steps", 2, "--save-every", 1, "--keep-last", 3,
              "--lr", 1e-3, "--warmup-steps", 0, "--no-progress", "--seed", 5)


def test_a_bert_without_mlm_head_gets_a_fresh_one_and_a_head_warmup(minilm, tmp_path):
    """MiniLM: one line says the head starts fresh; the export is BertForMaskedLM. With
    --head-warmup-steps 2 the encoder's every tensor is the source file's, bit for bit,
    after steps 1 and 2 while the head moves, and all of them move at step 3; a run
    stopped inside the warmup (step 1) and resumed ends bitwise where the other does."""
    model, shards = minilm
    run = tmp_path / "run"
    result = ok(bertmodel_main, "pretrain", "--init-from", model, "--data", shards, "--out", run, *MINILM_RUN)
    said = [line for line in result.output.splitlines() if "MLM head" in line]
    assert said == [f"initialised from {model} (BertModel): it has no MLM head, so cls.predictions.* start fresh "
                    "(BERT's init; the decoder is its word embeddings, tied); the encoder waits 2 steps while they "
                    "train (--head-warmup-steps); not used: bert.pooler.*"]
    source = {f"bert.{k}": v for k, v in load_file(str(model / "model.safetensors")).items()}
    states = {s: torch.load(run / "checkpoints" / f"step-{s}" / "state.pt", weights_only=False)["model"]
              for s in (1, 2, 3)}
    body = [key for key in states[1] if key.startswith("bert.")]
    assert len(body) == 101 and set(body) <= set(source)  # 6 layers x 16 tensors + 5 of the embeddings
    for step in (1, 2):
        assert all(torch.equal(states[step][key], source[key]) for key in body), step
    assert not torch.equal(states[1]["cls.predictions.transform.dense.weight"],
                           states[2]["cls.predictions.transform.dense.weight"])
    moved = [key for key in body if not torch.equal(states[3][key], source[key])]
    assert moved == body
    theirs, info = transformers.AutoModelForMaskedLM.from_pretrained(run / "hf", output_loading_info=True)
    assert type(theirs).__name__ == "BertForMaskedLM" and not any(info.values())

    halves = tmp_path / "halves"
    ok(bertmodel_main, "pretrain", "--init-from", model, "--data", shards, "--out", halves, *MINILM_RUN, "--stop-at", 1)
    ok(bertmodel_main, "pretrain", "--init-from", model, "--data", shards, "--out", halves, *MINILM_RUN)
    again = torch.load(halves / "checkpoints" / "step-3" / "state.pt", weights_only=False)["model"]
    assert all(torch.equal(again[key], states[3][key]) for key in states[3])


def one_line_error(*args) -> str:
    result = invoke(bertmodel_main, "pretrain", *args, "--no-progress")
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def test_sources_pretrain_cannot_continue_are_one_line(sources, tmp_path):
    source, shards = sources["roberta-base"]
    base = ("--data", shards, "--max-steps", 2, "--batch-size", 4)
    deberta = tmp_path / "deberta"
    deberta.mkdir()
    (deberta / "config.json").write_text(json.dumps({"model_type": "deberta-v2", "vocab_size": 128100}))
    assert one_line_error("--init-from", deberta, *base, "--out", tmp_path / "a") == (
        f"Error: {deberta}: is a deberta-v2 model; pretrain trains bert, modernbert, roberta (and electra) models")
    untied = released("roberta-base", tmp_path / "untied", tie_word_embeddings=False)
    assert one_line_error("--init-from", untied, *base, "--out", tmp_path / "b") == (
        f"Error: {untied}: its MLM decoder is a matrix of its own, not its word embeddings (config.json's "
        "tie_word_embeddings is false); pretrain trains tied decoders")
    electra = tmp_path / "electra"
    config = transformers.ElectraConfig(vocab_size=50265, embedding_size=16, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=130)
    transformers.ElectraForPreTraining(config).save_pretrained(electra)
    for path in (TOKENIZERS / "roberta-base").iterdir():
        if path.name != "config.json":
            shutil.copyfile(path, electra / path.name)
    assert one_line_error("--init-from", electra, *base, "--out", tmp_path / "c") == (
        f"Error: {electra}: an ELECTRA discriminator (ElectraForPreTraining), which has no MLM head to continue; "
        "continue its generator (ElectraForMaskedLM) with MLM, or the pair with --objective rtd --init-generator "
        "GENERATOR_DIR")
    assert one_line_error(*base, "--out", tmp_path / "d", "--head-warmup-steps", 3) == (
        "Error: --head-warmup-steps holds a starting model's encoder while its head trains: it needs --init-from")
    assert one_line_error("--init-from", source, *base, "--out", tmp_path / "e", "--decay-only", "--warmup-steps",
                          5) == "Error: --decay-only starts at the peak lr at step 0; drop --warmup-steps 5"
    assert not any((tmp_path / name).exists() for name in "abcde")


UNCASED = SHARED_DATA / "bert-base-uncased-vocab.txt"


def electra_pair(out, shared: bool = True):
    """transformers' ELECTRA discriminator and generator (BERT's uncased vocabulary), as
    Google's pairs come: one embedding module (E 32) that the generator (H 32) and the
    discriminator (H 64) both read; `shared` False gives the generator a table of its own."""
    config = dict(vocab_size=30522, embedding_size=32, num_hidden_layers=2, num_attention_heads=2,
                  max_position_embeddings=128)
    torch.manual_seed(0)
    disc = transformers.ElectraForPreTraining(transformers.ElectraConfig(**config, hidden_size=64,
                                                                         intermediate_size=128))
    gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(**config, hidden_size=32, intermediate_size=64))
    if shared:
        gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    for name, model in (("disc", disc), ("gen", gen)):
        model.save_pretrained(out / name)
        shutil.copyfile(UNCASED, out / name / "vocab.txt")
    return out / "disc", out / "gen"


@pytest.fixture(scope="module")
def uncased_shards(text, tmp_path_factory):
    return build_shards(text, UNCASED, tmp_path_factory.mktemp("uncased") / "shards")


def test_an_electra_pair_continues_as_one_pair(uncased_shards, tmp_path):
    """--objective rtd --init-from DISC --init-generator GEN: at step 0 every tensor of both
    files is the model's, the embedding module one for both; the run exports the pair's
    transformers classes, which load with nothing missing; the pair's RUN/hf continues as
    the pair again (its generator found beside it)."""
    from bertmodel.tasks.rtd import RTDTask

    disc, gen = electra_pair(tmp_path)
    lines = []
    cfg = TrainConfig(out=str(tmp_path / "unused"), data=[str(uncased_shards)], objective="rtd", init_from=str(disc),
                      init_generator=str(gen), batch_size=4)
    model = RTDTask(cfg, Dist(), lines.append).fresh_model(lines.append)
    ours = {"disc": model.discriminator.state_dict(), "gen": model.generator.state_dict()}
    for name in ("disc", "gen"):
        file = load_file(str(tmp_path / name / "model.safetensors"))
        assert all(torch.equal(ours[name][key], file[key]) for key in file), name
    assert model.generator.electra.embeddings is model.discriminator.electra.embeddings
    assert lines[-1] == (f"initialised from {disc} (ElectraForPreTraining) and its generator {gen} "
                         "(ElectraForMaskedLM), their one embedding module shared as there")
    run = tmp_path / "run"
    ok(bertmodel_main, "pretrain", "--objective", "rtd", "--init-from", disc, "--init-generator", gen, "--data",
       uncased_shards, "--out", run, "--batch-size", 4, "--max-steps", 2, "--no-progress")
    for part, cls in (("hf", "ElectraForPreTraining"), ("generator", "ElectraForMaskedLM")):
        loaded, info = getattr(transformers, cls).from_pretrained(run / part, output_loading_info=True)
        assert not any(info.values()), (part, info)
    again = ok(bertmodel_main, "pretrain", "--objective", "rtd", "--init-from", run / "hf", "--data", uncased_shards,
               "--out", tmp_path / "again", "--batch-size", 4, "--max-steps", 1, "--no-progress")
    assert (f"initialised from {run / 'hf'} (ElectraForPreTraining) and its generator {run / 'generator'} "
            "(ElectraForMaskedLM)") in again.output


def test_an_electra_pair_that_does_not_share_its_embeddings_is_one_line(uncased_shards, tmp_path):
    disc, gen = electra_pair(tmp_path, shared=False)
    base = ("--objective", "rtd", "--data", uncased_shards, "--max-steps", 2, "--batch-size", 4)
    assert one_line_error(*base, "--init-from", disc, "--init-generator", gen, "--out", tmp_path / "a") == (
        f"Error: {gen}: its electra.embeddings.position_embeddings.weight is not the discriminator's ({disc}); an "
        "ELECTRA pair trains one embedding module, so these two were not trained together")
    assert one_line_error(*base, "--init-from", disc, "--out", tmp_path / "b") == (
        f"Error: {disc}: an ELECTRA discriminator without its generator; give the generator's directory "
        "(ElectraForMaskedLM) with --init-generator")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_an_electra_generator_continues_as_electra_for_masked_lm(uncased_shards, tmp_path):
    """An ELECTRA generator alone is an MLM model: MLM alone (no pair head), its head loaded
    and tied as there, exported as ElectraForMaskedLM that AutoModelForMaskedLM reads whole."""
    _, gen = electra_pair(tmp_path)
    run = tmp_path / "run"
    result = ok(bertmodel_main, "pretrain", "--init-from", gen, "--data", uncased_shards, "--out", run,
                "--batch-size", 4, "--max-steps", 2, "--no-progress")
    assert (f"initialised from {gen} (ElectraForMaskedLM): its encoder and MLM head (generator_lm_head.bias, "
            "generator_predictions.LayerNorm.*, generator_predictions.dense.*), the decoder tied to the word "
            "embeddings as there") in result.output
    assert f"{gen} has no pair head: MLM alone on the shards' next-sentence pairs, their labels unused (electra " \
           "models have none)" in result.output
    loaded, info = transformers.AutoModelForMaskedLM.from_pretrained(run / "hf", output_loading_info=True)
    assert type(loaded).__name__ == "ElectraForMaskedLM" and not any(info.values())


def test_decay_only_is_the_wsd_schedule_without_warmup_or_stable_phase():
    """--decay-only's schedule: the formula at every step and past the end, and the very
    schedule --schedule wsd --warmup-steps 0 --decay-ratio 1 gives; the recorded fields say so."""
    for shape, decay in (("1-sqrt", lambda p: 1 - math.sqrt(p)), ("linear", lambda p: 1 - p)):
        cfg = TrainConfig(out="unused", data=["unused"], decay_only=True, lr=3e-4, max_steps=12, decay_shape=shape)
        schedule = cfg.lr_schedule()
        assert [schedule(s) for s in range(13)] == [3e-4 * decay(s / 12) for s in range(13)]
        assert schedule(13) == 0.0
        assert (cfg.schedule, cfg.warmup_steps, cfg.decay_ratio) == ("wsd", 0, 1.0)
        assert schedule == TrainConfig(out="unused", data=["unused"], lr=3e-4, max_steps=12, schedule="wsd",
                                       warmup_steps=0, decay_ratio=1.0, decay_shape=shape).lr_schedule()
