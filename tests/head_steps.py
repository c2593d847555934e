"""Training two models step by step, ours and a transformers class, and the batches they
take: what tests/test_heads_match_transformers.py (BERT) and
tests/test_modernbert_matches_transformers.py (ModernBERT) share.

The steps run in float64. The two models compute the same function through different
kernels (our oneDNN linears, packed rows and sparse MLM slots; their MKL linears, padded
rows and dense logits), so they round differently, and each CPU (AVX-512, AVX2, Intel's
MKL paths or AMD's) rounds otherwise again. AdamW amplifies that: in fp32 (unit roundoff
u = 2^-24) the 8 losses of a ModernBERT classification run drifted to 6.4e-5 apart on one
CPU (AMD EPYC, 1.2e-7 at step 1) and stayed within 1e-5 on another, and the weights
differed by 1.6e-5. To first order a rounding error, and what the steps make of it, scales
with u; float64's is 2^-29 (5e8 times) smaller, which takes that drift to ~1e-13. The
comparisons below allow 1e-10 (relative for losses and norms, absolute + relative for
weights): a thousand times that, on any CPU, and still far below what a real difference
(a wrong mask, bias, decay group, label or lr) moves a loss by, 1e-4 and more.

In float64 ours runs torch's kernels where it has fp32-only fast paths: the oneDNN linear
(linear.py), which `first_step_in_fp32` checks in one fp32 forward and backward against
float64, and fused AdamW's folded clipping (optim.clip_and_step), which
tests/test_clip_and_step.py checks against clip_grad_norm_ then step."""
from __future__ import annotations

import contextlib
import copy
from unittest import mock

import numpy as np
import pytest
import torch

from bertmodel.data import ShardDataset
from bertmodel.data.shards import open_shard_dir
from bertmodel.data.synthetic import small_shard_dir
from bertmodel.data.qa_features import prepare_qa_features
from bertmodel.model.heads import IGNORE_INDEX
from bertmodel.tasks.qa import WindowSet
from bertmodel.training.optim import Schedule, build_optimizer, clip_and_step, set_lr
from qa_fixtures import example, tiny_tokenizer

transformers = pytest.importorskip("transformers")

STEPS, LR, DECAY = 8, 3e-3, 0.01
FLOAT64_TOL = 1e-10  # module docstring


@contextlib.contextmanager
def in_float64(models, batches):
    """The models in float64, and the batches, whose float tensors (regression targets)
    it yields in float64. Two places of transformers' take `.float()`, meant to upcast
    half types, which rounds a float64 model's values down to fp32: ModernBERT's
    apply_rotary_pos_emb (its q and k) and ForMaskedLMLoss (the logits); here they keep
    float64, as ours does (rope.rotate, heads.at_least_fp32)."""
    from transformers.loss.loss_utils import ForMaskedLMLoss, fixed_cross_entropy
    from transformers.models.modernbert import modeling_modernbert

    for model in models:
        model.double()
        if isinstance(model, transformers.PreTrainedModel) and model.loss_function is ForMaskedLMLoss:
            model.loss_function = lambda logits, labels, vocab_size, **kw: fixed_cross_entropy(
                logits.view(-1, vocab_size), labels.view(-1).to(logits.device), **kw)
    rotate_half = modeling_modernbert.rotate_half

    def rotary(q, k, cos, sin, unsqueeze_dim=1):
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    as64 = lambda batch: {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}  # noqa: E731
    with mock.patch.object(modeling_modernbert, "apply_rotary_pos_emb", rotary):
        yield [(as64(a), as64(b)) for a, b in batches]


def train_both(ours, theirs, batches, clip: float | None, schedule: str = "linear", loss_free: tuple[str, ...] = ()) -> None:
    """STEPS steps of each on (our batch, their batch) pairs; asserts the learning rate,
    the loss and the gradient norm of every step and the final weights equal, and that
    ours learnt (its loss on the first batch fell).

    clip: the global norm to clip to (None: middle_norm's); it must lie between the
    smallest and the largest norm of the run, so that some steps are clipped and some not (AdamW is blind to a
    gradient scale that is the same at every step, so clipping every step or none
    would not test it).

    loss_free: parameters the loss does not depend on (a bias that shifts every logit of
    a softmax alike). Their gradient is 0 up to rounding, which Adam turns into steps
    whose sign is the rounding's (of ~lr where the rounding outweighs eps), so they drift
    apart; asserted gradient-free in transformers at every step, and left out of the
    weight comparison.

    Both run in float64 (module docstring)."""
    with in_float64((ours, theirs), batches) as batches:
        _steps(ours, theirs, batches, clip, schedule, loss_free)


def _steps(ours, theirs, batches: list, clip: float | None, schedule: str, loss_free: tuple[str, ...]) -> None:
    if clip is None:
        clip = middle_norm(theirs, batches, schedule)
    ours.train(), theirs.train()
    # Ours as the trainer builds it (AdamW over the model's own decay groups; eps as the
    # Trainer's default) and as the loop steps it (set_lr, clip_and_step). No warmup (the
    # clips are chosen for this schedule); test_finetune_matches_transformers.py has one.
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
        assert loss_ours.item() == pytest.approx(loss_theirs.item(), rel=FLOAT64_TOL), f"step {step}"
        losses.append((loss_ours.item(), loss_theirs.item()))
        loss_ours.backward(), loss_theirs.backward()
        for name in loss_free:
            assert float(named[name].grad.abs().max()) < 1e-6, (name, step)
        norm_ours = clip_and_step(opt_ours, params_ours, clip)
        norm_theirs = float(torch.nn.utils.clip_grad_norm_(list(named.values()), clip))
        norms.append(norm_theirs)
        opt_theirs.step(), sched_theirs.step()
        assert norm_ours == pytest.approx(norm_theirs, rel=FLOAT64_TOL), f"step {step}"
        opt_ours.zero_grad(set_to_none=True), opt_theirs.zero_grad(set_to_none=True)
    assert len(losses) == STEPS
    assert min(norms) < clip < max(norms), norms
    theirs_state = theirs.state_dict()
    for name, weight in ours.state_dict().items():
        if name not in loss_free:
            torch.testing.assert_close(weight, theirs_state[name], atol=FLOAT64_TOL, rtol=FLOAT64_TOL,
                                       msg=lambda m, name=name: f"{name}: {m}")
    with torch.no_grad():  # it trained: not a comparison of two idle models
        assert ours(**batches[0][0]).loss.item() < losses[0][0] - 0.01


def fp32_rounding(config, seq_len: int, rows: int, classes: int) -> float:
    """How far an fp32 forward pass of a classifier may lie from the exact one, relative
    to the values' scale: fp32 rounds each op to u = 2^-24, and a sum or dot product of n
    terms to n u of the sum of their magnitudes (Higham, "Accuracy and Stability of
    Numerical Algorithms", 2002, §3.1: gamma_n). To first order the errors of the ops a
    value passes through add up (LayerNorm rescales an error with its input, so it
    keeps its relative size), so the bound is u times the summed lengths of that chain:
    per layer the Q/K/V projection (H terms), the scores (D = H / heads), the softmax's
    max and sum (2 x T), its product with V (T), the output projection (H), two
    LayerNorms (mean and variance: 4 H), the feed-forward (H in, I out); then the
    embeddings' and head's LayerNorms and projections (6 H), a mean over the sequence
    (T), the loss's softmax (classes) and its mean over the rows; and one u for each
    elementwise op (residuals, activation, scaling, rotation: 10 a layer, fewer in both)."""
    layer = 7 * config.hidden_size + config.hidden_size // config.num_attention_heads + 3 * seq_len \
        + config.intermediate_size + 10
    return (config.num_hidden_layers * layer + 6 * config.hidden_size + seq_len + classes + rows) * 2.0 ** -24


def first_step_in_fp32(ours, theirs, batch_ours, batch_theirs, bound: float, loss_free: tuple[str, ...] = ()) -> None:
    """One forward and backward of ours in fp32, as the CPU trains it (the oneDNN linear
    where torch has it, linear.py; packed rows where set), against transformers' class
    in float64, which is the exact result to ~1e-16: the loss within `bound` (relative,
    fp32_rounding) of it, every gradient within twice that of its largest entry (a
    weight's gradient runs the chain back from the loss, then meets the forward's
    activations). transformers' class in fp32 meets the same bound: it is what fp32
    rounding makes of this computation, not a licence for ours. One step only: AdamW
    would turn a rounding of a gradient near 0 into a step of lr.

    loss_free: parameters whose gradient is 0 but for rounding (train_both), so has no
    scale of its own to be relative to; left out."""
    exact_model = copy.deepcopy(theirs).train()
    with in_float64([exact_model], [(batch_theirs, batch_theirs)]) as [(_, batch64)]:
        exact_loss = exact_model(**batch64).loss
        exact_loss.backward()
    exact = {name: p.grad for name, p in exact_model.named_parameters() if name not in loss_free}
    assert all(float(g.abs().max()) > 0 for g in exact.values())  # every gradient has a scale to compare in
    for model, batch in ((ours, batch_ours), (theirs, batch_theirs)):
        assert next(model.parameters()).dtype == torch.float32
        model.train()
        loss = model(**batch).loss
        loss.backward()
        name_of = type(model).__name__
        assert abs(loss.item() - exact_loss.item()) <= bound * abs(exact_loss.item()), name_of
        grads = {name: p.grad for name, p in model.named_parameters() if name in exact}
        assert grads.keys() == exact.keys(), name_of
        for name, grad in grads.items():
            error, scale = float((grad.double() - exact[name]).abs().max()), float(exact[name].abs().max())
            assert error <= 2 * bound * scale, (name_of, name, error / scale, 2 * bound)


def moved(ours, before: dict, name: str) -> float:
    return float((ours.state_dict()[name] - before[name]).abs().max())


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


def step_shards(root, max_seq_length: int = 32, max_predictions: int = 5) -> ShardDataset:
    """The pre-training steps' shards under `root`: STEPS batches of 8 NSP pair rows over a
    120-word WordPiece vocabulary ([PAD] 0), some rows padded."""
    path = small_shard_dir(root / "data", rows=STEPS * 8, words=120, num_shards=1, max_seq_length=max_seq_length,
                           max_predictions=max_predictions, batch_rows=8)
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


def token_batches(vocab: int):
    """STEPS batches of 8 padded rows of 6 to 39 tokens, 4 of 5 real tokens labelled (of 5 tags), the rest -100."""
    rng = np.random.default_rng(1)
    for _ in range(STEPS):
        lengths = rng.integers(6, 40, 8)
        T = int(lengths.max())
        mask = (np.arange(T)[None] < lengths[:, None]).astype(np.int64)
        ids = rng.integers(5, vocab, (8, T)) * mask
        labels = np.where(mask.astype(bool) & (rng.random((8, T)) < 0.8), rng.integers(0, 5, (8, T)), IGNORE_INDEX)
        batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
                 "labels": torch.from_numpy(labels)}
        yield batch, dict(batch)


def choice_batches(vocab: int):
    """STEPS batches of 4 examples x 3 padded choices of 5 to 29 tokens, and the right choice's index."""
    rng = np.random.default_rng(2)
    for _ in range(STEPS):
        lengths = rng.integers(5, 30, (4, 3))
        T = int(lengths.max())
        mask = (np.arange(T)[None, None] < lengths[..., None]).astype(np.int64)
        ids = rng.integers(5, vocab, (4, 3, T)) * mask
        batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
                 "labels": torch.from_numpy(rng.integers(0, 3, 4))}
        yield batch, dict(batch)


def middle_norm(theirs, batches, schedule: str) -> float:
    """The median gradient norm of a copy of `theirs` trained on `batches` without
    clipping: a clip that catches some steps of the clipped run and not others."""
    model = copy.deepcopy(theirs).train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=1e-8)
    norms = []
    for step, (_, batch) in enumerate(batches):
        for group in opt.param_groups:
            group["lr"] = Schedule(LR, 0, STEPS, kind=schedule)(step)
        model(**batch).loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(model.parameters()), float("inf"))))
        opt.step(), opt.zero_grad(set_to_none=True)
    return float(np.median(norms))
