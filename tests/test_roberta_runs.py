"""The RoBERTa architecture through every command, as a user runs them:
`pretrain --architecture roberta` (MLM alone: NSP-pair shards read as one sequence, said
in the log; the pair objectives and ELECTRA's refused in one line), its export (transformers'
RobertaForMaskedLM with no missing keys and equal logits, the tokenizer giving no segment
ids), `export-hf` and `fill-mask`; and fine-tuning each task (classify, qa, tokens, choice,
embed, rerank) from a transformers RobertaForMaskedLM directory (save_pretrained, random
weights, bert-base-uncased's vocabulary), exported as the matching Roberta* class, read
back by `evaluate` and `predict`. A model whose padding id is not its tokenizer's is
refused: RoBERTa tells padding by its id."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from bertmodel.data.shards import tokenizer_info
from bertmodel.data.synthetic import small_shard_dir
from bertmodel.hf import export_hf, load_into, load_pretrained
from bertmodel.model import HEADS, RobertaConfig, XLMRobertaConfig
from bertmodel.model.config import vocabulary_ids
from embed_fixtures import SQUAD, distinct_rows
from finetune_fixtures import invoke, one_line_failure
from rerank_fixtures import as_pairs, squad_groups, write_jsonl
from shared_data import SHARED_DATA, TOKENIZERS

transformers = pytest.importorskip("transformers")
VOCAB = SHARED_DATA / "bert-base-uncased-vocab.txt"
RTE, CONLL, ECARE = SHARED_DATA / "glue" / "RTE", SHARED_DATA / "ner" / "conll2003", \
    SHARED_DATA / "multiple_choice" / "e-CARE"
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("roberta-runs")]
FAST = ("--batch-size", 8, "--no-progress", "--seed", 3, "--device", "cpu")


def ok(*args):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result


def loads_as(directory, hf_class):
    """transformers' class from `directory`, with no missing, unexpected or mismatched keys."""
    theirs, info = hf_class.from_pretrained(directory, output_loading_info=True)
    assert not any(info.values()), info
    return theirs.eval()


# -- pre-training ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """NSP pair rows over a w0..w249 WordPiece vocabulary ([PAD] 0, [CLS] 2, [SEP] 3)."""
    return small_shard_dir(tmp_path_factory.mktemp("roberta-shards") / "nsp", rows=96, max_seq_length=64)


def test_pretrain_roberta_reads_pairs_as_one_sequence_and_exports_roberta_for_masked_lm(shards, tmp_path):
    run = tmp_path / "run"
    result = ok("pretrain", "--architecture", "roberta", "--data", shards, "--out", run, "--preset", "tiny",
                "--max-steps", 6, "--log-every", 2, "--lr", 3e-3, *FAST)
    assert "the roberta architecture has no pair head: MLM alone" in result.output
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all("nsp_acc" not in r for r in records) and "mlm_acc" in records[-1]
    assert json.loads((run / "run.json").read_text())["architecture"] == "RobertaForMaskedLM"
    config = json.loads((run / "hf" / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("roberta", ["RobertaForMaskedLM"])
    # the tokenizer's ids; positions for 512 tokens past [PAD] 0
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == (0, 2, 3)
    assert (config["max_position_embeddings"], config["type_vocab_size"], config["layer_norm_eps"]) == (513, 1, 1e-5)
    theirs = loads_as(run / "hf", transformers.RobertaForMaskedLM)
    pre = load_pretrained(run / "hf")
    ours = HEADS["roberta"]["mlm"](pre.config).eval()
    assert load_into(ours, pre) == []
    ids = torch.randint(5, 255, (3, 40))
    mask = torch.ones_like(ids)
    mask[1, 25:], mask[2, 9:] = 0, 0
    ids = ids * mask  # [PAD] 0
    slots = torch.minimum(torch.arange(40), mask.sum(1, keepdim=True) - 1)
    with torch.no_grad():
        a = ours(ids, torch.zeros_like(ids), mask, slots).mlm_logits
        b = theirs(input_ids=ids, attention_mask=mask).logits.gather(1, slots[..., None].expand_as(a))
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)  # fp32: rounding far below 1e-5 at this size
    tokenizer = transformers.AutoTokenizer.from_pretrained(run / "hf")
    assert "token_type_ids" not in tokenizer("w1 w2", "w3")  # one token type: none given
    ok("export-hf", run, tmp_path / "exported")
    loads_as(tmp_path / "exported", transformers.RobertaForMaskedLM)
    assert ok("fill-mask", run, "w1 w2 [MASK] w4").output.strip()


@pytest.mark.parametrize("objective,words", [("mlm+nsp", ("pair head", "roberta")), ("rtd", ("rtd", "roberta"))])
def test_objectives_roberta_cannot_train_are_refused_in_one_line(shards, tmp_path, objective, words):
    one_line_failure(invoke("pretrain", "--architecture", "roberta", "--objective", objective, "--data", shards,
                            "--out", tmp_path / "run", "--preset", "tiny", "--max-steps", 2, *FAST),
                     tmp_path / "run", words)


def test_pretraining_an_xlm_roberta_dir_further_keeps_its_class_names(shards, tmp_path):
    """--init-from a transformers XLM-R directory (over the shards' vocabulary): the run is
    XLM-R's, its export XLMRobertaForMaskedLM with model_type xlm-roberta, every weight loaded."""
    tok = tokenizer_info(shards)
    config = XLMRobertaConfig.preset("tiny", **vocabulary_ids(tok, "roberta"))
    torch.manual_seed(4)
    source = tmp_path / "xlmr"
    export_hf(HEADS["xlm-roberta"]["mlm"](config), source, tokenizer=tok)
    transformers.XLMRobertaForMaskedLM.from_pretrained(source).save_pretrained(source)
    result = ok("pretrain", "--init-from", source, "--data", shards, "--out", tmp_path / "run", "--max-steps", 2,
                *FAST)
    assert "newly initialised" not in result.output and "(XLMRobertaForMaskedLM)" in result.output
    written = json.loads((tmp_path / "run" / "hf" / "config.json").read_text())
    assert (written["model_type"], written["architectures"]) == ("xlm-roberta", ["XLMRobertaForMaskedLM"])
    assert type(loads_as(tmp_path / "run" / "hf", transformers.AutoModelForMaskedLM)).__name__ == \
        "XLMRobertaForMaskedLM"


# -- fine-tuning from a transformers RoBERTa directory ------------------------------------

@pytest.fixture(scope="module")
def roberta_dir(tmp_path_factory):
    """A tiny random RobertaForMaskedLM written by transformers' save_pretrained, with
    bert-base-uncased's vocabulary ([PAD] 0 is then its padding id) beside it."""
    if not VOCAB.exists():
        pytest.skip("../shared/data/bert-base-uncased-vocab.txt is absent")
    tok = tokenizer_info(VOCAB)
    config = RobertaConfig.preset("tiny", **vocabulary_ids(tok, "roberta"))
    source = tmp_path_factory.mktemp("roberta") / "hf"
    torch.manual_seed(2)
    export_hf(HEADS["roberta"]["mlm"](config), source, tokenizer=tok)
    transformers.RobertaForMaskedLM.from_pretrained(source).save_pretrained(source)  # as transformers writes it
    return source


def needs(*paths):
    for path in paths:
        if not path.exists():
            pytest.skip(f"{path} is absent")


def test_finetune_classify_then_evaluate_predict_and_export(roberta_dir, tmp_path):
    needs(RTE)
    out = tmp_path / "rte"
    ok("finetune", "classify", "--model", roberta_dir, "--train", RTE / "train.tsv", "--validation", RTE / "dev.tsv",
       "--text-column", "sentence1", "--text-pair-column", "sentence2", "--out", out, "--max-train-examples", 32,
       "--max-eval-examples", 16, "--epochs", 1, "--max-seq-length", 128, *FAST)
    theirs = loads_as(out / "hf", transformers.RobertaForSequenceClassification)
    pre = load_pretrained(out / "hf")
    ours = HEADS["roberta"]["classify"](pre.config, 2).eval()
    assert load_into(ours, pre) == []
    ids = torch.randint(1000, 30000, (3, 50))
    mask = torch.ones_like(ids)
    mask[2, 20:] = 0
    ids = ids * mask
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, torch.ones_like(ids), mask).logits,
                                   theirs(input_ids=ids, attention_mask=mask).logits, atol=1e-5, rtol=1e-5)
    assert 0 <= json.loads(ok("evaluate", out, "--no-progress").stdout)["accuracy"] <= 1
    predicted = ok("predict", out, "a man is sleeping .", "--pair", "nobody sleeps .").stdout
    assert predicted.split("\t")[0].strip() in ("entailment", "not_entailment"), predicted
    pipeline = transformers.pipeline("text-classification", model=str(out / "hf"))  # pairs without segment ids
    assert pipeline({"text": "a man is sleeping .", "text_pair": "nobody sleeps ."})["label"] in (
        "entailment", "not_entailment")
    ok("export-hf", out, tmp_path / "exported")
    loads_as(tmp_path / "exported", transformers.RobertaForSequenceClassification)


def test_finetune_qa_tokens_and_choice_export_their_roberta_classes(roberta_dir, tmp_path):
    needs(SQUAD, CONLL, ECARE)
    ok("finetune", "qa", "--model", roberta_dir, "--train", SQUAD, "--validation", SQUAD, "--out", tmp_path / "qa",
       "--max-train-examples", 16, "--max-eval-examples", 8, "--epochs", 1, "--max-seq-length", 128, *FAST)
    loads_as(tmp_path / "qa" / "hf", transformers.RobertaForQuestionAnswering)
    assert "f1" in json.loads(ok("evaluate", tmp_path / "qa", "--no-progress").stdout)
    ok("finetune", "tokens", "--model", roberta_dir, "--train", CONLL / "train.txt", "--validation",
       CONLL / "valid.txt", "--out", tmp_path / "ner", "--max-train-examples", 24, "--max-eval-examples", 8,
       "--epochs", 1, *FAST)
    loads_as(tmp_path / "ner" / "hf", transformers.RobertaForTokenClassification)
    assert ok("predict", tmp_path / "ner", "EU rejects German call to boycott British lamb .").stdout.strip()
    ok("finetune", "choice", "--model", roberta_dir, "--train", ECARE / "train.jsonl", "--validation",
       ECARE / "dev.jsonl", "--context-column", "premise", "--question-column", "ask-for", "--choice-columns",
       "hypothesis1,hypothesis2", "--out", tmp_path / "choice", "--max-train-examples", 16,
       "--max-eval-examples", 8, "--epochs", 1, *FAST)
    loads_as(tmp_path / "choice" / "hf", transformers.RobertaForMultipleChoice)
    assert "accuracy" in json.loads(ok("evaluate", tmp_path / "choice", "--no-progress").stdout)


def test_finetune_embed_and_rerank_export_roberta_model_and_cross_encoder(roberta_dir, tmp_path):
    needs(SQUAD)
    st = pytest.importorskip("sentence_transformers")
    rows = distinct_rows(24)
    train = write_jsonl(tmp_path / "triples.jsonl", [{"anchor": r["query"], "positive": r["positive"],
                                                      "negative": r["negatives"][0]} for r in rows[:16]])
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"anchor": r["query"], "positive": r["positive"]} for r in rows[16:]])
    ok("finetune", "embed", "--model", roberta_dir, "--train", train, "--validation", dev, "--out",
       tmp_path / "embed", "--max-steps", 2, "--max-query-length", 32, "--max-passage-length", 64, *FAST)
    loads_as(tmp_path / "embed" / "hf", transformers.RobertaModel)
    model = st.SentenceTransformer(str(tmp_path / "embed" / "hf"), device="cpu")
    assert model.encode(["who wrote it?"]).shape == (1, 128)
    groups = squad_groups(12, negatives=2, words=24)
    ok("finetune", "rerank", "--model", roberta_dir, "--train", write_jsonl(tmp_path / "pairs.jsonl",
       as_pairs(groups[:8])), "--validation", write_jsonl(tmp_path / "groups.jsonl", groups[8:]), "--out",
       tmp_path / "rerank", "--max-steps", 2, "--max-seq-length", 96, *FAST)
    loads_as(tmp_path / "rerank" / "hf", transformers.RobertaForSequenceClassification)
    from sentence_transformers.cross_encoder import CrossEncoder

    scores = CrossEncoder(str(tmp_path / "rerank" / "hf"), device="cpu").predict([("who?", "a passage .")])
    assert scores.shape == (1,)
    assert json.loads(ok("evaluate", tmp_path / "rerank", "--no-progress").stdout)


def test_a_model_padding_with_another_id_than_its_tokenizer_is_refused(roberta_dir, tmp_path):
    needs(RTE)
    other = tmp_path / "pad1"
    shutil.copytree(roberta_dir, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "pad_token_id": 1}))
    one_line_failure(invoke("finetune", "classify", "--model", other, "--train", RTE / "train.tsv", "--text-column",
                            "sentence1", "--text-pair-column", "sentence2", "--out", tmp_path / "run",
                            "--max-train-examples", 8, *FAST), tmp_path / "run", ("padding id is 1", "pads with 0"))


def test_a_roberta_with_roberta_base_tokenizer_predicts_as_the_transformers_pipeline(tmp_path):
    """random:tiny of the roberta architecture with roberta-base's own byte-level BPE files:
    config.json carries its ids (<pad> 1, <s> 0, </s> 2) and 512 + 1 + 1 positions; the
    text-classification pipeline (AutoTokenizer's `<s> A </s></s> B </s>`, no segment ids,
    cut at the run's 128 tokens as predict cuts) scores pairs as our predict does."""
    tokenizer_dir = TOKENIZERS / "roberta-base"
    needs(RTE, tokenizer_dir)
    out = tmp_path / "rte"
    ok("finetune", "classify", "--model", "random:tiny", "--architecture", "roberta", "--tokenizer", tokenizer_dir,
       "--train", RTE / "train.tsv", "--validation", RTE / "dev.tsv", "--text-column", "sentence1",
       "--text-pair-column", "sentence2", "--out", out, "--max-train-examples", 32, "--max-eval-examples", 16,
       "--epochs", 1, "--max-seq-length", 128, *FAST)
    config = json.loads((out / "hf" / "config.json").read_text())
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == (1, 0, 2)
    assert config["max_position_embeddings"] == 514
    rows = [line.split("\t") for line in (RTE / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:6]]
    classify = transformers.pipeline("text-classification", model=str(out / "hf"), device="cpu")
    theirs = [classify({"text": r[1], "text_pair": r[2]}, truncation=True) for r in rows]
    theirs = [t[0] if isinstance(t, list) else t for t in theirs]
    lines = ok("predict", out, *[r[1] for r in rows], *[a for r in rows for a in ("--pair", r[2])]).stdout
    ours = [line.split("\t") for line in lines.splitlines()]
    assert [o[0] for o in ours] == [t["label"] for t in theirs]
    assert [float(o[1]) for o in ours] == pytest.approx([t["score"] for t in theirs], abs=1e-4)  # printed to 4 places
