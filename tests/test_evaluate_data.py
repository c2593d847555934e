"""What `evaluate` and `predict` do with data that does not fit the model, on small real
runs (a NER run on CoNLL-2003, a ModernBERT NER run, an RTE classifier): gold tags the
model does not know (WNUT-17 on a CoNLL model) are refused, or scored as missed with no
loss; a CoNLL file whose last column is a number is one line; the sentences split into
windows and the rows truncated are reported as training reports them; a long text
read at the model's full length gets the entities and scores of transformers' pipeline."""
from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.data.tagged import read_tagged
from bertmodel.data.word_windows import encode_words
from bertmodel.errors import BertmodelError
from bertmodel.metrics.entities import entity_metrics
from shared_data import SHARED_DATA

transformers = pytest.importorskip("transformers")

CONLL, WNUT = SHARED_DATA / "ner" / "conll2003", SHARED_DATA / "ner" / "wnut17"
RTE = SHARED_DATA / "glue" / "RTE"
CASED, UNCASED = SHARED_DATA / "bert-base-cased-vocab.txt", SHARED_DATA / "bert-base-uncased-vocab.txt"
pytestmark = pytest.mark.skipif(not (CONLL.is_dir() and WNUT.is_dir() and RTE.is_dir() and CASED.is_file()),
                                reason=f"the shared NER and GLUE data are not at {SHARED_DATA}")
FAST = ("--batch-size", 8, "--max-steps", 2, "--device", "cpu", "--no-progress")


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def ok(*args):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result


def ner_finetune(out, *extra):
    return ok("finetune", "tokens", "--model", "random:tiny", "--tokenizer", CASED, "--train", CONLL / "train.txt",
              "--validation", CONLL / "valid.txt", "--max-train-examples", 32, "--max-eval-examples", 8,
              "--out", out, *FAST, *extra)


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory):
    """A BERT token classifier trained (two steps) on CoNLL-2003's tags (its first 32
    sentences have all 9)."""
    out = tmp_path_factory.mktemp("ner") / "run"
    ner_finetune(out)
    return out


# -- gold tags the model does not know -----------------------------------------------------

def test_gold_tags_the_model_does_not_know_are_refused_or_scored_as_missed(ner_run, tmp_path):
    wnut = tmp_path / "wnut17-dev-head.conll"  # WNUT-17's first 300 sentences, as published
    text = (WNUT / "emerging.dev.conll").read_text(encoding="utf-8")
    wnut.write_text("\n\n".join(re.split(r"\n[ \t]*\n", text)[:300]) + "\n", encoding="utf-8")
    gold = read_tagged(wnut).tags
    assert len(gold) == 300
    known = set(json.loads((ner_run / "hf" / "config.json").read_text())["id2label"].values())
    unknown = Counter(t for tags in gold for t in tags if t not in known)
    words = sum(map(len, gold))
    assert unknown and sum(unknown.values()) < words  # WNUT's types are not CoNLL's; its O is

    refused = invoke("evaluate", "--no-progress", ner_run, "--data", wnut, "--out", tmp_path / "refused")
    assert (refused.exit_code, refused.stdout) == (1, "")
    line = refused.stderr.strip()
    assert "\n" not in line and line.startswith(f"Error: {wnut}: {sum(unknown.values()):,} of {words:,} words carry "
                                                "gold tags the model does not know: ")
    top, count = unknown.most_common(1)[0]
    assert f"{top} ({count:,})" in line and "--allow-unknown-tags" in line
    assert not (tmp_path / "refused").exists()

    scored = invoke("evaluate", "--no-progress", ner_run, "--data", wnut, "--out", tmp_path / "scored",
                    "--allow-unknown-tags")
    assert scored.exit_code == 0, scored.output
    warning = scored.stderr.splitlines()[0]
    assert warning.startswith(f"warning: {wnut}: {sum(unknown.values()):,} of {words:,} words carry gold tags")
    assert warning.endswith("they count as missed entities and wrong words; no loss is reported")
    metrics = json.loads(scored.stdout)
    assert "loss" not in metrics  # a loss has no term for a tag the model has no logit for
    # Every word and every gold entity counts: the figures are the metric's over all of them.
    records = [json.loads(line) for line in (tmp_path / "scored" / "predictions.jsonl").read_text().splitlines()]
    assert [r["gold"] for r in records] == gold
    predicted = [r["tags"] for r in records]
    expected = entity_metrics(gold, predicted)
    assert [metrics[k] for k in ("f1", "precision", "recall", "accuracy")] == \
        [expected[k] for k in ("f1", "precision", "recall", "accuracy")]
    assert metrics["accuracy"] == sum(p == g for ps, gs in zip(predicted, gold) for p, g in zip(ps, gs)) / words
    assert metrics["person_recall"] == expected["per_type"]["person"]["recall"] == 0.0  # never predicted: all missed


def test_a_number_in_the_last_column_is_one_line_naming_the_file(ner_run, tmp_path):
    lines = (CONLL / "valid.txt").read_text().splitlines()[:200]
    scored = tmp_path / "scored.txt"  # word POS chunk tag score: the tag is no longer last
    scored.write_text("".join(f"{line} 1.0\n" if line.strip() else "\n" for line in lines))
    first = next(i for i, line in enumerate(lines, 1) if line.strip() and not line.startswith("-DOCSTART-"))
    message = f"{scored}: line {first}: the last column holds numbers (1.0), not tags"
    with pytest.raises(BertmodelError, match=re.escape(message)):
        read_tagged(scored)
    refused = invoke("evaluate", "--no-progress", ner_run, "--data", scored, "--out", tmp_path / "eval")
    assert (refused.exit_code, refused.stdout) == (1, "")
    assert refused.stderr.startswith(f"Error: {message}") and refused.stderr.count("\n") == 1
    ids = tmp_path / "ids.txt"  # a word and an integer: ids given as text stay plain labels
    ids.write_text("Ada 1\nwrote 0\n\nLondon 1\n")
    assert read_tagged(ids).tags == [["1", "0"], ["1"]]


# -- what --max-seq-length did, reported ------------------------------------------------------

def test_evaluate_reports_the_sentences_split_into_windows(ner_run, tmp_path):
    result = ok("evaluate", "--no-progress", ner_run, "--max-seq-length", 12, "--out", tmp_path / "eval")
    data = read_tagged(CONLL / "valid.txt").head(8)  # the run's --max-eval-examples
    windows = encode_words(CASED, data.words, 12)
    longer = sum(len(w) + 2 > 12 for w in data.words)  # at least these need a second window
    assert windows.split_sentences >= longer > 0
    assert (f"validation: 8 sentences from {CONLL / 'valid.txt'} ({len(windows):,} windows of up to 12 tokens, "
            f"{windows.split_sentences:,} sentences split into windows)") in result.stderr.splitlines()
    assert json.loads(result.stdout)["f1"] >= 0  # and still every word is scored


@pytest.mark.slow  # an RTE run of its own: about 7 s
def test_evaluate_and_predict_report_truncated_rows(tmp_path):
    run = tmp_path / "rte"
    ok("finetune", "classify", "--model", "random:tiny", "--tokenizer", UNCASED, "--train", RTE / "train.tsv",
       "--validation", RTE / "dev.tsv", "--text-column", "sentence1", "--text-pair-column", "sentence2",
       "--max-train-examples", 16, "--max-eval-examples", 24, "--out", run, *FAST)
    dev = [line.split("\t") for line in (RTE / "dev.tsv").read_text().splitlines()[1:25]]
    tokenizer = transformers.BertTokenizer(str(UNCASED))  # transformers' own count of each pair's tokens
    lengths = np.array([len(tokenizer(a, b)["input_ids"]) for _, a, b, _ in dev])
    result = ok("evaluate", "--no-progress", run, "--max-seq-length", 64, "--out", tmp_path / "eval")
    truncated = int((lengths > 64).sum())
    assert 0 < truncated < len(dev)
    assert (f"validation: 24 examples from {RTE / 'dev.tsv'} ({truncated:,} truncated to 64 tokens)"
            in result.stderr.splitlines())
    _, a, b, _ = dev[int(lengths.argmax())]
    told = invoke("predict", run, a, "--pair", b, "--max-seq-length", 32)
    assert told.exit_code == 0 and told.stderr == (
        "warning: 1 pair read (1 truncated to 32 tokens; the rest of each is not read); --max-seq-length up to the "
        "model's 512 positions reads more\n")
    too_long = invoke("predict", run, a, "--pair", b, "--max-seq-length", 1024)
    assert too_long.exit_code == 1 and too_long.stderr.startswith("Error: --max-seq-length 1024 is longer than")


# -- a long text at the model's full length -------------------------------------------------------

@pytest.mark.slow  # a ModernBERT NER run and transformers' pipeline over ~600 tokens: about 15 s
def test_a_long_text_at_full_length_gets_the_pipelines_entities(tmp_path):
    run = tmp_path / "mb"
    ner_finetune(run, "--architecture", "modernbert", "--lr", "1e-3")
    words = [w for sentence in read_tagged(CONLL / "valid.txt").words[:120] for w in sentence]
    text = " ".join(words)[:2500].rsplit(" ", 1)[0]  # real newswire, ~600 tokens: past the run's 128
    model = transformers.AutoModelForTokenClassification.from_pretrained(run / "hf").eval()
    # The export claims the run's 128, where the pipeline would cut; the whole text takes the
    # model's 8,192, given here as predict takes it below (--max-seq-length 8192).
    assert transformers.BertTokenizer.from_pretrained(run / "hf").model_max_length == 128
    tokenizer = transformers.BertTokenizer.from_pretrained(run / "hf", model_max_length=8192)  # the run's vocab.txt
    assert len(tokenizer(text)["input_ids"]) > 512
    pipe = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer,
                                 aggregation_strategy="first", device="cpu")
    expected = [(e["entity_group"], e["start"], e["end"], float(e["score"])) for e in pipe(text)]
    assert expected

    def entities(result):
        assert result.exit_code == 0, result.output
        return [(e["entity_group"], e["start"], e["end"], e["score"])
                for e in json.loads(result.stdout)["entities"]]

    windowed = invoke("predict", run, text)  # the run's 128 tokens: windows, and a warning saying so
    assert windowed.stderr.startswith("warning: 1 text longer than --max-seq-length 128 read in windows cut at word "
                                      "boundaries (")
    assert "--max-seq-length up to the model's 8,192 positions reads more at once" in windowed.stderr
    spans = entities(windowed)
    assert len(spans) != len(expected) or max(abs(a[3] - b[3]) for a, b in zip(spans, expected)) > 1e-4

    whole = invoke("predict", run, text, "--max-seq-length", 8192)
    assert whole.stderr == ""  # read at once: nothing to say
    got = entities(whole)
    assert [g[:3] for g in got] == [e[:3] for e in expected]
    assert [g[3] for g in got] == pytest.approx([e[3] for e in expected], abs=1e-5)
