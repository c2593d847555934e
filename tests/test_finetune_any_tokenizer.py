"""Fine-tuning, inference and export with released tokenizers that are not BERT's
WordPiece: byte-level BPE (roberta-base, ModernBERT-base) and SentencePiece Unigram
(deberta-v3-base), on real GLUE lines.

The references are transformers' own tokenizers on the same files, independent of our
loader: `AutoTokenizer.from_pretrained(DIR)` for roberta-base and ModernBERT-base,
`DebertaV2Tokenizer.from_pretrained(DIR)` for deberta-v3-base (no config.json beside its
spm.model tells AutoTokenizer the class)."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from bertmodel.data.choice import ChoiceExamples, encode_choices
from bertmodel.data.classification import encode_texts
from bertmodel.data.shards import tokenizer_info
from shared_data import SHARED_DATA, TOKENIZERS
from shared_data import released_reference as reference

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece", reason="deberta-v3-base's spm.model needs the sentencepiece extra")

GLUE = SHARED_DATA / "glue"
FAMILIES = ["roberta-base", "modernbert-base", "deberta-v3-base"]

if not TOKENIZERS.is_dir() or not GLUE.is_dir():
    pytest.skip(f"shared tokenizers or GLUE not found under {SHARED_DATA}", allow_module_level=True)


def glue_pairs(task: str, split: str = "dev") -> tuple[list[str], list[str]]:
    """(first, second) texts of every line of a GLUE TSV (RTE: sentence1/2; MRPC: #1/#2 String)."""
    with open(GLUE / task / f"{split}.tsv", encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    columns = ("sentence1", "sentence2") if task == "RTE" else ("#1 String", "#2 String")
    return [r[columns[0]] for r in rows], [r[columns[1]] for r in rows]


def assert_rows_equal(encoded, theirs):
    for i in range(len(encoded)):
        ids, types = encoded.row(i)
        assert ids.tolist() == theirs["input_ids"][i], (i, ids.tolist(), theirs["input_ids"][i])
        assert types.tolist() == theirs["token_type_ids"][i], i


@pytest.mark.parametrize("family", FAMILIES)
def test_the_tokenizer_is_described_by_its_own_files(family):
    info, theirs = tokenizer_info(TOKENIZERS / family), reference(family)
    assert info.kind == {"deberta-v3-base": "unigram"}.get(family, "bpe")
    assert info.vocab_size == len(theirs)
    assert info.special_ids == {"pad": theirs.pad_token_id, "unk": theirs.unk_token_id, "cls": theirs.cls_token_id,
                                "sep": theirs.sep_token_id, "mask": theirs.mask_token_id}
    assert info.fingerprint == info.load().fingerprint()
    # The files a run copies load as the same tokenizer, also without the source's config.json.
    assert "tokenizer.json" in info.files and "tokenizer_config.json" in info.files
    assert tokenizer_info(info.files["tokenizer.json"].parent).same_as(info) is None


@pytest.mark.parametrize("task", ["RTE", "MRPC"])
@pytest.mark.parametrize("family", FAMILIES)
def test_pair_and_single_features_equal_transformers_on_glue(family, task):
    """ids and type ids of `tokenizer(a, b, truncation=True, max_length=L)` on every dev
    line: RoBERTa's `<s> A </s></s> B </s>` cut with 4 specials, ModernBERT's one token
    type, DeBERTa's `[CLS] A [SEP] B [SEP]` types 0/1; L = 24 cuts nearly every pair
    (often both texts), 64 some, 512 none."""
    first, second = glue_pairs(task)
    theirs_tok = reference(family)
    whole = [len(ids) for ids in theirs_tok(first, second)["input_ids"]]
    cuts = {}
    for length in (24, 64, 512):
        encoded = encode_texts(TOKENIZERS / family, first, second, length)
        theirs = theirs_tok(first, second, truncation=True, max_length=length, return_token_type_ids=True)
        assert_rows_equal(encoded, theirs)
        cuts[length] = encoded.truncated
        assert encoded.truncated == sum(n > length for n in whole)
        single = encode_texts(TOKENIZERS / family, first, None, length)
        assert_rows_equal(single, theirs_tok(first, truncation=True, max_length=length, return_token_type_ids=True))
    assert cuts[24] > len(first) * 0.9 and 0 < cuts[64] < len(first) and cuts[512] == 0  # every regime seen


@pytest.mark.parametrize("family", FAMILIES)
def test_choices_equal_transformers_pairs(family):
    """Each choice as the pair (context, choice), cut longest_first as run_swag's
    tokenizer call cuts it."""
    first, second = glue_pairs("RTE")
    contexts, choices = first[:40], [[second[i], second[i + 1], second[i + 2]] for i in range(40)]
    encoded = encode_choices(TOKENIZERS / family, ChoiceExamples(contexts, None, choices, None, "RTE", {}), 40)
    flat_first = [c for c in contexts for _ in range(3)]
    flat_second = [c for row in choices for c in row]
    theirs = reference(family)(flat_first, flat_second, truncation=True, max_length=40, return_token_type_ids=True)
    assert_rows_equal(encoded.sequences, theirs)
    assert encoded.truncated == len({i // 3 for i, ids in enumerate(
        reference(family)(flat_first, flat_second)["input_ids"]) if len(ids) > 40})
    assert np.all(encoded.sequences.lengths <= 40)


# -- models as released: tiny random weights, the real tokenizer files -----------------

# transformers' class prefix, config and the model's own special ids per family. The
# encoders are drawn with std 0.5, not 0.02: at 0.02 a tiny random encoder maps every
# text to nearly the same vector, and a comparison of predictions could not fail.
RELEASED = {"modernbert-base": ("ModernBert", dict(vocab_size=50368, hidden_size=32, intermediate_size=48,
                                                   num_hidden_layers=2, num_attention_heads=2,
                                                   max_position_embeddings=512, global_attn_every_n_layers=2,
                                                   local_attention=64, pad_token_id=50283, bos_token_id=50281,
                                                   eos_token_id=50282, cls_token_id=50281, sep_token_id=50282)),
            "roberta-base": ("Roberta", dict(vocab_size=50265, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=130,
                                             type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2))}
MASK_IDS = {"modernbert-base": 50284, "roberta-base": 50264}  # SOURCES.md


def released_model(family: str, out, tokenizer_dir=None):
    """transformers' MLM model of `family`, save_pretrained to `out` with the family's
    tokenizer files copied beside it (as a hub download holds them)."""
    import shutil

    import torch

    prefix, fields = RELEASED[family]
    config = getattr(transformers, f"{prefix}Config")(**fields, initializer_range=0.5)
    torch.manual_seed(0)
    getattr(transformers, f"{prefix}ForMaskedLM")(config).save_pretrained(out)
    source = tokenizer_dir or TOKENIZERS / family
    for path in source.iterdir():
        if path.name != "config.json":
            shutil.copyfile(path, out / path.name)
    return out


@pytest.fixture(scope="module", params=list(RELEASED))
def classified(request, tmp_path_factory):
    """(family, run) of `finetune classify` on an RTE slice from a released-layout model."""
    from finetune_fixtures import invoke

    family = request.param
    root = tmp_path_factory.mktemp(family)
    model = released_model(family, root / "model")
    run = root / "rte"
    result = invoke("finetune", "classify", "--model", model, "--train", GLUE / "RTE" / "train.tsv",
                    "--validation", GLUE / "RTE" / "dev.tsv", "--text-column", "sentence1", "--text-pair-column",
                    "sentence2", "--out", run, "--max-train-examples", 64, "--max-eval-examples", 32,
                    "--batch-size", 16, "--max-steps", 6, "--lr", 3e-3, "--max-seq-length", 64, "--no-progress",
                    "--device", "cpu", "--seed", 1)
    assert result.exit_code == 0, result.output
    return family, run


def dev_pairs(n: int = 16) -> tuple[list[str], list[str]]:
    first, second = glue_pairs("RTE")
    return first[:n], second[:n]


@pytest.mark.slow  # a fine-tuning run per family and transformers' model and pipeline: about 20 s
def test_classify_export_is_the_families_class_and_tokenizer(classified, tmp_path):
    """RUN/hf (and export-hf's copy of the run) load as transformers' ModernBert/Roberta
    ForSequenceClassification with no missing keys; AutoTokenizer on them gives our ids
    (its cls, pad and mask the family's, never BERT's 101/0/103); in float64 its logits
    equal ours."""
    import torch

    from bertmodel.hf import load_into, load_pretrained
    from bertmodel.model import head_class
    from finetune_fixtures import invoke

    family, run = classified
    prefix = RELEASED[family][0]
    exported = tmp_path / "exported"
    assert invoke("export-hf", run, exported).exit_code == 0
    first, second = dev_pairs()
    source = reference(family)
    for directory in (run / "hf", exported):
        theirs, info = transformers.AutoModelForSequenceClassification.from_pretrained(directory,
                                                                                       output_loading_info=True)
        assert type(theirs).__name__ == f"{prefix}ForSequenceClassification" and not any(info.values()), info
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        assert (tokenizer.cls_token_id, tokenizer.pad_token_id, tokenizer.mask_token_id) == (
            source.cls_token_id, source.pad_token_id, source.mask_token_id)
        assert tokenizer.model_max_length == 64  # the run's length
        batch = tokenizer(first, second, truncation=True, return_token_type_ids=True)
        assert_rows_equal(encode_texts(directory, first, second, 64), batch)
        assert batch["input_ids"] == source(first, second, truncation=True, max_length=64)["input_ids"]
    pre = load_pretrained(run / "hf")
    ours = head_class(pre.config, "classify")(pre.config, 2).eval()
    assert load_into(ours, pre) == []
    batch = tokenizer(first, second, truncation=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        mine = ours.double()(batch["input_ids"], None, batch["attention_mask"]).logits
        theirs = theirs.eval().double()(**batch).logits
    # float64 throughout for RoBERTa. transformers' ModernBERT rotates q and k in float32
    # even in a float64 model (apply_rotary_pos_emb's .float()); with a 0.5-std encoder the
    # attention scores are large, and that rounding (relative 6e-8) reaches the logits at
    # ~1e-6. The rows' logits spread over more than 0.1: either bound is far below that.
    assert mine.std(0).min() > 0.1
    torch.testing.assert_close(mine, theirs, atol={"ModernBert": 1e-5, "Roberta": 1e-9}[prefix], rtol=0)


@pytest.mark.slow  # a fine-tuning run per family and transformers' pipeline: about 15 s
def test_the_text_classification_pipeline_gives_our_predictions(classified, tmp_path):
    """`bertmodel predict` on the dev pairs and transformers' text-classification pipeline
    on the export agree on every label and probability (float32, two implementations:
    1e-5, where the probabilities spread over more than 0.1)."""
    import json

    from finetune_fixtures import invoke

    family, run = classified
    first, second = dev_pairs()
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence1\tsentence2\n" + "".join(f"{a}\t{b}\n" for a, b in zip(first, second)), encoding="utf-8")
    predicted = invoke("predict", run, "--file", dev, "--device", "cpu", "--no-progress")
    assert predicted.exit_code == 0, predicted.output
    ours = [json.loads(line) for line in predicted.stdout.splitlines()]
    classify = transformers.pipeline("text-classification", model=str(run / "hf"), device="cpu")
    theirs = classify([{"text": a, "text_pair": b} for a, b in zip(first, second)], truncation=True, top_k=None)
    assert [max(t, key=lambda s: s["score"])["label"] for t in theirs] == [o["label"] for o in ours]
    labels = sorted(ours[0]["probabilities"])
    mine = np.array([[o["probabilities"][k] for k in labels] for o in ours])
    np.testing.assert_allclose([[{s["label"]: s["score"] for s in t}[k] for k in labels] for t in theirs], mine,
                               rtol=0, atol=1e-5)
    assert np.ptp(mine[:, 0]) > 0.1


@pytest.mark.parametrize("family", list(RELEASED))
def test_fill_mask_uses_the_tokenizers_own_mask(family, tmp_path):
    """fill-mask on a released-layout MLM dir encodes the text as AutoTokenizer does (the
    mask 50284 for ModernBERT, <mask> 50264 for RoBERTa, taking the space before it) and
    its probabilities at the mask are transformers' (float32 both: rtol 1e-4)."""
    import torch

    from bertmodel.data.shards import tokenizer_info
    from bertmodel.inference.fill_mask import encode_text, fill_masks, load_tokenizer

    model = released_model(family, tmp_path / "model")
    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    text = f"The capital of France is {tokenizer.mask_token}."
    info = tokenizer_info(model)
    ids = encode_text(info, load_tokenizer(info), text)
    assert ids == tokenizer(text)["input_ids"] and ids.count(MASK_IDS[family]) == 1
    assert encode_text(info, load_tokenizer(info), "The capital of France is [MASK].") == ids  # BERT's spelling too
    guesses = fill_masks(model, [text], top_k=RELEASED[family][1]["vocab_size"])[0][0]
    mine = np.zeros(len(guesses))
    for guess in guesses:
        mine[guess.id] = guess.prob
    theirs_model = transformers.AutoModelForMaskedLM.from_pretrained(model).eval()
    with torch.no_grad():
        logits = theirs_model(input_ids=torch.tensor([ids])).logits[0, ids.index(MASK_IDS[family])]
    theirs = logits.softmax(-1).numpy()
    assert theirs.max() > 100 * np.median(theirs)  # a peaked distribution: the comparison can fail
    np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-9)


def maskless_tokenizer(out):
    """ModernBERT-base's files with the mask token gone: its added token renamed, no
    mask_token in the configs (a tokenizer some encoders are released with)."""
    import json

    out.mkdir()
    source = TOKENIZERS / "modernbert-base"
    data = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    for added in data["added_tokens"]:
        if added["content"] == "[MASK]":
            added["content"] = "[unused_mask]"
    (out / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        config = json.loads((source / name).read_text(encoding="utf-8"))
        config.pop("mask_token", None)
        for added in (config.get("added_tokens_decoder") or {}).values():
            if added["content"] == "[MASK]":
                added["content"] = "[unused_mask]"
        (out / name).write_text(json.dumps(config), encoding="utf-8")
    return out


def test_fill_mask_refuses_a_tokenizer_without_a_mask_token(tmp_path):
    from finetune_fixtures import invoke

    model = released_model("modernbert-base", tmp_path / "model", maskless_tokenizer(tmp_path / "maskless"))
    result = invoke("fill-mask", model, "The capital of France is [MASK].")
    assert result.exit_code == 1
    assert result.output == (f"Error: {model}: the tokenizer has no mask token ([MASK] / <mask>); masked language "
                             "modelling needs one\n")


def lower_cased_modernbert(out):
    """ModernBERT-base's tokenizer lower-casing its text: the same 50,368 entries, other
    tokens for the same text (another fingerprint)."""
    import json
    import shutil

    out.mkdir()
    source = TOKENIZERS / "modernbert-base"
    data = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    data["normalizer"] = {"type": "Sequence", "normalizers": [data["normalizer"], {"type": "Lowercase"}]}
    (out / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(source / name, out / name)
    return out


@pytest.mark.slow  # two shard builds and a short pre-training: about 60 s
def test_pretraining_refuses_shards_of_another_tokenizer_of_the_same_size(tmp_path):
    """A ModernBERT dir continued on shards built with its own tokenizer runs; on shards of
    a lower-casing copy (same size, other fingerprint) --init-from is refused naming both,
    and so is a resume of the first run onto them, --allow-changed-options or not."""
    from bertmodel.data.synthetic import build_corpus_shards
    from finetune_fixtures import invoke

    text = tmp_path / "wiki.txt"
    text.write_text("".join((SHARED_DATA / "wikitext-2-raw-train-head.txt").read_text(encoding="utf-8")
                            .splitlines(keepends=True)[:200]), encoding="utf-8")
    own = build_corpus_shards(text, TOKENIZERS / "modernbert-base", tmp_path / "own", dupe_factor=1,
                              max_seq_length=64, max_predictions=10, pairs="none")
    other = build_corpus_shards(text, lower_cased_modernbert(tmp_path / "lower"), tmp_path / "other", dupe_factor=1,
                                max_seq_length=64, max_predictions=10, pairs="none")
    model = released_model("modernbert-base", tmp_path / "model")
    fast = ("--init-from", model, "--batch-size", 4, "--no-progress", "--device", "cpu")
    run = tmp_path / "run"
    assert invoke("pretrain", "--data", own, "--out", run, "--max-steps", 1, *fast).exit_code == 0
    refused = invoke("pretrain", "--data", other, "--out", tmp_path / "new", "--max-steps", 1, *fast)
    assert refused.exit_code == 1 and not (tmp_path / "new").exists()
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {model}: its tokenizer is not the one {other} was built "
                                                   "with (tokenizer fingerprint "), refused.output
    # The run's export: transformers' ModernBERT MLM class with the tokenizer's own ids and a
    # length within the model's 512 positions (the tokenizer's files claim 8,192).
    assert type(transformers.AutoModelForMaskedLM.from_pretrained(run / "hf")).__name__ == "ModernBertForMaskedLM"
    exported = transformers.AutoTokenizer.from_pretrained(run / "hf")
    assert exported.model_max_length == 512 and exported.mask_token_id == 50284
    assert exported(text.read_text(encoding="utf-8")[:2000])["input_ids"] == reference("modernbert-base")(
        text.read_text(encoding="utf-8")[:2000])["input_ids"]
    for allow in ((), ("--allow-changed-options",)):
        resumed = invoke("pretrain", "--data", other, "--out", run, "--max-steps", 2, *fast, *allow)
        assert resumed.exit_code == 1
        lines = resumed.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"Error: {run / 'checkpoints' / 'step-1'}: trained with another tokenizer than {other} holds "
            "(tokenizer fingerprint "), resumed.output


@pytest.mark.slow  # two short fine-tuning runs and sentence-transformers' models: about 30 s
def test_embed_and_rerank_exports_read_texts_as_we_do(tmp_path):
    """From a RoBERTa-layout dir (4 special tokens to a pair): an embed run's export read
    by SentenceTransformer gives our embedder's vectors, and a rerank run's export read by
    CrossEncoder tokenizes each (query, passage) as our features, cut at the run's 64."""
    import json

    sentence_transformers = pytest.importorskip("sentence_transformers")
    from bertmodel.retrieval.embedder import load_embedder
    from finetune_fixtures import invoke

    model = released_model("roberta-base", tmp_path / "model")
    first, second = glue_pairs("RTE", "train")
    rows = [{"query": b, "passage": a, "label": i % 2} for i, (a, b) in enumerate(zip(first[:48], second[:48]))]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    fast = ("--batch-size", 16, "--max-steps", 2, "--no-progress", "--device", "cpu")
    rerank = invoke("finetune", "rerank", "--model", model, "--train", data, "--validation", data, "--out",
                    tmp_path / "rerank", "--max-seq-length", 64, *fast)
    assert rerank.exit_code == 0, rerank.output
    cross = sentence_transformers.CrossEncoder(str(tmp_path / "rerank" / "hf"), device="cpu")
    queries, passages = [r["query"] for r in rows], [r["passage"] for r in rows]
    theirs = cross.tokenizer(queries, passages, truncation=True, return_token_type_ids=True)
    assert_rows_equal(encode_texts(tmp_path / "rerank" / "hf", queries, passages, 64), theirs)
    assert max(len(ids) for ids in theirs["input_ids"]) == 64 and theirs["input_ids"][0][:1] == [0]

    pairs = tmp_path / "embed.jsonl"
    pairs.write_text("".join(json.dumps({"query": r["query"], "positive": r["passage"]}) + "\n" for r in rows),
                     encoding="utf-8")
    embed = invoke("finetune", "embed", "--model", model, "--train", pairs, "--out", tmp_path / "embed",
                   "--max-query-length", 32, "--max-passage-length", 64, *fast)
    assert embed.exit_code == 0, embed.output
    hf = tmp_path / "embed" / "hf"
    vectors = sentence_transformers.SentenceTransformer(str(hf), device="cpu").encode(passages[:16])
    ours = load_embedder(hf).encode_passages(passages[:16])
    # float32, two implementations of the same sums: 1e-5 on unit vectors whose rows
    # differ by far more (checked).
    np.testing.assert_allclose(vectors, ours, rtol=0, atol=1e-5)
    assert np.abs(ours[:, None] - ours[None]).max() > 0.1


@pytest.mark.slow  # a short fine-tuning run of a tiny BERT with a 128,001-entry embedding: about 15 s
@pytest.mark.parametrize("family", ["deberta-v3-base", "roberta-base"])
def test_a_bert_trained_with_another_families_tokenizer_exports_that_tokenizer(family, tmp_path):
    """--model random:tiny --tokenizer DIR: the export is a BertForSequenceClassification
    whose AutoTokenizer is the tokenizer's own class (its config.json says model_type
    bert, the tokenizer_config.json names the class) and gives our features; config.json
    pads with the tokenizer's pad id."""
    import json

    from finetune_fixtures import invoke

    run = tmp_path / "mrpc"
    result = invoke("finetune", "classify", "--model", "random:tiny", "--tokenizer", TOKENIZERS / family, "--train",
                    GLUE / "MRPC" / "train.tsv", "--text-column", "#1 String", "--text-pair-column", "#2 String",
                    "--label-column", "Quality", "--out", run, "--max-train-examples", 32, "--batch-size", 16,
                    "--max-steps", 1, "--max-seq-length", 48, "--no-progress", "--device", "cpu")
    assert result.exit_code == 0, result.output
    model = transformers.AutoModelForSequenceClassification.from_pretrained(run / "hf")
    assert type(model).__name__ == "BertForSequenceClassification"
    assert json.loads((run / "hf" / "config.json").read_text())["pad_token_id"] == reference(family).pad_token_id
    tokenizer = transformers.AutoTokenizer.from_pretrained(run / "hf")
    assert type(tokenizer).__name__ == type(reference(family)).__name__.removesuffix("Fast")
    first, second = glue_pairs("MRPC")
    assert_rows_equal(encode_texts(run / "hf", first, second, 48),
                      tokenizer(first, second, truncation=True, return_token_type_ids=True))


def test_a_model_dir_with_vocab_json_and_merges_only_brings_its_tokenizer(tmp_path):
    """A RoBERTa dir as older releases hold it (vocab.json + merges.txt, no tokenizer.json):
    the model's tokenizer is found and fill-mask encodes as roberta-base's tokenizer
    (its tokenizer.json: <mask> takes the space before it; transformers 5 building from
    vocab.json + merges.txt alone leaves that space as a token of its own)."""
    import shutil

    from bertmodel.hf import load_pretrained
    from bertmodel.inference.fill_mask import encode_text, load_tokenizer

    source = tmp_path / "files"
    source.mkdir()
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(TOKENIZERS / "roberta-base" / name, source / name)
    model = released_model("roberta-base", tmp_path / "model", source)
    info = load_pretrained(model).tokenizer
    assert info is not None and info.special_ids == {"pad": 1, "unk": 3, "cls": 0, "sep": 2, "mask": 50264}
    text = "The capital of France is <mask>."
    assert encode_text(info, load_tokenizer(info), text) == reference("roberta-base")(text)["input_ids"]
