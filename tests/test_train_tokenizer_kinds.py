"""train-tokenizer --model bpe / unigram: reproducible files that transformers reads as
tokenizers does, letters of every script kept, tokens/word comparable with WordPiece's,
and one-line refusals of the options another model owns.

Byte-level BPE and Unigram are trained on one shared English Wikipedia shard (wiki_00)
and read on another (wiki_01); the script test trains on Korean petitions, Hindi GNOME
messages and the Thai and CJK lines of WikiText, and reads NSMC movie reviews.
"""
from __future__ import annotations

import gzip
import json
import os
import pathlib
import subprocess
import sys
import unicodedata

import pytest
from click.testing import CliRunner
from tokenizers import Tokenizer

from bertprep.cli import main
from bertprep.errors import BertprepError
from bertprep.tokenizer import TokenizerTrainingConfig, load_tokenizer, train_tokenizer
from shared_data import SHARED_DATA

WIKI = SHARED_DATA / "enwiki_wikiextractor"
WIKITEXT = SHARED_DATA / "wikitext-2-raw-train-head.txt"
KOREAN = SHARED_DATA / "korean"
HINDI = pathlib.Path(__file__).parent / "data" / "hindi-gnome-messages.txt.gz"
FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "training.json")
KINDS = ("bpe", "unigram")
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

needs_wiki = pytest.mark.skipif(not (WIKI / "wiki_00").is_file(), reason=f"shared data not found at {SHARED_DATA}")
# One xdist worker runs the module: its four trainings (module fixtures) are made once,
# not again on the other worker for the tests handed to it.
pytestmark = pytest.mark.xdist_group("train_tokenizer_kinds")


def _cli(*args) -> object:
    return CliRunner().invoke(main, ["train-tokenizer", *map(str, args), "--quiet"])


@pytest.fixture(scope="module", params=KINDS)
def wiki_tokdir(request, tmp_path_factory):
    if not (WIKI / "wiki_00").is_file():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    out = tmp_path_factory.mktemp(request.param) / "tok"
    result = _cli(WIKI / "wiki_00", "--out", out, "--model", request.param, "--vocab-size", 8000, "--cased")
    assert result.exit_code == 0, result.output
    return request.param, out, result.output


def _wiki_lines(name: str) -> list[str]:
    """The text lines of a WikiExtractor shard (the <doc> markup lines left out)."""
    lines = (WIKI / name).read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith(("<doc ", "</doc>"))]


# ---------------------------------------------------------------- reproducible


def _train_in_a_fresh_process(out: pathlib.Path, *options: str) -> None:
    # A new interpreter: the trainers' Rust HashMaps get new random seeds.
    command = [sys.executable, "-c", "from bertprep.cli import main; main()", "train-tokenizer",
               str(WIKI / "wiki_00"), "--out", str(out), "--quiet", *options]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "random"},
                            timeout=300)
    assert result.returncode == 0, result.stderr


def test_a_rerun_gives_byte_identical_files(wiki_tokdir, tmp_path):
    """The module's training (in this process) trained again in a fresh one: the
    cased model's files, whose normaliser has no lower-casing step (an uncased one's
    adds a deterministic one)."""
    kind, first, _ = wiki_tokdir
    _train_in_a_fresh_process(tmp_path / "again", "--model", kind, "--vocab-size", "8000", "--cased")
    assert sorted(p.name for p in first.iterdir()) == sorted(FILES)
    for name in FILES:
        assert (first / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
    tokenizer = Tokenizer.from_file(str(first / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == 8000
    assert [tokenizer.id_to_token(i) for i in range(5)] == SPECIALS


# ---------------------------------------------------------------- read as transformers reads them


def test_transformers_gives_the_ids_and_offsets_of_tokenizers_on_every_line(wiki_tokdir):
    from transformers import AutoTokenizer

    kind, out, _ = wiki_tokdir
    lines = _wiki_lines("wiki_01")
    auto = AutoTokenizer.from_pretrained(str(out))
    reference = Tokenizer.from_file(str(out / "tokenizer.json"))
    expected = reference.encode_batch(lines)
    got = auto(lines, return_offsets_mapping=True)
    assert got["input_ids"] == [e.ids for e in expected]
    assert [list(map(tuple, o)) for o in got["offset_mapping"]] == [e.offsets for e in expected]
    pairs = list(zip(lines[:400], lines[1:401]))
    expected_pairs = reference.encode_batch(pairs)
    got_pairs = auto([a for a, _ in pairs], [b for _, b in pairs], return_token_type_ids=True)
    assert got_pairs["input_ids"] == [e.ids for e in expected_pairs]
    assert got_pairs["token_type_ids"] == [e.type_ids for e in expected_pairs]
    # [CLS] A [SEP] B [SEP] with B's part of type 1, [PAD] = 0, as the WordPiece files.
    first = expected_pairs[0]
    assert first.ids[0] == 2 and first.type_ids[-1] == 1 and first.ids.count(3) == 2
    assert auto.pad_token_id == 0 and auto.mask_token_id == 4 and auto.unk_token_id == 1


def test_bertprep_loads_them_as_their_kind_with_bert_specials_and_template(wiki_tokdir):
    kind, out, _ = wiki_tokdir
    tok = load_tokenizer(out)
    assert tok.kind == kind and tok.byte_level == (kind == "bpe")
    assert tok.special.as_dict() == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert (tok.template.prefix, tok.template.middle, tok.template.suffix, tok.template.b_type) == ((2,), (3,), (3,), 1)
    assert not set(tok.ordinary_ids().tolist()) & {0, 1, 2, 3, 4}
    report = json.loads((out / "training.json").read_text(encoding="utf-8"))["report"]
    assert report["fingerprint"] == tok.fingerprint()


def test_a_literal_special_token_in_text_is_text(wiki_tokdir):
    """With the special tokens split as text (tokenizers' encode_special_tokens,
    transformers' split_special_tokens, what shards are built with), a literal "[MASK]"
    comes out as ordinary pieces, never a special id, from the files alone. The Unigram
    trainer scores its special pieces 0.0, its best: the cased model made [MASK] of it."""
    from transformers import AutoTokenizer

    kind, out, _ = wiki_tokdir
    text = "Paris [MASK] [CLS] [SEP] [PAD] [UNK]x"
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    tokenizer.encode_special_tokens = True
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert not set(ids) & {0, 1, 2, 3, 4}, ids
    auto = AutoTokenizer.from_pretrained(str(out), split_special_tokens=True)
    assert auto(text, add_special_tokens=False)["input_ids"] == ids
    assert load_tokenizer(out).text_tokenizer().encode(text, add_special_tokens=False).ids == ids


def test_mask_takes_the_space_before_it(wiki_tokdir):
    from transformers import AutoTokenizer

    kind, out, _ = wiki_tokdir
    text = "Paris is the [MASK] of France."
    ids = Tokenizer.from_file(str(out / "tokenizer.json")).encode(text).ids
    assert AutoTokenizer.from_pretrained(str(out))(text)["input_ids"] == ids
    before = Tokenizer.from_file(str(out / "tokenizer.json")).id_to_token(ids[ids.index(4) - 1])
    assert before.endswith("the"), before  # "Ġthe" / "▁the", not a lone space piece


def test_the_summary_names_the_alphabet(wiki_tokdir):
    kind, out, output = wiki_tokdir
    lines = output.splitlines()
    assert f"vocabulary: 8,000 entries (requested 8,000), alphabet " in output
    if kind == "bpe":
        assert "alphabet: the 256 bytes: every text encodes, with no [UNK]" in lines
        assert "[UNK] rate 0.0000%" in output
    else:
        assert any(line.startswith("alphabet: ") and "of the sample's character occurrences" in line for line in lines)
    assert not (out / "vocab.txt").exists()  # Google's tokenization.py would read it as WordPiece


# ---------------------------------------------------------------- tokens per word


@needs_wiki
def test_every_model_counts_tokens_per_word_over_the_same_words(tmp_path):
    """The report's words are BERT's whatever the model: WordPiece counts them from its
    own encodings' word ids, the others by splitting the text as BERT does, so the counts
    agree; and each model's tokens/word is its tokens (counted here from its files) over
    those words."""
    lines = _wiki_lines("wiki_00")[:400]
    reports = {}
    for kind in ("wordpiece", *KINDS):
        config = TokenizerTrainingConfig(model=kind, vocab_size=4000, heldout_fraction=0)
        reports[kind] = train_tokenizer([[line] for line in lines], config, tmp_path / kind, progress=False)
    words = {kind: report.heldout_words for kind, report in reports.items()}
    assert len(set(words.values())) == 1 and words["bpe"] > 10_000, words
    for kind in KINDS:
        tokenizer = Tokenizer.from_file(str(tmp_path / kind / "tokenizer.json"))
        tokens = sum(len(e.ids) for e in tokenizer.encode_batch(lines, add_special_tokens=False))
        assert reports[kind].tokens_per_word == tokens / words[kind]
    assert reports["bpe"].unk_rate == 0.0


# ---------------------------------------------------------------- scripts


def _nfc_lower(text: str) -> str:
    """What the normaliser should make of text (lower-cased, accents kept), spaces
    collapsed: computed with Python's unicodedata, not tokenizers."""
    return " ".join(unicodedata.normalize("NFC", text).lower().split())


@pytest.fixture(scope="module")
def scripts_corpus():
    if not (KOREAN / "nsmc-a.tsv").is_file() or not WIKITEXT.is_file():
        pytest.skip(f"shared Korean data not found at {KOREAN}")
    documents, size = [], 0
    with open(KOREAN / "petitions" / "petitions_2019-04", encoding="utf-8") as handle:
        for line in handle:
            documents.append([json.loads(line)["content"]])
            size += len(documents[-1][0].encode("utf-8"))
            if size >= 200_000:
                break
    hindi = gzip.open(HINDI, "rt", encoding="utf-8").read().split("\n")[:-1]
    documents += [[line] for i, line in enumerate(hindi) if i % 5]
    other = [line for line in WIKITEXT.read_text(encoding="utf-8").splitlines()
             if any("\u0e01" <= c <= "\u0e5b" or "\u3040" <= c <= "\u9fff" for c in line)]
    documents += [[line] for line in other]
    reviews = []
    with open(KOREAN / "nsmc-a.tsv", encoding="utf-8") as handle:
        next(handle)  # id, document, label
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 3 and fields[1].strip():
                reviews.append(fields[1])
    samples = {"korean": reviews[-300:], "hindi": [line for i, line in enumerate(hindi) if i % 5 == 0][:300],
               "thai and cjk": other}
    return documents, samples


@pytest.fixture(scope="module", params=KINDS)
def scripts_tokdir(request, scripts_corpus, tmp_path_factory):
    documents, samples = scripts_corpus
    out = tmp_path_factory.mktemp(request.param) / "tok"
    config = TokenizerTrainingConfig(model=request.param, vocab_size=16_000)
    report = train_tokenizer(documents, config, out, progress=False)
    return request.param, out, report, samples


def test_letters_of_every_script_survive(scripts_tokdir):
    """Hangul stays syllables (and ㅋㅋ compatibility jamo), Devanagari keeps its marks,
    Thai its vowels and tones: decoding the encoding gives the text back, lower-cased."""
    kind, out, report, samples = scripts_tokdir
    norm = report.normalisation
    assert (norm.lowercase, norm.strip_accents) == (True, False)
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    for script, lines in samples.items():
        encodings = tokenizer.encode_batch(lines, add_special_tokens=False)
        known = [(line, e) for line, e in zip(lines, encodings) if 1 not in e.ids]
        wrong = [line for line, e in known if _nfc_lower(tokenizer.decode(e.ids)) != _nfc_lower(line)]
        assert wrong == [], (script, wrong[:3])
        if script != "thai and cjk":  # reviews and messages never trained on
            assert len(known) >= 0.95 * len(lines), (script, len(known), len(lines))
    # The Thai, kana and CJK lines were trained on: none of their letters is [UNK] (the
    # coverage rule may leave out a rare other character: a full-width "３" seen once).
    unknown = [line[start:end] for line in samples["thai and cjk"]
               for token, (start, end) in zip(*_ids_and_offsets(tokenizer, line)) if token == 1]
    assert not [c for text in unknown for c in text if "\u0e01" <= c <= "\u0e5b" or "\u3040" <= c <= "\u9fff"]
    pieces = [tokenizer.decode([i]) for i in range(tokenizer.get_vocab_size())]
    assert not any("\u1100" <= c <= "\u11ff" for piece in pieces for c in piece)  # no conjoining jamo
    assert any("्" in piece for piece in pieces) and any("ं" in piece for piece in pieces)  # virama, anusvara


def _ids_and_offsets(tokenizer: Tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    encoding = tokenizer.encode(text, add_special_tokens=False)
    return encoding.ids, encoding.offsets


@pytest.mark.parametrize("scripts_tokdir", ["bpe"], indirect=True)
def test_byte_level_keeps_letters_nfkc_would_rewrite(scripts_tokdir):
    """Thai SARA AM and Hangul compatibility jamo (NFKC makes ำ into ํ + า and ㅋ into
    conjoining ᄏ), and Devanagari nukta letters: the byte-level model encodes anything, so
    its decoding shows exactly what the normaliser kept."""
    _, out, _, _ = scripts_tokdir
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    for text in ("น้ำ ทำ ค่ำ", "ㅋㅋㅋ ㅠㅠ 재밌다", "ज़िंदगी", "戦場のヴァルキュリア 中文字", "m² ﬁnal"):
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False).ids) == text.lower()


def test_transformers_agrees_on_every_script(scripts_tokdir):
    from transformers import AutoTokenizer

    kind, out, _, samples = scripts_tokdir
    lines = [line for group in samples.values() for line in group]
    reference = Tokenizer.from_file(str(out / "tokenizer.json"))
    got = AutoTokenizer.from_pretrained(str(out))(lines)["input_ids"]
    assert got == [e.ids for e in reference.encode_batch(lines)]


# ---------------------------------------------------------------- options


@pytest.mark.parametrize("args, message", [
    (("--model", "foo"), "Error: Invalid value for '--model': 'foo' is not one of 'wordpiece', 'bpe', 'unigram'."),
    (("--model", "bpe", "--max-chars-per-word", "200"),
     "Error: --max-chars-per-word: not an option of --model bpe (byte-level BPE encodes words of any length)"),
    (("--model", "bpe", "--limit-alphabet", "50"),
     "Error: --limit-alphabet: not an option of --model bpe (byte-level BPE starts from the 256 bytes, which "
     "encode any text with no [UNK])"),
    (("--model", "bpe", "--character-coverage", "0.99"), "Error: --character-coverage: not an option of --model bpe"),
    (("--model", "bpe", "--sample-alphabet"),
     "Error: --complete-scripts/--sample-alphabet: not an option of --model bpe"),
    (("--model", "unigram", "--min-frequency", "2"),
     "Error: --min-frequency: not an option of --model unigram (Unigram prunes pieces by likelihood, not by pair "
     "counts)"),
    (("--model", "unigram", "--max-chars-per-word", "100"),
     "Error: --max-chars-per-word: not an option of --model unigram (Unigram encodes words of any length)"),
])
def test_a_bad_option_is_one_line_and_writes_nothing(tmp_path, args, message):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat\non the mat\n\nthe dog ran\n", encoding="utf-8")
    result = _cli(corpus, "--out", tmp_path / "tok", *args)
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(message), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]


def test_byte_level_needs_room_for_the_bytes(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat\n", encoding="utf-8")
    result = _cli(corpus, "--out", tmp_path / "tok", "--model", "bpe", "--vocab-size", "260")
    assert result.exit_code == 1
    assert result.stderr == ("Error: --vocab-size: 260 is too small for byte-level BPE: the 5 special tokens, "
                             "0 [unused] slots and the 256 bytes take 261\n")


def test_the_library_refuses_what_the_model_does_not_use():
    with pytest.raises(BertprepError, match=r"^--limit-alphabet: not an option of --model bpe"):
        TokenizerTrainingConfig(model="bpe", limit_alphabet=50)
    with pytest.raises(BertprepError, match=r"^--min-frequency: not an option of --model unigram"):
        TokenizerTrainingConfig(model="unigram", min_frequency=3)
    with pytest.raises(BertprepError, match=r"^--model: 'foo' is not one of wordpiece, bpe, unigram"):
        TokenizerTrainingConfig(model="foo")
    # The defaults of the options a model refuses are no choice: accepted, and not recorded.
    recorded = TokenizerTrainingConfig(model="bpe").recorded()
    assert recorded["model"] == "bpe" and "max_chars_per_word" not in recorded and "limit_alphabet" not in recorded
    assert "model" not in TokenizerTrainingConfig().recorded()  # a WordPiece training.json keeps its bytes
