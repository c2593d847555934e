"""Tokenizers trained with the default options on real Korean and Hindi text keep the
user's text: no conjoining jamo the text never held, few [UNK]s on text of another
register than the sample, and encode -> tokens gives back the text's characters.

Korean: trained on ~300 KB of the Blue House petitions (formal prose), measured on NSMC
movie reviews (informal: ㅋㅋ, ^^, 재밌다). Hindi: GNOME's Hindi user-interface
translations (tests/data/SOURCES.md), every fifth line held out. Under BERT-uncased's
normalisation (lower-casing stripped accents) the Korean vocabulary was learnt over
jamo: 27,796 of 30,000 entries held jamo the petitions never contained, and 1% of the
reviews' tokens spelled the review (docs/inputs.md, "Other languages").
"""
from __future__ import annotations

import gzip
import json
import pathlib
import re
import unicodedata

import pytest
from click.testing import CliRunner

from bertprep.cli import main
from bertprep.tokenizer import TokenizerTrainingConfig, load_tokenizer, train_tokenizer
from shared_data import SHARED_DATA

KOREAN = SHARED_DATA / "korean"
HINDI = pathlib.Path(__file__).parent / "data" / "hindi-gnome-messages.txt.gz"
UNK_ROWS_MAX = 0.05  # share of held-out rows holding an [UNK]
ROUND_TRIP_MIN = 0.995  # share of the others whose tokens spell the text, case aside


def _letters(text: str) -> str:
    """The text's characters, case aside, without what BERT's normaliser drops anyway
    (whitespace, control and format characters)."""
    return "".join(c.lower() for c in text if not c.isspace() and unicodedata.category(c) not in ("Cc", "Cf"))


def _measure(tok, rows: list[str]) -> tuple[float, float]:
    """(share of rows with an [UNK], share of the others whose pieces spell the row)."""
    with_unk, spelled = 0, 0
    for row, encoding in zip(rows, tok.tokenizer.encode_batch(rows, add_special_tokens=False)):
        if tok.special.unk in encoding.ids:
            with_unk += 1
            continue
        spelled += "".join(t.removeprefix("##") for t in encoding.tokens) == _letters(row)
    return with_unk / len(rows), spelled / (len(rows) - with_unk)


def _conjoining_jamo(text: str) -> set[str]:
    return {c for c in text if 0x1100 <= ord(c) <= 0x11FF}


@pytest.fixture(scope="module")
def korean(tmp_path_factory):
    if not (KOREAN / "nsmc-a.tsv").is_file():
        pytest.skip(f"shared Korean data not found at {KOREAN}")
    documents, size = [], 0
    with open(KOREAN / "petitions" / "petitions_2019-04", encoding="utf-8") as handle:
        for line in handle:
            content = json.loads(line)["content"]
            documents.append([content])
            size += len(content.encode("utf-8"))
            if size >= 300_000:
                break
    out = tmp_path_factory.mktemp("korean") / "tok"
    report = train_tokenizer(documents, TokenizerTrainingConfig(vocab_size=16_000), out, progress=False)
    rows = []
    with open(KOREAN / "nsmc-a.tsv", encoding="utf-8") as handle:
        next(handle)  # id, document, label
        for line in handle:
            fields = line.rstrip("\n").split("\t")  # NSMC is read with quoting off
            if len(fields) == 3 and fields[1].strip():
                rows.append(fields[1])
    return report, load_tokenizer(out), out, "".join(d[0] for d in documents), rows[-1000:]


def test_korean_defaults_keep_syllables_and_encode_informal_reviews(korean):
    report, tok, _, training_text, reviews = korean
    norm = report.normalisation
    assert (norm.lowercase, norm.strip_accents, norm.chosen_by) == (True, False, "auto")
    assert next(iter(norm.scripts)) == "Hangul" and norm.scripts["Hangul"] > 0.95
    contained = _conjoining_jamo(training_text)
    unseen = [t for t in tok.vocab if _conjoining_jamo(t) - contained]
    assert unseen == []
    assert report.alphabet_completed.get("Hangul", 0) > 0  # the KS X 1001 syllables the petitions lack
    unk_rows, spelled = _measure(tok, reviews)
    assert unk_rows <= UNK_ROWS_MAX, unk_rows
    assert spelled >= ROUND_TRIP_MIN, spelled


@pytest.mark.slow  # ~8 s: transformers builds two tokenizers of 16,000 entries
def test_korean_tokenizer_gives_the_same_ids_in_transformers(korean):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, BertTokenizer

    _, tok, out, _, reviews = korean
    # transformers' BertTokenizer cuts words at 100 characters (files.py): rows with
    # longer "words" are left to tokenizers.
    rows = [r for r in reviews[:300] if max(map(len, r.split())) <= 100]
    expected = [e.ids for e in tok.tokenizer.encode_batch(rows, add_special_tokens=False)]
    auto = AutoTokenizer.from_pretrained(str(out))
    bert = BertTokenizer(vocab=str(out / "vocab.txt"), do_lower_case=True, strip_accents=False)
    from_file = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert [auto(r, add_special_tokens=False)["input_ids"] for r in rows] == expected
    assert [bert(r, add_special_tokens=False)["input_ids"] for r in rows] == expected
    assert [e.ids for e in from_file.encode_batch(rows, add_special_tokens=False)] == expected


def test_hindi_defaults_keep_devanagari_marks(tmp_path):
    lines = gzip.open(HINDI, "rt", encoding="utf-8").read().split("\n")[:-1]
    train = [[line] for i, line in enumerate(lines) if i % 5]
    heldout = [line for i, line in enumerate(lines) if i % 5 == 0]
    report = train_tokenizer(train, TokenizerTrainingConfig(vocab_size=4_000), tmp_path / "tok", progress=False)
    norm = report.normalisation
    assert (norm.strip_accents, next(iter(norm.scripts))) == (False, "Devanagari")
    tok = load_tokenizer(tmp_path / "tok")
    assert {"्", "##्", "ं", "##ं"} <= set(tok.vocab)  # virama and anusvara: letters, kept
    unk_rows, spelled = _measure(tok, heldout)
    assert unk_rows <= UNK_ROWS_MAX, unk_rows
    assert spelled >= ROUND_TRIP_MIN, spelled


def _train_one_file(out, vocab_size: int) -> str:
    """`bertprep train-tokenizer` on one petitions file (1.8 MB), as docs/inputs.md's recipe
    reads them; the alphabet line it prints."""
    result = CliRunner().invoke(main, ["train-tokenizer", str(KOREAN / "petitions" / "petitions_2017-08"),
                                       "--text-field", "content", "--sentences", "split", "--out", str(out),
                                       "--vocab-size", str(vocab_size), "--no-progress"])
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if line.startswith("alphabet: "))


def test_a_sample_too_small_for_hangul_names_the_vocabulary_it_needs(tmp_path):
    """One petitions file keeps fewer syllables than the four: the 2,350 of KS X 1001 do
    not fit in a quarter of 10,000 entries, and 재밌다 is [UNK]. The message names the
    size this sample needs; one entry less still leaves Hangul out, that size takes it in."""
    if not (KOREAN / "petitions" / "petitions_2017-08").is_file():
        pytest.skip(f"shared Korean data not found at {KOREAN}")
    line = _train_one_file(tmp_path / "small", 10_000)
    named = re.search(r"no room for the repertoire of Hangul: it needs --vocab-size >= ([\d,]+) for this sample",
                      line)
    assert named, line
    needed = int(named.group(1).replace(",", ""))
    assert needed > 10_000
    assert "[UNK]" in load_tokenizer(tmp_path / "small").tokenizer.encode("재밌다").tokens
    assert f"it needs --vocab-size >= {needed:,}" in _train_one_file(tmp_path / "one-less", needed - 1)
    line = _train_one_file(tmp_path / "enough", needed)
    assert "no room" not in line and re.search(r"added: .*[\d,]+ Hangul", line), line
    tok = load_tokenizer(tmp_path / "enough")
    assert tok.tokenizer.encode("재밌다", add_special_tokens=False).tokens == ["재", "##밌", "##다"]
    assert {"재", "밌", "다"} <= set(tok.vocab) and {"##밌", "##다"} <= set(tok.vocab)
