"""Fine-tuning data for classification: labelled tables in every format, the label
space, and encoding that equals transformers' tokenizer (on the real GLUE files)."""
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertmodel.data.classification import encode_examples, encode_texts, longest_first, pad_batch
from bertmodel.data.labels import LabelSpace
from bertmodel.data.tables import LabelledTexts, read_hub_dataset, read_table
from bertmodel.errors import BertmodelError
from bertprep.tokenizer import load_tokenizer
from shard_fixtures import write_vocab
from shared_data import SHARED_DATA

GLUE = SHARED_DATA / "glue"
UNCASED = SHARED_DATA / "bert-base-uncased-vocab.txt"
needs_glue = pytest.mark.skipif(not GLUE.is_dir() or not UNCASED.is_file(),
                                reason=f"real GLUE files and vocab not found under {SHARED_DATA}")

ROWS = [  # (sentence1, sentence2, label): commas, quotes and a tab-free text in each
    ("the old city, by the river", 'a "new" bridge', "yes"),
    ("children played music", "the baker opened shop", "no"),
    ('he said "rain', "wind over the harbour", "yes"),
]


def _check_rows(data: LabelledTexts):
    assert data.texts == [r[0] for r in ROWS]
    assert data.pairs == [r[1] for r in ROWS]
    assert data.labels == [r[2] for r in ROWS]


# -- every format ----------------------------------------------------------------------

def test_tsv_reads_quotes_literally_and_names_lines(tmp_path):
    path = tmp_path / "t.tsv"
    body = "".join(f"{a}\t{b}\t{label}\r\n" for a, b, label in ROWS)  # CRLF line ends too
    path.write_bytes(("\ufeffs1\ts2\tlabel\r\n" + body).encode("utf-8"))
    data = read_table(path, "s1", "s2", "label")
    _check_rows(data)  # the unbalanced quote in row 3 did not swallow a line
    assert [data.record(i) for i in range(3)] == ["line 2", "line 3", "line 4"]
    assert data.source == str(path)


def test_csv_with_quoted_fields(tmp_path):
    path = tmp_path / "t.csv"
    lines = ["s1,s2,label"] + [",".join('"' + f.replace('"', '""') + '"' for f in row) for row in ROWS]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _check_rows(read_table(path, "s1", "s2", "label"))
    # A quoted field across two lines: the record is named by the line it starts on.
    path.write_text('s1,s2,label\n"one\ntwo",b,yes\nc,d,no\n', encoding="utf-8")
    data = read_table(path, "s1", "s2")
    assert data.texts == ["one\ntwo", "c"] and data.record(1) == "line 4"


def test_jsonl_json_array_and_parquet(tmp_path):
    records = [{"s1": a, "s2": b, "label": label, "extra": 1} for a, b, label in ROWS]
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")
    _check_rows(read_table(jsonl, "s1", "s2"))
    array = tmp_path / "t.json"
    array.write_text(json.dumps(records, indent=1), encoding="utf-8")
    data = read_table(array, "s1", "s2")
    _check_rows(data)
    assert data.record(2) == "row 2"
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(records), parquet)
    data = read_table(parquet, "s1", "s2")
    _check_rows(data)
    assert data.record(0) == "row 0"


def test_save_to_disk_dataset_and_dataset_dict(tmp_path):
    datasets = pytest.importorskip("datasets")
    columns = {"s1": [r[0] for r in ROWS], "s2": [r[1] for r in ROWS], "label": [r[2] for r in ROWS]}
    datasets.Dataset.from_dict(columns).save_to_disk(str(tmp_path / "ds"))
    _check_rows(read_table(tmp_path / "ds", "s1", "s2", split="train"))  # split ignored for a Dataset
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns),
                               "validation": datasets.Dataset.from_dict({k: v[:1] for k, v in columns.items()})})
    dd.save_to_disk(str(tmp_path / "dd"))
    assert read_table(tmp_path / "dd", "s1", "s2", split="validation").texts == [ROWS[0][0]]
    with pytest.raises(BertmodelError, match=r"dd: a DatasetDict and no split was given; its splits are train, validation"):
        read_table(tmp_path / "dd", "s1", "s2")
    with pytest.raises(BertmodelError, match=r"it has no split 'test'; its splits are train, validation"):
        read_table(tmp_path / "dd", "s1", "s2", split="test")


def test_class_label_order_is_kept(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"s": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["not_equivalent", "equivalent"])})
    ds = datasets.Dataset.from_dict({"s": ["a", "b", "c"], "label": [1, 0, 1]}, features=features)
    ds.save_to_disk(str(tmp_path / "ds"))
    ds.to_parquet(str(tmp_path / "t.parquet"))
    for source in (tmp_path / "ds", tmp_path / "t.parquet"):
        data = read_table(source, "s")
        assert data.labels == ["equivalent", "not_equivalent", "equivalent"]
        space = LabelSpace.from_labels(data)
        assert space.labels == ("not_equivalent", "equivalent")  # declared, not sorted
        assert space.encode(data).tolist() == [1, 0, 1]


def test_hub_dataset_by_name(tmp_path):
    pytest.importorskip("datasets")
    folder = tmp_path / "local_dataset"  # load_dataset(name) of a folder of data files: offline
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"s": "a b", "y": 1}\n{"s": "c", "y": 0}\n', encoding="utf-8")
    (folder / "validation.jsonl").write_text('{"s": "d", "y": 1}\n', encoding="utf-8")
    data = read_hub_dataset(str(folder), "s", label_column="y", split="validation", cache_dir=str(tmp_path / "cache"))
    assert (data.texts, data.labels, data.source) == (["d"], [1], f"{folder}:validation")
    with pytest.raises(BertmodelError, match=r"local_dataset:test: cannot load the dataset \(ValueError: Unknown split"):
        read_hub_dataset(str(folder), "s", split="test", cache_dir=str(tmp_path / "cache"))


def test_labels_absent_for_prediction(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("index\tsentence\n0\thello\n1\tworld\n", encoding="utf-8")
    assert read_table(path, "sentence", labels_required=False).labels is None
    assert read_table(path, "sentence", label_column=None).labels is None
    assert read_table(path, "sentence", label_column="index", labels_required=False).labels == ["0", "1"]


# -- bad input: one line naming the file and the record ------------------------------

@pytest.mark.parametrize("name, content, match", [
    ("empty.tsv", "", r"empty\.tsv: empty file"),
    ("blank.tsv", "\n\n", r"blank\.tsv: empty file"),
    ("header.csv", "s,label\n", r"header\.csv: no records after the header line"),
    ("empty.jsonl", "\n", r"empty\.jsonl: empty file"),
    ("missing.tsv", "text\tlabel\nhi\t1\n",
     r"missing\.tsv: no text column 'sentence'; the columns are 'text', 'label' \(if the file has no header"),
    ("missing.jsonl", '{"text": "hi", "label": 1}\n',
     r"missing\.jsonl: no text column 'sentence'; the columns are 'text', 'label'$"),
    ("blank_label.tsv", "sentence\tlabel\nhi\t1\nho\t \n", r"blank_label\.tsv: line 3: label column 'label' is blank"),
    ("null_label.jsonl", '{"sentence": "a", "label": 1}\n\n{"sentence": "b", "label": null}\n',
     r"null_label\.jsonl: line 3: label column 'label' is blank"),
    ("no_label.jsonl", '{"sentence": "a", "label": 1}\n{"sentence": "b"}\n', r"line 2: label column 'label' is blank"),
    ("fields.tsv", "sentence\tlabel\nhi\t1\nho\t1\textra\n",
     r"fields\.tsv: line 3 has 3 fields, the header has 2 \(TAB-separated, no quoting\)"),
    ("bad.jsonl", '{"sentence": "a", "label": 1}\n{"sentence": \n', r"bad\.jsonl: line 2: not valid JSON"),
    ("number.jsonl", '{"sentence": 12, "label": 1}\n', r"number\.jsonl: line 1: text column 'sentence' is int 12, not text"),
    ("multi.jsonl", '{"sentence": "a", "label": [1, 2]}\n', r"multi\.jsonl: line 1: label \[1, 2\] is a list"),
    ("array.json", '[{"sentence": "a", "label": 1}, 3]', r"array\.json: row 1: expected a JSON object, got int"),
    ("table.txt", "sentence\tlabel\n", r"table\.txt: unknown table format '\.txt'"),
])
def test_bad_text_files(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(BertmodelError, match=match) as info:
        read_table(path, "sentence", label_column="label")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name, content, where", [
    ("cut.jsonl", '{"sentence": "a", "label": 1}\n{"sentence": "b\n',
     "line 2: not valid JSON (Unterminated string starting at: column 14)"),
    ("comma.jsonl", '{"sentence": "a", "label": 1}\n{"sentence": "b" "label": 0}\n',
     "line 2: not valid JSON (Expecting ',' delimiter: column 18)"),
    ("cut.json", '[{"sentence": "a", "label": 1},\n {"sentence": "b, "label": 0}]\n',
     "line 2: not valid JSON (Expecting ',' delimiter: column 20)"),
])
def test_json_errors_say_where(tmp_path, name, content, where):
    """The decoder's message alone ("Unterminated string starting at") names no place."""
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(BertmodelError) as info:
        read_table(path, "sentence")
    assert str(info.value) == f"{path}: {where}"


def test_bad_bytes_missing_file_and_bad_parquet(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes(b"sentence\tlabel\ncaf\xe9\t1\n")
    with pytest.raises(BertmodelError, match=r"latin1\.tsv: line 2 is not valid UTF-8 \(byte 0xe9 at offset 18\)"):
        read_table(path, "sentence")
    with pytest.raises(BertmodelError, match=r"nope\.tsv: no such file or directory"):
        read_table(tmp_path / "nope.tsv", "sentence")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(BertmodelError, match=r"broken\.parquet: not a readable Parquet file"):
        read_table(tmp_path / "broken.parquet", "sentence")
    pq.write_table(pa.table({"sentence": pa.array([], pa.string())}), tmp_path / "empty.parquet")
    with pytest.raises(BertmodelError, match=r"empty\.parquet: empty file \(no rows\)"):
        read_table(tmp_path / "empty.parquet", "sentence")
    pq.write_table(pa.table({"sentence": ["a", "b"], "label": [1.0, math.nan]}), tmp_path / "nan.parquet")
    with pytest.raises(BertmodelError, match=r"nan\.parquet: row 1: label column 'label' is blank"):
        read_table(tmp_path / "nan.parquet", "sentence")
    (tmp_path / "folder").mkdir()
    with pytest.raises(BertmodelError, match=r"folder: not a datasets save_to_disk directory"):
        read_table(tmp_path / "folder", "sentence")


# -- the label space -------------------------------------------------------------------

def _data(labels, source="train.tsv"):
    return LabelledTexts(texts=["x"] * len(labels), pairs=None, labels=labels, source=source,
                         line_numbers=np.arange(2, 2 + len(labels)))


def test_label_order_as_run_glue():
    assert LabelSpace.from_labels(_data(["b", "a", "c", "a"])).labels == ("a", "b", "c")
    assert LabelSpace.from_labels(_data(["B", "a"])).labels == ("B", "a")  # code point order
    numeric = LabelSpace.from_labels(_data(["10", "2", "1", "2"]))  # text that is all integers
    assert (numeric.kind, numeric.labels) == ("int", (1, 2, 10))
    assert numeric.encode(_data(["10", 1, "2"])).tolist() == [2, 0, 1]  # from TSV or JSON alike
    assert LabelSpace.from_labels(_data([3, 1, 2])).labels == (1, 2, 3)


def test_regression_when_asked_or_float():
    for labels, num_labels in ((["3.800", "1.5", "0"], None), ([0.5, 2.0], None), (["1", "2", "3"], 1)):
        space = LabelSpace.from_labels(_data(labels), num_labels=num_labels)
        assert (space.regression, space.num_labels, space.problem_type) == (True, 1, "regression")
        np.testing.assert_array_equal(space.encode(_data(labels)), np.asarray(labels, np.float64).astype(np.float32))
        assert space.encode(_data(labels)).dtype == np.float32
    with pytest.raises(BertmodelError, match=r"train\.tsv: line 3: regression needs a number, label is 'high'"):
        LabelSpace.from_labels(_data(["1", "high"]), num_labels=1)


def test_num_labels_keeps_absent_classes_or_refuses():
    assert LabelSpace.from_labels(_data(["0", "2"]), num_labels=3).labels == (0, 1, 2)
    assert LabelSpace.from_labels(_data([0.0, 1.0]), num_labels=2).labels == (0, 1)  # a float column
    with pytest.raises(BertmodelError, match=r"num_labels 3, but the training labels are 2: 'a', 'b'"):
        LabelSpace.from_labels(_data(["a", "b"]), num_labels=3)
    with pytest.raises(BertmodelError, match=r"every training label is 'a'; classification needs at least 2"):
        LabelSpace.from_labels(_data(["a", "a"]))


def test_unknown_validation_label():
    space = LabelSpace.from_labels(_data(["entailment", "not_entailment"]))
    with pytest.raises(BertmodelError, match=r"^dev\.tsv: line 3: unknown label 'neutral'; "
                                             r"the training labels are 'entailment', 'not_entailment'$"):
        space.encode(_data(["entailment", "neutral"], source="dev.tsv"))
    with pytest.raises(BertmodelError, match=r"dev\.tsv: line 2: unknown label '7'"):
        LabelSpace.from_labels(_data(["0", "1"])).encode(_data(["7"], source="dev.tsv"))


def test_label_space_round_trips_through_json():
    for space in (LabelSpace("str", ("entailment", "not_entailment")), LabelSpace("int", (1, 2, 10)),
                  LabelSpace("regression")):
        assert LabelSpace.from_dict(json.loads(json.dumps(space.to_dict()))) == space
    space = LabelSpace("int", (1, 2, 10))
    assert space.id2label() == {0: "1", 1: "2", 2: "10"} and space.label2id() == {"1": 0, "2": 1, "10": 2}
    assert space.decode([2, 0]) == [10, 1]
    assert LabelSpace("regression").id2label() == {0: "LABEL_0"}
    with pytest.raises(BertmodelError, match="kind 'int' with non-integer labels"):
        LabelSpace.from_dict({"kind": "int", "labels": ["a", "b"]})


# -- encoding --------------------------------------------------------------------------

def test_longest_first_matches_tokenizers_rule_table():
    # The table of tokenizers' own test (truncate_encodings_longest_first, max_length 7).
    cases = [(0, 0, 0, 0), (0, 2, 0, 2), (0, 8, 0, 7), (2, 0, 2, 0), (2, 8, 2, 5), (4, 4, 3, 4),
             (4, 8, 3, 4), (8, 0, 7, 0), (8, 2, 5, 2), (8, 4, 4, 3), (8, 8, 3, 4), (2, 4, 2, 4)]
    a, b, keep_a, keep_b = (np.array(c) for c in zip(*cases))
    got_a, got_b = longest_first(a, b, 7)
    assert got_a.tolist() == keep_a.tolist() and got_b.tolist() == keep_b.tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.integers(3, 30))
def test_longest_first_equals_tokenizers_truncation(a, b, max_length):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    tok = Tokenizer(models.WordLevel({"[CLS]": 0, "[SEP]": 1, "w": 2, "[UNK]": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 0), ("[SEP]", 1)])
    tok.enable_truncation(max_length, strategy="longest_first")
    type_ids = tok.encode(" ".join(["w"] * a), " ".join(["w"] * b)).type_ids
    got_a, got_b = longest_first(np.array([a]), np.array([b]), max_length - 3)
    assert (int(got_a[0]), int(got_b[0])) == (type_ids.count(0) - 2, type_ids.count(1) - 1)


def test_encode_layout_truncation_and_padding(tmp_path):
    tok = load_tokenizer(write_vocab(tmp_path / "vocab.txt"))
    cls, sep = tok.special.cls, tok.special.sep
    data = LabelledTexts(texts=["the river", "children played music in the old city"],
                         pairs=["a bridge", "the baker"], labels=["yes", "no"], source="t.tsv")
    space = LabelSpace.from_labels(data)
    enc = encode_examples(tok, data, space, max_seq_length=8, engine="tokenizers")
    ids0, types0 = enc.row(0)
    river = tok.tokenizer.encode("the river", add_special_tokens=False).ids
    bridge = tok.tokenizer.encode("a bridge", add_special_tokens=False).ids
    assert ids0.tolist() == [cls, *river, sep, *bridge, sep]
    assert types0.tolist() == [0] * (len(river) + 2) + [1] * (len(bridge) + 1)
    assert enc.lengths.tolist() == [len(ids0), 8] and enc.truncated == 1  # row 1: 7 + 2 words cut to 3 + 2
    assert enc.labels.tolist() == [1, 0]  # "no" < "yes"
    batch = pad_batch(enc, [0, 1], pad_id=tok.special.pad)
    assert batch["input_ids"].shape == (2, 8)  # longest row, rounded to 8 and capped at max_seq_length
    assert batch["attention_mask"].sum(axis=1).tolist() == enc.lengths.tolist()
    assert batch["input_ids"][0, len(ids0):].tolist() == [tok.special.pad] * (8 - len(ids0))
    assert batch["input_ids"].dtype == np.int64 and batch["labels"].tolist() == [1, 0]
    assert pad_batch(enc, [0], pad_multiple=1)["input_ids"].shape == (1, len(ids0))  # its own longest
    single = encode_texts(tok, ["the river", "children played music in the old city"], max_seq_length=4)
    assert single.row(1)[0].tolist() == [cls, *tok.tokenizer.encode("children played", add_special_tokens=False).ids, sep]
    assert single.labels is None and not single.token_type_ids.any()
    with pytest.raises(BertmodelError, match="max_seq_length 2 leaves no room for the 3 special tokens of a pair"):
        encode_texts(tok, ["a"], ["b"], max_seq_length=2)
    with pytest.raises(BertmodelError, match=r"t\.tsv: row 0: unknown label 'maybe'"):
        encode_examples(tok, LabelledTexts(["a"], None, ["maybe"], "t.tsv"), space)


# -- the real GLUE files ---------------------------------------------------------------

@needs_glue
def test_glue_files_read_as_documented():
    rte = read_table(GLUE / "RTE/train.tsv", "sentence1", "sentence2", "label")
    assert len(rte) == 2490 and rte.labels.count("entailment") == 1249
    assert (rte.texts[0], rte.pairs[0], rte.labels[0]) == (
        "No Weapons of Mass Destruction Found in Iraq Yet.", "Weapons of Mass Destruction Found in Iraq.", "not_entailment")
    assert rte.texts[2164].startswith('"That film')  # the unbalanced quote stays in its row
    assert len(read_table(GLUE / "RTE/dev.tsv", "sentence1", "sentence2", "label")) == 277
    assert LabelSpace.from_labels(rte).labels == ("entailment", "not_entailment")
    mrpc = read_table(GLUE / "MRPC/train.tsv", "#1 String", "#2 String", "Quality")  # header after a BOM
    assert len(mrpc) == 3668 and LabelSpace.from_labels(mrpc).encode(mrpc).sum() == 2474
    assert len(read_table(GLUE / "MRPC/dev.tsv", "#1 String", "#2 String", "Quality")) == 408
    cola = read_table(GLUE / "CoLA/in_domain_train.tsv", 3, label_column=1, header=False)
    assert len(cola) == 8551 and cola.labels.count("1") == 6023 and cola.record(0) == "line 1"
    assert cola.texts[0] == "Our friends won't buy this analysis, let alone the next one we propose."
    dev = read_table(GLUE / "CoLA/in_domain_dev.tsv", "3", label_column="1", header=False)  # CLI strings
    assert len(dev) == 527 and dev.labels.count("1") == 367
    with pytest.raises(BertmodelError, match=r"in_domain_train\.tsv: no text column 'sentence'; the columns are "
                                             r"'gj04', '1', '', \"Our friends won't buy this analysis, let\"… \(if the file has no header line"):
        read_table(GLUE / "CoLA/in_domain_train.tsv", "sentence")


@needs_glue
@pytest.mark.parametrize("name, text, pair, label, header", [
    ("RTE/train.tsv", "sentence1", "sentence2", "label", True),
    ("MRPC/train.tsv", "#1 String", "#2 String", "Quality", True),
    ("CoLA/in_domain_train.tsv", 3, None, 1, False),
])
def test_encoding_equals_transformers_on_glue(name, text, pair, label, header):
    transformers = pytest.importorskip("transformers")
    vocab = UNCASED.read_text(encoding="utf-8").splitlines()
    reference = transformers.BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    data = read_table(GLUE / name, text, pair, label, header=header)
    tok = load_tokenizer(UNCASED)
    # 128 (the default) and a length that cuts most rows, where longest-first decides.
    for max_length in (128, 16 if pair is None else 40):
        ours = encode_examples(tok, data, LabelSpace.from_labels(data), max_seq_length=max_length)
        theirs = reference(data.texts, data.pairs, truncation=True, max_length=max_length)
        assert ours.offsets[-1] == sum(len(row) for row in theirs["input_ids"])
        assert ours.input_ids.tolist() == [t for row in theirs["input_ids"] for t in row]
        assert ours.token_type_ids.tolist() == [t for row in theirs["token_type_ids"] for t in row]
        assert ours.lengths.tolist() == [len(row) for row in theirs["input_ids"]]
        if max_length < 128:
            assert ours.truncated > len(data) // 10
