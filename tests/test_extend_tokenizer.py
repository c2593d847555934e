"""`bertprep extend-tokenizer` on real tokenizers and real text: BERT-uncased's vocab.txt
with Korean petitions (WordPiece: whole words and ## pieces), roberta-base's byte-level BPE
with English WikiText (merges continued from the base's pieces, after the base's), ModernBERT-base's into its [unusedK]
slots, and a Unigram TOKDIR trained here with Korean (pieces with scores).

Shown: every base id keeps its token (all of them compared); the new tokens sit where they
were placed; the tokens per word the command reports are those of tokenizers' own encode
of the corpus with the base and with the result, and fall; WordPiece's first merge is the
most frequent pair of the base's pieces (counted here from tokenizers' encodings); the
files load in AutoTokenizer with our ids; a second run in another process writes the same
bytes; bad input is one line."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest
from click.testing import CliRunner
from tokenizers import Tokenizer, models

from bertprep.cli import main
from bertprep.tokenizer import load_tokenizer
from extension_fixtures import BERT_UNCASED, KOREAN, WIKITEXT, petitions_head, skip_without_inputs
from shared_data import TOKENIZERS

skip_without_inputs()
pytestmark = pytest.mark.slow  # ten extensions of real tokenizers, two in subprocesses: about 35 s in all
TRANSFORMERS_MAX_WORD = 100  # transformers' BertTokenizer maps longer words to [UNK] (bertprep/tokenizer/files.py)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def extend(base, corpus, out, *options):
    result = run("extend-tokenizer", base, corpus, "--out", out, "--no-progress", *options)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def petitions(tmp_path_factory):
    return petitions_head(tmp_path_factory.mktemp("corpus") / "petitions.jsonl")


@pytest.fixture(scope="module")
def english(tmp_path_factory):
    """WikiText paragraphs, one a line, without the " = Heading = " lines (which the reader
    takes for document boundaries): the reader's lines are these, as encoded below."""
    lines = [line.strip() for line in WIKITEXT.read_text(encoding="utf-8").splitlines()[:600]
             if line.strip() and not re.fullmatch(r"\s*=.*=\s*", line)]
    out = tmp_path_factory.mktemp("corpus") / "wiki.txt"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def wordpiece(petitions, tmp_path_factory):
    out = tmp_path_factory.mktemp("ext") / "bert-ko"
    return out, extend(BERT_UNCASED, petitions, out, *KOREAN, "--add", 300).output


@pytest.fixture(scope="module")
def roberta(english, tmp_path_factory):
    out = tmp_path_factory.mktemp("ext") / "roberta-wiki"
    return out, extend(TOKENIZERS / "roberta-base", english, out, "--add", 200).output


def record(tokdir) -> dict:
    return json.loads((tokdir / "extension.json").read_text(encoding="utf-8"))["report"]


def reported_tokens_per_word(output: str) -> tuple[float, float]:
    before, after = re.search(r"tokens per word on the corpus: ([\d.]+) -> ([\d.]+)", output).groups()
    return float(before), float(after)


def tokens_per_word(tokenizer_json, texts: list[str]) -> float:
    """tokenizers' own encode of `texts` (no special tokens) over its pre-tokenizer's words."""
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))
    normalizer, pre = tokenizer.normalizer, tokenizer.pre_tokenizer
    words = sum(len(pre.pre_tokenize_str(normalizer.normalize_str(text) if normalizer else text)) for text in texts)
    return tokens / words


def assert_keeps_every_base_id(base, extended, renamed=()):
    assert len(extended.vocab) >= len(base.vocab)
    changed = [i for i, (a, b) in enumerate(zip(base.vocab, extended.vocab)) if a != b]
    assert changed == sorted(renamed)


def petition_texts(path) -> list[str]:
    return [json.loads(line)["content"] for line in path.read_text(encoding="utf-8").splitlines()]


def test_wordpiece_keeps_every_base_id_and_adds_after_them(wordpiece, petitions):
    out, output = wordpiece
    base, extended = load_tokenizer(BERT_UNCASED), load_tokenizer(out)
    assert_keeps_every_base_id(base, extended)
    added = record(out)["added"]
    assert extended.vocab[30522:] == added and len(added) == 300
    assert f"added 300 tokens to the wordpiece tokenizer of 30,522" in output
    # The figures are tokenizers' own encode of each petition with each tokenizer (a
    # sentence split at spaces leaves BERT's words as they are).
    texts = petition_texts(petitions)
    before, after = tokens_per_word(base_json(base, out.parent), texts), tokens_per_word(out / "tokenizer.json", texts)
    assert reported_tokens_per_word(output) == (round(before, 3), round(after, 3))
    assert record(out)["tokens_per_word_before"] == pytest.approx(before, rel=1e-12)
    assert record(out)["tokens_per_word_after"] == pytest.approx(after, rel=1e-12)
    # 300 tokens on Korean that BERT-uncased spells in jamo: a third fewer tokens (4.95 -> 3.30 measured)
    assert after < 0.75 * before
    assert "new tokens: ##" in output


def base_json(base, where):
    path = where / "bert-base-uncased.json"
    path.write_text(base.tokenizer.to_str(), encoding="utf-8")
    return path


def test_wordpiece_adds_missing_characters_then_the_most_frequent_pair(wordpiece, petitions):
    """Counted here from tokenizers' encodings: the characters the base lacks in its
    [UNK] words come first, most frequent first; the first merge is a pair of adjacent
    pieces that occurs most often (word frequency x occurrences), the words spelt by
    tokenizers' WordPiece over the base vocabulary and those characters."""
    out, _ = wordpiece
    base = load_tokenizer(BERT_UNCASED)
    normalizer, pre = base.tokenizer.normalizer, base.tokenizer.pre_tokenizer
    words = Counter(w for text in petition_texts(petitions)
                    for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)))
    vocab = set(base.vocab)
    lacking = Counter()
    for word, n in words.items():
        if base.tokenizer.encode([word], is_pretokenized=True, add_special_tokens=False).tokens == ["[UNK]"]:
            for form in {ch if i == 0 else "##" + ch for i, ch in enumerate(word)} - vocab:
                lacking[form] += n
    report = record(out)
    characters = report["added"][:report["characters"]]
    assert characters == sorted((f for f, n in lacking.items() if n >= 2), key=lambda f: (-lacking[f], f))
    with_characters = Tokenizer(models.WordPiece({t: i for i, t in enumerate(base.vocab + characters)},
                                                 unk_token="[UNK]", max_input_chars_per_word=200))
    pairs = Counter()
    for word, n in words.items():
        tokens = with_characters.encode([word], is_pretokenized=True).tokens
        if tokens != ["[UNK]"]:
            for pair in zip(tokens, tokens[1:]):
                pairs[pair] += n
    first = report["added"][report["characters"]]
    top = max(pairs.values())
    assert any(a + b[2:] == first and n == top for (a, b), n in pairs.items()), (first, pairs.most_common(3))


def test_reuse_unused_fills_berts_slots_with_the_same_tokens(wordpiece, petitions, tmp_path):
    out, _ = wordpiece
    reused = tmp_path / "reused"
    output = extend(BERT_UNCASED, petitions, reused, *KOREAN, "--add", 300, "--reuse-unused").output
    base, extended = load_tokenizer(BERT_UNCASED), load_tokenizer(reused)
    slots = [i for i, token in enumerate(base.vocab) if re.fullmatch(r"\[unused\d+\]", token)]
    assert len(slots) == 994 and extended.vocab_size == 30522
    assert_keeps_every_base_id(base, extended, renamed=slots[:300])
    assert [extended.vocab[i] for i in slots[:300]] == record(out)["added"]  # the same choice, in slot order
    assert "(300 in [unused] slots;" in output


def test_the_same_inputs_write_the_same_bytes(wordpiece, roberta, petitions, english, tmp_path):
    """A second run in another process (another hash seed, other HashMap orders in the
    Rust trainers) writes byte-identical files: WordPiece's merges and BPE's."""
    out, bpe = wordpiece[0], roberta[0]
    for first, base, corpus, options in ((out, BERT_UNCASED, petitions, (*KOREAN, "--add", "300")),
                                         (bpe, TOKENIZERS / "roberta-base", english, ("--add", "200"))):
        again = tmp_path / f"{first.name}-again"
        subprocess.run([sys.executable, "-m", "bertprep", "extend-tokenizer", str(base), str(corpus), "--out",
                        str(again), "--no-progress", *options], check=True, capture_output=True,
                       env={**os.environ, "PYTHONHASHSEED": "123"})
        names = sorted(p.name for p in first.iterdir())
        assert names == sorted(p.name for p in again.iterdir())
        for name in names:
            assert (first / name).read_bytes() == (again / name).read_bytes(), name


def test_bpe_appends_merges_after_robertas(roberta, english):
    out, output = roberta
    base, extended = load_tokenizer(TOKENIZERS / "roberta-base"), load_tokenizer(out)
    assert_keeps_every_base_id(base, extended)
    pairs = lambda path: [m.split(" ") if isinstance(m, str) else m  # noqa: E731 ("a b" or ["a", "b"])
                          for m in json.loads(path.read_text())["model"]["merges"]]
    base_merges, merges = pairs(TOKENIZERS / "roberta-base" / "tokenizer.json"), pairs(out / "tokenizer.json")
    assert merges[:len(base_merges)] == base_merges and len(merges) >= len(base_merges) + 200
    results = ["".join(m) for m in merges[len(base_merges):]]
    new = list(dict.fromkeys(r for r in results if r not in set(base.vocab)))  # others cost no id
    assert extended.vocab[50265:] == new == record(out)["added"] and len(new) == 200
    # The first appended merge is the most frequent pair of adjacent base pieces inside a
    # word, counted here from tokenizers' own encoding of the corpus.
    roberta_base = Tokenizer.from_file(str(TOKENIZERS / "roberta-base" / "tokenizer.json"))
    pairs = Counter()
    for encoding in roberta_base.encode_batch(english.read_text(encoding="utf-8").splitlines(), add_special_tokens=False):
        for (a, word_a), (b, word_b) in zip(zip(encoding.tokens, encoding.word_ids),
                                            zip(encoding.tokens[1:], encoding.word_ids[1:])):
            pairs[a, b] += word_a == word_b
    assert pairs[tuple(merges[len(base_merges)])] == max(pairs.values())
    # vocab.json and merges.txt say the same as tokenizer.json (transformers may read either)
    assert json.loads((out / "vocab.json").read_text()) == json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    assert (out / "merges.txt").read_text().splitlines()[1:] == [" ".join(m) for m in merges]
    texts = english.read_text(encoding="utf-8").splitlines()
    before = tokens_per_word(TOKENIZERS / "roberta-base" / "tokenizer.json", texts)
    after = tokens_per_word(out / "tokenizer.json", texts)
    assert reported_tokens_per_word(output) == (round(before, 3), round(after, 3))
    assert after < before  # 1.13 -> 1.10 measured: English, which roberta-base knows well
    assert "' @-@'" in output or "' @.@'" in output  # WikiText's own markup, decoded for the summary


def test_modernbert_reuse_unused_fills_its_83_slots_first(petitions, tmp_path):
    out = tmp_path / "modernbert-ko"
    output = extend(TOKENIZERS / "modernbert-base", petitions, out, *KOREAN, "--add", 100, "--reuse-unused").output
    base, extended = load_tokenizer(TOKENIZERS / "modernbert-base"), load_tokenizer(out)
    slots = [i for i, token in enumerate(base.vocab) if re.fullmatch(r"\[unused\d+\]", token)]
    assert slots == list(range(50285, 50368))
    assert_keeps_every_base_id(base, extended, renamed=slots)
    assert extended.vocab_size == 50368 + 17
    assert [extended.vocab[i] for i in (*slots, *range(50368, 50385))] == record(out)["added"]
    assert extended.special == base.special
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert not any(int(i) in slots for i in config["added_tokens_decoder"])  # transformers would re-add them
    assert "(83 in [unused] slots)" in output


@pytest.fixture(scope="module")
def unigram(english, petitions, tmp_path_factory):
    """A Unigram TOKDIR trained on English here, extended with Korean."""
    root = tmp_path_factory.mktemp("unigram")
    result = run("train-tokenizer", english, "--model", "unigram", "--vocab-size", 3000, "--out", root / "base",
                 "--no-progress")
    assert result.exit_code == 0, result.output
    return root / "base", root / "ko", extend(root / "base", petitions, root / "ko", *KOREAN, "--add", 200).output


def test_unigram_adds_pieces_with_scores(unigram, petitions):
    base_dir, out, output = unigram
    base, extended = load_tokenizer(base_dir), load_tokenizer(out)
    assert_keeps_every_base_id(base, extended)
    base_pieces = json.loads((base_dir / "tokenizer.json").read_text())["model"]["vocab"]
    pieces = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    assert pieces[:len(base_pieces)] == base_pieces  # every base piece with its score
    new = pieces[len(base_pieces):]
    assert [p for p, _ in new] == record(out)["added"] and len(new) == 200
    assert all(min(s for _, s in base_pieces) <= score < 0 for _, score in new)
    assert all(p.startswith("▁") or p[0] != " " for p, _ in new)
    texts = petition_texts(petitions)
    before, after = tokens_per_word(base_dir / "tokenizer.json", texts), tokens_per_word(out / "tokenizer.json", texts)
    assert after < 0.9 * before
    assert reported_tokens_per_word(output)[1] < reported_tokens_per_word(output)[0]


def test_every_extension_loads_in_autotokenizer_with_our_ids(wordpiece, unigram, roberta, petitions, english):
    transformers = pytest.importorskip("transformers")
    korean = [s for text in petition_texts(petitions)[:20] for s in text.split(". ")]
    cases = {wordpiece[0]: korean, unigram[1]: korean, roberta[0]: english.read_text().splitlines()[:100]}
    for tokdir, texts in cases.items():
        ours, theirs = load_tokenizer(tokdir), transformers.AutoTokenizer.from_pretrained(tokdir)
        assert len(theirs) == ours.vocab_size
        if ours.kind == "wordpiece":
            pre = ours.tokenizer.pre_tokenizer
            texts = [t for t in texts if all(len(w) <= TRANSFORMERS_MAX_WORD for w, _ in
                                             pre.pre_tokenize_str(ours.tokenizer.normalizer.normalize_str(t)))]
        assert len(texts) > 50
        encoded = [e.ids for e in ours.tokenizer.encode_batch(texts)]
        assert encoded == theirs(texts)["input_ids"], tokdir
        assert any(i >= load_tokenizer_size(tokdir) for ids in encoded for i in ids)  # new tokens in use


def load_tokenizer_size(tokdir) -> int:
    return record(tokdir)["base_vocab_size"]


def one_line(result, exit_code: int = 1) -> str:
    assert result.exit_code == exit_code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_bad_input_is_one_line(petitions, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    assert one_line(run("extend-tokenizer", BERT_UNCASED, empty, "--add", 5, "--out", tmp_path / "a",
                        "--no-progress")) == f"Error: {empty}: no text found"
    assert not (tmp_path / "a").exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    assert one_line(run("extend-tokenizer", BERT_UNCASED, petitions, *KOREAN, "--add", 5, "--out", taken,
                        "--no-progress")) == f"Error: {taken}: exists and is not empty (use --overwrite to replace it)"
    assert one_line(run("extend-tokenizer", tmp_path / "nowhere", petitions, "--add", 5, "--out", tmp_path / "b"),
                    exit_code=2).endswith(f"Path '{tmp_path / 'nowhere'}' does not exist.")
    not_a_tokenizer = tmp_path / "notes"
    not_a_tokenizer.mkdir()
    assert one_line(run("extend-tokenizer", not_a_tokenizer, petitions, "--add", 5, "--out", tmp_path / "c")) == (
        f"Error: {not_a_tokenizer}: directory has no tokenizer.json or vocab.txt")
    assert "--add" in one_line(run("extend-tokenizer", BERT_UNCASED, petitions, "--add", 0, "--out", tmp_path / "d"),
                               exit_code=2)
