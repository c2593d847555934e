"""Released tokenizers (byte-level BPE, SentencePiece Unigram) read by bertprep encode
exactly as transformers' own tokenizer on the same files: ids, single and pair templates,
type ids and offsets, on every line of the shared English corpora and the Korean NSMC
file, and `bertprep encode --ids --special` prints the same ids.

The references are independent of our loader: `AutoTokenizer.from_pretrained(DIR)` for
roberta-base (its config.json says RobertaTokenizer) and ModernBERT-base,
`DebertaV2Tokenizer.from_pretrained(DIR)` for deberta-v3-base (no config.json is kept
beside its spm.model, so AutoTokenizer cannot tell the class; transformers converts the
SentencePiece model itself)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from bertprep.cli import main
from bertprep.errors import BertprepError
from bertprep.tokenizer import ReleasedTokenizer, load_tokenizer
from shared_data import SHARED_DATA
from shared_data import released_reference as reference

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece", reason="deberta-v3-base's spm.model needs the sentencepiece extra")

TOKENIZERS = SHARED_DATA / "tokenizers"
ENGLISH = [SHARED_DATA / "google_sample_text.txt", SHARED_DATA / "wikitext-2-raw-train-head.txt",
           *sorted((SHARED_DATA / "enwiki_wikiextractor").glob("wiki_*"))]
KOREAN = SHARED_DATA / "korean" / "nsmc-a.tsv"
FAMILIES = ["roberta-base", "modernbert-base", "deberta-v3-base"]
EXPECTED_SPECIALS = {  # SOURCES.md of the tokenizer files
    "roberta-base": dict(cls=0, pad=1, sep=2, unk=3, mask=50264),
    "modernbert-base": dict(cls=50281, sep=50282, pad=50283, unk=50280, mask=50284),
    "deberta-v3-base": dict(pad=0, cls=1, sep=2, unk=3, mask=128000),
}

if not TOKENIZERS.is_dir():
    pytest.skip(f"shared tokenizer files not found at {TOKENIZERS}", allow_module_level=True)


def corpus_lines() -> list[str]:
    lines = []
    for path in ENGLISH:
        lines += path.read_text(encoding="utf-8").split("\n")
    lines += KOREAN.read_text(encoding="utf-8").split("\n")
    return lines


@pytest.fixture(scope="module")
def lines():
    missing = [p for p in (*ENGLISH, KOREAN) if not p.is_file()]
    if missing:
        pytest.skip(f"shared corpus not found: {missing[0]}")
    return corpus_lines()


@pytest.mark.parametrize("family", FAMILIES)
def test_special_ids_come_from_the_files(family):
    tok = load_tokenizer(TOKENIZERS / family)
    assert isinstance(tok, ReleasedTokenizer)
    assert tok.special.as_dict() == EXPECTED_SPECIALS[family]
    theirs = reference(family)
    assert (tok.special.cls, tok.special.sep, tok.special.pad, tok.special.mask) == (
        theirs.cls_token_id, theirs.sep_token_id, theirs.pad_token_id, theirs.mask_token_id)
    ordinary = set(tok.ordinary_ids().tolist())
    assert not ordinary & set(theirs.all_special_ids)
    assert len(ordinary) == len([t for t in tok.vocab if t is not None]) - len(
        {i for i, added in tok.tokenizer.get_added_tokens_decoder().items() if added.special}
        | set(theirs.all_special_ids))


def differing(ours, theirs) -> list[int]:
    """Indices where our encodings' ids, offsets or type ids differ from transformers' batch."""
    return [i for i, encoding in enumerate(ours)
            if (encoding.ids, encoding.offsets, encoding.type_ids) != (
                theirs["input_ids"][i], [tuple(o) for o in theirs["offset_mapping"][i]], theirs["token_type_ids"][i])]


@pytest.mark.parametrize("family", FAMILIES)
def test_ids_templates_and_offsets_equal_transformers_on_every_line(family, lines):
    """Every line in one pair, as A or as B (an odd count's last line with the first):
    each line's ids and offsets, the pair template and its type ids. Both sides encode
    each sequence of a pair alone and the post-processor only puts the template's tokens
    around it, so a line's pieces and offsets are the ones it has alone: the single
    template is checked on every 16th line (2,260 lines from every file) rather than
    encoding every line a second time."""
    tok = load_tokenizer(TOKENIZERS / family)
    theirs = reference(family)
    assert len(lines) > 36_000
    firsts, seconds = lines[0::2], lines[1::2] + lines[:len(lines) % 2]
    pairs = theirs(firsts, seconds, return_offsets_mapping=True, return_token_type_ids=True)
    differences = differing(tok.tokenizer.encode_batch(list(zip(firsts, seconds))), pairs)
    assert differences == [], f"{len(differences)} pairs differ, first at line {2 * differences[0]}"

    sample = lines[::16]
    singles = theirs(sample, return_offsets_mapping=True, return_token_type_ids=True)
    ours = tok.tokenizer.encode_batch(sample)
    differences = differing(ours, singles)
    assert differences == [], f"{len(differences)} of {len(sample)} lines differ, first {sample[differences[0]]!r}"
    assert ours[0].ids[:len(tok.template.prefix)] == list(tok.template.prefix)


def test_roberta_pair_template_is_its_own(lines):
    tok = load_tokenizer(TOKENIZERS / "roberta-base")
    assert tok.template.pair_ids([10], [20]) == [0, 10, 2, 2, 20, 2]
    assert tok.template.one_type and tok.template.pair_specials == 4
    deberta = load_tokenizer(TOKENIZERS / "deberta-v3-base")
    assert deberta.template.pair_ids([10], [20]) == [1, 10, 2, 20, 2]
    assert deberta.template.pair_type_ids(1, 1).tolist() == [0, 0, 0, 1, 1]


def printed_ids(family: str, options: list[str], lines: list[str]) -> list[list[int]]:
    """What `bertprep encode --tokenizer DIR --ids --special [OPTIONS]` prints for the
    lines on its stdin, as integers. In this process (CliRunner): a Python start-up and
    the imports of a subprocess would cost more than the encoding."""
    result = CliRunner().invoke(main, ["encode", "--tokenizer", str(TOKENIZERS / family), "--ids", "--special",
                                       *options], input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    return [[int(i) for i in line.split()] for line in result.stdout.splitlines()]


@pytest.mark.parametrize("family", FAMILIES)
def test_encode_command_prints_transformers_ids(family):
    """`bertprep encode --ids --special` (one text per line) and `--pair` (A tab B)
    against transformers, on the sample text and a slice of NSMC (Hangul, emoticons)."""
    texts = [line for line in (SHARED_DATA / "google_sample_text.txt").read_text(encoding="utf-8").split("\n")]
    texts += KOREAN.read_text(encoding="utf-8").split("\n")[1:200]
    texts = [t.replace("\t", " ") for t in texts]
    theirs = reference(family)
    assert printed_ids(family, [], texts) == theirs(texts)["input_ids"]
    pairs = [f"{a}\t{b}" for a, b in zip(texts[:-1], texts[1:])]
    assert printed_ids(family, ["--pair"], pairs) == theirs(texts[:-1], texts[1:])["input_ids"]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_copy_loads_in_transformers_with_equal_ids_and_the_same_fingerprint(family, tmp_path, lines):
    tok = load_tokenizer(TOKENIZERS / family)
    tok.save(tmp_path / "copy")
    again = load_tokenizer(tmp_path / "copy")
    assert again.fingerprint() == tok.fingerprint() and again.special == tok.special
    auto = transformers.AutoTokenizer.from_pretrained(tmp_path / "copy")  # no config.json beside it
    sample = lines[:3000]
    assert auto(sample)["input_ids"] == [e.ids for e in tok.tokenizer.encode_batch(sample)]
    assert auto.mask_token_id == tok.special.mask


def test_pre_split_words_follow_transformers_add_prefix_space_recipe():
    """`encode_words`: RoBERTa's NER recipe, `add_prefix_space=True` with
    `is_split_into_words=True`: every word carries its leading space (Ġ)."""
    tok = load_tokenizer(TOKENIZERS / "roberta-base")
    theirs = transformers.AutoTokenizer.from_pretrained(TOKENIZERS / "roberta-base", add_prefix_space=True)
    words = "EU rejects German call to boycott British lamb .".split()
    expected = theirs(words, is_split_into_words=True)
    ours = tok.encode_words(words)
    assert ours.ids == expected["input_ids"] and ours.word_ids == expected.word_ids()
    assert ours.tokens[1] == "ĠEU"


def test_released_tokenizer_errors_are_one_line(tmp_path):
    source = json.loads((TOKENIZERS / "modernbert-base" / "tokenizer.json").read_text(encoding="utf-8"))
    source["post_processor"] = None
    (tmp_path / "tokenizer.json").write_text(json.dumps(source), encoding="utf-8")
    with pytest.raises(BertprepError) as excinfo:
        load_tokenizer(tmp_path)
    assert str(excinfo.value) == (f"{tmp_path / 'tokenizer.json'}: the post-processor puts no special token "
                                  f"between A and B; a pair needs a separator (a tokenizer.json with a BERT- or "
                                  f"RoBERTa-style template)")
    with pytest.raises(BertprepError, match="lowercase applies to WordPiece tokenizers only"):
        load_tokenizer(TOKENIZERS / "roberta-base", lowercase=True)


def test_no_mask_token_is_reported_when_masking_needs_it(tmp_path):
    source = json.loads((TOKENIZERS / "roberta-base" / "tokenizer.json").read_text(encoding="utf-8"))
    source["added_tokens"] = [t for t in source["added_tokens"] if t["content"] != "<mask>"]
    del source["model"]["vocab"]["<mask>"]
    (tmp_path / "tokenizer.json").write_text(json.dumps(source), encoding="utf-8")
    tok = load_tokenizer(tmp_path)
    assert tok.special.mask is None
    with pytest.raises(BertprepError) as excinfo:
        tok.require_mask(str(tmp_path))
    assert str(excinfo.value).startswith(f"{tmp_path}: the tokenizer has no mask token")


@pytest.mark.parametrize("model, cased", [("bpe", False), ("unigram", False), ("bpe", True)])
def test_a_trained_subword_model_loads_with_its_casing(model, cased, tmp_path):
    """train-tokenizer's BPE and Unigram files normalise with a BertNormalizer (inside a
    Sequence): the loader reads its switches, so inspect and manifests say uncased."""
    out = tmp_path / "tok"
    subprocess.run([sys.executable, "-m", "bertprep", "train-tokenizer", str(SHARED_DATA / "google_sample_text.txt"),
                    "--out", str(out), "--model", model, "--vocab-size", "600", "--no-progress",
                    "--cased" if cased else "--lowercase"], capture_output=True, text=True, check=True)
    tok = load_tokenizer(out)
    assert (tok.kind, tok.lowercase) == (model, not cased)
    same = tok.tokenizer.encode("The WORLD").ids == tok.tokenizer.encode("the world").ids
    assert same is (not cased)


def test_a_sentencepiece_model_without_the_package_names_the_extra(monkeypatch, tmp_path):
    """A machine without sentencepiece (a fault this one cannot have, hence the stand-in
    import failure): one line naming the file and the extra to install; no output."""
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # `import sentencepiece` raises ImportError
    result = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['sentencepiece'] = None; from bertprep.cli import main; "
                               "main(['build-shards', sys.argv[1], '--tokenizer', sys.argv[2], '--out', sys.argv[3]])",
         str(SHARED_DATA / "google_sample_text.txt"), str(TOKENIZERS / "deberta-v3-base"), str(tmp_path / "out")],
        capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip() == (f"Error: {TOKENIZERS / 'deberta-v3-base' / 'spm.model'}: a SentencePiece model; "
                                     "reading it needs the sentencepiece package (pip install "
                                     "'bertprep[sentencepiece]')")
    assert not (tmp_path / "out").exists()
    with pytest.raises(BertprepError, match=r"needs the sentencepiece package"):
        load_tokenizer(TOKENIZERS / "deberta-v3-base")
