"""Pre-training from scratch on shards of a released tokenizer (byte-level BPE,
SentencePiece Unigram), as a user runs it: `bertprep build-shards --tokenizer DIR`, then
`bertmodel pretrain --architecture bert|roberta|modernbert`; the vocabulary size and the
special ids come from the shards' tokenizer, the export loads in transformers with that
tokenizer, and fill-mask reads the model's guesses with the tokenizer's own mask."""
from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from bertmodel.cli import main as bertmodel_main
from bertmodel.inference.fill_mask import fill_masks
from bertprep.cli import main as bertprep_main
from shared_data import SHARED_DATA, released_reference

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

TOKENIZERS = SHARED_DATA / "tokenizers"
TEXT = SHARED_DATA / "google_sample_text.txt"
if not (TOKENIZERS.is_dir() and TEXT.is_file()):
    pytest.skip(f"shared tokenizer files or sample text not found under {SHARED_DATA}", allow_module_level=True)

HF_CLASSES = {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM", "modernbert": "ModernBertForMaskedLM"}


def invoke(main, *args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def build(tmp_path, family, *options):
    out = tmp_path / f"shards-{family}"
    result = invoke(bertprep_main, "build-shards", TEXT, "--tokenizer", TOKENIZERS / family, "--out", out,
                    "--max-seq-length", 64, "--dupe-factor", 2, "--no-progress", *options)
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("family, architecture", [("roberta-base", "roberta"), ("modernbert-base", "modernbert"),
                                                  ("deberta-v3-base", "bert")])
def test_pretrain_on_released_tokenizer_shards_exports_what_transformers_loads(family, architecture, tmp_path):
    pytest.importorskip("sentencepiece")
    shards = build(tmp_path, family, "--pairs", "none" if architecture != "bert" else "nsp")
    run = tmp_path / "run"
    result = invoke(bertmodel_main, "pretrain", "--data", shards, "--out", run, "--architecture", architecture,
                    "--preset", "tiny", "--batch-size", 4, "--max-steps", 3, "--no-progress")
    assert result.exit_code == 0, result.output
    reference = released_reference(family)
    config = json.loads((run / "hf" / "config.json").read_text())
    assert config["vocab_size"] == len(reference)  # 50265, 50368, 128001: the tokenizer's, not BERT's 30522
    assert config["pad_token_id"] == reference.pad_token_id
    model = getattr(transformers, HF_CLASSES[architecture]).from_pretrained(run / "hf")
    exported = transformers.AutoTokenizer.from_pretrained(run / "hf")
    text = "The man went to the store to buy a gallon of milk."
    assert exported(text)["input_ids"] == reference(text)["input_ids"]
    assert exported.mask_token_id == reference.mask_token_id

    masked = f"The man went to the {reference.mask_token} to buy milk."
    guesses, = fill_masks(run, [masked], top_k=3)
    encoded = exported(masked, return_tensors="pt")
    model.eval()
    with torch.no_grad():
        logits = model(**{k: v for k, v in encoded.items() if k != "token_type_ids"}).logits[0].double()
    at = encoded["input_ids"][0].tolist().index(reference.mask_token_id)
    top = torch.softmax(logits[at], -1).topk(3)
    assert len(guesses) == 1  # one mask
    assert [g.id for g in guesses[0]] == top.indices.tolist()
    # Float64 softmax of transformers' fp32 logits against ours: fp32 rounding of a
    # tiny model's logits (|logit| < 10) moves a probability by far less than 1e-4.
    assert [g.prob for g in guesses[0]] == pytest.approx(top.values.tolist(), abs=1e-4)


def test_dynamic_whole_word_masks_of_a_bpe_tokenizer_are_refused_in_one_line(tmp_path):
    shards = build(tmp_path, "roberta-base", "--pairs", "none", "--whole-word-mask")
    result = invoke(bertmodel_main, "pretrain", "--data", shards, "--out", tmp_path / "run", "--architecture",
                    "roberta", "--preset", "tiny", "--batch-size", 4, "--max-steps", 2, "--masking", "dynamic",
                    "--no-progress")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"Error: {shards}: whole-word masks of a bpe tokenizer need each token's word, which shards do not keep; "
        "train on the shards' own masks (--masking static)")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_dynamic_masks_of_a_roberta_tokenizer_never_cover_its_template(tmp_path):
    """RoBERTa's template is <s> A </s></s> B </s>: ids 0 and 2, not BERT's [CLS]/[SEP]."""
    from bertmodel.data import ShardDataset
    from bertmodel.data.shards import open_shard_dir
    from bertmodel.data.recipes import DynamicMasking, masking_vocabulary
    from bertprep.instances.masking import MaskingConfig
    import numpy as np

    shards = ShardDataset([open_shard_dir(build(tmp_path, "roberta-base", "--pairs", "nsp"))])
    dynamic = DynamicMasking(shards, 0, MaskingConfig(20, 0.5, False, False), masking_vocabulary(shards.tokenizer))
    batch = dynamic.collate_at(np.arange(len(shards)), None, 0, 0)
    labels = batch["masked_lm_labels"]
    real = labels != -100
    masked_originals = labels[real]
    assert real.sum() > 100
    assert not np.isin(masked_originals, [0, 1, 2]).any()  # <s>, <pad>, </s> never chosen
    ids = batch["input_ids"]
    assert (ids[:, 0] == 0).all()  # every row still starts with <s>
