"""The ModernBERT-style architecture through every command, as a user runs them, on real
text (../shared/data): `pretrain --architecture modernbert` (MLM only, from NSP-pair and
FULL-SENTENCES shards, dynamic 30% masking, wsd), exact resume, the export round trip
(transformers' ModernBertForMaskedLM with no missing keys and equal logits at 128, 1,024
and 4,096 tokens, AutoTokenizer, fill-mask), loading a transformers `save_pretrained`
ModernBERT dir, context extension (--init-from a 128-token run onto 1,024-token shards),
and fine-tuning (classify, qa, tokens, choice) from our run and from a transformers dir,
exported as the matching ModernBertFor* class with equal logits."""
from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data.shards import tokenizer_info
from bertmodel.data.synthetic import build_corpus_shards
from bertmodel.hf import export_hf, load_into, load_pretrained
from bertmodel.model import ModernBertConfig, ModernBertForMaskedLM
from bertmodel.training import checkpoint as ckpt
from shared_data import SHARED_DATA

transformers = pytest.importorskip("transformers")
TEXT, VOCAB = SHARED_DATA / "wikitext-2-raw-train-head.txt", SHARED_DATA / "bert-base-uncased-vocab.txt"
pytestmark = [pytest.mark.skipif(not TEXT.exists(), reason="../shared/data (WikiText-2 slice, bert vocab) is absent"),
              pytest.mark.slow,  # about 100 s in all: one worker builds the shards and the run once
              pytest.mark.xdist_group("modernbert-runs")]
FAST = ("--preset", "tiny", "--batch-size", 8, "--log-every", 5, "--no-progress", "--seed", 3)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("modernbert")
    return {"nsp": build_corpus_shards(TEXT, VOCAB, root / "nsp", dupe_factor=1),
            "none": build_corpus_shards(TEXT, VOCAB, root / "none", dupe_factor=1, pairs="none"),
            "long": build_corpus_shards(TEXT, VOCAB, root / "long", dupe_factor=1, pairs="none", max_seq_length=1024,
                                        max_predictions=160)}


@pytest.fixture(scope="module")
def run(shards, tmp_path_factory):
    """A tiny ModernBERT pre-trained as the README's recipe says (30% dynamic masking, wsd)."""
    out = tmp_path_factory.mktemp("runs") / "run"
    ok("pretrain", "--architecture", "modernbert", "--data", shards["none"], "--out", out, *FAST, "--max-steps", 30,
       "--lr", 3e-3, "--masking", "dynamic", "--mask-rate", 0.3, "--schedule", "wsd", "--eval-data", shards["nsp"],
       "--eval-every", 30, "--eval-batches", 4)
    return out


def test_pretrain_modernbert_learns_and_records_its_architecture(run):
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < losses[0] - 1.0  # it learns (tiny model, 30 steps: from ~10.3)
    assert "nsp_acc" not in records[-1] and 0 < records[-1]["eval_mlm_acc"] < 1  # MLM only, held out too
    assert json.loads((run / "run.json").read_text())["architecture"] == "ModernBertForMaskedLM"
    config = json.loads((run / "hf" / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["architectures"] == ["ModernBertForMaskedLM"]
    assert (config["pad_token_id"], config["cls_token_id"], config["sep_token_id"], config["mask_token_id"]) == \
        (0, 101, 102, 103)  # bert-base-uncased's, not ModernBERT's BPE defaults


def test_pair_objectives_are_refused_in_one_line(shards, tmp_path):
    result = invoke("pretrain", "--architecture", "modernbert", "--objective", "mlm+nsp", "--data", shards["nsp"],
                    "--out", tmp_path / "run", *FAST, "--max-steps", 2)
    assert result.exit_code != 0 and "pair head" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_pretrain_reads_pair_shards_as_one_sequence_and_resumes_exactly(shards, tmp_path):
    args = ("pretrain", "--architecture", "modernbert", "--data", shards["nsp"], *FAST, "--max-steps", 6,
            "--masking", "dynamic", "--unpad", "on")
    ok(*args, "--out", tmp_path / "straight")
    ok(*args, "--out", tmp_path / "resumed", "--stop-at", 3)
    ok(*args, "--out", tmp_path / "resumed")
    a, b = (ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / r)) for r in ("straight", "resumed"))
    assert a["step"] == b["step"] == 6
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k  # bitwise


def test_export_loads_in_transformers_with_equal_logits_at_long_lengths(run):
    """RUN/hf: no missing or unexpected keys; equal logits (fp32, 1e-5) on padded
    batches of mixed lengths at 128, 1,024 and 4,096 tokens (local window 128: the
    banded local layers at the two longer ones)."""
    theirs, info = transformers.ModernBertForMaskedLM.from_pretrained(run / "hf", output_loading_info=True)
    assert not any(info.values()), info
    pre = load_pretrained(run / "hf")
    ours = ModernBertForMaskedLM(pre.config)
    assert load_into(ours, pre) == []
    ours.eval(), theirs.eval()
    g = torch.Generator().manual_seed(0)
    for T in (128, 1024, 4096):
        lengths = torch.tensor([T, T // 2 + 3, T // 5])
        mask = (torch.arange(T)[None] < lengths[:, None]).long()
        ids = torch.randint(1000, 30000, (3, T), generator=g) * mask
        with torch.no_grad():
            a, b = ours(ids, None, mask).mlm_logits, theirs(input_ids=ids, attention_mask=mask).logits
        real = mask.bool()
        torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=1e-5, msg=f"T={T}")


def test_tokenizer_and_fill_mask_pipeline_work_on_the_export(run):
    tok = transformers.AutoTokenizer.from_pretrained(run / "hf")
    assert tok.mask_token_id == 103 and tok.model_max_length == 8192  # not bertprep's 512
    assert len(tok("word " * 2000)["input_ids"]) == 2002
    fill = transformers.pipeline("fill-mask", model=str(run / "hf"))
    guesses = fill("the game was [MASK] in japan .")
    assert len(guesses) == 5 and all(g["token"] < 30522 for g in guesses)
    result = ok("fill-mask", run, "the game was [MASK] in japan .")  # ours reads it too
    assert result.output.strip()


def test_a_transformers_modernbert_dir_becomes_our_model(tmp_path):
    """save_pretrained (there is no hub here) of transformers' classes: the MLM model and
    a bare encoder load into ours with equal outputs."""
    config = ModernBertConfig.preset("tiny", vocab_size=30522, cls_token_id=101, sep_token_id=102)
    hf_config = transformers.ModernBertConfig(**{k: v for k, v in config.to_hf_dict().items()
                                                 if k not in ("architectures", "dtype")})
    torch.manual_seed(1)
    theirs = transformers.ModernBertForMaskedLM(hf_config).eval()
    theirs.save_pretrained(tmp_path / "mlm")
    transformers.ModernBertModel(hf_config).save_pretrained(tmp_path / "bare")
    pre = load_pretrained(tmp_path / "mlm")
    assert pre.architecture == "ModernBertForMaskedLM" and pre.config == config
    ours = ModernBertForMaskedLM(pre.config).eval()
    assert load_into(ours, pre) == []
    ids = torch.randint(1000, 30000, (2, 300))
    mask = torch.ones_like(ids)
    mask[1, 200:] = 0
    with torch.no_grad():
        a, b = ours(ids, None, mask).mlm_logits, theirs(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=1e-5, rtol=1e-5)
    bare = load_pretrained(tmp_path / "bare")
    assert bare.architecture == "ModernBertModel" and all(k.startswith("model.") for k in bare.state_dict)
    export_hf(ours, tmp_path / "again", tokenizer=tokenizer_info(VOCAB))  # and back out
    again, info = transformers.ModernBertForMaskedLM.from_pretrained(tmp_path / "again", output_loading_info=True)
    assert not any(info.values())


def test_context_extension_from_a_short_run_onto_long_shards(run, shards, tmp_path):
    """--init-from a 128-token run onto 1,024-token FULL-SENTENCES shards: the same
    weights (RoPE has no table to grow), rows of up to 1,024 tokens, and it still learns."""
    out = tmp_path / "long"
    ok("pretrain", "--init-from", run, "--data", shards["long"], "--out", out, "--batch-size", 2, "--max-steps", 4,
       "--log-every", 2, "--no-progress", "--lr", 1e-3, "--unpad", "on")
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(out))
    assert ModernBertConfig.from_dict(state["config"]) == load_pretrained(run).config
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r.get("tokens_per_s", 0) for r in records) > 0
    refused = invoke("pretrain", "--init-from", run, "--architecture", "bert", "--data", shards["long"], "--out",
                     tmp_path / "x", "--max-steps", 2, "--no-progress")
    assert refused.exit_code != 0 and "conflicts" in refused.output


GLUE, SQUAD, NER, CHOICE = (SHARED_DATA / "glue" / "RTE", SHARED_DATA / "squad", SHARED_DATA / "ner",
                            SHARED_DATA / "multiple_choice")


def load_export(run_dir, hf_class):
    """RUN/hf as transformers' hf_class, asserting no missing, unexpected or mismatched keys."""
    theirs, info = hf_class.from_pretrained(run_dir / "hf", output_loading_info=True)
    assert not any(info.values()), info
    return theirs.eval()


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_finetune_classify_from_our_run_exports_sequence_classification(run, tmp_path, pooling):
    rte = GLUE / "train.tsv"
    if not rte.exists():
        pytest.skip("../shared/data/glue/RTE is absent")
    out = tmp_path / "rte"
    ok("finetune", "classify", "--model", run, "--train", rte, "--validation", GLUE / "dev.tsv", "--text-column",
       "sentence1", "--text-pair-column", "sentence2", "--out", out, "--max-train-examples", 64,
       "--max-eval-examples", 32, "--batch-size", 16, "--epochs", 1, "--max-seq-length", 256, "--no-progress",
       *(("--classifier-pooling", pooling) if pooling != "cls" else ()))
    theirs = load_export(out, transformers.ModernBertForSequenceClassification)
    assert theirs.config.classifier_pooling == pooling
    pre = load_pretrained(out / "hf")
    from bertmodel.model import ModernBertForSequenceClassification

    ours = ModernBertForSequenceClassification(pre.config, 2).eval()
    load_into(ours, pre)
    ids = torch.randint(1000, 30000, (3, 200))
    mask = torch.ones_like(ids)
    mask[2, 50:] = 0
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, None, mask).logits, theirs(input_ids=ids, attention_mask=mask).logits,
                                   atol=1e-5, rtol=1e-5)
    assert json.loads((out / "hf" / "config.json").read_text())["id2label"] == {"0": "entailment",
                                                                                  "1": "not_entailment"}


def test_finetune_qa_from_our_run_exports_question_answering(run, tmp_path):
    squad = SQUAD / "squad-v1.1-train-head.json"
    if not squad.exists():
        pytest.skip("../shared/data/squad is absent")
    out = tmp_path / "qa"
    ok("finetune", "qa", "--model", run, "--train", squad, "--validation", squad, "--out", out,
       "--max-train-examples", 32, "--max-eval-examples", 16, "--batch-size", 8, "--epochs", 1,
       "--max-seq-length", 512, "--doc-stride", 128, "--no-progress")
    theirs = load_export(out, transformers.ModernBertForQuestionAnswering)
    from bertmodel.model import ModernBertForQuestionAnswering

    pre = load_pretrained(out / "hf")
    ours = ModernBertForQuestionAnswering(pre.config).eval()
    load_into(ours, pre)
    ids = torch.randint(1000, 30000, (2, 500))
    mask = torch.ones_like(ids)
    mask[1, 300:] = 0
    with torch.no_grad():
        a, b = ours(ids, None, mask), theirs(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(a.start_logits, b.start_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.end_logits, b.end_logits, atol=1e-5, rtol=1e-5)
    assert "eval_f1" in (out / "metrics.jsonl").read_text()


def test_finetune_tokens_and_choice_from_a_transformers_modernbert_dir(tmp_path):
    """A transformers ModernBertForMaskedLM dir (save_pretrained, with our vocabulary) as
    --model: the encoder and the shared `head` load, the task heads start fresh, and the
    exports load as ModernBertForTokenClassification / ModernBertForMultipleChoice."""
    conll, ecare = NER / "conll2003" / "train.txt", CHOICE / "e-CARE" / "train.jsonl"
    if not conll.exists() or not ecare.exists():
        pytest.skip("../shared/data/ner or multiple_choice is absent")
    config = ModernBertConfig.preset("tiny", vocab_size=30522, cls_token_id=101, sep_token_id=102, mask_token_id=103)
    torch.manual_seed(2)
    source = tmp_path / "hf-modernbert"
    export_hf(ModernBertForMaskedLM(config), source, tokenizer=tokenizer_info(VOCAB))
    transformers.ModernBertForMaskedLM.from_pretrained(source).save_pretrained(source)  # as transformers writes it
    result = ok("finetune", "tokens", "--model", source, "--train", conll, "--validation", NER / "conll2003" /
                "valid.txt", "--out", tmp_path / "ner", "--max-train-examples", 48, "--max-eval-examples", 24,
                "--batch-size", 16, "--epochs", 1, "--no-progress")
    assert "head.*" not in result.output.split("newly initialised")[-1].split("\n")[0]  # head.dense/norm loaded
    ner, info = transformers.ModernBertForTokenClassification.from_pretrained(tmp_path / "ner" / "hf",
                                                                              output_loading_info=True)
    assert not any(info.values()) and ner.config.id2label[0] in ("O", "B-LOC", "B-MISC", "B-ORG", "B-PER")
    ok("finetune", "choice", "--model", source, "--train", ecare, "--validation", CHOICE / "e-CARE" / "dev.jsonl",
       "--context-column", "premise", "--question-column", "ask-for", "--choice-columns", "hypothesis1,hypothesis2",
       "--out", tmp_path / "choice", "--max-train-examples", 32, "--max-eval-examples", 16, "--batch-size", 8,
       "--epochs", 1, "--no-progress", "--classifier-pooling", "mean")
    mc, info = transformers.ModernBertForMultipleChoice.from_pretrained(tmp_path / "choice" / "hf",
                                                                         output_loading_info=True)
    assert not any(info.values()) and mc.config.classifier_pooling == "mean"
    ok("evaluate", tmp_path / "choice")  # our evaluate reads it back on the same architecture
    refused = invoke("finetune", "classify", "--model", VOCAB.parent / "nonexistent", "--out", tmp_path / "x")
    assert refused.exit_code != 0


def test_random_preset_of_either_architecture_and_bert_refuses_pooling(tmp_path):
    rte = GLUE / "train.tsv"
    if not rte.exists():
        pytest.skip("../shared/data/glue/RTE is absent")
    common = ("--train", rte, "--text-column", "sentence1", "--text-pair-column", "sentence2",
              "--max-train-examples", 16, "--batch-size", 8, "--epochs", 1, "--no-progress", "--tokenizer", VOCAB)
    ok("finetune", "classify", "--model", "random:tiny", "--architecture", "modernbert", "--out", tmp_path / "m",
       *common)
    assert json.loads((tmp_path / "m" / "hf" / "config.json").read_text())["architectures"] == [
        "ModernBertForSequenceClassification"]
    refused = invoke("finetune", "classify", "--model", "random:tiny", "--classifier-pooling", "mean", "--out",
                     tmp_path / "b", *common)
    assert refused.exit_code != 0 and "modernbert" in refused.output
