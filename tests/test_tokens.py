"""`finetune tokens`: reading CoNLL and tag-list tables (IOB1/BIOES read as IOB2),
WordPiece windows that predict every word once, the head trained step by step against
transformers' BertForTokenClassification, and a run end to end: export that loads as
AutoModelForTokenClassification with equal logits, `predict` entities equal to
transformers' token-classification pipeline (aggregation "first"), `evaluate`'s
per-sentence predictions."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from bertmodel.data.tagged import read_tagged
from bertmodel.data.word_windows import IGNORE_INDEX, encode_words
from bertmodel.errors import BertmodelError
from bertmodel.model import BertForTokenClassification
from bertmodel.model.unpad import set_unpad
from bertmodel.tasks.entity_text import group_entities
from bertmodel.tasks.tokens import TagSet
from shared_data import SHARED_DATA
from test_heads_match_transformers import tiny, train_both, twin

transformers = pytest.importorskip("transformers")

CONLL = SHARED_DATA / "ner" / "conll2003"
WNUT = SHARED_DATA / "ner" / "wnut17"
CASED_VOCAB = SHARED_DATA / "bert-base-cased-vocab.txt"
needs_data = pytest.mark.skipif(not CONLL.is_dir() or not CASED_VOCAB.is_file(),
                                reason=f"the shared NER data and vocabularies are not at {SHARED_DATA}")


# -- reading -------------------------------------------------------------------------------

@needs_data
def test_conll2003_reads_as_published():
    train = read_tagged(CONLL / "train.txt")
    valid = read_tagged(CONLL / "valid.txt")
    assert (len(train), len(valid)) == (14_041, 3_250)  # the standard sizes, -DOCSTART- skipped
    assert sum(map(len, train.words)) == 203_621
    assert train.words[0] == "EU rejects German call to boycott British lamb .".split()
    assert train.tags[0] == ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]
    assert train.scheme == "IOB2"
    entities = sum(t.startswith("B-") for tags in valid.tags for t in tags)
    assert entities == 5_942


@needs_data
def test_wnut17_lines_holding_a_tab_end_sentences():
    # 2,394 sentence breaks in wnut17train.conll are a lone TAB: blank once stripped.
    data = read_tagged(WNUT / "wnut17train.conll")
    assert len(data) == 3_394
    assert sum(map(len, data.words)) == 62_730


def test_iob1_and_bioes_are_read_as_iob2(tmp_path):
    iob1 = tmp_path / "iob1.txt"
    iob1.write_text("-DOCSTART- -X- O\n\nJohn NNP I-PER\nSmith NNP I-PER\nmet VBD O\nMary NNP I-PER\n"
                    "Jane NNP B-PER\nin IN O\nRome NNP I-LOC\n\n")
    data = read_tagged(iob1)
    assert data.scheme == "IOB1"
    assert data.tags == [["B-PER", "I-PER", "O", "B-PER", "B-PER", "O", "B-LOC"]]
    bioes = tmp_path / "bioes.txt"
    bioes.write_text("John S-PER\nvisited O\nNew B-LOC\nYork E-LOC\n\nAda S-PER\n")
    data = read_tagged(bioes)
    assert data.scheme == "BIOES"
    assert data.tags == [["B-PER", "O", "B-LOC", "I-LOC"], ["B-PER"]]  # no blank line at the end: still read


def test_plain_tags_are_labels_not_entities(tmp_path):
    pos = tmp_path / "pos.txt"
    pos.write_text("The DT\ncat NN\nsat VBD\n\n")
    data = read_tagged(pos)
    assert data.scheme == "plain"
    assert TagSet.from_data(data).entities is False


@pytest.mark.parametrize("text, message", [
    ("John B-PER\nsmiled\n\n", "line 2 has a word and no tag, but line 1 has a tag"),
    ("John B-PER\nsmiled B_PER\n\n", "line 1: tag 'B_PER' is not O or B-/I-/E-/S- and a type"),
    ("\n\n", "no sentences"),
])
def test_bad_conll_is_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(BertmodelError, match=message) as err:
        read_tagged(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_tables_with_word_and_tag_lists(tmp_path):
    rows = [{"tokens": ["Ada", "Lovelace", "wrote"], "ner_tags": ["B-PER", "I-PER", "O"]},
            {"tokens": ["in", "London"], "ner_tags": ["O", "B-LOC"]}]
    path = tmp_path / "ner.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = read_tagged(path)  # no --tags-column: "tags", else "ner_tags"
    assert data.words[1] == ["in", "London"] and data.tags[1] == ["O", "B-LOC"]
    path.write_text(json.dumps({"tokens": ["Ada"], "ner_tags": [1]}) + "\n")
    with pytest.raises(BertmodelError, match="integer tag 1 in 'ner_tags' and no tag names"):
        read_tagged(path)
    path.write_text(json.dumps({"tokens": ["Ada", "Byron"], "ner_tags": ["B-PER"]}) + "\n")
    with pytest.raises(BertmodelError, match="line 1: 2 words but 1 tags"):
        read_tagged(path)


def test_a_saved_dataset_with_classlabel_tags_reads_their_names(tmp_path):
    import datasets

    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names))})
    ds = datasets.Dataset.from_dict({"tokens": [["Ada", "Lovelace", "in", "London"]], "ner_tags": [[1, 2, 0, 3]]},
                                    features=features)
    ds.save_to_disk(str(tmp_path / "ds"))
    data = read_tagged(tmp_path / "ds")
    assert data.tags == [["B-PER", "I-PER", "O", "B-LOC"]]
    assert TagSet.from_data(data).tags == tuple(names)  # the dataset's id order, kept for export


# -- windows ---------------------------------------------------------------------------------

@needs_data
def test_every_word_is_predicted_once_and_long_sentences_become_windows():
    data = read_tagged(CONLL / "valid.txt").head(400)
    tags = TagSet.from_data(data)
    windows = encode_words(CASED_VOCAB, data.words, 16, data.tags, tags.ids)
    assert windows.split_sentences > 50  # at 16 tokens many sentences need more than one window
    assert np.diff(windows.offsets).max() <= 16
    seen = [np.zeros(len(w), int) for w in data.words]
    for w in range(len(windows)):
        lo, hi = windows.offsets[w], windows.offsets[w + 1]
        for k in windows.word_index[lo:hi][windows.word_index[lo:hi] >= 0]:
            seen[windows.sentence[w]][k] += 1
    assert all((s == 1).all() for s in seen)
    # the first piece of each word carries its tag, the others nothing
    firsts = windows.word_index >= 0
    assert (windows.labels[~firsts] == IGNORE_INDEX).all()
    gold = [tags.ids[t] for sentence in data.tags for t in sentence]
    assert sorted(windows.labels[firsts].tolist()) == sorted(gold)


def test_label_all_tokens_labels_later_pieces_inside_the_entity(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "love", "##lace", "ada", "\x00"]) + "\n")
    ids = {"O": 0, "B-PER": 1, "I-PER": 2}
    words = [["Ada", "Lovelace", "\x07"]]  # a control character normalises to nothing: [UNK] stands in
    first = encode_words(vocab, words, 16, [["B-PER", "B-PER", "O"]], ids)
    every = encode_words(vocab, words, 16, [["B-PER", "B-PER", "O"]], ids, label_all_tokens=True)
    assert first.input_ids.tolist() == [2, 7, 5, 6, 1, 3]
    assert first.labels.tolist() == [-100, 1, 1, -100, 0, -100]
    assert every.labels.tolist() == [-100, 1, 1, 2, 0, -100]
    assert first.word_index.tolist() == [-1, 0, 1, -1, 2, -1]


def test_entities_group_as_the_pipeline_groups_them():
    text = "Ada Lovelace met Charles Babbage in London"
    words = [(0, 3), (4, 12), (13, 16), (17, 24), (25, 32), (33, 35), (36, 42)]
    labels = ["B-PER", "I-PER", "O", "B-PER", "B-PER", "O", "I-LOC"]
    got = group_entities(words, labels, [0.9, 0.7, 0.99, 0.8, 0.6, 0.9, 0.5], text)
    assert [(e["entity_group"], e["word"]) for e in got] == [("PER", "Ada Lovelace"), ("PER", "Charles"),
                                                            ("PER", "Babbage"), ("LOC", "London")]
    assert got[0]["score"] == pytest.approx(0.8)


# -- the head, step by step against transformers -----------------------------------------------

@needs_data
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_token_classification_trains_step_by_step_as_transformers(packed):
    data = read_tagged(CONLL / "train.txt").head(32)
    tags = TagSet.from_data(data)
    windows = encode_words(CASED_VOCAB, data.words, 48, data.tags, tags.ids)
    torch.manual_seed(0)
    ours = BertForTokenClassification(tiny(28_996), len(tags.tags))
    theirs = twin(ours, transformers.BertForTokenClassification, num_labels=len(tags.tags))
    if packed:
        set_unpad(ours, "repad")
    batches = []
    for start in range(0, 32, 4):
        batch = {k: torch.from_numpy(v) for k, v in windows.collate(np.arange(start, start + 4), 0, 1).items()}
        batches.append((batch, dict(batch)))
    masks = torch.cat([b["attention_mask"].flatten() for b, _ in batches])
    labels = torch.cat([b["labels"].flatten() for b, _ in batches])
    assert (masks == 0).any()  # padding occurs ...
    assert ((labels == IGNORE_INDEX) & (masks == 1)).sum() > 64  # ... and so do real pieces the loss skips
    train_both(ours, theirs, batches, clip=3.6)  # between the run's smallest and largest norm (3.2-4.0)


# -- end to end ------------------------------------------------------------------------------------

def bertmodel(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "bertmodel.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


@needs_data
@pytest.mark.slow
def test_finetune_tokens_end_to_end_exports_predicts_and_evaluates(tmp_path):
    run = tmp_path / "ner"
    done = bertmodel("finetune", "tokens", "--model", "random:tiny", "--tokenizer", CASED_VOCAB,
                     "--train", CONLL / "train.txt", "--validation", CONLL / "valid.txt", "--max-train-examples", 64,
                     "--max-eval-examples", 40, "--batch-size", 16, "--epochs", 1, "--lr", "1e-5", "--out", run,
                     "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "eval_f1" in done.stdout + done.stderr
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evaluated = [m for m in metrics if "eval_f1" in m]
    assert evaluated and {"eval_precision", "eval_recall", "eval_accuracy", "eval_PER_f1"} <= set(evaluated[-1])

    # transformers loads the export, with equal logits
    model = transformers.AutoModelForTokenClassification.from_pretrained(run / "hf").eval()
    assert model.config.id2label[0] == "O" and len(model.config.id2label) == 9
    tokenizer = transformers.AutoTokenizer.from_pretrained(run / "hf")
    texts = ["Ada Lovelace worked with Charles Babbage in London .", "Reuters reported from Germany on Monday ."]
    from bertmodel.inference.predict import _setup

    task, net, _ = _setup(run, {}, "cpu", read_validation=False)
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = model(**enc).logits
        ours = net(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]).logits
    keep = enc["attention_mask"].bool()
    torch.testing.assert_close(ours[keep], theirs[keep], atol=1e-5, rtol=1e-5)

    # predict's entities are the pipeline's (aggregation "first")
    pipe = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer,
                                 aggregation_strategy="first", device="cpu")
    got = [json.loads(line) for line in bertmodel("predict", run, *texts).stdout.splitlines()]
    for text, record in zip(texts, got):
        expected = pipe(text)
        assert [(e["entity_group"], e["start"], e["end"]) for e in record["entities"]] == \
            [(e["entity_group"], e["start"], e["end"]) for e in expected]
        assert [e["score"] for e in record["entities"]] == pytest.approx([float(e["score"]) for e in expected],
                                                                           abs=1e-5)
    assert any(r["entities"] for r in got), "an untrained head should still tag some words"

    # evaluate writes a JSON line per sentence and the metrics of the run's validation data
    shown = bertmodel("evaluate", run)
    assert shown.returncode == 0, shown.stderr
    scores = json.loads(shown.stdout)
    assert {"f1", "precision", "recall", "accuracy"} <= set(scores)
    best = json.loads((run / "best.json").read_text())  # the run's own evaluation of the model it kept
    assert best["metric"] == "f1" and scores["f1"] == pytest.approx(best["value"], abs=1e-9)
    lines = (run / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 40
    first = json.loads(lines[0])
    assert len(first["tokens"]) == len(first["tags"]) == len(first["gold"])

    # a file of words gets a tag per word
    words = tmp_path / "words.txt"
    words.write_text("Ada\nLovelace\n\nLondon\ncalling\n")
    tagged = [json.loads(line) for line in bertmodel("predict", run, "--file", words).stdout.splitlines()]
    assert [len(r["tags"]) for r in tagged] == [2, 2]


def test_a_pretrained_head_is_kept_only_for_the_same_head_and_classes(tmp_path):
    """Heads share tensor names (classifier.*): a NER head whose labels are in another
    order fits ours row for row on the wrong classes, a regression head fits a choice
    scorer. Only the same class with the same labels keeps its head."""
    from bertmodel.hf import export_hf, load_pretrained
    from bertmodel.model import BertForMultipleChoice, BertForSequenceClassification
    from bertmodel.tasks.finetuning import start_from

    config = tiny(50)
    torch.manual_seed(0)
    source = BertForTokenClassification(config, 3)
    tags = ["O", "B-PER", "I-PER"]
    export_hf(source, tmp_path / "ner", head_config={"num_labels": 3, "id2label": dict(enumerate(tags)),
                                                      "label2id": {t: i for i, t in enumerate(tags)}})
    pre = load_pretrained(tmp_path / "ner")
    same, log = start_from(BertForTokenClassification, pre, [].append, labels=tags, num_labels=3), []
    torch.testing.assert_close(same.classifier.weight, source.classifier.weight)
    other = start_from(BertForTokenClassification, pre, log.append, labels=["O", "B-LOC", "I-LOC"], num_labels=3)
    assert not torch.equal(other.classifier.weight, source.classifier.weight)
    assert "the head of" in log[0] and "its labels (O, B-PER, I-PER) are not this run's (O, B-LOC, I-LOC)" in log[0]
    torch.testing.assert_close(other.bert.encoder.layer[0].attention.self.query.weight,
                               source.bert.encoder.layer[0].attention.self.query.weight)  # the encoder is kept

    regression = BertForSequenceClassification(config, 1)
    export_hf(regression, tmp_path / "stsb", head_config={"num_labels": 1})
    log = []
    scorer = start_from(BertForMultipleChoice, load_pretrained(tmp_path / "stsb"), log.append)
    assert not torch.equal(scorer.classifier.weight, regression.classifier.weight)
    assert "a BertForSequenceClassification head" in log[0]
