"""The cross-encoder's training, step by step, against sentence-transformers on real pairs.

Each test trains two models from the same weights on the same data (real SQuAD
questions, their own paragraph as the positive and other paragraphs of the article as
hard negatives) for 8 steps, in float64 (tests/head_steps.py's docstring: a thousand
times float64's rounding drift through AdamW, still far below what a real difference
moves a loss by), and asserts every step's loss and gradient norm and the weights after
every step equal. Ours gets the batches as the rerank task collates them (PairSet,
GroupSet); sentence-transformers' CrossEncoder gets the texts and tokenises them itself,
after a check that its token ids are ours (so the comparison covers the tokenisation a
CrossEncoder of RUN/hf will do at prediction time):
- bce: BertForReranking on all-MiniLM-L6-v2's weights, and ModernBertForReranking on a
  small random ModernBERT exported for CrossEncoder to load, against
  CrossEncoder + BinaryCrossEntropyLoss on labelled pairs;
- listwise: against the cross-encoder MultipleNegativesRankingLoss with scale 1, no
  activation and no in-batch negatives (called once per query: with one query in the
  call there are none), averaged over the batch's queries, on groups of 2 to 4
  candidates (the -1 padding of `candidates`), and against a per-query softmax
  cross-entropy written here.
sentence-transformers' ListNetLoss is not a counterpart: it targets softmax(labels)
(labels 1, 0, 0 give the positive e / (e + 2), not 1) and computes in float32.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from bertmodel.data.classification import encode_texts
from bertmodel.data.rerank import RerankGroups
from bertmodel.data.shards import tokenizer_info
from bertmodel.hf import export_hf, load_into, load_pretrained
from bertmodel.model.config import ModernBertConfig, vocabulary_ids
from bertmodel.model.rerank_heads import BertForReranking, ModernBertForReranking, group_scores, listwise_loss
from bertmodel.tasks.rerank import GroupSet, PairSet, cross_encoder_config
from bertmodel.training.optim import build_optimizer, clip_and_step
from embed_fixtures import minilm_path
from rerank_fixtures import as_pairs, needs_squad, squad_groups

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.cross_encoder import CrossEncoder, losses  # noqa: E402
from head_steps import FLOAT64_TOL, in_float64  # noqa: E402

STEPS, LR, DECAY, MAX_LEN = 8, 1e-4, 0.01, 128
WORDS = 16  # of each paragraph: real text, short rows (two float64 models on 2 cores)
PAIRS_PER_STEP, QUERIES_PER_STEP = 8, 2
pytestmark = needs_squad


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread, as each xdist worker has (conftest.py): two float64 MiniLMs on two
    cores that other work shares spend most of their time at OpenMP barriers waiting for a
    descheduled thread (measured under such load: 106 s for this file, 40 s with one thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def minilm():
    return minilm_path()


def as_torch(batch: dict) -> dict:
    return {k: torch.from_numpy(v) for k, v in batch.items()}


def pair_batches(tokenizer_dir, pairs: list[dict]) -> list[dict]:
    """STEPS batches of PAIRS_PER_STEP labelled pairs, as RerankTask collates them, each
    with its texts (what CrossEncoder's loss takes)."""
    encoded = encode_texts(tokenizer_dir, [p["query"] for p in pairs], [p["passage"] for p in pairs], MAX_LEN)
    encoded.labels = np.array([p["label"] for p in pairs], np.float32)
    assert not encoded.truncated
    data = PairSet(encoded, 0, 1)
    batches = []
    for s in range(STEPS):
        rows = np.arange(s * PAIRS_PER_STEP, (s + 1) * PAIRS_PER_STEP)
        batch = as_torch(data.collate(rows))
        batch["texts"] = [[pairs[r]["query"] for r in rows], [pairs[r]["passage"] for r in rows]]
        batches.append(batch)
    return batches


def varied_groups(count: int, skip: int) -> RerankGroups:
    """SQuAD groups keeping 1, 2 or 3 negatives in turn (2 to 4 candidates a query)."""
    rows = squad_groups(count, negatives=3, skip=skip, words=WORDS)
    return RerankGroups([r["query"] for r in rows],
                        [[r["positive"], *r["negatives"][:1 + i % 3]] for i, r in enumerate(rows)], "squad")


def group_batches(tokenizer_dir, groups: RerankGroups) -> list[dict]:
    """STEPS batches of QUERIES_PER_STEP queries, as RerankTask collates them for listwise,
    each with its groups' texts."""
    queries = [q for q, c in zip(groups.queries, groups.candidates) for _ in c]
    encoded = encode_texts(tokenizer_dir, queries, [p for c in groups.candidates for p in c], MAX_LEN)
    assert not encoded.truncated
    data = GroupSet(encoded, [len(c) for c in groups.candidates], 0, 1)
    batches = []
    for s in range(STEPS):
        rows = range(s * QUERIES_PER_STEP, (s + 1) * QUERIES_PER_STEP)
        batch = as_torch(data.collate(np.array(rows)))
        batch["texts"] = [(groups.queries[r], groups.candidates[r]) for r in rows]
        batches.append(batch)
    return batches


def model_inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k != "texts"}


def assert_same_tokens(cross_encoder, queries: list[str], passages: list[str], batch: dict) -> None:
    """CrossEncoder's own tokenisation of the pairs is ours (row by row, padding aside)."""
    theirs = cross_encoder.preprocess(list(zip(queries, passages)))
    for row in range(len(queries)):
        ours_length = int(batch["attention_mask"][row].sum())
        their_length = int(theirs["attention_mask"][row].sum())
        assert ours_length == their_length, f"row {row}: {ours_length} tokens, theirs {their_length}"
        for key in ("input_ids", "token_type_ids"):
            if key in theirs:
                assert batch[key][row, :ours_length].tolist() == theirs[key][row, :ours_length].tolist(), \
                    f"row {row} {key}"


def their_optimizer(model, lr: float):
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": DECAY},
                              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                             lr=lr, eps=1e-8, foreach=False)


def assert_weights_equal(ours, theirs_state: dict, step: int) -> None:
    for name, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs_state[name], rtol=FLOAT64_TOL, atol=FLOAT64_TOL,
                                   msg=lambda m: f"step {step}, {name}: {m}")


def train_against_st(ours, cross_encoder, their_loss, batches: list[dict], clip: float,
                     lr: float = LR) -> tuple[list, list]:
    """STEPS steps of each; asserts loss, gradient norm (clipped to `clip`) and weights at
    every step, and that ours learnt. their_loss(batch) -> their loss on the batch's texts.
    Returns (losses, gradient norms)."""
    with in_float64((ours, cross_encoder), [(model_inputs(b), model_inputs(b)) for b in batches]) as doubled:
        ours.train()
        cross_encoder.eval()  # dropout off; ours has none (config), so both are deterministic
        opt_ours = build_optimizer(ours, "adamw", lr, DECAY, torch.device("cpu"), eps=1e-8)
        params_ours = [p for p in ours.parameters() if p.requires_grad]
        opt_theirs = their_optimizer(cross_encoder, lr)
        params_theirs = [p for p in cross_encoder.parameters() if p.requires_grad]
        losses_seen, norms = [], []
        for step, ((batch, _), original) in enumerate(zip(doubled, batches)):
            loss_ours = ours(**batch).loss
            loss_theirs = their_loss(original)
            assert loss_ours.dtype == loss_theirs.dtype == torch.float64
            assert loss_ours.item() == pytest.approx(loss_theirs.item(), rel=FLOAT64_TOL), f"step {step}"
            losses_seen.append(loss_ours.item())
            loss_ours.backward(), loss_theirs.backward()
            norm_ours = clip_and_step(opt_ours, params_ours, clip)
            norm_theirs = torch.nn.utils.clip_grad_norm_([p for p in params_theirs if p.grad is not None], clip)
            opt_theirs.step()
            assert norm_ours == pytest.approx(norm_theirs.item(), rel=FLOAT64_TOL), f"step {step}"
            norms.append(norm_ours)
            opt_ours.zero_grad(set_to_none=True), opt_theirs.zero_grad(set_to_none=True)
            assert_weights_equal(ours, cross_encoder.model.state_dict(), step)
    assert losses_seen[-1] != losses_seen[0]
    assert min(norms) < clip < max(norms), f"clip {clip} should clip some steps and not others: {norms}"
    return losses_seen, norms


class InLogitsDtype(torch.nn.Module):
    def __init__(self, loss: torch.nn.Module):
        super().__init__()
        self.loss = loss

    def forward(self, logits, labels):
        return self.loss(logits, labels.to(logits.dtype))


def bce_of(cross_encoder):
    """BinaryCrossEntropyLoss, computing in the logits' dtype: it takes `labels.float()`
    (meant for integer labels), and torch's BCE with logits computes in the target's
    dtype, so float64 logits would be scored in float32. The labels, 0 and 1, are the
    same in either; the loss module itself is theirs (BCEWithLogitsLoss, mean)."""
    loss = losses.BinaryCrossEntropyLoss(cross_encoder)
    loss.bce_with_logits_loss = InLogitsDtype(loss.bce_with_logits_loss)
    return lambda batch: loss(batch["texts"], batch["labels"])


def listwise_of(cross_encoder):
    """The cross-encoder MNRL with scale 1 and no activation, one query a call (so no
    in-batch negatives: the candidates are the query's positive and hard negatives),
    averaged over the batch's queries as our loss averages them."""
    loss = losses.MultipleNegativesRankingLoss(cross_encoder, num_negatives=None, scale=1.0, activation_fn=None)
    return lambda batch: torch.stack([loss([[query], *[[c] for c in candidates]], None)
                                      for query, candidates in batch["texts"]]).mean()


def minilm_pair(minilm):
    """Ours on MiniLM's weights (dropout 0, a fresh classifier) and CrossEncoder(MiniLM)
    with ours' classifier copied into it (it draws its own)."""
    pre = load_pretrained(minilm)
    config = dataclasses.replace(pre.config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    ours = BertForReranking(config)
    notes = load_into(ours, pre)
    assert notes == [f"newly initialised (not in {minilm}): classifier.bias, classifier.weight"]
    theirs = CrossEncoder(str(minilm), num_labels=1, device="cpu")
    with torch.no_grad():
        theirs.model.classifier.weight.copy_(ours.classifier.weight)
        theirs.model.classifier.bias.copy_(ours.classifier.bias)
    assert set(ours.state_dict()) == set(theirs.model.state_dict())
    return ours, theirs


def check_tokens(cross_encoder, batches: list[dict], listwise: bool) -> None:
    for batch in batches:
        if listwise:
            queries = [q for q, c in batch["texts"] for _ in c]
            passages = [p for _, c in batch["texts"] for p in c]
        else:
            queries, passages = batch["texts"]
        assert_same_tokens(cross_encoder, queries, passages, batch)


@pytest.mark.slow
def test_bert_bce_steps_equal_binary_cross_entropy_loss(minilm):
    ours, theirs = minilm_pair(minilm)
    batches = pair_batches(minilm, as_pairs(squad_groups(STEPS * PAIRS_PER_STEP // 4, words=WORDS)))
    assert {float(b["labels"].sum()) for b in batches} == {2.0}  # 2 positives, 6 negatives a step
    check_tokens(theirs, batches, listwise=False)
    train_against_st(ours, theirs, bce_of(theirs), batches, clip=0.6)


@pytest.mark.slow
def test_bert_listwise_steps_equal_multiple_negatives_ranking_loss(minilm):
    ours, theirs = minilm_pair(minilm)
    batches = group_batches(minilm, varied_groups(STEPS * QUERIES_PER_STEP, skip=16))
    assert (batches[0]["candidates"] == torch.tensor([[0, 1, -1], [2, 3, 4]])).all()
    check_tokens(theirs, batches, listwise=True)
    train_against_st(ours, theirs, listwise_of(theirs), batches, clip=0.5)


def test_listwise_loss_is_each_querys_softmax_cross_entropy():
    """group_scores + listwise_loss against the definition, query by query: -log of the
    positive's (column 0's) softmax over that query's candidates only."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(9, dtype=torch.float64, generator=generator)
    sizes = [2, 4, 3]
    candidates = torch.tensor([[0, 1, -1, -1], [2, 3, 4, 5], [6, 7, 8, -1]])
    grouped = group_scores(logits, candidates)
    assert torch.isinf(grouped[candidates < 0]).all()
    reference, start = [], 0
    for size in sizes:
        own = logits[start:start + size]
        reference.append(-(own[0] - torch.logsumexp(own, 0)))
        start += size
    assert listwise_loss(grouped).item() == pytest.approx(torch.stack(reference).mean().item(), rel=1e-12)


@pytest.fixture(scope="module")
def modernbert_dir(minilm, tmp_path_factory):
    """A small random ModernBERT reranker (4 layers, 2 of them local with a 16-token
    window; dropout 0) with MiniLM's vocabulary, exported as a rerank run exports it."""
    tok = tokenizer_info(minilm)
    config = ModernBertConfig.preset("tiny", hidden_size=64, num_attention_heads=4, intermediate_size=96,
                                     local_attention=16, **vocabulary_ids(tok, "modernbert"))
    torch.manual_seed(0)
    model = ModernBertForReranking(config)
    out = tmp_path_factory.mktemp("modernbert") / "hf"
    export_hf(model, out, tokenizer=tok, head_config=cross_encoder_config(),
              task={"name": "rerank", "architecture": model.hf_architecture})
    return out


def modernbert_pair(modernbert_dir):
    pre = load_pretrained(modernbert_dir)
    assert pre.architecture == "ModernBertForSequenceClassification"
    ours = ModernBertForReranking(pre.config)
    assert load_into(ours, pre) == []
    theirs = CrossEncoder(str(modernbert_dir), device="cpu")
    assert theirs.num_labels == 1 and isinstance(theirs.activation_fn, torch.nn.Identity)
    assert set(ours.state_dict()) == set(theirs.model.state_dict())
    return ours, theirs


def test_modernbert_bce_steps_equal_binary_cross_entropy_loss(minilm, modernbert_dir):
    ours, theirs = modernbert_pair(modernbert_dir)
    batches = pair_batches(minilm, as_pairs(squad_groups(STEPS * PAIRS_PER_STEP // 4, skip=40, words=WORDS)))
    check_tokens(theirs, batches, listwise=False)
    train_against_st(ours, theirs, bce_of(theirs), batches, clip=12.0, lr=1e-3)


def test_modernbert_listwise_steps_equal_multiple_negatives_ranking_loss(minilm, modernbert_dir):
    ours, theirs = modernbert_pair(modernbert_dir)
    batches = group_batches(minilm, varied_groups(STEPS * QUERIES_PER_STEP, skip=60))
    check_tokens(theirs, batches, listwise=True)
    train_against_st(ours, theirs, listwise_of(theirs), batches, clip=0.1, lr=1e-3)
