"""bertprep.tokenizer.files: loading, building, saving, the contract other modules rely on."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from bertprep.errors import BertprepError
from bertprep.tokenizer import SPECIAL_TOKENS, SpecialIds, build_tokenizer, infer_lowercase, load_tokenizer

from shared_data import SHARED_DATA as DATA  # noqa: E402  ../shared/data beside the checkout
UNCASED = DATA / "bert-base-uncased-vocab.txt"
CASED = DATA / "bert-base-cased-vocab.txt"
needs_data = pytest.mark.skipif(not UNCASED.is_file(), reason=f"shared data not found at {DATA}")

# A small vocabulary with a non-Google layout, so nothing can rely on fixed ids.
SMALL = ["[unused0]", "[PAD]", "the", "cat", "sat", "[MASK]", "[UNK]", "##s", "on", "[CLS]",
         "mat", "[SEP]", ".", "[", "]", "mask", "c", "##a", "##t", "[foo]", "s", "##at"]


def write_vocab(path: pathlib.Path, tokens) -> pathlib.Path:
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return path


def test_special_ids_are_looked_up_not_assumed():
    tok = build_tokenizer(SMALL, lowercase=True)
    assert tok.special == SpecialIds(pad=1, unk=6, cls=9, sep=11, mask=5)
    assert tok.special.as_dict() == {"pad": 1, "unk": 6, "cls": 9, "sep": 11, "mask": 5}
    encoding = tok.tokenizer.encode("The cats sat", "on the mat.")
    assert encoding.tokens == ["[CLS]", "the", "cat", "##s", "sat", "[SEP]", "on", "the", "mat", ".", "[SEP]"]
    assert encoding.ids == [9, 2, 3, 7, 4, 11, 8, 2, 10, 12, 11]
    assert encoding.type_ids == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert tok.vocab_size == len(SMALL)


def test_literal_mask_in_text_is_text():
    tok = build_tokenizer(SMALL, lowercase=True)
    assert tok.tokenizer.encode("[MASK] cat", add_special_tokens=False).tokens == ["[", "mask", "]", "cat"]


def test_ordinary_ids_exclude_every_bracketed_special():
    tok = build_tokenizer(SMALL, lowercase=True)
    ids = tok.ordinary_ids()
    assert ids.dtype == np.int32
    expected = [i for i, t in enumerate(SMALL) if t not in
                ("[unused0]", "[PAD]", "[MASK]", "[UNK]", "[CLS]", "[SEP]", "[foo]")]
    assert ids.tolist() == expected
    assert SMALL.index("[") in ids and SMALL.index("]") in ids  # bare brackets are text


@needs_data
def test_google_vocab_layout_and_ordinary_pool():
    tok = load_tokenizer(UNCASED)
    assert tok.special == SpecialIds(pad=0, unk=100, cls=101, sep=102, mask=103)
    assert tok.lowercase is True and tok.max_chars_per_word == 200 and tok.vocab_size == 30522
    assert tok.source == UNCASED
    pool = tok.ordinary_ids()
    # 30,522 minus [PAD], [UNK], [CLS], [SEP], [MASK] and [unused0..993].
    assert len(pool) == 30522 - 5 - 994
    assert pool[0] == 999 and tok.vocab[999] == "!"
    assert tok.tokenizer.encode("hello, my dog is cute", add_special_tokens=False).ids == \
        [7592, 1010, 2026, 3899, 2003, 10140]
    cased = load_tokenizer(CASED)
    assert cased.lowercase is False
    assert cased.tokenizer.encode("Hello , my dog is cute", add_special_tokens=False).ids == \
        [8667, 117, 1139, 3676, 1110, 10509]


def test_infer_lowercase():
    assert infer_lowercase(["[PAD]", "[UNK]", "the", "ℝ"]) is True  # ℝ has no lower-case form
    assert infer_lowercase(["[PAD]", "[UNK]", "The"]) is False


def test_fingerprint_is_stable_and_covers_settings():
    a = build_tokenizer(SMALL, lowercase=True)
    assert a.fingerprint() == build_tokenizer(list(SMALL), lowercase=True).fingerprint()
    assert len(a.fingerprint()) == 64
    assert a.fingerprint() != build_tokenizer(SMALL, lowercase=False).fingerprint()
    assert a.fingerprint() != build_tokenizer(SMALL, lowercase=True, max_chars_per_word=100).fingerprint()
    assert a.fingerprint() != build_tokenizer(SMALL[::-1], lowercase=True).fingerprint()
    # Documented format: sha256 of ["bertprep-tokenizer/1", lowercase, max_chars, vocab].
    import hashlib
    text = json.dumps(["bertprep-tokenizer/1", True, 200, SMALL], ensure_ascii=False, separators=(",", ":"))
    assert a.fingerprint() == hashlib.sha256(text.encode()).hexdigest()


def test_save_and_load_round_trip(tmp_path):
    tok = build_tokenizer(SMALL, lowercase=False, max_chars_per_word=50)
    names = tok.save(tmp_path / "tok")
    assert sorted(names) == sorted(["vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"])
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == sorted(names)  # no temporaries left
    assert (tmp_path / "tok" / "vocab.txt").read_text(encoding="utf-8") == "\n".join(SMALL) + "\n"
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is False and config["tokenizer_class"] == "BertTokenizer"
    for source in (tmp_path / "tok", tmp_path / "tok" / "tokenizer.json"):
        again = load_tokenizer(source)
        assert again.fingerprint() == tok.fingerprint()
        assert again.lowercase is False and again.max_chars_per_word == 50
        assert again.tokenizer.encode("[MASK] cat").tokens == ["[CLS]", "[", "[UNK]", "]", "cat", "[SEP]"]
    # A TOKDIR with only vocab.txt + tokenizer_config.json takes do_lower_case from the config.
    (tmp_path / "tok" / "tokenizer.json").unlink()
    assert load_tokenizer(tmp_path / "tok").lowercase is False
    assert load_tokenizer(tmp_path / "tok" / "vocab.txt").lowercase is True  # bare: inferred
    assert load_tokenizer(tmp_path / "tok", lowercase=True, max_chars_per_word=7).max_chars_per_word == 7


def test_encoder_json_matches_tokenizers_with_nanotoken():
    nanotoken = pytest.importorskip("nanotoken")
    tok = load_tokenizer(UNCASED) if UNCASED.is_file() else build_tokenizer(SMALL, lowercase=True)
    texts = ["The [MASK] sat on the [SEP] mat.", "Héllo wörld [CLS]", "x" * 150, "日本語のテキスト", ""]
    config = json.loads(tok.encoder_json())
    assert config["post_processor"] is None and config["added_tokens"] == []
    fast = nanotoken.Tokenizer.from_json(tok.encoder_json())
    ragged = fast.encode_batch(texts, add_special_tokens=False)
    expected = [tok.tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
    assert ragged.ids.tolist() == [i for ids in expected for i in ids]
    assert np.diff(ragged.offsets).tolist() == [len(ids) for ids in expected]


@pytest.mark.parametrize("tokens, problem", [
    ([], "empty vocabulary"),
    (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"], "vocabulary lacks [MASK]"),
    (["[PAD]", "a", "b"], "vocabulary lacks [UNK], [CLS], [SEP], [MASK]"),
    (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "a"], "duplicate token 'a' (ids 5 and 7)"),
])
def test_vocab_txt_errors_name_the_file_and_problem(tmp_path, tokens, problem):
    path = write_vocab(tmp_path / "vocab.txt", tokens)
    with pytest.raises(BertprepError) as excinfo:
        load_tokenizer(path)
    assert str(excinfo.value) == f"{path}: {problem}"


@pytest.mark.parametrize("text, problem", [
    ("{not json", "not a tokenizer (invalid JSON: Expecting property name enclosed in double quotes at line 1)"),
    ('{"model": {"type": "BPE", "vocab": {}, "merges": []}}', "empty vocabulary"),
    ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}',
     "no [CLS]/<s> or [SEP]/</s> token: an encoder's sequences need both"),
    ('[1, 2]', "not a WordPiece tokenizer (model type None)"),
    ('{"model": {"type": "WordPiece", "vocab": {}}}', "empty vocabulary"),
    ('{"model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "a": 2}}}', "vocabulary ids are not 0..1 (token 'a' has id 2)"),
    ('{"model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "[UNK]": 1}}}', "vocabulary lacks [CLS], [SEP], [MASK]"),
])
def test_tokenizer_json_errors(tmp_path, text, problem):
    path = tmp_path / "tokenizer.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BertprepError) as excinfo:
        load_tokenizer(path)
    assert str(excinfo.value) == f"{path}: {problem}"


def test_path_errors(tmp_path):
    with pytest.raises(BertprepError, match=f"^{tmp_path / 'nope'}: no such file or directory$"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(BertprepError, match=r"directory has no tokenizer\.json or vocab\.txt$"):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.txt").write_bytes(b"[PAD]\n\xff\xfe\n")
    with pytest.raises(BertprepError, match=r"vocab\.txt: not a tokenizer \(not UTF-8 text: byte 6\)$"):
        load_tokenizer(tmp_path / "vocab.txt")
    write_vocab(tmp_path / "vocab.txt", ["[PAD]", "", "[UNK]"])
    with pytest.raises(BertprepError, match=r"vocab\.txt: line 2 is empty"):
        load_tokenizer(tmp_path / "vocab.txt")


def test_windows_line_ends_and_surrounding_spaces_are_stripped_like_google(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes("\r\n".join([*SPECIAL_TOKENS, " cat", "sat "]).encode() + b"\r\n")
    tok = load_tokenizer(path)
    assert tok.vocab == [*SPECIAL_TOKENS, "cat", "sat"]
