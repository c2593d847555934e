"""Normalisation per script: accent stripping is separate from lower-casing, chosen from
the sample (auto) and carried by every loader; text of any script round-trips.

BERT-uncased's accent stripping (NFD, delete Mn) turns Hangul into conjoining jamo and
deletes letters of Devanagari, Thai and Arabic; these tests fail on a tokenizer that
strips whenever it lower-cases.
"""
from __future__ import annotations

import json
import random
import re
import unicodedata

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertprep.cli import main
from bertprep.tokenizer import (TokenizerTrainingConfig, build_tokenizer, choose_normalisation, load_tokenizer,
                                resolve_strip_accents, script_of, train_tokenizer)
from bertprep.tokenizer.scripts import bert_normalizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _chars(low: int, high: int) -> list[str]:
    return [chr(cp) for cp in range(low, high + 1) if unicodedata.category(chr(cp))[0] in "LMN"]


# Real scripts, as the strategies below draw them (assigned letters, marks and digits).
SCRIPTS = {
    "hangul": _chars(0xAC00, 0xAC00 + 1500),  # syllables (a slice: the vocabulary stays small)
    "compat_jamo": _chars(0x3131, 0x318E),  # ㅋㅋ, ㅠㅠ
    "devanagari": _chars(0x0900, 0x097F),
    "thai": _chars(0x0E01, 0x0E5B),
    "arabic": _chars(0x0621, 0x065F),
    "cjk": _chars(0x4E00, 0x4E00 + 800),
    "cyrillic": _chars(0x0400, 0x045F) + ["\u0301"],  # with accented letters and the stress mark
    "emoji": [chr(cp) for cp in range(0x1F600, 0x1F650)] + ["\u2764\ufe0f", "\U0001F44D\U0001F3FD"],
}
ALL = sorted({ch for chars in SCRIPTS.values() for ch in chars} | set("abcdefghijklmnopqrstuvwxyz.,!?"))


def _script_vocab(lowercase: bool, strip_accents: bool) -> list[str]:
    """Every character the strategies can draw, normalised, as a piece and a "##" piece,
    plus bigram pieces (so words split into longer tokens too)."""
    norm = bert_normalizer(lowercase, strip_accents)
    pieces = sorted({c for ch in ALL for c in norm.normalize_str(ch) if not c.isspace()})
    rng = random.Random(0)
    bigrams = sorted({rng.choice(pieces) + rng.choice(pieces) for _ in range(3000)})
    vocab = SPECIALS + pieces + ["##" + p for p in pieces] + bigrams + ["##" + b for b in bigrams]
    return list(dict.fromkeys(vocab))


TOKENIZERS = {strip: build_tokenizer(_script_vocab(True, strip), True, strip_accents=strip)
              for strip in (False, True)}

word = st.one_of(*(st.lists(st.sampled_from(chars), min_size=1, max_size=12).map("".join)
                   for chars in SCRIPTS.values()))
text_strategy = st.lists(st.tuples(word, st.sampled_from([" ", "  ", "\t", "\n", ""])), min_size=1, max_size=20) \
    .map(lambda parts: "".join(w + sep for w, sep in parts))


def _lower_letters(text: str) -> str:
    """The user's characters, case aside (per character, as the normaliser lower-cases),
    without what BERT's normaliser removes anyway: whitespace and control/format
    characters (the emoji ZWJ is one)."""
    return "".join(c.lower() for c in text if not c.isspace() and unicodedata.category(c) not in ("Cc", "Cf"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text_strategy)
def test_text_of_real_scripts_round_trips(text):
    norm = choose_normalisation(_counts(text), lowercase=True, strip_accents=None)
    tok = TOKENIZERS[norm.strip_accents]
    encoding = tok.tokenizer.encode(text, add_special_tokens=False)
    normalised = tok.tokenizer.normalizer.normalize_str(text)
    if tok.special.unk not in encoding.ids:
        pieces = "".join(t[2:] if t.startswith("##") else t for t in encoding.tokens)
        assert pieces == "".join(c for c in normalised if not c.isspace())
        # Offsets index the user's text: what NER entities and QA answers are cut from.
        for token, (start, end) in zip(encoding.tokens, encoding.offsets):
            source = tok.tokenizer.normalizer.normalize_str(text[start:end])
            assert source.replace(" ", "") == token.removeprefix("##"), (token, text[start:end])
    # Under the defaults a text holding any Hangul, Devanagari, Thai, Arabic or CJK keeps
    # its letters, case aside; only (almost) all-Latin/Greek/Cyrillic text may lose accents.
    if not norm.strip_accents:
        assert "".join(c for c in normalised if not c.isspace()) == _lower_letters(text)
    else:
        letters = sum(norm.scripts.values())
        # The shares are each a count / letters; their float sum may land a few ulps under
        # an exact 99% that auto (one division of counts) accepts, hence the 1e-12.
        assert letters == 0 or sum(norm.scripts.get(s, 0) for s in ("Latin", "Greek", "Cyrillic")) >= 0.99 - 1e-12


def _counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    return counts


@pytest.mark.parametrize("text", ["마스크 착용", "ㅋㅋㅋ 재밌다", "सभी मनुष्यों को", "มนุษย์ทั้งหลาย", "أحراراً متساوين",
                                  "Tất cả mọi người"])
def test_defaults_keep_the_letters_of_scripts_whose_marks_are_letters(text):
    norm = choose_normalisation(_counts(text * 10), lowercase=True, strip_accents=None)
    assert norm.strip_accents is False and norm.lowercase is True
    normalised = bert_normalizer(norm.lowercase, norm.strip_accents).normalize_str(text)
    assert normalised == text.lower()
    # BERT-uncased's stripping would not keep them (what the default used to be).
    assert bert_normalizer(True, True).normalize_str(text) != text.lower()


def test_auto_strips_english_as_bert_uncased_and_says_why():
    english = _counts("The naïve owner of the small shop met the people of the old town on a Sunday morning, "
                      "and they talked about the weather for an hour. " * 20)
    norm = choose_normalisation(english, lowercase=True, strip_accents=None)
    assert (norm.strip_accents, norm.chosen_by, norm.google_compatible) == (True, "auto", True)
    assert norm.describe() == "lower-case, strip accents (auto: 100.0% of the letters are Latin, Greek or Cyrillic)"
    assert norm.describe_scripts() == "Latin 100.0%" and norm.warnings == []
    assert choose_normalisation(english, lowercase=False, strip_accents=None).strip_accents is False


def test_forced_stripping_of_hangul_is_warned_in_one_line_naming_script_and_option():
    korean = _counts("마스크 착용 의무화를 청원합니다 " * 30 + "OK")
    norm = choose_normalisation(korean, lowercase=True, strip_accents=True)
    assert norm.strip_accents is True and norm.chosen_by == "option"
    [warning] = norm.warnings
    assert "\n" not in warning and "Hangul" in warning and "--no-strip-accents" in warning
    assert warning.startswith("accent stripping (--strip-accents) changes letters beyond case: it alters 100.0% "
                              "of the Hangul characters of the training sample")
    assert "(U+1102 U+1175)" in warning  # 니 becomes two conjoining jamo
    kept = choose_normalisation(korean, lowercase=True, strip_accents=None)
    assert kept.strip_accents is False and kept.warnings == []
    hangul = 14 * 30  # syllables; "OK" adds 2 Latin letters
    assert kept.describe_scripts() == f"Hangul {hangul / (hangul + 2):.1%}, Latin {2 / (hangul + 2):.1%}"
    assert kept.summary_lines()[2].startswith("note: Google's tokenization.py cannot reproduce lower-casing "
                                              "without accent stripping")


def test_script_names():
    assert [script_of(c) for c in "a마ㅋ一कกاЖΩ"] == ["Latin", "Hangul", "Hangul", "CJK", "Devanagari", "Thai",
                                                   "Arabic", "Cyrillic", "Greek"]
    assert [script_of(c) for c in "７\u0301😀 ,"] == [None, "Inherited", None, None, None]
    assert script_of("Ａ") == "Latin" and script_of("ｶ") == "Katakana"  # fullwidth and halfwidth forms


def test_strip_accents_is_written_and_read_back_by_every_loader(tmp_path):
    from transformers import AutoTokenizer, BertTokenizer

    texts = ["마스크 착용 ㅋㅋ 재밌다", "सभी मनुष्यों को गौरव", "Café ÉTÉ naïve", "一二三 Привет мир 😀",
             "มนุษย์ทั้งหลาย", "أحراراً"]
    vocab = _script_vocab(True, False) + sorted({c for t in texts for c in t.lower() if not c.isspace()}
                                                 - set(_script_vocab(True, False)))
    vocab = list(dict.fromkeys(vocab + ["##" + t for t in vocab if len(t) == 1 and not t.startswith("#")]))
    tok = build_tokenizer(vocab, lowercase=True, strip_accents=False)
    tok.save(tmp_path / "tok")
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert (config["do_lower_case"], config["strip_accents"]) == (True, False)
    assert json.loads((tmp_path / "tok" / "tokenizer.json").read_text())["normalizer"]["strip_accents"] is False
    again = load_tokenizer(tmp_path / "tok")
    assert (again.lowercase, again.strip_accents) == (True, False) and again.fingerprint() == tok.fingerprint()
    from tokenizers import Tokenizer

    auto = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    bert = BertTokenizer(vocab=str(tmp_path / "tok" / "vocab.txt"), do_lower_case=True, strip_accents=False)
    from_file = Tokenizer.from_file(str(tmp_path / "tok" / "tokenizer.json"))
    engines = {
        "bertprep": lambda t: again.tokenizer.encode(t, add_special_tokens=False).ids,
        "AutoTokenizer": lambda t: auto(t, add_special_tokens=False)["input_ids"],
        "BertTokenizer(vocab=...)": lambda t: bert(t, add_special_tokens=False)["input_ids"],
        "Tokenizer.from_file": lambda t: from_file.encode(t, add_special_tokens=False).ids,
    }
    expected = [engines["bertprep"](t) for t in texts]
    assert all(tok.special.unk not in ids for ids in expected)
    for name, encode in engines.items():
        assert [encode(t) for t in texts] == expected, name
    # Hangul stays syllables: the pieces are the user's text, case aside.
    assert again.tokenizer.encode("마스크", add_special_tokens=False).tokens[0] == "마"


def test_fingerprint_of_bert_convention_is_unchanged_and_strip_counts():
    vocab = SPECIALS + ["a", "##b"]
    uncased = build_tokenizer(vocab, True)
    assert uncased.strip_accents is True and build_tokenizer(vocab, False).strip_accents is False
    payload = json.dumps(["bertprep-tokenizer/1", True, 200, vocab], ensure_ascii=False, separators=(",", ":"))
    import hashlib

    assert uncased.fingerprint() == hashlib.sha256(payload.encode()).hexdigest()
    kept = build_tokenizer(vocab, True, strip_accents=False)
    assert kept.fingerprint() != uncased.fingerprint()


def test_overriding_casing_moves_stripping_only_where_it_followed():
    assert resolve_strip_accents(True, None, lowercase=False) is False  # BERT-uncased files read --cased
    assert resolve_strip_accents(True, True, lowercase=False) is False
    assert resolve_strip_accents(True, False, lowercase=False) is False
    assert resolve_strip_accents(False, None, lowercase=True) is True  # a bare cased vocab read uncased
    assert resolve_strip_accents(True, False) is False  # lower-case, accents kept: kept
    assert resolve_strip_accents(False, True, lowercase=True) is True
    assert resolve_strip_accents(True, False, strip_accents=True) is True


def test_bare_vocab_and_transformers_dirs_follow_their_files(tmp_path):
    vocab = SPECIALS + ["마", "##스", "##크", "ᄆ", "##ᅡ", "##ᄉ", "##ᅳ", "##ᄏ"]
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    bare = load_tokenizer(tmp_path / "vocab.txt")  # Google's convention: uncased strips
    assert (bare.lowercase, bare.strip_accents) == (True, True)
    assert bare.tokenizer.encode("마스크", add_special_tokens=False).tokens[0] == "ᄆ"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "strip_accents": False}))
    configured = load_tokenizer(tmp_path)
    assert configured.strip_accents is False
    assert configured.tokenizer.encode("마스크", add_special_tokens=False).tokens == ["마", "##스", "##크"]
    assert load_tokenizer(tmp_path, strip_accents=True).strip_accents is True


def test_tokenizer_info_export_and_fill_mask_carry_strip_accents(tmp_path):
    from transformers import AutoTokenizer

    from bertmodel.data.shards import tokenizer_info
    from bertmodel.hf import write_tokenizer
    from bertmodel.inference.fill_mask import load_tokenizer as fill_mask_tokenizer

    vocab = SPECIALS + ["마", "##스", "##크", "ᄆ", "##ᅡ", "##ᄉ", "##ᅳ", "##ᄏ"]
    tok = build_tokenizer(vocab, True, strip_accents=False)
    tok.save(tmp_path / "tok")
    info = tokenizer_info(tmp_path / "tok")
    assert (info.lowercase, info.strip_accents) == (True, False)
    assert fill_mask_tokenizer(info).encode("마스크", add_special_tokens=False).tokens == ["마", "##스", "##크"]
    # A tokenizer.json alone, and a bare vocab.txt with the manifest's settings.
    only_json = tmp_path / "json"
    only_json.mkdir()
    (only_json / "tokenizer.json").write_bytes((tmp_path / "tok" / "tokenizer.json").read_bytes())
    assert tokenizer_info(only_json).strip_accents is False
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "vocab.txt").write_bytes((tmp_path / "tok" / "vocab.txt").read_bytes())
    bare = tokenizer_info(tmp_path / "bare", manifest={"tokenizer": {"lowercase": True, "strip_accents": False}})
    assert (bare.lowercase, bare.strip_accents) == (True, False)
    assert tokenizer_info(tmp_path / "bare").strips_accents is True  # nothing says: Google's convention
    assert bare.same_as(tokenizer_info(tmp_path / "bare")) == "strip_accents False vs True"
    out = tmp_path / "export"
    out.mkdir()
    write_tokenizer(out, bare, 512)
    assert json.loads((out / "tokenizer_config.json").read_text())["strip_accents"] is False
    assert AutoTokenizer.from_pretrained(str(out)).tokenize("마스크") == ["마", "##스", "##크"]
    assert fill_mask_tokenizer(bare).encode("마스크", add_special_tokens=False).tokens == ["마", "##스", "##크"]


def test_entities_and_answers_are_cut_from_the_users_text_under_any_normalisation():
    from bertmodel.tasks.entity_text import text_words

    text = "서울시 마스크 착용 सभी मनुष्यों Café أحراراً"
    for strip in (False, True):
        spans = text_words(TOKENIZERS[strip], text)
        # Whole words as the user wrote them, also where stripping deleted a final mark (ं, ً).
        assert [text[s:e] for s, e in spans] == text.split()


def test_train_tokenizer_reports_normalisation_before_training_and_records_it(tmp_path):
    corpus = tmp_path / "ko.txt"
    lines = ["마스크 착용 의무화를 청원합니다", "정말 재밌다 ㅋㅋ", "아이들이 안전하게 학교에 다닐 수 있도록"]
    corpus.write_text("\n\n".join(lines * 40) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["train-tokenizer", str(corpus), "--out", str(tmp_path / "tok"),
                                       "--vocab-size", "300", "--quiet", "--heldout-fraction", "0"])
    assert result.exit_code == 0, result.output
    lines_out = result.stdout.splitlines()
    assert lines_out[0].startswith("read 1 file, ")
    assert lines_out[1] == ("normalisation: lower-case, accents kept (auto: 0.0% of the letters are Latin, Greek "
                            "or Cyrillic)")
    assert lines_out[2] == "scripts: Hangul 100.0%"
    assert lines_out[3].startswith("note: Google's tokenization.py cannot reproduce")
    assert lines_out[4].startswith("vocabulary: ")  # all of it reported before the trainer's result
    # 300 entries leave no room for KS X 1001's syllables: said, not silently skipped.
    assert re.search(r"; no room for the repertoire of ASCII, Hangul: they need --vocab-size >= [\d,]+ for this "
                     r"sample$", lines_out[5]), lines_out[5]
    vocab = (tmp_path / "tok" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert not [t for t in vocab if any(0x1100 <= ord(c) <= 0x11FF for c in t)]  # no conjoining jamo
    assert "재" in vocab and "ㅋ" in vocab
    recorded = json.loads((tmp_path / "tok" / "training.json").read_text(encoding="utf-8"))
    assert recorded["config"]["strip_accents"] is None  # auto, as given
    assert recorded["report"]["normalisation"]["strip_accents"] is False
    assert recorded["report"]["normalisation"]["scripts"] == {"Hangul": 1.0}
    assert json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())["strip_accents"] is False


def test_forced_strip_accents_on_korean_warns_on_stderr(tmp_path):
    corpus = tmp_path / "ko.txt"
    corpus.write_text("마스크 착용 의무화를 청원합니다\n\n정말 재밌다\n" * 20, encoding="utf-8")
    result = CliRunner().invoke(main, ["train-tokenizer", str(corpus), "--out", str(tmp_path / "tok"),
                                       "--vocab-size", "200", "--quiet", "--heldout-fraction", "0",
                                       "--strip-accents"])
    assert result.exit_code == 0, result.output
    [warning] = [line for line in result.stderr.splitlines() if "accent stripping" in line]
    assert warning.startswith("warning: accent stripping (--strip-accents) changes letters beyond case: it alters "
                              "100.0% of the Hangul characters")
    assert "normalisation: lower-case, strip accents (--strip-accents)" in result.stdout
    assert "note: Google's" not in result.stdout  # lower-case + strip: Google's do_lower_case reproduces it


def test_character_coverage_keeps_frequent_characters_and_limit_overrides(tmp_path):
    # 100 distinct characters, "a" 901 times: a 0.9 coverage keeps "a" alone.
    text = " ".join(["a"] * 901 + [chr(0xAC00 + i) for i in range(99)])
    config = dict(vocab_size=400, heldout_fraction=0, min_frequency=1, complete_scripts=False, min_alphabet=0)
    report = train_tokenizer([[text]], TokenizerTrainingConfig(character_coverage=0.9, **config), tmp_path / "a",
                             progress=False)
    assert report.alphabet_size == 1 and report.alphabet_dropped == 99
    assert report.alphabet_dropped_share == 99 / 1000
    full = train_tokenizer([[text]], TokenizerTrainingConfig(character_coverage=1.0, **config), tmp_path / "b",
                           progress=False)
    assert full.alphabet_size == 100 and full.alphabet_dropped == 0
    limited = train_tokenizer([[text]], TokenizerTrainingConfig(limit_alphabet=5, **config), tmp_path / "c",
                              progress=False)
    assert limited.alphabet_size == 5
    # By default an alphabet of up to 1,000 characters is kept whole, whatever the coverage.
    floor = train_tokenizer([[text]], TokenizerTrainingConfig(character_coverage=0.9, vocab_size=400, heldout_fraction=0,
                                                              min_frequency=1, complete_scripts=False),
                            tmp_path / "e", progress=False)
    assert floor.alphabet_size == 100
    (tmp_path / "x.txt").write_text(text + "\n", encoding="utf-8")
    both = CliRunner().invoke(main, ["train-tokenizer", str(tmp_path / "x.txt"), "--out", str(tmp_path / "d"),
                                     "--character-coverage", "0.9", "--limit-alphabet", "5"])
    assert both.exit_code == 2 and "give one" in both.stderr
