"""`bertmodel pretrain --objective rtd` end to end on Google's sample text: the run logs
and evaluates ELECTRA's figures; RUN/hf (the discriminator) and RUN/generator load in
transformers' classes with no missing or unexpected keys and give our logits (BERT:
ElectraForPreTraining / ElectraForMaskedLM; ModernBERT: ModernBertForTokenClassification,
whose encoder AutoModel loads as ModernBertModel, / ModernBertForMaskedLM); a stopped and
resumed run ends with the uninterrupted run's weights, bit for bit (static and dynamic
masks, padded and packed); the discriminator's loss reads real tokens only; fine-tuning
takes the run; bad option combinations are one-line errors."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data import ShardDataset
from bertmodel.data.shards import open_shard_dir
from bertmodel.hf import load_pretrained
from bertmodel.model.rtd import ReplacedTokenDetection, RTDOutput
from bertmodel.training import checkpoint as ckpt
from bertprep.cli import main as bertprep_main
from shared_data import SHARED_DATA

transformers = pytest.importorskip("transformers")

SAMPLE, UNCASED = SHARED_DATA / "google_sample_text.txt", SHARED_DATA / "bert-base-uncased-vocab.txt"
RTE = SHARED_DATA / "glue" / "RTE"
# One xdist worker runs the module: the shards and the two logged runs (module fixtures)
# that most tests read are made once.
pytestmark = [pytest.mark.skipif(not SAMPLE.is_file() or not UNCASED.is_file(),
                                 reason="needs ../shared/data (google_sample_text.txt, bert-base-uncased-vocab.txt)"),
              pytest.mark.xdist_group("rtd")]


def invoke(cli, *args, code: int = 0):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    out = tmp_path_factory.mktemp("rtd") / "shards"
    invoke(bertprep_main, "build-shards", SAMPLE, "--tokenizer", UNCASED, "--out", out, "--max-seq-length", 64,
           "--dupe-factor", 2, "--no-progress")
    return out


def pretrain(shards, out, *args, code: int = 0):
    return invoke(main, "pretrain", "--data", shards, "--out", out, "--preset", "tiny", "--objective", "rtd",
                  "--batch-size", 8, "--max-steps", 12, "--lr", "5e-4", "--warmup-steps", 2, "--log-every", 3,
                  "--save-every", 6, "--no-progress", *args, code=code)


@pytest.fixture(scope="module")
def logged_run(shards, tmp_path_factory):
    """(RUN, its output) of a 12-step run of an architecture that evaluates and saves
    every 3 steps, made on first use: the figures test checks it, and the tests that
    fine-tune, score, plot or refuse a finished ELECTRA run read it (none writes into it
    but plot, whose curves.png no other test looks at)."""
    made = {}

    def get(architecture: str):
        if architecture not in made:
            run = tmp_path_factory.mktemp(f"rtd-{architecture}") / "run"
            result = pretrain(shards, run, "--architecture", architecture, "--eval-data", shards, "--eval-batches", 2,
                              "--eval-every", 3, "--save-every", 3, "--keep-last", 4)
            made[architecture] = run, result.output
        return made[architecture]

    return get


def batch_of(shards, rows: int = 6) -> dict:
    data = ShardDataset([open_shard_dir(shards)])
    arrays = data.collate(np.arange(rows))
    return {k: torch.from_numpy(v) for k, v in arrays.items()}


def replayed_evaluation(checkpoint, shards, eval_batches: int) -> dict:
    """The evaluation of a checkpoint's model done again here: the first eval_batches
    batches of the held-out shards in file order, dropout off, the generator's noise from
    a stream of its own seeded seed x 1000 (rank 0), the figures by their definitions."""
    train = ckpt.load_checkpoint(checkpoint)["train"]
    model = our_model(checkpoint)
    data = ShardDataset([open_shard_dir(shards)])
    size = train["batch_size"]
    noise = torch.Generator().manual_seed(train["seed"] * 1000)
    outs, batches = [], []
    for s in range(eval_batches):
        arrays = data.collate(np.arange(s * size, (s + 1) * size), model.config.max_position_embeddings)
        batch = {k: torch.from_numpy(v) for k, v in arrays.items()}
        with torch.no_grad():
            outs.append(model(**batch, sample_generator=noise))
        batches.append(batch)
    return figures_by_definition(outs, batches)


def our_model(run) -> ReplacedTokenDetection:
    """The model of a run's latest checkpoint, or of a checkpoint directory."""
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(run) or run)
    from bertmodel.model.config import config_from_dict

    model = ReplacedTokenDetection(config_from_dict(state["config"]), config_from_dict(state["task"]["generator_config"]))
    model.load_state_dict(state["model"])
    return model.eval()


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
def test_a_run_logs_electra_figures_and_exports_both_models(shards, logged_run, architecture):
    run, output = logged_run(architecture)
    assert "RUN/generator" in output and "replaced-token detection" in output
    assert "unpadded" not in output  # --unpad auto: pre-training stays padded on the CPU, whatever the heads
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train, evals = [r for r in records if "loss" in r], [r for r in records if "eval_loss" in r]
    for key in ("mlm_loss", "disc_loss", "mlm_acc", "disc_acc", "disc_precision", "disc_recall", "replaced_share"):
        assert key in train[-1] and f"eval_{key}" in evals[-1], key
    assert 0.05 < train[-1]["replaced_share"] < 0.2  # about the 15% masked, less the samples that hit the original
    assert train[-1]["loss"] == pytest.approx(train[-1]["mlm_loss"] + 50 * train[-1]["disc_loss"], rel=1e-6)
    # The evaluations' figures, recomputed from the checkpoints' outputs on the held-out
    # batches: the same float32 outputs, so equal to float64 rounding of the ratios. At
    # step 3 the discriminator still calls some tokens replaced (its precision is a number);
    # by step 12 it calls none, which metrics.jsonl writes as null (nan: nothing to measure).
    by_step = {r["step"]: r for r in evals}
    assert sorted(by_step) == [3, 6, 9, 12]
    for step in (3, 12):
        logged = {k: math.nan if v is None else v for k, v in by_step[step].items() if k != "step"}
        replayed = replayed_evaluation(run / "checkpoints" / f"step-{step}", shards, eval_batches=2)
        assert {f"eval_{k}": v for k, v in replayed.items()} == pytest.approx(logged, rel=1e-12, nan_ok=True)

    ours = our_model(run)
    batch = batch_of(shards)
    with torch.no_grad():
        out = ours(**batch, sample_generator=torch.Generator().manual_seed(0))
        ids, mask = batch["input_ids"].long(), batch["attention_mask"]
        disc_logits = ours.discriminator(ids, batch["token_type_ids"], mask)
        gen_logits = ours.generator.slot_logits(ids, batch["token_type_ids"], mask, batch["masked_lm_positions"].long())
    assert out.mlm_logits.shape == gen_logits.shape
    slots = batch["masked_lm_positions"].long()
    if architecture == "bert":
        disc_class, gen_class = transformers.ElectraForPreTraining, transformers.ElectraForMaskedLM
    else:
        disc_class, gen_class = transformers.ModernBertForTokenClassification, transformers.ModernBertForMaskedLM
    disc, info = disc_class.from_pretrained(run / "hf", output_loading_info=True)
    assert not any(info.values()), info
    gen, info = gen_class.from_pretrained(run / "generator", output_loading_info=True)
    assert not any(info.values()), info
    kwargs = {"token_type_ids": batch["token_type_ids"].long()} if architecture == "bert" else {}
    with torch.no_grad():
        theirs = disc.eval()(input_ids=ids, attention_mask=mask, **kwargs).logits
        theirs_gen = gen.eval()(input_ids=ids, attention_mask=mask, **kwargs).logits
    real = mask.bool()
    torch.testing.assert_close(theirs.reshape(disc_logits.shape)[real], disc_logits[real], atol=1e-5, rtol=1e-5)
    at_slots = theirs_gen.gather(1, slots[..., None].expand(-1, -1, theirs_gen.shape[-1]))
    torch.testing.assert_close(at_slots, gen_logits, atol=1e-4, rtol=1e-4)
    tokenizer = transformers.AutoTokenizer.from_pretrained(run / "generator")
    assert tokenizer("the man went to the store")["input_ids"][0] == tokenizer.cls_token_id
    # fill-mask reads the generator, from the run, its checkpoint's state or either export.
    text = "the man went to the [MASK] and bought a gallon of milk ."
    guesses = {str(where): invoke(main, "fill-mask", where, text, "--top-k", 3).output
               for where in (run, run / "hf", run / "generator")}
    assert len(set(guesses.values())) == 1, guesses
    pipeline = transformers.pipeline("fill-mask", model=str(run / "generator"), top_k=1)
    assert pipeline(text)[0]["token_str"].replace(" ", "") in guesses[str(run)].split("\n")[1]
    if architecture == "modernbert":  # the discriminator's encoder as ModernBertModel
        encoder, info = transformers.AutoModel.from_pretrained(run / "hf", output_loading_info=True)
        assert type(encoder).__name__ == "ModernBertModel" and not info["missing_keys"], info
        with torch.no_grad():
            hidden = encoder.eval()(input_ids=ids, attention_mask=mask).last_hidden_state
            ours_hidden = ours.discriminator.model(ids, None, mask)
        torch.testing.assert_close(hidden[real], ours_hidden[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("architecture,recipe", [("bert", []), ("modernbert", ["--masking", "dynamic",
                                                                             "--unpad", "on"])],
                         ids=["bert-static", "modernbert-dynamic-packed"])
def test_a_stopped_run_resumes_to_the_same_weights(shards, tmp_path, architecture, recipe):
    pretrain(shards, tmp_path / "straight", "--architecture", architecture, *recipe)
    pretrain(shards, tmp_path / "resumed", "--architecture", architecture, *recipe, "--stop-at", 5)
    assert ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "resumed"))["step"] == 5
    pretrain(shards, tmp_path / "resumed", "--architecture", architecture, *recipe)
    a = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "straight"))
    b = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "resumed"))
    assert a["step"] == b["step"] == 12
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    # The interval cut by the stop (steps 4-6) is logged whole after the resume: every
    # logged figure as in the uninterrupted run.
    figures = ("loss", "mlm_loss", "disc_loss", "mlm_acc", "disc_acc", "disc_precision", "disc_recall",
               "replaced_share")
    logged = {run: [json.dumps({k: r[k] for k in ("step", *figures)})
                    for r in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())]
              for run in ("straight", "resumed")}
    assert logged["straight"] == logged["resumed"] and len(logged["straight"]) == 4
    assert {k for k in a["model"] if k.startswith("generator.")} and {k for k in a["model"]
                                                                      if k.startswith("discriminator.")}


def test_the_discriminator_loss_reads_real_tokens_only(shards):
    """What sits at padded positions changes neither the loss nor the labels."""
    from bertmodel.model.config import ElectraConfig
    from bertmodel.model.rtd import generator_config

    torch.manual_seed(0)
    config = ElectraConfig.preset("tiny", vocab_size=30522, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    model = ReplacedTokenDetection(config, generator_config(config, 1 / 3)).eval()
    batch = batch_of(shards, 16)
    pad = batch["attention_mask"] == 0
    if not bool(pad.any()):  # a row cut short: padded positions to fill
        batch["attention_mask"][0, -5:] = 0
        pad = batch["attention_mask"] == 0
    other = dict(batch, input_ids=torch.where(pad, torch.full_like(batch["input_ids"], 1999), batch["input_ids"]))
    with torch.no_grad():
        a = model(**batch, sample_generator=torch.Generator().manual_seed(3))
        b = model(**other, sample_generator=torch.Generator().manual_seed(3))
    assert not bool(a.replaced[pad].any())
    # Replaced only where a real prediction slot points (a padded slot's position, often
    # [CLS], is never written), and not everywhere there.
    slots = torch.zeros_like(a.replaced)
    real_slots = batch["masked_lm_labels"] != -100
    rows = torch.arange(len(slots))[:, None].expand_as(real_slots)
    slots[rows[real_slots], batch["masked_lm_positions"].long()[real_slots]] = True
    assert not bool((a.replaced & ~slots).any()) and 0 < int(a.replaced.sum()) <= int(slots.sum())
    assert a.disc_loss.item() == pytest.approx(b.disc_loss.item(), rel=1e-6)
    real = ~pad
    expected = torch.nn.functional.binary_cross_entropy_with_logits(a.disc_logits[real], a.replaced[real].float())
    assert a.disc_loss.item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.skipif(not RTE.is_dir(), reason="needs ../shared/data/glue/RTE")
@pytest.mark.parametrize("architecture,hf_class", [("bert", "ElectraForSequenceClassification"),
                                                   ("modernbert", "ModernBertForSequenceClassification")])
def test_finetune_classify_takes_an_rtd_run(logged_run, tmp_path, architecture, hf_class):
    run, _ = logged_run(architecture)
    pre = load_pretrained(run)
    assert pre.architecture in ("ElectraForPreTraining", "ModernBertForTokenClassification")
    assert not any(k.startswith(("generator.", "discriminator.")) for k in pre.state_dict)
    out = tmp_path / "rte"
    invoke(main, "finetune", "classify", "--model", run, "--train", RTE / "train.tsv", "--validation",
           RTE / "dev.tsv", "--out", out, "--max-train-examples", 32, "--max-eval-examples", 16, "--batch-size", 16,
           "--epochs", 1, "--max-seq-length", 64, "--no-progress")
    theirs, info = getattr(transformers, hf_class).from_pretrained(out / "hf", output_loading_info=True)
    assert not any(info.values()), info
    tuned = load_pretrained(out / "hf").state_dict
    disc = pre.state_dict
    key = next(k for k in disc if "encoder.layer.0" in k or "layers.1.attn.Wqkv" in k)
    assert key in tuned and not torch.equal(tuned[key], disc[key])  # trained on, from the discriminator's weights


def test_fill_mask_refuses_a_discriminator_without_its_generator(logged_run, tmp_path):
    import shutil

    run, _ = logged_run("bert")
    alone = tmp_path / "discriminator"
    shutil.copytree(run / "hf", alone)  # RUN/hf alone, without RUN/generator beside it
    result = invoke(main, "fill-mask", alone, "the [MASK] .", code=1)
    assert result.output.startswith(f"Error: {alone}: the discriminator of an ELECTRA run, which has no MLM head")


def test_a_resume_with_other_model_options_is_a_one_line_error(shards, tmp_path):
    """The tables' layout, the generator's shape and the objective are the run's model:
    checked before any weight is loaded."""
    run = tmp_path / "run"
    pretrain(shards, run, "--embedding-sharing", "gdes", "--stop-at", 2)
    cases = [([], f"Error: {run}: an ELECTRA run with --embedding-sharing gdes, not tied; resume it with "
                  "--embedding-sharing gdes"),
             (["--embedding-sharing", "gdes", "--generator-size", "0.5"],
              f"Error: {run}: its generator has 2 layers, hidden 43, not 2 layers, hidden 64; resume with the run's "
              "--generator-size and --generator-layers")]
    for args, message in cases:
        result = pretrain(shards, run, *args, code=1)
        assert result.output == message + "\n", result.output
    other = invoke(main, "pretrain", "--data", shards, "--out", run, "--preset", "tiny", "--batch-size", 8,
                   "--max-steps", 12, "--no-progress", code=1)
    assert other.output == f"Error: {run}: an ELECTRA run (generator and discriminator); resume it with " \
                           "--objective rtd\n", other.output
    pretrain(shards, run, "--embedding-sharing", "gdes")  # the run's own options resume it
    assert ckpt.load_checkpoint(ckpt.latest_checkpoint(run))["step"] == 12


@pytest.mark.skipif(not (SHARED_DATA / "ner" / "conll2003").is_dir(), reason="needs ../shared/data/ner/conll2003")
def test_evaluate_and_predict_refuse_a_modernbert_discriminator(logged_run, tmp_path):
    """Its export has ModernBertForTokenClassification's shape (one label, replaced), but it
    is a pre-training run: one line says to fine-tune it, instead of tagging words."""
    run, _ = logged_run("modernbert")
    conll = SHARED_DATA / "ner" / "conll2003" / "valid.txt"
    exported = tmp_path / "exported"  # export-hf keeps what the model is
    invoke(main, "export-hf", run, exported)
    for model in (run, exported):
        for args in (["evaluate", model, "--data", conll], ["predict", model, "--file", conll, "--out",
                                                             tmp_path / "p.jsonl"]):
            result = invoke(main, *args, code=1)
            assert result.output == (f"Error: {model}: a pre-training run (ModernBertForTokenClassification), not "
                                     f"a fine-tuned model; fine-tune it first (bertmodel finetune classify|qa|"
                                     f"tokens|choice --model {model} ...), or score it as an embedder "
                                     f"(bertmodel evaluate {model} --data BEIR_DIR)\n"), result.output
    assert not (tmp_path / "p.jsonl").exists()


def test_fill_mask_refuses_a_model_without_an_mlm_head(tmp_path):
    """A bare encoder has no MLM head: guesses from a fresh one would look like answers."""
    import shutil

    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64)
    transformers.BertModel(config).save_pretrained(tmp_path / "bare")
    shutil.copyfile(UNCASED, tmp_path / "bare" / "vocab.txt")
    result = invoke(main, "fill-mask", tmp_path / "bare", "the [MASK] .", code=1)
    assert result.output.startswith(f"Error: {tmp_path / 'bare'}: has no MLM head (BertModel; missing cls.predictions")
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("args,message", [
    (["--objective", "mlm", "--generator-size", "0.25"], "--generator-size shapes ELECTRA's replaced-token "
                                                         "detection: add --objective rtd"),
    (["--objective", "mlm", "--init-generator", "SELF"], "--init-generator is the generator of the ELECTRA "
                                                         "discriminator in --init-from: give both, with --objective rtd"),
])
def test_bad_option_combinations_are_one_line_errors(shards, tmp_path, args, message):
    args = [str(shards) if a == "SELF" else a for a in args]
    result = CliRunner().invoke(main, ["pretrain", "--data", str(shards), "--out", str(tmp_path / "run"), "--preset",
                                       "tiny", "--max-steps", "2", "--no-progress", *args])
    assert result.exit_code != 0
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not RTE.is_dir() or not (SHARED_DATA / "ner" / "conll2003").is_dir(),
                    reason="needs ../shared/data (glue/RTE, ner/conll2003)")
def test_eval_suite_scores_an_rtd_run(logged_run, tmp_path):
    """eval-suite fine-tunes the discriminator on a classification and a token task."""
    run, _ = logged_run("bert")
    suite = tmp_path / "suite.toml"
    suite.write_text(f"""
name = "rtd"
seeds = [1]
data_dir = "{SHARED_DATA}"
[defaults]
epochs = 1
batch_size = 16
max_seq_length = 64
max_train_examples = 32
max_eval_examples = 16
device = "cpu"
[[task]]
name = "rte"
command = "classify"
train = "glue/RTE/train.tsv"
validation = "glue/RTE/dev.tsv"
[[task]]
name = "conll"
command = "tokens"
train = "ner/conll2003/train.txt"
validation = "ner/conll2003/valid.txt"
""")
    out = tmp_path / "suite"
    invoke(main, "eval-suite", "--model", run, "--suite", suite, "--out", out, "--no-progress")
    results = json.loads((out / "results.json").read_text())
    assert [t["name"] for t in results["tasks"]] == ["rte", "conll"]
    for task, hf_class in (("rte", "ElectraForSequenceClassification"), ("conll", "ElectraForTokenClassification")):
        hf_dirs = list((out / task).glob("*/seed-1/hf"))
        assert len(hf_dirs) == 1, hf_dirs
        assert json.loads((hf_dirs[0] / "config.json").read_text())["architectures"] == [hf_class]


def test_plot_draws_the_electra_figures(logged_run):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    from bertmodel.training.plot import eval_keys, read_metrics

    run, _ = logged_run("bert")
    keys = eval_keys(read_metrics(run))
    assert {"eval_disc_acc", "eval_disc_recall", "eval_mlm_acc", "eval_replaced_share", "eval_disc_loss"} <= set(keys)
    assert invoke(main, "plot", run).output == f"wrote {run / 'curves.png'} (1 run)\n"


# --- the figures, recomputed from the definitions ---------------------------------------------

def figures_by_definition(outs: list, batches: list[dict]) -> dict:
    """ELECTRA's figures over several micro-batches, written out in float64 numpy from
    their definitions: counts summed over the batches, then divided (a ratio of sums, not
    a mean of per-batch ratios); the losses a mean over the micro-batches (each already a
    mean). Real tokens are those with attention_mask 1 ([CLS] and [SEP] among them, padding
    not); "predicted replaced" is a logit above 0; the MLM figures read real slots only."""
    counts = dict.fromkeys(("tp", "predicted", "replaced", "correct", "real", "mlm_correct", "mlm_total"), 0)
    losses = {"loss": [], "mlm_loss": [], "disc_loss": []}
    for out, batch in zip(outs, batches):
        real = np.asarray(batch["attention_mask"]) == 1
        logits = np.asarray(out.disc_logits, np.float64)[real]
        truth = np.asarray(out.replaced)[real]
        guess = logits > 0
        counts["tp"] += int((guess & truth).sum())
        counts["predicted"] += int(guess.sum())
        counts["replaced"] += int(truth.sum())
        counts["correct"] += int((guess == truth).sum())
        counts["real"] += int(real.sum())
        labels = np.asarray(batch["masked_lm_labels"])
        slots = labels != -100
        argmax = np.asarray(out.mlm_logits, np.float64).argmax(-1)
        counts["mlm_correct"] += int((argmax[slots] == labels[slots]).sum())
        counts["mlm_total"] += int(slots.sum())
        for key in losses:
            losses[key].append(float(getattr(out, key)))
    c = counts
    return {**{key: float(np.mean(values)) for key, values in losses.items()},
            "mlm_acc": c["mlm_correct"] / c["mlm_total"], "disc_acc": c["correct"] / c["real"],
            "disc_precision": c["tp"] / c["predicted"] if c["predicted"] else float("nan"),
            "disc_recall": c["tp"] / c["replaced"] if c["replaced"] else float("nan"),
            "replaced_share": c["replaced"] / c["real"]}


def made_up_output(loss, mlm_loss, disc_loss, mlm_argmax, vocab, disc_logits, replaced) -> RTDOutput:
    """An RTDOutput with chosen figures: the generator's logits peak at mlm_argmax."""
    argmax = torch.tensor(mlm_argmax)
    mlm_logits = torch.nn.functional.one_hot(argmax, vocab).float() * 4.0 - 1.0  # (B, P, V)
    exact = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731 - 0.04 as written, not its float32
    return RTDOutput(exact(loss), exact(mlm_loss), exact(disc_loss), mlm_logits,
                     torch.tensor(disc_logits), torch.tensor(replaced))


# Two micro-batches whose per-batch ratios differ, so a mean of ratios is told from the
# ratio of sums. Batch one: row 0 is [CLS] a b c [SEP], row 1 [CLS] a [SEP] and two pads.
# The discriminator calls [CLS] of row 0 replaced (a false positive that counts: [CLS] is
# a real token), logit 0 is "original" (sigmoid 0.5 is not above it), the pads carry
# large logits (and one pad a stray "replaced") that must count nowhere; row 1's second
# prediction slot is padding (label -100): no slot of the MLM accuracy.
HAND_BATCHES = [
    {"attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]),
     "masked_lm_labels": torch.tensor([[2, 3], [1, -100]])},
    {"attention_mask": torch.tensor([[1, 1, 1, 1]]), "masked_lm_labels": torch.tensor([[0, 1]])},
]
HAND_OUTS = [
    made_up_output(3.0, 1.0, 0.04, [[2, 0], [1, 3]], 4,
                   [[2.0, 1.0, -1.0, -0.5, -3.0], [-1.0, 0.5, 0.0, 5.0, 3.0]],
                   [[False, True, False, True, False], [False, False, False, False, True]]),
    made_up_output(5.0, 2.0, 0.06, [[0, 1]], 4, [[-1.0, 2.0, 3.0, -1.0]], [[False, True, True, True]]),
]


def test_rtd_figures_are_ratios_of_sums_over_real_tokens():
    from bertmodel.tasks.rtd import RTDStats

    stats = RTDStats(torch.device("cpu"))
    for out, batch in zip(HAND_OUTS, HAND_BATCHES):
        stats.add(out, batch)
    got = RTDStats.summarize(stats.totals())
    # By hand: batch one has 8 real tokens, TP 1 (row 0 "a"), FP 2 ([CLS] of row 0, row
    # 1's "a"), FN 1, TN 4; MLM 2 of 3 real slots. Batch two: TP 2, FN 1, TN 1; MLM 2 of 2.
    want = {"loss": 4.0, "mlm_loss": 1.5, "disc_loss": 0.05, "mlm_acc": 4 / 5, "disc_acc": 8 / 12,
            "disc_precision": 3 / 5, "disc_recall": 3 / 5, "replaced_share": 5 / 12}
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key
    assert figures_by_definition(HAND_OUTS, HAND_BATCHES) == pytest.approx(want, rel=1e-12)
    # A new interval starts from nothing: batch two alone.
    stats.reset()
    stats.add(HAND_OUTS[1], HAND_BATCHES[1])
    alone = RTDStats.summarize(stats.totals())
    assert alone == pytest.approx({"loss": 5.0, "mlm_loss": 2.0, "disc_loss": 0.06, "mlm_acc": 1.0, "disc_acc": 0.75,
                                   "disc_precision": 1.0, "disc_recall": 2 / 3, "replaced_share": 0.75}, rel=1e-12)
    # Nothing called replaced: precision has nothing to measure (nan), recall is 0.
    quiet = made_up_output(1.0, 1.0, 0.0, [[0, 1]], 4, [[-1.0, -2.0, -3.0, -1.0]], [[False, True, True, False]])
    stats.reset()
    stats.add(quiet, HAND_BATCHES[1])
    summary = RTDStats.summarize(stats.totals())
    assert math.isnan(summary["disc_precision"]) and summary["disc_recall"] == 0.0
    assert summary["disc_acc"] == 0.5 and summary["replaced_share"] == 0.5
