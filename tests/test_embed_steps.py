"""The bi-encoder's training, step by step, against sentence-transformers on real pairs.

Each test trains two models from the same weights on the same batches (real SQuAD
questions, their paragraphs and a hard negative each, our tokenisation fed to both) for
8 steps, in float64 (tests/head_steps.py's docstring: a thousand times float64's rounding
drift through AdamW, still far below what a real difference moves a loss by), and
asserts every step's loss and gradient norm and the weights after every step equal:
- ours (BertBiEncoder on all-MiniLM-L6-v2's weights; ModernBertBiEncoder on a small
  random ModernBERT exported for sentence-transformers to load) against
  SentenceTransformer + MultipleNegativesRankingLoss, and + MatryoshkaLoss;
- GradCache (--mini-batch-size) against the plain loss: mini-batches of 3 texts without
  dropout, and with dropout on, the replayed second pass (the same masks as the first);
  both on MiniLM's embeddings and first 2 of its 6 layers (first_layers).
The duplicate rule is checked against a per-row reference written with the texts.
"""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from bertmodel.data.classification import encode_texts
from bertmodel.data.pairs import Pairs
from bertmodel.data.shards import tokenizer_info
from bertmodel.hf import export_hf, load_into, load_pretrained
from bertmodel.model.bi_encoder import BertBiEncoder, ModernBertBiEncoder
from bertmodel.model.config import ModernBertConfig, vocabulary_ids
from bertmodel.model.contrastive import in_batch_loss
from bertmodel.tasks.embed import PairSet
from bertmodel.training.optim import build_optimizer, clip_and_step
from embed_fixtures import distinct_rows, minilm_path, needs_squad

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.sentence_transformer import losses  # noqa: E402
from head_steps import FLOAT64_TOL, in_float64  # noqa: E402

STEPS, B, LR, DECAY, CLIP = 8, 4, 1e-4, 0.01, 1.0
pytestmark = needs_squad


@pytest.fixture(scope="module")
def minilm():
    return minilm_path()


def batches_of(tokenizer_dir, rows, negatives: int = 1) -> list[dict]:
    """STEPS batches of B rows, as the embed task collates them (passages column-major)."""
    pairs = Pairs([r["query"] for r in rows], [r["positive"] for r in rows], [r["negatives"][:negatives] for r in rows],
                  "squad")
    queries = encode_texts(tokenizer_dir, pairs.queries, None, 32)
    passages = encode_texts(tokenizer_dir, [t for p, n in zip(pairs.positives, pairs.negatives) for t in (p, *n)],
                            None, 64)
    data = PairSet(queries, passages, pairs.text_ids(), 0, 1)
    return [{k: torch.from_numpy(v) for k, v in data.collate(np.arange(s * B, (s + 1) * B)).items()}
            for s in range(STEPS)]


def st_features(batch: dict) -> list[dict]:
    """The same batch as sentence-transformers' loss takes it: one feature dict per column."""
    columns = [{"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                "token_type_ids": batch["token_type_ids"]}]
    n = batch["passage_input_ids"].shape[0] // B
    for c in range(n):
        rows = slice(c * B, (c + 1) * B)
        columns.append({"input_ids": batch["passage_input_ids"][rows],
                        "attention_mask": batch["passage_attention_mask"][rows],
                        "token_type_ids": batch["passage_token_type_ids"][rows]})
    return columns


def their_optimizer(model):
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": DECAY},
                              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                             lr=LR, eps=1e-8, foreach=False)


def assert_weights_equal(ours, theirs_state: dict, prefix: str, step: int) -> None:
    for name, value in ours.state_dict().items():
        key = name.removeprefix(prefix)
        torch.testing.assert_close(value, theirs_state[key], rtol=FLOAT64_TOL, atol=FLOAT64_TOL,
                                   msg=lambda m: f"step {step}, {name}: {m}")


def train_against_st(ours, st_model, loss_fn, batches, prefix: str) -> list[float]:
    """8 steps of each; asserts loss, gradient norm and weights at every step. Returns
    our losses."""
    with in_float64((ours, st_model), [(b, b) for b in batches]) as pairs:
        ours.train()
        st_model.eval()  # dropout off; ours has none (config), so both are deterministic
        opt_ours = build_optimizer(ours, "adamw", LR, DECAY, torch.device("cpu"), eps=1e-8)
        params_ours = [p for p in ours.parameters() if p.requires_grad]
        opt_theirs = their_optimizer(st_model)
        theirs_params = [p for p in st_model.parameters() if p.requires_grad]
        losses = []
        for step, (batch, _) in enumerate(pairs):
            loss_ours = ours(**batch).loss
            loss_theirs = loss_fn(st_features(batch), None)
            assert loss_ours.item() == pytest.approx(loss_theirs.item(), rel=FLOAT64_TOL), f"step {step}"
            losses.append(loss_ours.item())
            loss_ours.backward(), loss_theirs.backward()
            norm_ours = clip_and_step(opt_ours, params_ours, CLIP)
            norm_theirs = torch.nn.utils.clip_grad_norm_([p for p in theirs_params if p.grad is not None], CLIP)
            opt_theirs.step()
            assert norm_ours == pytest.approx(norm_theirs.item(), rel=FLOAT64_TOL), f"step {step}"
            opt_ours.zero_grad(set_to_none=True), opt_theirs.zero_grad(set_to_none=True)
            assert_weights_equal(ours, st_model[0].auto_model.state_dict(), prefix, step)
    assert losses[-1] != losses[0]
    return losses


def minilm_pair(minilm, **options):
    """Ours on MiniLM's weights (dropout 0) and SentenceTransformer(MiniLM) (mean pooling)."""
    pre = load_pretrained(minilm)
    config = dataclasses.replace(pre.config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ours = BertBiEncoder(config, **options)
    load_into(ours, pre)
    theirs = st.SentenceTransformer(str(minilm), device="cpu")
    return ours, theirs


def test_bert_steps_equal_multiple_negatives_ranking_loss(minilm):
    ours, theirs = minilm_pair(minilm)
    batches = batches_of(minilm, distinct_rows(STEPS * B))
    train_against_st(ours, theirs, losses.MultipleNegativesRankingLoss(theirs), batches, "bert.")


def test_bert_matryoshka_steps_equal_matryoshka_loss(minilm):
    dims = (384, 128, 32)
    ours, theirs = minilm_pair(minilm, matryoshka_dims=dims)
    loss = losses.MatryoshkaLoss(theirs, losses.MultipleNegativesRankingLoss(theirs), matryoshka_dims=list(dims))
    batches = batches_of(minilm, distinct_rows(STEPS * B, skip=STEPS * B))
    train_against_st(ours, theirs, loss, batches, "bert.")


@pytest.fixture(scope="module")
def modernbert_dir(minilm, tmp_path_factory):
    """A small random ModernBERT (4 layers, 2 of them local with a 16-token window) with
    MiniLM's vocabulary, exported as an embed run exports it."""
    tok = tokenizer_info(minilm)
    config = ModernBertConfig.preset("tiny", hidden_size=64, num_attention_heads=4, intermediate_size=96,
                                     local_attention=16, **vocabulary_ids(tok, "modernbert"))
    torch.manual_seed(0)
    model = ModernBertBiEncoder(config)
    out = tmp_path_factory.mktemp("modernbert") / "hf"
    settings = {"pooling": "mean", "normalize": True, "dimension": 64, "query_prefix": "", "passage_prefix": "",
                "max_seq_length": 128}
    export_hf(model, out, tokenizer=tok, architecture="ModernBertModel",
              task={"name": "embed", "architecture": "ModernBertModel", "sentence_transformers": settings})
    return out


def test_modernbert_steps_equal_multiple_negatives_ranking_loss(minilm, modernbert_dir):
    pre = load_pretrained(modernbert_dir)
    ours = ModernBertBiEncoder(pre.config)
    assert not [n for n in load_into(ours, pre) if "newly" in n]
    theirs = st.SentenceTransformer(str(modernbert_dir), device="cpu")
    theirs = st.SentenceTransformer(modules=[theirs[0], theirs[1]], device="cpu")  # MNRL's cosine normalises
    batches = batches_of(minilm, distinct_rows(STEPS * B, skip=2 * STEPS * B))
    train_against_st(ours, theirs, losses.MultipleNegativesRankingLoss(theirs), batches, "model.")


def train_pair(plain, cached, batches, seeded: bool) -> None:
    """8 steps of each (each step from the same RNG state when `seeded`); asserts losses,
    gradient norms and the weights equal at every step."""
    with in_float64((plain, cached), [(b, b) for b in batches]) as pairs:
        plain.train(), cached.train()
        opts = [build_optimizer(m, "adamw", LR, DECAY, torch.device("cpu"), eps=1e-8) for m in (plain, cached)]
        params = [[p for p in m.parameters() if p.requires_grad] for m in (plain, cached)]
        for step, (batch, _) in enumerate(pairs):
            results = []
            for model, opt, ps in zip((plain, cached), opts, params):
                if seeded:
                    torch.manual_seed(step)
                loss = model(**batch).loss
                loss.backward()
                results.append((loss.item(), clip_and_step(opt, ps, CLIP)))
                opt.zero_grad(set_to_none=True)
            assert results[1][0] == pytest.approx(results[0][0], rel=FLOAT64_TOL), f"step {step} loss"
            assert results[1][1] == pytest.approx(results[0][1], rel=FLOAT64_TOL), f"step {step} grad norm"
            assert_weights_equal(cached, {k.removeprefix("bert."): v for k, v in plain.state_dict().items()},
                                 "bert.", step)


def first_layers(minilm, layers: int = 2, dropout: bool = True) -> BertBiEncoder:
    """Ours on MiniLM's embeddings and first `layers` layers. GradCache against the
    plain loss compares two of our own models, for which the depth changes nothing: the
    mini-batches, the replayed dropout of every layer and the summed gradients are the
    same with 2 layers as with 6, at a third of the float64 steps' cost."""
    pre = load_pretrained(minilm)
    config = dataclasses.replace(pre.config, num_hidden_layers=layers)
    if not dropout:
        config = dataclasses.replace(config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    kept = {k: v for k, v in pre.state_dict.items()
            if not k.startswith("bert.encoder.layer.") or int(k.split(".")[3]) < layers}
    model = BertBiEncoder(config)
    assert load_into(model, dataclasses.replace(pre, config=config, state_dict=kept)) == []
    return model


def test_gradcache_mini_batches_equal_the_whole_batch(minilm):
    """Mini-batches of 3 texts (queries 4 -> 3 + 1, passages 8 -> 3 + 3 + 2), dropout 0."""
    plain = first_layers(minilm, dropout=False)
    cached = copy.deepcopy(plain)
    cached.mini_batch_size = 3
    train_pair(plain, cached, batches_of(minilm, distinct_rows(STEPS * B)), seeded=False)


def test_gradcache_replays_the_first_pass_dropout(minilm):
    """Dropout on (MiniLM's 0.1): one mini-batch per input draws its masks in the order
    the plain forward draws them, and the second pass must replay them exactly, or the
    gradient would be another sample's."""
    plain = first_layers(minilm)
    cached = copy.deepcopy(plain)
    cached.mini_batch_size = 64
    train_pair(plain, cached, batches_of(minilm, distinct_rows(STEPS * B)), seeded=True)
    torch.manual_seed(0)
    batch = batches_of(minilm, distinct_rows(STEPS * B))[0]
    plain.eval()
    assert plain(**batch).loss.item() != pytest.approx(cached.train()(**batch).loss.item(), rel=1e-6), \
        "dropout changed nothing: the replay check would be vacuous"


def test_duplicates_are_no_negatives_of_their_own_query():
    """Rows 0 and 1 share a positive, rows 2 and 3 a query, row 3's negative is row 0's
    positive: per row, the reference drops every candidate whose text is the row's
    positive (but its own column) and the positives of other rows with its query."""
    texts = {"q0": "who", "q1": "when", "q2": "where", "q3": "where", "p0": "A", "p1": "A", "p2": "B", "p3": "C",
             "n0": "D", "n1": "E", "n2": "F", "n3": "A"}
    rows = [(texts[f"q{i}"], texts[f"p{i}"], [texts[f"n{i}"]]) for i in range(4)]
    pairs = Pairs([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], "t")
    generator = torch.Generator().manual_seed(0)
    queries = torch.randn(4, 8, dtype=torch.float64, generator=generator)
    passages = torch.randn(8, 8, dtype=torch.float64, generator=generator)
    ours = in_batch_loss(queries, passages, 20.0, torch.from_numpy(pairs.text_ids()))
    candidates = [r[1] for r in rows] + [r[2][0] for r in rows]  # column-major
    scores = (torch.nn.functional.normalize(queries, dim=-1) @ torch.nn.functional.normalize(passages, dim=-1).T) * 20
    reference = []
    for i, (query, positive, _) in enumerate(rows):
        keep = [j for j, text in enumerate(candidates) if j == i or not (
            text == positive or (j < 4 and rows[j][0] == query))]
        reference.append(-(scores[i, i] - torch.logsumexp(scores[i, keep], 0)))
    assert ours.item() == pytest.approx(torch.stack(reference).mean().item(), rel=1e-12)
    # the rule changes the loss here: without it, the copies count as negatives
    assert in_batch_loss(queries, passages, 20.0).item() > ours.item()
