"""`pretrain --objective minilm`: MiniLMv2's self-attention relation distillation.

Step tests: 8 float64 steps of our distillation (distill/minilm.py's RelationDistillation,
the teacher loaded by teacher_encoder from a transformers directory, the student built as
the task builds it, AdamW over its decay groups, the loop's clip_and_step) against a
reference written here from the paper's equations on transformers' BertModel /
ModernBertModel: each layer's Q, K and V taken with the transformers modules' own weights
(ModernBERT: the attention norm, Wqkv and transformers' rotary embedding of the layer's
kind), the relations computed sequence by sequence on the real tokens alone (no mask at
all), torch's AdamW and clip_grad_norm_. The loss, its parts, the gradient norm and the
final weights agree to 1e-10 (tests/head_steps.py says why that bound holds on any CPU);
the parameters ours trains are exactly those the reference's loss reaches.

CLI: a run on shards of Google's sample text (--pairs none) from a transformers BERT
teacher: its figures, evaluation replayed with transformers' classes, RUN/hf a BertModel
that transformers loads and `finetune classify` takes, nothing of the teacher in a
checkpoint, and stop + resume ending bit for bit where the uninterrupted run does. Bad
input is one line."""
from __future__ import annotations

import copy
import json
import math
import shutil

import numpy as np
import pytest
import safetensors.torch
import torch
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data import ShardDataset
from bertmodel.data.shards import open_shard_dir
from bertmodel.distill.minilm import STUDENTS, RelationDistillation, teacher_encoder
from bertmodel.hf import load_pretrained
from bertmodel.model.config import BertConfig, ModernBertConfig
from bertmodel.tasks.minilm import OriginalText
from bertmodel.training import checkpoint as ckpt
from bertmodel.training.optim import Schedule, build_optimizer, clip_and_step, set_lr
from bertprep.cli import main as bertprep_main
from shared_data import SHARED_DATA

transformers = pytest.importorskip("transformers")

from head_steps import FLOAT64_TOL, STEPS, in_float64, step_shards  # noqa: E402

LR, DECAY = 3e-3, 0.01
SAMPLE, UNCASED, CASED = (SHARED_DATA / name for name in ("google_sample_text.txt", "bert-base-uncased-vocab.txt",
                                                          "bert-base-cased-vocab.txt"))
RTE = SHARED_DATA / "glue" / "RTE"


# -- the reference, from the equations -------------------------------------------------
def reference_kl(teacher: torch.Tensor, student: torch.Tensor, heads: int, attention_mask: torch.Tensor):
    """KL(R_T || R_S), R = softmax(S_r S_r^T / sqrt(d_r)) per relation head, on each
    sequence's real tokens alone; summed over keys, averaged over heads and real queries."""
    total, rows = 0.0, 0
    for b in range(teacher.shape[0]):
        real = attention_mask[b].bool()
        parts = []
        for x in (teacher[b, real], student[b, real]):  # (n, W)
            n, W = x.shape
            assert W % heads == 0
            d = W // heads
            x_r = x.view(n, heads, d).transpose(0, 1)  # (A_r, n, d_r): head a is columns a*d_r .. (a+1)*d_r
            parts.append(torch.log_softmax(x_r @ x_r.transpose(1, 2) / math.sqrt(d), dim=-1))  # (A_r, n, n)
        log_t, log_s = parts
        total = total + (log_t.exp() * (log_t - log_s)).sum()
        rows += int(real.sum()) * heads
    return total / rows


class LayerTap:
    """A transformers layer's input and output on the last forward (hooks)."""

    def __init__(self, layer: torch.nn.Module):
        self.layer = layer
        layer.register_forward_pre_hook(lambda module, args: setattr(self, "input", args[0]))
        layer.register_forward_hook(lambda module, args, out: setattr(self, "output", out))


def bert_qkv(tap: LayerTap, model) -> tuple:
    s = tap.layer.attention.self
    x = tap.input
    return s.query(x), s.key(x), s.value(x)


def modernbert_qkv(tap: LayerTap, model) -> tuple:
    """As transformers' ModernBertAttention.forward computes them before the scores."""
    from transformers.models.modernbert import modeling_modernbert

    layer = tap.layer
    h = layer.attn_norm(tap.input)
    B, T, H = h.shape
    A = model.config.num_attention_heads
    q, k, v = (t.transpose(1, 2) for t in layer.attn.Wqkv(h).view(B, T, 3, A, H // A).unbind(dim=2))  # (B, A, T, D)
    cos, sin = model.rotary_emb(h, torch.arange(T)[None], layer.attention_type)
    q, k = modeling_modernbert.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)
    return tuple(t.transpose(1, 2).reshape(B, T, H) for t in (q, k, v))


class Reference:
    """transformers' teacher and student (and a Linear projection) and the loss."""

    def __init__(self, teacher, student, projection, teacher_layer: int, heads: int, weight: float, qkv):
        self.teacher, self.student, self.projection = teacher, student, projection
        self.heads, self.weight, self.qkv = heads, weight, qkv
        self.teacher_tap = LayerTap(layers_of(teacher)[teacher_layer - 1])
        self.student_tap = LayerTap(layers_of(student)[-1])

    def __call__(self, batch: dict) -> list[torch.Tensor]:
        kwargs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        if isinstance(self.teacher, transformers.BertModel):
            kwargs["token_type_ids"] = batch["token_type_ids"]
        with torch.no_grad():
            self.teacher(**kwargs)
            teacher = self.qkv(self.teacher_tap, self.teacher)
        self.student(**kwargs)
        student = self.qkv(self.student_tap, self.student)
        parts = [reference_kl(t, s, self.heads, batch["attention_mask"]) for t, s in zip(teacher, student)]
        if self.weight:
            real = batch["attention_mask"].bool()
            projected = self.student_tap.output if self.projection is None else self.projection(self.student_tap.output)
            parts.append(((projected[real] - self.teacher_tap.output[real]) ** 2).mean())
        return parts

    def parameters(self) -> dict[str, torch.nn.Parameter]:
        named = dict(self.student.named_parameters())
        if self.projection is not None:
            named |= {f"hidden_projection.{k}": p for k, p in self.projection.named_parameters()}
        return named


def layers_of(model):
    return model.layers if isinstance(model, transformers.ModernBertModel) else model.encoder.layer


def hf_config(ours, cls):
    return cls(**{k: v for k, v in ours.to_hf_dict().items() if k not in ("architectures", "dtype")})


# -- the two sides, built alike ---------------------------------------------------------
def models(architecture: str, vocab: int, tmp_path, teacher_layer: int, heads: int, weight: float):
    """Ours (RelationDistillation, the teacher read from a transformers directory) and the
    reference holding the same weights: a 3-layer teacher 64 wide with 4 heads, a 2-layer
    student 32 wide with 2."""
    ours_cls, extra, cls, model_cls, prefix, qkv = {
        "bert": (BertConfig, dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), transformers.BertConfig,
                 transformers.BertModel, "bert.", bert_qkv),
        "modernbert": (ModernBertConfig, dict(local_attention=16), transformers.ModernBertConfig,
                       transformers.ModernBertModel, "model.", modernbert_qkv)}[architecture]
    teacher_config, student_config = (
        ours_cls.preset("tiny", num_hidden_layers=layers, hidden_size=width, num_attention_heads=width // 16,
                        intermediate_size=2 * width, vocab_size=vocab, max_position_embeddings=64, **extra)
        for layers, width in ((3, 64), (2, 32)))
    torch.manual_seed(0)
    their_teacher = model_cls(hf_config(teacher_config, cls)).eval()
    their_teacher.save_pretrained(tmp_path / "teacher")
    torch.manual_seed(1)
    student = STUDENTS[architecture](student_config, teacher_config.hidden_size if weight else None)
    ours = RelationDistillation(student, teacher_encoder(load_pretrained(tmp_path / "teacher")), teacher_layer,
                                heads, weight)
    their_student = model_cls(hf_config(student_config, cls))
    state = {k.removeprefix(prefix): v for k, v in student.state_dict().items() if k.startswith(prefix)}
    their_student.load_state_dict(state, strict=True)
    projection = None
    if student.hidden_projection is not None:
        projection = torch.nn.Linear(32, 64)
        projection.load_state_dict(student.hidden_projection.state_dict())
    return ours, Reference(their_teacher, their_student, projection, teacher_layer, heads, weight, qkv), prefix


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> ShardDataset:
    return step_shards(tmp_path_factory.mktemp("shards"))


def text_batches(shards: ShardDataset) -> list[dict]:
    """The batches as the task reads them (OriginalText): every [MASK] given back its token."""
    text, mask = OriginalText(shards), shards.tokenizer.special_ids["mask"]
    out = []
    for s in range(STEPS):
        rows = np.arange(s * 8, s * 8 + 8)
        masked = shards.collate(rows)
        batch = {k: torch.from_numpy(v) for k, v in text.collate(rows).items()}
        assert set(batch) == {"input_ids", "token_type_ids", "attention_mask"}
        restored = masked["masked_lm_labels"] != -100
        picked = np.nonzero(restored)
        assert np.array_equal(batch["input_ids"].numpy()[picked[0], masked["masked_lm_positions"][restored]],
                              masked["masked_lm_labels"][restored])
        assert (masked["input_ids"] == mask).any() and not bool((batch["input_ids"] == mask).any())
        out.append(batch)
    assert any(not bool(b["attention_mask"].all()) for b in out)  # padded rows: masked keys, skipped queries
    return out


def middle_norm(ours: RelationDistillation, data: list[dict]) -> float:
    """The median gradient norm of a copy trained without clipping: a clip that catches
    some steps and not others (AdamW is blind to a scale that is the same every step)."""
    model = copy.deepcopy(ours).double().train()
    opt = build_optimizer(model.student, "adamw", LR, DECAY, torch.device("cpu"), eps=1e-8)
    norms = []
    for step, batch in enumerate(data):
        set_lr(opt, Schedule(LR, 0, STEPS, kind="linear")(step))
        model(**batch).loss.backward()
        norms.append(clip_and_step(opt, [p for p in model.student.parameters() if p.requires_grad], math.inf))
        opt.zero_grad(set_to_none=True)
    return float(np.median(norms))


@pytest.mark.parametrize("architecture,teacher_layer,heads,weight", [
    ("bert", 2, 8, 0.5), ("modernbert", 1, 8, 2.0), ("modernbert", 3, 4, 0.0)],
    ids=["bert-middle-layer-8-relation-heads-hidden-mse", "modernbert-first-layer-8-relation-heads-hidden-mse",
         "modernbert-last-local-layer"])
def test_relation_distillation_steps_equal_the_equations_on_transformers_models(shards, tmp_path, architecture,
                                                                                teacher_layer, heads, weight):
    """Relation heads 8 split the teacher's 4 heads and the student's 2 across head
    boundaries; ModernBERT's layer 1 is global with no attention norm, its layer 3 local
    (its own RoPE base); the hidden MSE goes through a learnt 32 -> 64 projection."""
    data = text_batches(shards)
    ours, reference, prefix = models(architecture, shards.tokenizer.vocab_size, tmp_path, teacher_layer, heads, weight)
    clip = middle_norm(ours, data)
    with in_float64([ours, reference.teacher, reference.student] + [reference.projection] * bool(weight),
                    [(b, b) for b in data]) as pairs:
        ours.train(), reference.student.train()
        assert not ours.teacher.training  # the teacher stays in eval mode whatever the wrapper is set to
        theirs = reference.parameters()
        opt_ours = build_optimizer(ours.student, "adamw", LR, DECAY, torch.device("cpu"), eps=1e-8)
        opt_theirs = torch.optim.AdamW([
            {"params": [p for p in theirs.values() if p.dim() >= 2], "weight_decay": DECAY},
            {"params": [p for p in theirs.values() if p.dim() < 2], "weight_decay": 0.0}], lr=LR, eps=1e-8)
        schedule = Schedule(LR, 0, STEPS, kind="linear")
        trained = [p for p in ours.student.parameters() if p.requires_grad]
        norms, first = [], None
        for step, (batch, _) in enumerate(pairs):
            set_lr(opt_ours, schedule(step))
            for group in opt_theirs.param_groups:
                group["lr"] = schedule(step)
            out = ours(**batch)
            parts = reference(batch)
            loss = parts[0] + parts[1] + parts[2] + (weight * parts[3] if weight else 0.0)
            mine = [out.query_kl, out.key_kl, out.value_kl] + ([out.hidden_mse] if weight else [])
            assert (out.hidden_mse is None) == (not weight)
            for a, b in zip(mine + [out.loss], parts + [loss]):
                assert a.item() == pytest.approx(b.item(), rel=FLOAT64_TOL), f"step {step}"
            first = first if first is not None else (batch, out.loss.item())
            out.loss.backward(), loss.backward()
            if step == 0:  # ours trains exactly what the reference's loss reaches (DDP needs a gradient for each)
                reached = {name for name, p in theirs.items() if p.grad is not None}
                mine_trained = {name.removeprefix(prefix) for name, p in ours.student.named_parameters()
                                if p.requires_grad}
                assert mine_trained == reached
                assert all(p.grad is not None for p in trained)
                assert not any(p.requires_grad for p in ours.teacher.parameters())
            norm_ours = clip_and_step(opt_ours, trained, clip)
            norm_theirs = float(torch.nn.utils.clip_grad_norm_(list(theirs.values()), clip))
            opt_theirs.step()
            assert norm_ours == pytest.approx(norm_theirs, rel=FLOAT64_TOL), f"step {step}"
            norms.append(norm_theirs)
            opt_ours.zero_grad(set_to_none=True), opt_theirs.zero_grad(set_to_none=True)
        assert min(norms) < clip < max(norms), norms
        mine = {k.removeprefix(prefix): v for k, v in ours.student.state_dict().items()}
        for name, value in theirs.items():
            torch.testing.assert_close(mine[name], value.detach(), atol=FLOAT64_TOL, rtol=FLOAT64_TOL,
                                       msg=lambda m, name=name: f"{name}: {m}")
        with torch.no_grad():  # it learnt: not two idle models compared
            assert ours(**first[0]).loss.item() < first[1] * 0.9


# -- the command ------------------------------------------------------------------------
pytestmark_data = pytest.mark.skipif(not SAMPLE.is_file() or not UNCASED.is_file() or not CASED.is_file(),
                                     reason="needs ../shared/data (google_sample_text.txt, bert-base-*-vocab.txt)")


def invoke(cli, *args, code: int = 0):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


def bert_dir(path, vocab, layers: int = 3, hidden: int = 64, heads: int = 4, seed: int = 2):
    """A transformers BertModel directory with `vocab` as its tokenizer. Its weights are
    drawn 10x wider than BERT's init, so its attention is peaked and far from a fresh
    student's near-uniform one: relations worth learning (KLs of 0.1, not 1e-4)."""
    config = transformers.BertConfig(vocab_size=len(vocab.read_text().splitlines()), hidden_size=hidden,
                                     num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=2 * hidden,
                                     max_position_embeddings=128, initializer_range=0.2)
    torch.manual_seed(seed)
    transformers.BertModel(config).save_pretrained(path)
    shutil.copyfile(vocab, path / "vocab.txt")
    return path


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """Shards of Google's sample text as plain text (--pairs none), a held-out copy built with
    another seed, and a transformers BERT teacher of the same tokenizer."""
    root = tmp_path_factory.mktemp("minilm")
    shards = {}
    for name, seed in (("train", 1), ("held", 2)):
        shards[name] = root / name
        invoke(bertprep_main, "build-shards", SAMPLE, "--tokenizer", UNCASED, "--out", shards[name], "--pairs", "none",
               "--max-seq-length", 64, "--seed", seed, "--no-progress")
    return shards["train"], shards["held"], bert_dir(root / "teacher", UNCASED)


def distil(shards, teacher, out, *args, code: int = 0):
    return invoke(main, "pretrain", "--data", shards, "--out", out, "--objective", "minilm", "--teacher", teacher,
                  "--layers", 2, "--hidden", 32, "--heads", 2, "--intermediate", 64, "--batch-size", 4,
                  "--max-steps", 8, "--lr", "5e-3", "--warmup-steps", 2, "--log-every", 2, "--save-every", 4,
                  "--no-progress", *args, code=code)


def replayed_relations(run, held, teacher, batches: int, size: int) -> dict:
    """The relation KLs of RUN/hf against the teacher on the first `batches` held-out
    batches in file order, with transformers' classes and the reference above (fp32)."""
    student = transformers.BertModel.from_pretrained(run / "hf").eval()
    their_teacher = transformers.BertModel.from_pretrained(teacher).eval()
    reference = Reference(their_teacher, student, None, 3, 4, 0.0, bert_qkv)
    text = OriginalText(ShardDataset([open_shard_dir(held)]))
    sums = np.zeros(3)
    with torch.no_grad():
        for s in range(batches):
            batch = {k: torch.from_numpy(v) for k, v in text.collate(np.arange(s * size, (s + 1) * size)).items()}
            sums += [float(p) for p in reference(batch)]
    return dict(zip(("eval_qq_kl", "eval_kk_kl", "eval_vv_kl"), sums / batches))


@pytestmark_data
def test_a_run_distils_evaluates_exports_a_plain_encoder_and_resumes_bitwise(sample, tmp_path):
    shards, held, teacher = sample
    run = tmp_path / "run"
    result = distil(shards, teacher, run, "--eval-data", held, "--eval-batches", 3, "--eval-every", 4)
    assert (f"MiniLMv2 distillation: the student's last layer learns the Q-Q, K-K, V-V relations of layer 3 of 3 of "
            f"{teacher} (hidden 64, 4 heads), 4 relation heads; exports RUN/hf as BertModel") in result.output
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if "loss" in r]
    assert [r["step"] for r in logged] == [2, 4, 6, 8]
    for r in logged:
        assert r["loss"] == pytest.approx(r["qq_kl"] + r["kk_kl"] + r["vv_kl"], rel=1e-6)
        assert "hidden_mse" not in r
    evaluated = [r for r in records if "eval_loss" in r]
    assert [r["step"] for r in evaluated] == [4, 8]
    assert evaluated[1]["eval_loss"] < evaluated[0]["eval_loss"] - 0.01  # the same held-out batches: it learnt
    # Two fp32 computations of the same sums (ours padded and masked, the reference per
    # sequence) differ by ~1e-6 relative; a wrong mask, split or layer moves them by far more.
    replay = replayed_relations(run, held, teacher, 3, 4)
    for name, value in replay.items():
        assert evaluated[-1][name] == pytest.approx(value, rel=1e-4), name

    # RUN/hf: the student's plain encoder, whole, as transformers loads it
    their, info = transformers.BertModel.from_pretrained(run / "hf", output_loading_info=True)
    assert not any(info.values()), info
    assert json.loads((run / "hf" / "config.json").read_text())["architectures"] == ["BertModel"]
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(run))
    assert all(k.startswith("bert.") for k in state["model"])  # nothing of the teacher in a checkpoint
    trained = sum(len(g["params"]) for g in state["optimizer"]["param_groups"])
    frozen = ("bert.pooler.", "bert.encoder.layer.1.attention.output.", "bert.encoder.layer.1.intermediate.",
              "bert.encoder.layer.1.output.")
    assert trained == sum(1 for k in state["model"] if not k.startswith(frozen))

    # stopped at step 4 and resumed: the uninterrupted run's weights and figures, bit for bit
    parted = tmp_path / "parted"
    distil(shards, teacher, parted, "--eval-data", held, "--eval-batches", 3, "--eval-every", 4, "--stop-at", 4)
    assert ckpt.load_checkpoint(ckpt.latest_checkpoint(parted))["step"] == 4
    distil(shards, teacher, parted, "--eval-data", held, "--eval-batches", 3, "--eval-every", 4)
    resumed = ckpt.load_checkpoint(ckpt.latest_checkpoint(parted))
    assert resumed["step"] == 8
    assert all(torch.equal(resumed["model"][k], v) for k, v in state["model"].items())
    strip = lambda r: {k: v for k, v in r.items() if not k.endswith("_per_s") and k != "mfu"}  # noqa: E731
    assert [strip(json.loads(line)) for line in (parted / "metrics.jsonl").read_text().splitlines()] == \
        [strip(r) for r in records]

    if RTE.is_dir():  # every finetune command takes RUN/hf: the classifier alone is new
        tuned = invoke(main, "finetune", "classify", "--model", run / "hf", "--train", RTE / "train.tsv",
                       "--validation", RTE / "dev.tsv", "--out", tmp_path / "rte", "--max-train-examples", 16,
                       "--max-eval-examples", 8, "--batch-size", 8, "--epochs", 1, "--max-seq-length", 64,
                       "--no-progress")
        assert f"newly initialised (not in {run / 'hf'}): classifier.bias, classifier.weight\n" in tuned.output


@pytestmark_data
def test_the_hidden_mse_trains_a_projection_that_stays_out_of_the_export(sample, tmp_path):
    shards, _, shared_teacher = sample
    teacher = shutil.copytree(shared_teacher, tmp_path / "teacher")  # changed below
    run = tmp_path / "run"
    distil(shards, teacher, run, "--hidden-distill-weight", 0.5, "--max-steps", 2, "--teacher-layer", 2,
           "--relation-heads", 8)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    r = records[-1]
    assert r["loss"] == pytest.approx(r["qq_kl"] + r["kk_kl"] + r["vv_kl"] + 0.5 * r["hidden_mse"], rel=1e-6)
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(run))
    assert tuple(state["model"]["hidden_projection.weight"].shape) == (64, 32)
    assert state["task"] | {"teacher": None} == {"name": "pretraining", "architecture": "BertModel",
                                                  "objective": "minilm", "teacher": None, "teacher_layer": 2,
                                                  "relation_heads": 8, "hidden_distill_weight": 0.5,
                                                  "train_only": ["hidden_projection."]}
    their, info = transformers.BertModel.from_pretrained(run / "hf", output_loading_info=True)
    assert not any(info.values()), info
    # export-hf of the checkpoint leaves the projection out as RUN/hf does: the same tensors
    invoke(main, "export-hf", run, tmp_path / "exported", "--latest")
    exported, info = transformers.BertModel.from_pretrained(tmp_path / "exported", output_loading_info=True)
    assert not any(info.values()), info
    assert safetensors.torch.load_file(tmp_path / "exported" / "model.safetensors").keys() == \
        safetensors.torch.load_file(run / "hf" / "model.safetensors").keys()
    assert all(torch.equal(a, b) for a, b in zip(their.state_dict().values(), exported.state_dict().values()))
    # resuming with other model options is one line, before any weight is loaded
    result = distil(shards, teacher, run, "--max-steps", 4, code=1)
    assert result.output == (f"Error: {run}: its student has a hidden-state projection and these options give no; "
                             "resume with the run's own --teacher and --hidden-distill-weight\n"), result.output
    mlm = ["pretrain", "--data", shards, "--out", run, "--layers", 2, "--hidden", 32, "--heads", 2, "--intermediate",
           64, "--batch-size", 4, "--max-steps", 4, "--objective", "mlm", "--no-progress"]
    result = invoke(main, *mlm, code=1)  # the run's inputs are compared first: its teacher is among them
    assert result.output.startswith(f"Error: {run}: resuming on other data than the run was trained on (teacher: "
                                    f"{teacher} (sha256 "), result.output
    assert "-> none)" in result.output and len(result.output.splitlines()) == 1
    result = invoke(main, *mlm, "--allow-changed-options", code=1)
    assert (f"Error: {run}: a distilled plain encoder (--objective minilm); resume it with --objective minilm and "
            "its --teacher") in result.output.splitlines(), result.output
    bert_dir(teacher, UNCASED, seed=3)  # the same path, other weights: the run's teacher by content is gone
    result = distil(shards, teacher, run, "--hidden-distill-weight", 0.5, "--max-steps", 4, "--teacher-layer", 2,
                    "--relation-heads", 8, code=1)
    assert result.output.startswith(f"Error: {run}: resuming on other data than the run was trained on (teacher: "
                                    f"{teacher} (sha256 "), result.output
    assert len(result.output.splitlines()) == 1


@pytestmark_data
def test_bad_distillation_input_is_one_line(sample, tmp_path):
    shards, _, teacher = sample
    cased = bert_dir(tmp_path / "cased-teacher", CASED)
    out = tmp_path / "out"
    cases = [
        (["--teacher-layer", 4], f"--teacher-layer 4: {teacher} has 3 layers"),
        (["--relation-heads", 3], "--relation-heads 3 do not divide the teacher's width 64; give --relation-heads N "
                                  "that divides both widths"),
        (["--hidden", 34], "the teacher's attention heads (the default --relation-heads) 4 do not divide the "
                           "student's width 34; give --relation-heads N that divides both widths"),
        (["--masking", "dynamic"], "--masking dynamic masks tokens afresh; --objective minilm reads the shards' text "
                                   "with every mask undone, so drop it"),
    ]
    for args, message in cases:
        result = distil(shards, teacher, out, *args, code=1)
        assert result.output == f"Error: {message}\n", result.output
    result = distil(shards, cased, out, code=1)
    assert result.output == (f"Error: --teacher {cased}: its tokenizer is not the one {shards} was built with (vocab "
                             f"size 28,996 vs 30,522); build the shards with the teacher's tokenizer (bertprep "
                             f"build-shards --tokenizer {cased} --pairs none)\n"), result.output
    base = ["pretrain", "--data", shards, "--out", out, "--preset", "tiny", "--no-progress"]
    result = invoke(main, *base, "--teacher", teacher, code=1)
    assert result.output == "Error: --teacher is for task-agnostic distillation: add --objective minilm\n"
    result = invoke(main, *base, "--objective", "minilm", code=1)
    assert result.output == ("Error: --objective minilm distils a teacher's self-attention relations: give "
                             "--teacher DIR\n")
    assert not out.exists()
