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
from shared_data import SHARED_DATA

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece", reason="deberta-v3-base's spm.model needs the sentencepiece extra")

TOKENIZERS = SHARED_DATA / "tokenizers"
GLUE = SHARED_DATA / "glue"
FAMILIES = ["roberta-base", "modernbert-base", "deberta-v3-base"]

if not TOKENIZERS.is_dir() or not GLUE.is_dir():
    pytest.skip(f"shared tokenizers or GLUE not found under {SHARED_DATA}", allow_module_level=True)


def reference(family: str):
    directory = TOKENIZERS / family
    if family == "deberta-v3-base":
        return transformers.DebertaV2Tokenizer.from_pretrained(directory)
    return transformers.AutoTokenizer.from_pretrained(directory)


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
