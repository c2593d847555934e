"""Embedding distillation (`finetune embed --teacher`) against sentence-transformers, on
real text (WikiText sentences, SQuAD questions and paragraphs) and tiny random BERTs
with all-MiniLM-L6-v2's vocabulary (width 32 the students, 48 the embedder teacher, so
the student learns a projection; a one-logit cross-encoder of width 40).

- Step for step: our student under the task's loss module, on the task's own batches,
  against a SentenceTransformer of the same weights trained with losses.MSELoss
  (Transformer -> Pooling -> Dense -> Normalize) and losses.MarginMSELoss (two hard
  negatives per row), 8 AdamW steps in float64 (tests/head_steps.py's docstring: 1e-10),
  the loss, gradient norm and every weight equal at every step. The teacher's targets
  themselves are checked against SentenceTransformer.encode and CrossEncoder.predict.
- The cache: a run stopped and resumed computes the teacher's vectors once (a counter
  around the computation, the file's bytes and mtime unchanged); a changed teacher is
  refused on resume as other data, and with --allow-changed-options computed anew
  under a new fingerprint.
- The export: RUN/hf of a run with a projection loads in SentenceTransformer with the
  vectors our embedder gives, and in transformers' AutoModel with no stray tensor.
- The refusals, one line each.
"""
from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

from bertmodel.data.classification import encode_texts
from bertmodel.data.pairs import Pairs
from bertmodel.data.shards import tokenizer_info
from bertmodel.distill.embedding_losses import EmbeddingMSE, MarginMSE
from bertmodel.distill.embedding_targets import (TARGETS_DIR, cross_encoder_scores, read_teacher, teacher_vectors,
                                                 texts_digest)
from bertmodel.hf import export_hf, load_into, load_pretrained
from bertmodel.model import BertForQuestionAnswering, BertForSequenceClassification
from bertmodel.model.bi_encoder import BertBiEncoder
from bertmodel.model.config import BertConfig, vocabulary_ids
from bertmodel.model.rerank_heads import BertForReranking
from bertmodel.retrieval.embedder import load_embedder
from bertmodel.retrieval.sentence_files import write_sentence_files
from bertmodel.tasks.embed import PairSet
from bertmodel.tasks.embed_distill import MarginSet, TextSet, training_texts
from bertmodel.tasks.rerank import cross_encoder_config
from bertmodel.training.optim import build_optimizer, clip_and_step
from embed_fixtures import distinct_rows, minilm_path, needs_squad
from finetune_fixtures import invoke, one_line_failure
from head_steps import FLOAT64_TOL, in_float64
from shared_data import SHARED_DATA

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.base.modules.dense import Dense  # noqa: E402
from sentence_transformers.base.modules.normalize import Normalize  # noqa: E402
from sentence_transformers.sentence_transformer import losses  # noqa: E402

WIKITEXT = SHARED_DATA / "wikitext-2-raw-train-head.txt"
pytestmark = [needs_squad, pytest.mark.skipif(not WIKITEXT.is_file(), reason=f"{WIKITEXT} not found")]
STEPS, B, LR, DECAY, CLIP = 8, 4, 1e-3, 0.01, 1.0
CPU = torch.device("cpu")
RUN_ARGS = ["--device", "cpu", "--no-progress", "--batch-size", "8", "--lr", "1e-3", "--max-query-length", "32",
            "--max-passage-length", "48", "--log-every", "1"]


def wiki_texts(count: int, words: int = 30) -> list[str]:
    """WikiText's first `count` paragraphs (not headings), cut to `words` words."""
    lines = [line.strip() for line in WIKITEXT.read_text(encoding="utf-8").splitlines()]
    texts = [" ".join(line.split()[:words]) for line in lines if line and not line.startswith("=")]
    assert len(texts) >= count
    return texts[:count]


def tiny_config(tok, hidden: int) -> BertConfig:
    return BertConfig.preset("tiny", hidden_size=hidden, num_attention_heads=2, intermediate_size=2 * hidden,
                             max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                             **vocabulary_ids(tok, "bert"))


def embedder_dir(out, tok, hidden: int, seed: int):
    """A random BERT bi-encoder exported as an embed run exports it (sentence-transformers files)."""
    torch.manual_seed(seed)
    settings = {"pooling": "mean", "normalize": True, "dimension": hidden, "query_prefix": "", "passage_prefix": "",
                "max_seq_length": 64}
    return export_hf(BertBiEncoder(tiny_config(tok, hidden)), out, tokenizer=tok, architecture="BertModel",
                     task={"name": "embed", "architecture": "BertModel", "sentence_transformers": settings})


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The student, the embedder teacher, a cross-encoder and two heads that are neither."""
    minilm = minilm_path()
    tok = tokenizer_info(minilm)
    root = tmp_path_factory.mktemp("distill")
    out = {"tokenizer": minilm, "student": embedder_dir(root / "student", tok, 32, 0),
           "teacher": embedder_dir(root / "teacher", tok, 48, 1)}
    torch.manual_seed(2)
    # Drawn with std 0.5, not 0.02: a tiny BERT at 0.02 gives every pair nearly the same logit
    # (margins ~1e-3); at 0.5 they differ by about a unit, as a trained reranker's do
    cross = BertForReranking(dataclasses.replace(tiny_config(tok, 40), initializer_range=0.5))
    head = cross_encoder_config()
    out["cross"] = export_hf(cross, root / "cross", tokenizer=tok, architecture="BertForSequenceClassification",
                             head_config=head, task={"name": "rerank", "architecture": "BertForSequenceClassification",
                                                     "hf_config": head, "options": {"max_seq_length": 96}})
    three = BertForSequenceClassification(tiny_config(tok, 32), 3)
    out["three"] = export_hf(three, root / "three", tokenizer=tok, architecture="BertForSequenceClassification",
                             head_config={"num_labels": 3})
    out["qa"] = export_hf(BertForQuestionAnswering(tiny_config(tok, 32)), root / "qa", tokenizer=tok,
                          architecture="BertForQuestionAnswering")
    return out


# -- step for step against sentence-transformers ---------------------------------------------

def train_against_st(module, ours, theirs, loss_fn, batches, features, their_weights) -> list[float]:
    """STEPS steps of our training module and of sentence-transformers' loss on the same
    batches (features(batch) -> (their columns, their labels)); asserts loss, gradient
    norm and every weight (their_weights() -> our name -> their tensor) equal at every step."""
    with in_float64((ours, theirs), [(b, b) for b in batches]) as pairs:
        ours.train()
        theirs.eval()  # no dropout on either side (dropout 0 in the configs)
        opt_ours = build_optimizer(ours, "adamw", LR, DECAY, CPU, eps=1e-8)
        params_ours = [p for p in ours.parameters() if p.requires_grad]
        params_theirs = [p for p in theirs.parameters() if p.requires_grad]
        opt_theirs = torch.optim.AdamW([{"params": [p for p in params_theirs if p.dim() >= 2], "weight_decay": DECAY},
                                        {"params": [p for p in params_theirs if p.dim() < 2], "weight_decay": 0.0}],
                                       lr=LR, eps=1e-8, foreach=False)
        seen = []
        for step, (batch, _) in enumerate(pairs):
            loss_ours = module(**batch).loss
            loss_theirs = loss_fn(*features(batch))
            assert loss_ours.item() == pytest.approx(loss_theirs.item(), rel=FLOAT64_TOL), f"step {step}"
            seen.append(loss_ours.item())
            loss_ours.backward(), loss_theirs.backward()
            norm_ours = clip_and_step(opt_ours, params_ours, CLIP)
            norm_theirs = torch.nn.utils.clip_grad_norm_([p for p in params_theirs if p.grad is not None], CLIP)
            opt_theirs.step()
            assert norm_ours == pytest.approx(norm_theirs.item(), rel=FLOAT64_TOL), f"step {step}"
            opt_ours.zero_grad(set_to_none=True), opt_theirs.zero_grad(set_to_none=True)
            theirs_now = their_weights()
            for name, value in ours.state_dict().items():
                torch.testing.assert_close(value, theirs_now[name], rtol=FLOAT64_TOL, atol=FLOAT64_TOL,
                                           msg=lambda m: f"step {step}, {name}: {m}")
    assert seen[-1] != seen[0]
    return seen


def columns(batch, prefix: str = "") -> dict:
    return {k: batch[f"{prefix}{k}"] for k in ("input_ids", "attention_mask", "token_type_ids")}


def test_mse_steps_equal_sentence_transformers_mse_loss(models):
    texts = wiki_texts(STEPS * B)
    teacher = read_teacher(models["teacher"])
    assert (teacher.kind, teacher.dimension) == ("embedder", 48)
    targets = teacher_vectors(teacher, [("passage", t) for t in texts], CPU, 16)
    # The teacher's vectors are sentence-transformers' own (both fp32; unit vectors of a
    # 2-layer model through other kernels differ by a few float32 roundings, ~1e-7)
    reference = st.SentenceTransformer(str(models["teacher"]), device="cpu").encode(texts)
    np.testing.assert_allclose(targets, reference, atol=1e-6)

    pre = load_pretrained(models["student"])
    ours = BertBiEncoder(pre.config, projection_dim=48)  # the student learns a 32 -> 48 projection
    load_into(ours, pre)
    dense = Dense(32, 48, activation_function=torch.nn.Identity())
    ours.projection.load_state_dict(dense.linear.state_dict())
    student = st.SentenceTransformer(str(models["student"]), device="cpu")
    theirs = st.SentenceTransformer(modules=[student[0], student[1], dense, Normalize()], device="cpu")

    data = TextSet(encode_texts(models["tokenizer"], texts, None, 48), np.arange(len(texts)), 0, 1)
    data.set_targets(targets)
    batches = [{k: torch.from_numpy(v) for k, v in data.collate(np.arange(s * B, (s + 1) * B)).items()}
               for s in range(STEPS)]

    def their_weights():
        encoder = {f"bert.{k}": v for k, v in theirs[0].auto_model.state_dict().items()}
        return {**encoder, **{f"projection.{k}": v for k, v in dense.linear.state_dict().items()}}

    train_against_st(EmbeddingMSE(ours), ours, theirs, losses.MSELoss(theirs), batches,
                     lambda b: ([columns(b)], b["teacher_embeddings"]), their_weights)


def test_margin_mse_steps_equal_sentence_transformers_margin_mse_loss(models):
    rows = distinct_rows(STEPS * B, negatives=2)
    teacher = read_teacher(models["cross"])
    assert teacher.kind == "cross-encoder" and teacher.settings["max_seq_length"] == 96
    candidates = [[r["positive"], *r["negatives"]] for r in rows]
    scores = cross_encoder_scores(teacher, [r["query"] for r in rows], candidates, CPU, 16)
    # sentence-transformers' CrossEncoder reads the rerank export alike (its max_length 96, fp32)
    cross = st.CrossEncoder(str(models["cross"]), device="cpu")
    reference = cross.predict([(r["query"], p) for r, row in zip(rows, candidates) for p in row])
    np.testing.assert_allclose(scores.reshape(-1), reference, rtol=1e-5, atol=1e-5)
    assert np.abs(scores[:, :1] - scores[:, 1:]).mean() > 0.5  # margins worth learning

    pre = load_pretrained(models["student"])
    ours = BertBiEncoder(pre.config)
    load_into(ours, pre)
    theirs = st.SentenceTransformer(str(models["student"]), device="cpu")  # Transformer, Pooling, Normalize
    pairs = Pairs([r["query"] for r in rows], [r["positive"] for r in rows], [r["negatives"] for r in rows], "squad")
    tok = models["tokenizer"]
    queries = encode_texts(tok, pairs.queries, None, 32)
    passages = encode_texts(tok, [t for p, n in zip(pairs.positives, pairs.negatives) for t in (p, *n)], None, 48)
    data = MarginSet(PairSet(queries, passages, pairs.text_ids(), 0, 1))
    data.set_targets(scores)
    batches = [{k: torch.from_numpy(v) for k, v in data.collate(np.arange(s * B, (s + 1) * B)).items()}
               for s in range(STEPS)]

    def features(batch):
        passage = columns(batch, "passage_")
        return ([columns(batch)] + [{k: v[c * B:(c + 1) * B] for k, v in passage.items()} for c in range(3)],
                batch["teacher_margins"])

    train_against_st(MarginMSE(ours), ours, theirs, losses.MarginMSELoss(theirs), batches, features,
                     lambda: {f"bert.{k}": v for k, v in theirs[0].auto_model.state_dict().items()})


# -- a run: the cache and the export ----------------------------------------------------------

@pytest.fixture(scope="module")
def distilled(models, tmp_path_factory):
    """A run with the 48-wide teacher (a copy, changed later), stopped at step 2 and
    resumed to 4, the teacher's vectors computed under a counter."""
    root = tmp_path_factory.mktemp("run")
    teacher = shutil.copytree(models["teacher"], root / "teacher")
    texts = root / "texts.txt"
    texts.write_text("\n\n".join(wiki_texts(40)) + "\n", encoding="utf-8")  # blank lines are skipped
    run = root / "run"
    args = ["finetune", "embed", "--model", models["student"], "--teacher", teacher, "--train", texts, "--out", run,
            *RUN_ARGS, "--max-steps", "4"]
    record = {"calls": 0, "args": args, "run": run, "teacher": teacher, "texts": texts}
    import bertmodel.tasks.embed_distill as task

    def counted(*a, **k):
        record["calls"] += 1
        return teacher_vectors(*a, **k)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(task, "teacher_vectors", counted)
        record["patch"] = patch
        first = invoke(*args, "--stop-at", "2")
        assert first.exit_code == 0, first.output
        cached = sorted((run / TARGETS_DIR).glob("*.npy"))
        record["first"] = (record["calls"], cached, [p.stat().st_mtime_ns for p in cached], [p.read_bytes()
                                                                                            for p in cached])
        second = invoke(*args)
        assert second.exit_code == 0, second.output
        record["second_output"] = second.output
        yield record


def test_the_teacher_vectors_are_computed_once_and_read_back_on_resume(distilled):
    calls, cached, mtimes, contents = distilled["first"]
    run = distilled["run"]
    assert calls == 1 and len(cached) == 1
    assert distilled["calls"] == 1, "the resume computed the teacher's vectors again"
    assert [p.stat().st_mtime_ns for p in cached] == mtimes and [p.read_bytes() for p in cached] == contents
    assert f"teacher targets: {cached[0]} (40 x 48, computed earlier)" in distilled["second_output"]
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 4
    # What was cached is the teacher's unit vectors of the file's lines, in order (one batch of 64, as the run)
    expected = teacher_vectors(read_teacher(distilled["teacher"]), [("passage", t) for t in wiki_texts(40)], CPU, 64)
    np.testing.assert_array_equal(np.load(cached[0]), expected)


def test_a_changed_teacher_is_other_data_and_gets_new_targets(distilled):
    """Run after the other tests of the fixture: it changes the teacher's weights in place."""
    run, teacher, args = distilled["run"], distilled["teacher"], distilled["args"]
    (old,) = sorted((run / TARGETS_DIR).glob("*.npy"))
    weights = teacher / "model.safetensors"
    from safetensors.torch import load_file, save_file

    tensors = load_file(weights)
    tensors["embeddings.word_embeddings.weight"] = tensors["embeddings.word_embeddings.weight"] * 2
    save_file(tensors, weights, metadata={"format": "pt"})
    refused = invoke(*args[:-1], "6")
    assert refused.exit_code == 1
    errors = [line for line in refused.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: {run}: resuming on other data") and "teacher" in errors[0]
    done = invoke(*args[:-1], "6", "--allow-changed-options")
    assert done.exit_code == 0, done.output
    assert distilled["calls"] == 2
    (new,) = sorted((run / TARGETS_DIR).glob("*.npy"))
    assert new.name != old.name and not np.allclose(np.load(new), 0)
    assert f"teacher targets: {new} (40 x 48, computed now)" in done.output


def test_training_texts_of_each_source(tmp_path):
    """A text file's lines (BOM and blank lines dropped), a table's --text-column, and a
    BEIR directory's --train-split queries (as queries) with every corpus passage (title
    + text, as BEIR joins them)."""
    from types import SimpleNamespace

    lines = wiki_texts(5)
    plain = tmp_path / "texts.txt"
    plain.write_text("\ufeff" + "\n\n".join(lines) + "\n  \n", encoding="utf-8")
    table = tmp_path / "texts.jsonl"
    table.write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(lines)))
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "Paris", "text": "is in France."}) + "\n"
                                       + json.dumps({"_id": "d2", "text": "Rome is in Italy."}) + "\n")
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in
                                                (("q1", "Where is Paris?"), ("q2", "Where is Rome?"))))
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td2\t1\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")

    def read(train, column=None, split="train"):
        return training_texts(SimpleNamespace(train=str(train), text_column=column, train_split=split))

    assert read(plain) == [("passage", t) for t in lines]
    assert read(table, "body") == [("passage", t) for t in lines]
    assert read(beir) == [("query", "Where is Rome?"), ("passage", "Paris is in France."),
                          ("passage", "Rome is in Italy.")]
    assert read(beir, split="dev") == [("passage", "Paris is in France."), ("passage", "Rome is in Italy.")]


def test_texts_digest_tells_where_one_text_ends():
    assert texts_digest([("ab", "c")]) != texts_digest([("a", "bc")])
    assert texts_digest([("a",), ("b",)]) != texts_digest([("a", "b")])


def test_the_export_with_a_projection_loads_in_sentence_transformers_as_we_embed(distilled):
    hf = distilled["run"] / "hf"
    modules = json.loads((hf / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling", "Dense", "Normalize"]
    import transformers

    _, info = transformers.AutoModel.from_pretrained(hf, output_loading_info=True)
    assert not any(info.values()), info  # the projection is the Dense module's, not a stray tensor of BertModel's
    texts = wiki_texts(60)[40:]
    ours = load_embedder(distilled["run"])
    assert ours.dimension == 48
    ours.model.double()
    theirs = st.SentenceTransformer(str(hf), device="cpu").double()
    expected = theirs.encode(texts, convert_to_tensor=True).numpy()
    # Both compute in float64; ours hands back float32, so the rows differ by its rounding (2^-24 of a unit vector)
    np.testing.assert_allclose(ours.encode(texts), expected, rtol=0, atol=1e-7)


# -- refusals ---------------------------------------------------------------------------------

def tanh_dense_teacher(teacher, out):
    """The teacher with a Dense module of activation Tanh (sentence-transformers' default),
    which no linear projection reproduces."""
    out = shutil.copytree(teacher, out)
    settings = json.loads((out / "bertmodel_task.json").read_text())["sentence_transformers"]
    write_sentence_files(out, settings, {"weight": torch.zeros(48, 48), "bias": torch.zeros(48)})
    config = json.loads((out / "2_Dense" / "config.json").read_text())
    config["activation_function"] = "torch.nn.modules.activation.Tanh"
    (out / "2_Dense" / "config.json").write_text(json.dumps(config))
    shutil.rmtree(out / "2_Normalize")  # now 3_Normalize
    return out


@pytest.mark.parametrize("case", ["three-labels", "qa-head", "tanh-dense", "no-negatives", "mini-batch", "no-texts",
                                  "no-text-column"])
def test_refusals_in_one_line(models, tmp_path, case):
    rows = tmp_path / "pairs.jsonl"
    rows.write_text("".join(json.dumps({"query": r["query"], "positive": r["positive"]}) + "\n"
                            for r in distinct_rows(8)))
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(wiki_texts(8)) + "\n")
    teacher, train, extra = models["teacher"], texts, []
    if case == "three-labels":
        teacher, names = models["three"], [models["three"], "a classifier with 3 labels", "cross-encoder"]
    elif case == "qa-head":
        teacher, names = models["qa"], [models["qa"], "BertForQuestionAnswering", "embedder"]
    elif case == "tanh-dense":
        teacher = tanh_dense_teacher(models["teacher"], tmp_path / "tanh")
        names = [teacher / "2_Dense" / "config.json", "Tanh", "linear projection only"]
    elif case == "no-negatives":
        teacher, train, names = models["cross"], rows, [rows, "rows without hard negatives", "--negative-column"]
    elif case == "mini-batch":
        extra, names = ["--mini-batch-size", "2"], ["--mini-batch-size", "--teacher"]
    elif case == "no-texts":
        texts.write_text("\n  \n")
        names = [texts, "no texts"]
    else:
        train = tmp_path / "texts.jsonl"
        train.write_text(json.dumps({"id": 1, "body": "a sentence"}) + "\n")
        names = [train, "'body'", "--text-column names another"]
    out = tmp_path / "run"
    result = invoke("finetune", "embed", "--model", models["student"], "--teacher", teacher, "--train", train,
                    "--out", out, *RUN_ARGS, "--max-steps", "1", *extra)
    one_line_failure(result, out, names)
