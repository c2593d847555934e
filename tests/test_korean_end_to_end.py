"""Korean through both CLIs, on the shared real data: a tokenizer trained on Blue House
petitions with the default options, shards, a few pre-training steps of the tiny
preset, a sentiment classifier fine-tuned on NSMC movie reviews and a QA model on
petition sentences; then what a user sees. The user's Hangul must come back as they
wrote it: predictions echo the text unchanged, fill-mask guesses and the pieces of a
review are syllables (U+AC00-U+D7A3), never the conjoining jamo (U+1100-U+11FF) that
BERT-uncased's accent stripping decomposes Hangul into, and QA answers are cut from the
original context (upper-case Latin kept) by character offsets.

The slice of petitions keeps the shared files' name without a suffix: bertprep must tell
their JSON Lines by the content (read as text, the keys and quotes became the corpus).
"""
from __future__ import annotations

import json
import math
import re

import pytest
from click.testing import CliRunner

from bertmodel.cli import main as model_cli
from bertprep.cli import main as prep_cli
from shared_data import SHARED_DATA

KOREAN = SHARED_DATA / "korean"
PETITIONS = KOREAN / "petitions"
NSMC = KOREAN / "nsmc-a.tsv"
FAST = ["--device", "cpu", "--no-progress"]
REVIEWS = ["이 영화 정말 재밌다 ㅋㅋ 배우들 연기가 최고!", "지루하고 별로였어요... 돈 아까움 ^^;"]

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not NSMC.is_file() or not PETITIONS.is_dir(),
                                 reason=f"shared Korean data not found under {KOREAN}")]


def invoke(cli, *args) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result.output


def jamo(text: str) -> set[str]:
    return {c for c in text if 0x1100 <= ord(c) <= 0x11FF}


def syllables(text: str) -> set[str]:
    return {c for c in text if 0xAC00 <= ord(c) <= 0xD7A3}


def nsmc_rows() -> list[str]:
    """NSMC's lines after the header, read as its own code reads it: TAB, no quoting."""
    return NSMC.read_text(encoding="utf-8").split("\n")[1:-1]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """(root, tokenizer report, tokenizer dir, shards dir, pre-training run dir)."""
    root = tmp_path_factory.mktemp("korean")
    lines, size = [], 0
    with open(PETITIONS / "petitions_2019-04", encoding="utf-8") as handle:
        for line in handle:  # about 300 KB of text: 87 petitions
            lines.append(line)
            size += len(json.loads(line)["content"].encode("utf-8"))
            if size >= 300_000:
                break
    corpus = root / "petitions_2019-04"
    corpus.write_text("".join(lines), encoding="utf-8")
    text = ["--text-field", "content", "--sentences", "split"]
    # Default normalisation and alphabet; a vocabulary half the default size (16,000
    # leaves room for the KS X 1001 syllables the petitions lack: 밌 in 재밌다).
    report = invoke(prep_cli, "train-tokenizer", corpus, *text, "--out", root / "tok", "--vocab-size", 16000)
    invoke(prep_cli, "build-shards", corpus, *text, "--tokenizer", root / "tok", "--out", root / "shards",
           "--max-seq-length", 128, "--cache-dir", root / "cache", "--quiet")
    invoke(model_cli, "pretrain", "--data", root / "shards", "--out", root / "run", "--preset", "tiny",
           "--batch-size", 16, "--max-steps", 30, "--lr", "1e-3", "--warmup-ratio", "0.1", "--log-every", 5,
           "--masking", "dynamic", "--objective", "mlm", "--seed", 1, *FAST)
    return root, report, root / "tok", root / "shards", root / "run"


def test_default_tokenizer_learns_syllables_and_the_shards_record_it(pipeline):
    _, report, tok, shards, _ = pipeline
    assert "accents kept (auto" in report, report
    vocab = (tok / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert not {"category", "petition", "status", "agree"} & set(vocab)  # keys of the records, were they read as text
    assert [t for t in vocab if jamo(t)] == []
    hangul = [t for t in vocab if syllables(t)]
    assert len(hangul) > len(vocab) // 2, len(hangul)  # a Korean vocabulary, not one of ASCII and marks
    manifest = json.loads((shards / "manifest.json").read_text())
    assert '"strip_accents": false' in json.dumps(manifest), "the shards' tokenizer must say it keeps accents"


def test_pretrained_model_fills_masks_with_syllables(pipeline):
    _, _, tok, _, run = pipeline
    losses = [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    vocab_size = len((tok / "vocab.txt").read_text(encoding="utf-8").split("\n")) - 1
    # A uniform guess over the vocabulary costs ln(V); 30 steps at 1e-3 learn the frequent pieces.
    assert all(math.isfinite(x) for x in losses) and losses[-1] < math.log(vocab_size), losses
    out = invoke(model_cli, "fill-mask", run, "정부는 국민의 [MASK]를 들어야 합니다.", "--top-k", 20)
    guesses = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert len(guesses) == 20, out
    assert not jamo("".join(guesses)), out
    assert any(syllables(g) for g in guesses), out


def test_nsmc_classifier_predicts_on_the_users_hangul(pipeline):
    root, _, _, _, run = pipeline
    rows = nsmc_rows()
    header = "id\tdocument\tlabel\n"
    (root / "nsmc-train.tsv").write_text(header + "\n".join(rows[:300]) + "\n", encoding="utf-8")
    (root / "nsmc-dev.tsv").write_text(header + "\n".join(rows[-200:]) + "\n", encoding="utf-8")
    invoke(model_cli, "finetune", "classify", "--model", run, "--train", root / "nsmc-train.tsv",
           "--validation", root / "nsmc-dev.tsv", "--text-column", "document", "--label-column", "label",
           "--out", root / "cls", "--epochs", 1, "--batch-size", 32, "--lr", "1e-3", "--max-seq-length", 64,
           "--seed", 1, *FAST)
    best = json.loads((root / "cls" / "best.json").read_text())
    assert 0.0 <= best["value"] <= 1.0
    out = invoke(model_cli, "predict", root / "cls", *REVIEWS, "--device", "cpu", "--no-progress")
    lines = [line.split("\t") for line in out.splitlines() if "\t" in line]
    assert [text for _, _, text in lines] == REVIEWS  # the text as written, not its normalised form
    assert {label for label, _, _ in lines} <= {"0", "1"}
    assert all(0.5 <= float(p) <= 1.0 for _, p, _ in lines)

    from transformers import AutoTokenizer

    pieces = AutoTokenizer.from_pretrained(str(root / "cls" / "hf")).tokenize(REVIEWS[0])
    assert not jamo("".join(pieces)) and "".join(p.removeprefix("##") for p in pieces) == REVIEWS[0].replace(" ", "")


def _abbreviation_questions() -> list[dict]:
    """Petition sentences holding an upper-case Latin abbreviation (OECD, GMO, TV, ...),
    each asked for it: SQuAD paragraphs whose answers the lower-casing tokenizer sees as
    'oecd', so only offsets into the original give the user's 'OECD' back."""
    from bertprep.corpus.sentences import split_sentences

    paragraphs = []
    with open(PETITIONS / "petitions_2017-08", encoding="utf-8") as handle:
        for line in handle:
            for sentence in split_sentences(json.loads(line)["content"]):
                found = re.search(r"\b[A-Z]{2,5}\b", sentence)
                if found and 30 < len(sentence) < 90:
                    n = len(paragraphs)
                    paragraphs.append({"context": sentence, "qas": [{
                        "id": f"q{n}", "question": "이 문장에 나오는 영어 약어는 무엇입니까?",
                        "answers": [{"text": found.group(), "answer_start": found.start()}]}]})
            if len(paragraphs) >= 48:
                return paragraphs
    return paragraphs


def test_qa_answers_are_the_original_characters(pipeline):
    root, _, _, _, run = pipeline
    paragraphs = _abbreviation_questions()
    assert len(paragraphs) == 48
    for name, part in (("train", paragraphs[:32]), ("dev", paragraphs[32:])):
        (root / f"qa-{name}.json").write_text(json.dumps(
            {"version": "1.1", "data": [{"title": "petitions", "paragraphs": part}]}, ensure_ascii=False),
            encoding="utf-8")
    invoke(model_cli, "finetune", "qa", "--model", run, "--train", root / "qa-train.json",
           "--validation", root / "qa-dev.json", "--out", root / "qa", "--max-steps", 4, "--batch-size", 8,
           "--lr", "1e-3", "--max-seq-length", 96, "--seed", 1, *FAST)
    invoke(model_cli, "evaluate", root / "qa", "--device", "cpu", "--no-progress")
    nbest = json.loads((root / "qa" / "nbest_predictions.json").read_text(encoding="utf-8"))
    contexts = {p["qas"][0]["id"]: p["context"] for p in paragraphs[32:]}
    assert set(nbest) == set(contexts)
    answers = [(qid, entry["text"]) for qid, entries in nbest.items() for entry in entries if entry["text"]]
    assert answers and all(text in contexts[qid] for qid, text in answers)  # cut from the user's text
    assert not jamo("".join(text for _, text in answers))
    # Short contexts: the n-best spans cover every token, so some hold the capitals the
    # tokenizer lower-cased; a de-tokenized answer would read 'oecd'.
    assert any(re.search(r"[A-Z]{2}", text) for _, text in answers)
    context = contexts[next(iter(contexts))]
    out = invoke(model_cli, "predict", root / "qa", "--question", "이 문장에 나오는 영어 약어는 무엇입니까?",
                 "--context", context, "--device", "cpu", "--no-progress")
    answer, score = out.strip().splitlines()[-1].rsplit("\t", 1)  # the answer, then its probability
    assert answer and answer in context and 0.0 < float(score) <= 1.0, (answer, context)
