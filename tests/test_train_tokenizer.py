"""train-tokenizer: exact size, layout, loading everywhere, sampling, errors."""
from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

from bertprep.cli import main
from bertprep.errors import BertprepError
from bertprep.corpus import BottomSample
from bertprep.tokenizer import TokenizerTrainingConfig, train_tokenizer

from shared_data import SHARED_DATA as DATA  # noqa: E402  ../shared/data beside the checkout
TRAIN_FILES = [DATA / "wikitext-2-raw-train-head.txt", DATA / "enwiki_wikiextractor" / "wiki_00",
               DATA / "enwiki_wikiextractor" / "wiki_01"]
needs_data = pytest.mark.skipif(not TRAIN_FILES[0].is_file(), reason=f"shared data not found at {DATA}")
VOCAB_SIZE = 3000
UNUSED = 7


@pytest.fixture(scope="module")
def tokdir(tmp_path_factory):
    if not TRAIN_FILES[0].is_file():
        pytest.skip(f"shared data not found at {DATA}")
    out = tmp_path_factory.mktemp("train") / "tok"
    result = CliRunner().invoke(main, ["train-tokenizer", *map(str, TRAIN_FILES), "--out", str(out),
                                       "--vocab-size", str(VOCAB_SIZE), "--unused", str(UNUSED), "--quiet"])
    assert result.exit_code == 0, result.output
    return out, result


def test_summary_and_files(tokdir):
    out, result = tokdir
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "training.json"])
    lines = result.stdout.splitlines()
    assert lines[0].startswith("read 3 files, 3.0 MB, ")
    assert "vocabulary: 3,000 entries (requested 3,000), alphabet " in result.stdout
    assert result.stderr == ""  # no warnings: the corpus supports 3,000 entries
    report = json.loads((out / "training.json").read_text())["report"]
    assert report["vocab_size"] == VOCAB_SIZE and report["shortfall"] == 0
    assert report["heldout_documents"] + report["training_documents"] == report["corpus_documents"]
    assert report["measured_on"] == "held-out" and report["heldout_words"] > 500
    assert 0 <= report["unk_rate"] < 0.01 and 1.0 < report["tokens_per_word"] < 2.5


def test_exact_size_and_layout(tokdir):
    out, _ = tokdir
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert vocab[-1] == ""
    vocab = vocab[:-1]
    assert len(vocab) == VOCAB_SIZE == len(set(vocab))
    assert vocab[:UNUSED + 5] == ["[PAD]", *(f"[unused{i}]" for i in range(UNUSED)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    # Then the alphabet sorted by code point, then "##" forms, then merges.
    alphabet = [t for t in vocab[UNUSED + 5:] if len(t) == 1]
    assert alphabet == sorted(alphabet) and vocab[UNUSED + 5:UNUSED + 5 + len(alphabet)] == alphabet
    assert "##(" not in vocab and "##," not in vocab  # punctuation never continues a word
    assert "##e" in vocab and "the" in vocab and all(t == t.lower() for t in vocab[UNUSED + 5:])


@needs_data
def test_loads_everywhere_and_agrees_with_encode_on_every_line(tokdir):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, BertTokenizer

    out, _ = tokdir
    text_path = DATA / "enwiki_wikiextractor" / "wiki_02"  # not trained on
    lines = [line for line in text_path.read_text(encoding="utf-8").split("\n") if line.strip()]
    result = CliRunner().invoke(main, ["encode", "--tokenizer", str(out)], input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    encoded = result.stdout.split("\n")[:-1]
    assert len(encoded) == len(lines) > 2000

    from_file = Tokenizer.from_file(str(out / "tokenizer.json"))
    vocab = {t: i for i, t in enumerate((out / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1])}
    engines = {
        "tokenizers.Tokenizer.from_file": lambda s: from_file.encode(s, add_special_tokens=False).tokens,
        "BertTokenizer(vocab=path)": BertTokenizer(vocab=str(out / "vocab.txt"), do_lower_case=True).tokenize,
        "BertTokenizer(vocab=dict)": BertTokenizer(vocab=vocab, do_lower_case=True).tokenize,
        "AutoTokenizer.from_pretrained": AutoTokenizer.from_pretrained(str(out)).tokenize,
    }
    for name, tokenize in engines.items():
        bad = [(line, got) for line, got in zip(lines, encoded) if " ".join(tokenize(line)) != got]
        assert bad == [], f"{name}: {len(bad)} lines differ, first {bad[0]}"
    auto = AutoTokenizer.from_pretrained(str(out))
    assert type(auto).__name__ == "BertTokenizer" and auto.do_lower_case is True
    assert auto.convert_tokens_to_ids(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) == [0, 8, 9, 10, 11]
    assert auto("a b")["input_ids"][0] == vocab["[CLS]"]
    ids = CliRunner().invoke(main, ["encode", "--tokenizer", str(out), "--ids", "--special", lines[0]]).stdout
    assert ids.split() == [str(i) for i in auto(lines[0])["input_ids"]]


def _docs(text: str) -> list[list[str]]:
    return [[s for s in block.split("\n") if s] for block in text.split("\n\n") if block.strip()]


def test_shortfall_is_reported(tmp_path):
    documents = _docs("the cat sat on the mat\nthe dog sat\n\nthe cat ran\n")
    report = train_tokenizer(documents, TokenizerTrainingConfig(vocab_size=500, heldout_fraction=0),
                             tmp_path / "tok", progress=False)
    vocab = (tmp_path / "tok" / "vocab.txt").read_text().split("\n")[:-1]
    assert report.vocab_size == len(vocab) < 500
    assert report.shortfall == 500 - len(vocab)
    assert report.warnings[-1] == (f"vocabulary has {len(vocab):,} entries, {500 - len(vocab):,} fewer than "
                                   "--vocab-size: the corpus has too few distinct words")
    assert report.measured_on == "training"  # nothing was held out
    assert {"the", "cat", "sat", "##at"} <= set(vocab)


def test_vocab_smaller_than_alphabet_drops_rarest_characters(tmp_path):
    documents = _docs("aaaa bbbb ccc dd e\naaaa bbbb ccc dd\n")
    config = TokenizerTrainingConfig(vocab_size=5 + 6, heldout_fraction=0)
    report = train_tokenizer(documents, config, tmp_path / "tok", progress=False)
    vocab = (tmp_path / "tok" / "vocab.txt").read_text().split("\n")[:-1]
    # Room for 6: a, b, c and their ## forms; d and e (rarest) dropped.
    assert vocab == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "##a", "##b", "##c"]
    assert report.alphabet_dropped == 2
    assert report.warnings == ["--vocab-size 11 leaves room for only 3 initial characters: "
                               "2 rare characters left out (they encode as [UNK])"]


def test_limit_alphabet_breaks_ties_by_code_point(tmp_path):
    # z, y, x, w each occur 4 times, v once: a limit of 3 keeps w, x, y (lowest code points).
    documents = _docs("zz yy xx ww\nzz yy xx ww v\n")
    config = TokenizerTrainingConfig(vocab_size=100, limit_alphabet=3, heldout_fraction=0, min_frequency=1)
    report = train_tokenizer(documents, config, tmp_path / "tok", progress=False)
    vocab = (tmp_path / "tok" / "vocab.txt").read_text().split("\n")[:-1]
    assert vocab[5:11] == ["w", "x", "y", "##w", "##x", "##y"]
    assert "z" not in vocab and report.alphabet_dropped == 2


def test_sample_is_independent_of_document_order(tmp_path):
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma"]
    documents = [[" ".join(rng.choice(words) + rng.choice("abcdefgh") for _ in range(rng.randint(3, 30)))]
                 for _ in range(400)]
    config = TokenizerTrainingConfig(vocab_size=200, sample_bytes=3000, heldout_fraction=0.1, min_frequency=1)
    first = train_tokenizer(documents, config, tmp_path / "a", progress=False)
    shuffled = documents[:]
    rng.shuffle(shuffled)
    second = train_tokenizer(shuffled, config, tmp_path / "b", progress=False)
    assert first.training_bytes == second.training_bytes <= 3000
    assert first.training_documents == second.training_documents > 10
    assert first.heldout_documents == second.heldout_documents > 10
    assert (tmp_path / "a" / "vocab.txt").read_bytes() == (tmp_path / "b" / "vocab.txt").read_bytes()


def test_bottom_sample_equals_brute_force(tmp_path):
    rng = random.Random(1)
    items = [(rng.randrange(1 << 64), rng.randint(1, 200)) for _ in range(3000)]
    sampler = BottomSample(tmp_path / "s.txt", budget=5000)
    for n, (priority, size) in enumerate(items):
        sampler.add(str(n).encode().ljust(size, b"."), priority)
    path, total, count = sampler.finish()
    kept, used = set(), 0
    for priority, size in sorted(items):
        if used + size > 5000:
            break
        kept.add(priority)
        used += size
    assert total == used and count == len(kept) > 30
    expected = b"".join(str(n).encode().ljust(size, b".") for n, (p, size) in enumerate(items) if p in kept)
    assert path.read_bytes() == expected  # kept in input order


def test_crash_leaves_no_half_tokenizer(tmp_path):
    def documents():
        yield ["the cat sat"]
        raise BertprepError("corpus.txt: broken")

    with pytest.raises(BertprepError, match="broken"):
        train_tokenizer(documents(), TokenizerTrainingConfig(vocab_size=50), tmp_path / "tok", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_empty_corpus_is_an_error(tmp_path):
    with pytest.raises(BertprepError, match="^the corpus is empty: no documents to train on$"):
        train_tokenizer([], TokenizerTrainingConfig(vocab_size=50), tmp_path / "tok", progress=False)


def _invoke(*args):
    return CliRunner().invoke(main, ["train-tokenizer", *map(str, args), "--quiet"])


def test_cli_errors_are_one_line(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat\non the mat\n\nthe dog ran\n", encoding="utf-8")
    missing = _invoke(tmp_path / "missing.txt", "--out", tmp_path / "t1")
    assert missing.exit_code != 0 and str(tmp_path / "missing.txt") in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and not (tmp_path / "t1").exists()

    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n", encoding="utf-8")
    result = _invoke(empty, "--out", tmp_path / "t2")
    assert result.exit_code == 1 and result.stderr == f"Error: {empty}: no text found\n"

    existing = tmp_path / "tok"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    result = _invoke(corpus, "--out", existing, "--vocab-size", "40")
    assert result.exit_code == 1
    assert result.stderr == f"Error: {existing}: exists and is not empty (use --overwrite to replace it)\n"
    assert (existing / "keep.txt").read_text() == "mine"

    result = _invoke(corpus, "--out", existing, "--vocab-size", "40", "--overwrite")
    assert result.exit_code == 0, result.output
    assert not (existing / "keep.txt").exists() and (existing / "vocab.txt").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "empty.txt", "tok"]  # no temporaries

    result = _invoke(corpus, "--out", tmp_path / "t3", "--sample-bytes", "lots")
    assert result.exit_code == 2 and "'lots' is not a size" in result.stderr


def test_every_option_has_help():
    command = main.commands["train-tokenizer"]
    for param in command.params:
        if param.param_type_name == "option":
            assert param.help, param.name
    assert "Example:" in command.help and "Example:" in main.commands["encode"].help
