"""`bertmodel evaluate ENCODER --data BEIR_DIR`: a starting model's retrieval baseline. A
plain transformers encoder (all-MiniLM-L6-v2's BertModel directory), sentence-transformers
directories (their pooling, normalisation, prompts, length and similarity) and an ELECTRA
pre-training run are read as embedders; the measures equal trec_eval's (pytrec_eval) on
SentenceTransformer(dir)'s own vectors, on the shared SQuAD head as BEIR. What is no
encoder, or data an encoder cannot be scored on, is one line naming what evaluate takes."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from bertmodel.data.beir import BeirData, passage_text, read_beir
from bertmodel.metrics.ranking import trec_order
from embed_fixtures import minilm_path, needs_squad, squad_articles
from finetune_fixtures import invoke, one_line_failure, sentence, tiny_bert, write_tsv
from shared_data import SHARED_DATA

pytrec_eval = pytest.importorskip("pytrec_eval")
pytestmark = [needs_squad, pytest.mark.slow, pytest.mark.xdist_group("evaluate_encoder")]
FAST = ["--device", "cpu", "--no-progress"]
# Two float32 encoders of the same weights (ours, transformers' under sentence-transformers)
# differ by kernel rounding: ~1e-6 in a cosine of 384-dim unit vectors. A judged passage
# whose score lies within SCORE_SLACK of another's may rank either side of it.
SCORE_SLACK = 1e-5


@pytest.fixture(scope="module")
def beir_dir(tmp_path_factory):
    """Five articles of the SQuAD head, split by `bertmodel squad-to-beir`."""
    root = tmp_path_factory.mktemp("encoder-beir")
    result = invoke("squad-to-beir", squad_articles(root / "squad.json"), "--out", root / "beir", "--dev-fraction",
                    "0.2", "--test-fraction", "0.2", "--no-progress")
    assert result.exit_code == 0, result.output
    return root / "beir"


def st_measures(model_dir, beir: BeirData, max_seq_length: int | None = None) -> tuple[dict, int]:
    """trec_eval's measures (pytrec_eval) of exact search with SentenceTransformer(dir)'s
    own encode_query / encode_document and similarity, and how many judged queries have a
    relevant passage within SCORE_SLACK of another passage (whose rank a rounding may move)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu")
    if max_seq_length:
        model.max_seq_length = max_seq_length
    qids, pids = list(beir.queries), list(beir.corpus)
    queries = model.encode_query([beir.queries[q] for q in qids], convert_to_tensor=True)
    passages = model.encode_document([passage_text(beir.corpus[p]) for p in pids], convert_to_tensor=True)
    scores = model.similarity(queries, passages).double().numpy()
    run = {q: {pids[j]: float(scores[i, j]) for j in range(len(pids))} for i, q in enumerate(qids)}
    ambiguous = 0
    for i, q in enumerate(qids):
        relevant = [pids.index(p) for p, grade in beir.qrels[q].items() if grade > 0]
        gaps = np.abs(scores[i][:, None] - scores[i][relevant][None, :])
        gaps[relevant, range(len(relevant))] = np.inf  # a passage against itself
        ambiguous += int((gaps < SCORE_SLACK).any())
    evaluator = pytrec_eval.RelevanceEvaluator(beir.qrels, {"ndcg_cut.10", "recall.100", "map", "recip_rank"})
    top100 = {q: {d: s[d] for d in trec_order(s)[:100]} for q, s in run.items()}
    full = evaluator.evaluate(top100)
    cut = evaluator.evaluate({q: {d: s[d] for d in trec_order(s)[:10]} for q, s in run.items()})
    n = len(beir.qrels)
    return {"ndcg@10": sum(v["ndcg_cut_10"] for v in full.values()) / n,
            "recall@100": sum(v["recall_100"] for v in full.values()) / n,
            "map": sum(v["map"] for v in full.values()) / n,
            "mrr@10": sum(v["recip_rank"] for v in cut.values()) / n}, ambiguous


def assert_measures_match(ours: dict, theirs: dict, ambiguous: int, queries: int) -> None:
    """Equal, up to the queries whose relevant passage sits in a near-tie: each of these
    measures lies in [0, 1] per query, so such a query moves a mean by at most 1 / n."""
    assert set(ours) == set(theirs)
    assert ambiguous <= queries // 10, f"{ambiguous} near-tied queries of {queries}: the check says little"
    for name, value in theirs.items():
        assert ours[name] == pytest.approx(value, abs=ambiguous / queries + 1e-12), name


def evaluate(model, beir_dir, out, *args) -> dict:
    result = invoke("evaluate", model, "--data", beir_dir, "--validation-split", "test", "--out", out, *FAST, *args)
    assert result.exit_code == 0, result.output
    assert (out / "run.trec").is_file()
    return json.loads(result.stdout.strip().splitlines()[0])


def test_a_plain_encoder_is_scored_as_sentence_transformers_reads_it(beir_dir, tmp_path):
    """MiniLM's transformers directory (no sentence-transformers files): mean pooling,
    normalised, queries and passages cut at --max-seq-length (128: SQuAD paragraphs run
    longer, so the cut is exercised), as SentenceTransformer(dir) reads a plain encoder."""
    minilm = minilm_path()
    ours = evaluate(minilm, beir_dir, tmp_path, "--max-seq-length", "128")
    test = read_beir(beir_dir, "test")
    theirs, ambiguous = st_measures(minilm, test, max_seq_length=128)
    assert_measures_match(ours, theirs, ambiguous, len(test.qrels))
    assert 0.5 < ours["ndcg@10"] < 1  # MiniLM retrieves SQuAD paragraphs: a real ranking


@pytest.mark.parametrize("layout", ["cls-normalised-prompts", "mean-dot"])
def test_a_sentence_transformers_directory_is_read_with_its_own_modules(beir_dir, tmp_path, layout):
    """Directories SentenceTransformer.save writes: CLS pooling + Normalize with query and
    document prompts and a 96-token length; mean pooling, no Normalize, dot-product
    similarity (the raw vectors rank). evaluate reads each as the library does."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    minilm = minilm_path()
    if layout == "cls-normalised-prompts":
        modules = [Transformer(str(minilm), max_seq_length=96), Pooling(384, pooling_mode="cls"), Normalize()]
        options = {"prompts": {"query": "query: ", "document": "passage: "}, "similarity_fn_name": "cosine"}
    else:
        modules = [Transformer(str(minilm), max_seq_length=96), Pooling(384, pooling_mode="mean")]
        options = {"similarity_fn_name": "dot"}
    directory = tmp_path / "st"
    SentenceTransformer(modules=modules, device="cpu", **options).save(str(directory))
    out = tmp_path / "out"
    out.mkdir()
    ours = evaluate(directory, beir_dir, out)
    test = read_beir(beir_dir, "test")
    theirs, ambiguous = st_measures(directory, test)
    assert_measures_match(ours, theirs, ambiguous, len(test.qrels))


SAMPLE, UNCASED = SHARED_DATA / "google_sample_text.txt", SHARED_DATA / "bert-base-uncased-vocab.txt"


@pytest.mark.skipif(not SAMPLE.is_file() or not UNCASED.is_file(), reason="needs google_sample_text.txt and "
                    "bert-base-uncased-vocab.txt")
def test_an_electra_pretraining_run_is_read_as_an_embedder(beir_dir, tmp_path):
    """A few steps of `pretrain --objective rtd`: the run (its discriminator, an ELECTRA
    encoder) embeds as transformers' ElectraModel of RUN/hf does, mean-pooled by definition,
    and evaluate ranks the collection with it."""
    from transformers import AutoTokenizer, ElectraModel

    from bertmodel.retrieval.embedder import load_embedder
    from bertprep.cli import main as bertprep_main
    from click.testing import CliRunner

    shards, run = tmp_path / "shards", tmp_path / "run"
    built = CliRunner().invoke(bertprep_main, ["build-shards", str(SAMPLE), "--tokenizer", str(UNCASED), "--out",
                                               str(shards), "--max-seq-length", "64", "--no-progress"])
    assert built.exit_code == 0, built.output
    trained = invoke("pretrain", "--data", shards, "--out", run, "--preset", "tiny", "--objective", "rtd",
                     "--batch-size", "8", "--max-steps", "3", "--no-progress")
    assert trained.exit_code == 0, trained.output
    test = read_beir(beir_dir, "test")
    texts = [passage_text(p) for p in list(test.corpus.values())[:16]]
    ours = load_embedder(run, max_passage_length=128).encode_passages(texts)
    tokenizer = AutoTokenizer.from_pretrained(run / "hf")
    electra = ElectraModel.from_pretrained(run / "hf").eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        hidden = electra(**batch).last_hidden_state.double()
    mask = batch["attention_mask"].unsqueeze(-1).double()
    mean = (hidden * mask).sum(1) / mask.sum(1)
    theirs = (mean / mean.norm(dim=-1, keepdim=True)).numpy()
    # float32 on both sides, unit vectors: kernel rounding, ~1e-7 per component.
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)
    measures = evaluate(run, beir_dir, tmp_path)
    assert set(measures) == {"ndcg@10", "mrr@10", "recall@100", "map"}


def test_an_encoder_on_data_it_cannot_be_scored_on_says_what_evaluate_takes(tmp_path):
    rte = SHARED_DATA / "glue" / "RTE" / "dev.tsv"
    if not rte.is_file():
        pytest.skip(f"{rte} not found")
    minilm = minilm_path()
    line = one_line_failure(invoke("evaluate", minilm, "--data", rte, *FAST), tmp_path / "none")
    assert line == (f"Error: {minilm}: a BertModel model, not a fine-tuned one; evaluate and predict take classify, "
                    "qa, tokens, choice and rerank models fine-tuned by `bertmodel finetune` (evaluate also embed "
                    f"runs); an encoder is scored as an embedder by `bertmodel evaluate {minilm} --data BEIR_DIR`")


def test_a_fine_tuned_classifier_is_no_embedder(beir_dir, tmp_path):
    """Our classify run holds an encoder, but its vectors were trained for labels: a BEIR
    directory given to it is refused in one line naming what embeds, before any encoding."""
    bert = tiny_bert(tmp_path)
    rng = random.Random(0)
    train = write_tsv(tmp_path / "train.tsv", ["sentence", "label"], [(sentence(rng), i % 2) for i in range(16)])
    run = tmp_path / "run"
    trained = invoke("finetune", "classify", "--model", bert, "--train", train, "--out", run, *FAST,
                     "--max-steps", "1", "--batch-size", "8")
    assert trained.exit_code == 0, trained.output
    line = one_line_failure(invoke("evaluate", run, "--data", beir_dir, *FAST), tmp_path / "none")
    assert line == (f"Error: {run}: a classification run (BertForSequenceClassification), not an embedding model; "
                    "texts are embedded by embed runs, pre-training runs, sentence-transformers directories and "
                    "transformers BERT, ModernBERT, RoBERTa, XLM-R and ELECTRA encoder directories")
    assert not (run / "run.trec").exists()
