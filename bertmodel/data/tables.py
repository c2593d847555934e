"""Read labelled text tables for fine-tuning: TSV, CSV, JSONL, Parquet and datasets.

One entry point per kind of source, both returning `LabelledTexts` (texts, optional
text pairs, raw labels, where they came from):
- `read_table(path, ...)`: a file, or a `datasets` `save_to_disk` directory;
- `read_hub_dataset(name, ...)`: `datasets.load_dataset(name, config, split=...)`.
`open_table(path)` gives the same files as a `Table` of named columns, for readers that
choose their columns by what the file holds (`bertmodel predict --file`).

Formats, chosen by suffix (or `file_format=`):
- `.tsv`/`.tab`: split on TAB with no quote processing, as GLUE's own reader does
  (`csv.QUOTE_NONE`): RTE and MRPC hold unbalanced double quotes, and a quote-aware
  reader would merge rows. A UTF-8 BOM is dropped (MRPC's header starts with one);
- `.csv`: the `csv` module's default dialect (commas, double-quoted fields);
- `.jsonl`/`.ndjson`/`.json`: one JSON object per line, or a `.json` file holding one
  array of objects;
- `.parquet`/`.pq`: pyarrow; a `datasets` ClassLabel stored in its metadata is honoured;
- a directory: `datasets.load_from_disk` (a Dataset, or a DatasetDict and `split`).

A classifier's text columns, when none is given, are found by name (`text_columns`,
shared by finetune, evaluate and predict --file): the first of TEXT_LAYOUTS the table
holds, pairs first.

TSV and CSV have a header line by default. `header=False` reads header-less files
(CoLA's raw `in_domain_*.tsv`: source, label, author's mark, sentence), with columns
given as 0-based indices (`text_column=3, label_column=1`); every row must then have
as many fields as the first. Blank lines in text files are skipped.

Records are named in errors as `line N` (1-based line of the file where the record
starts) for text files and `row N` (0-based, as `dataset[N]`) for Arrow data.
Text must be valid UTF-8: a bad byte is an error naming its line, not a silent
replacement inside a training example.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from bertmodel.errors import BertmodelError

Column = str | int
SUFFIX_FORMATS = {".tsv": "tsv", ".tab": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl",
                  ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
FORMATS = ("tsv", "csv", "jsonl", "parquet", "dataset")

# The (text, text pair) columns read when no --text-column is given, the first the table
# holds: GLUE's pairs under the names transformers' run_glue.py keys them by
# (task_to_keys: sentence1/sentence2 for MRPC, RTE, STS-B and WNLI, question1/question2
# for QQP, premise/hypothesis for MNLI, question/sentence for QNLI), SQuAD-style
# question/context, transformers' text/text_pair (what predict --file reads), then a
# single text (SST-2's and CoLA's sentence, text). Pairs come first: QNLI's table also
# has a sentence. run_glue falls back on the first two non-label columns; here a table
# without these names is refused instead: its first columns are often an id or an index.
TEXT_LAYOUTS: tuple[tuple[str, str | None], ...] = (
    ("sentence1", "sentence2"), ("question1", "question2"), ("premise", "hypothesis"), ("question", "sentence"),
    ("question", "context"), ("text", "text_pair"), ("sentence", None), ("text", None))
USUAL_TEXT_COLUMNS = ", ".join(a if b is None else f"{a} + {b}" for a, b in TEXT_LAYOUTS)


@dataclass
class LabelledTexts:
    texts: list[str]  # segment A of each record
    pairs: list[str] | None  # segment B, or None for single-sentence data
    labels: list | None  # raw labels as read (str from TSV/CSV, JSON/Arrow values otherwise); None: unlabelled
    source: str  # the file or directory, or "name[config]:split" for a hub dataset
    label_names: list[str] | None = None  # class order the data declares (a datasets ClassLabel)
    line_numbers: np.ndarray | None = None  # (N,) 1-based line where each record starts (text files)
    columns: "TextColumns | None" = None  # the text columns read, and whether they were found by name

    def __len__(self) -> int:
        return len(self.texts)

    def head(self, n: int) -> "LabelledTexts":
        """The first n records."""
        cut = lambda values: None if values is None else values[:n]  # noqa: E731
        return LabelledTexts(self.texts[:n], cut(self.pairs), cut(self.labels), self.source, self.label_names,
                             cut(self.line_numbers), self.columns)

    def record(self, i: int) -> str:
        """How errors name record i: 'line 17' in a text file, 'row 16' in Arrow data."""
        if self.line_numbers is not None:
            return f"line {int(self.line_numbers[i])}"
        return f"row {i}"


@dataclass
class Table:
    """What a format reader hands over: columns by name (or index), and record names."""

    columns: list[Column]  # every column present, in file order
    get: Callable[[Column], list]  # column -> values (missing cells as None)
    line_numbers: np.ndarray | None
    class_names: dict[Column, list[str]]  # datasets ClassLabel columns -> names
    hint: str = ""  # appended to a missing-column error
    source: str = ""  # the file or directory, for messages

    def listing(self) -> str:
        """The columns as errors list them ("'a', 'b'"; a header-less file's first row kept short)."""
        shown = ", ".join(repr(c) if len(str(c)) <= 40 else repr(str(c)[:40]) + "…" for c in self.columns[:30])
        return shown + (f", … ({len(self.columns)} in all)" if len(self.columns) > 30 else "")

    def has(self, column: Column) -> bool:
        return column in self.columns or (isinstance(column, str) and column.isdigit()
                                          and int(column) in self.columns)

    def column(self, column: Column, role: str) -> Column:
        """`column` as the file names it ("3" from a command line is index 3 in a
        header-less file); a missing column is an error listing those there are."""
        if column in self.columns:
            return column
        if isinstance(column, str) and column.isdigit() and int(column) in self.columns:
            return int(column)
        # A header-less file read as if it had one shows its first row: listing() keeps it short.
        raise BertmodelError(f"{self.source}: no {role} column {column!r}; the columns are {self.listing()}"
                             f"{self.hint}")

    def record(self, i: int) -> str:
        """How errors name record i: 'line 17' in a text file, 'row 16' in Arrow data."""
        return f"line {int(self.line_numbers[i])}" if self.line_numbers is not None else f"row {i}"

    def texts(self, column: Column, role: str = "text", blank_ok: bool = False) -> list[str]:
        """The strings of `column`; a missing or non-text cell (a blank one unless
        `blank_ok`: prediction input) is an error naming its record."""
        return _texts(self.get(self.column(column, role)), column, self.source, self.record, blank_ok)


@dataclass(frozen=True)
class TextColumns:
    """The columns a classifier reads: its text, its text pair (None: single texts), and
    whether they were found by name (no --text-column given)."""

    text: Column
    pair: Column | None
    found: bool

    def describe(self) -> str:
        """"text columns 'text' + 'text_pair' (found by name; ...)", as a run logs it."""
        shown = repr(self.text) + (f" + {self.pair!r}" if self.pair is not None else "")
        return f"text column{'s' if self.pair is not None else ''} {shown}" + (
            " (found by name; --text-column chooses others)" if self.found else "")


def text_columns(table: Table, text_column: Column | None = None, text_pair_column: Column | None = None,
                 fallback: bool = False) -> TextColumns:
    """The text (and pair) columns to read: `text_column` and `text_pair_column` as
    given; with no text column, the first of TEXT_LAYOUTS the table holds (a given
    `text_pair_column` then replaces the layout's pair). `fallback`: the given columns
    are a trained run's own (evaluate, predict --file), read where the table has the
    text column, else found by name. Names none: one line listing the table's columns."""
    if text_column is not None and (not fallback or table.has(text_column)):
        return TextColumns(text_column, text_pair_column, False)
    for text, pair in TEXT_LAYOUTS:
        if table.has(text) and (pair is None or table.has(pair)):
            return TextColumns(text, pair if text_pair_column is None or fallback else text_pair_column, True)
    if text_column is not None:  # the run's own column, and no usual one either
        table.column(text_column, "text")
    if table.columns and all(isinstance(c, int) for c in table.columns):
        raise BertmodelError(f"{table.source}: no --text-column given and a file without a header has no column "
                             "names; give --text-column as a 0-based index")
    raise BertmodelError(f"{table.source}: no --text-column given and none of the usual text columns "
                         f"({USUAL_TEXT_COLUMNS}); the columns are {table.listing()}{table.hint}")


def read_table(path, text_column: Column | None = None, text_pair_column: Column | None = None,
               label_column: Column | None = "label", *, labels_required: bool = True,
               split: str | None = None, header: bool = True,
               file_format: str | None = None, fallback: bool = False) -> LabelledTexts:
    """Read a labelled table from a file or a `save_to_disk` directory.

    `text_column=None`: the text (and pair) columns found by name (`text_columns`, as
    with `fallback` for a text column the table lacks).
    `label_column=None` reads no labels; `labels_required=False` reads them when the
    column exists and gives `labels=None` when it does not (prediction-only data).
    `split` picks a split of a saved DatasetDict (ignored for a saved Dataset).
    Raises BertmodelError (one line, naming the file) for a missing file, an unknown
    format, an empty file, a missing column, a malformed record, a blank text or a blank
    label."""
    table = open_table(path, split=split, header=header, file_format=file_format)
    return _select(table, table.source, text_column, text_pair_column, label_column, labels_required, fallback)


def open_table(path, *, split: str | None = None, header: bool = True, file_format: str | None = None) -> Table:
    """The columns of a file or `save_to_disk` directory (formats and errors as read_table)."""
    path = Path(path)
    if not path.exists():
        raise BertmodelError(f"{path}: no such file or directory")
    fmt = file_format or ("dataset" if path.is_dir() else SUFFIX_FORMATS.get(path.suffix.lower()))
    if fmt not in FORMATS:
        raise BertmodelError(f"{path}: unknown table format {path.suffix or '(no suffix)'!r}; "
                             f"use one of {', '.join(SUFFIX_FORMATS)} or a save_to_disk directory")
    if fmt == "dataset":
        return _dataset_table(_load_from_disk(path, split), str(path))
    if fmt == "parquet":
        table = _read_parquet(path)
    else:
        text = _read_text(path)
        if fmt == "tsv":
            table = _read_delimited(path, text, header, tsv=True)
        elif fmt == "csv":
            table = _read_delimited(path, text, header, tsv=False)
        else:
            table = _read_json_records(path, text)
    table.source = str(path)
    return table


def read_hub_dataset(name: str, text_column: Column | None = None, text_pair_column: Column | None = None,
                     label_column: Column | None = "label", *, config: str | None = None,
                     split: str = "train", labels_required: bool = True,
                     cache_dir: str | None = None, fallback: bool = False) -> LabelledTexts:
    """Read one split of `datasets.load_dataset(name, config, split=split)` (columns as read_table)."""
    table = open_hub_table(name, config=config, split=split, cache_dir=cache_dir)
    return _select(table, table.source, text_column, text_pair_column, label_column, labels_required, fallback)


def open_hub_table(name: str, *, config: str | None = None, split: str = "train",
                   cache_dir: str | None = None) -> Table:
    """The columns of one split of `datasets.load_dataset(name, config, split=split)`."""
    import datasets

    source = f"{name}[{config}]:{split}" if config else f"{name}:{split}"
    try:
        ds = datasets.load_dataset(name, config, split=split, cache_dir=cache_dir)
    except Exception as exc:  # datasets raises many types (hub, builder, split); one line
        raise BertmodelError(f"{source}: cannot load the dataset ({_first_line(exc)})") from None
    return _dataset_table(ds, source)


# -- formats ---------------------------------------------------------------------------

def _read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise BertmodelError(f"{path}: line {line} is not valid UTF-8 "
                             f"(byte 0x{data[exc.start]:02x} at offset {exc.start:,})") from None


def _read_delimited(path: Path, text: str, header: bool, tsv: bool) -> Table:
    rows: list[list[str]] = []
    starts: list[int] = []
    if tsv:
        # split("\n"), not splitlines(): a text may hold \x0b, \x1c or U+2028, which
        # splitlines() would treat as line ends.
        for number, line in enumerate(text.split("\n"), start=1):
            line = line[:-1] if line.endswith("\r") else line
            if line:
                rows.append(line.split("\t"))
                starts.append(number)
    else:
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            previous = 0
            for row in reader:
                if row:
                    rows.append(row)
                    starts.append(previous + 1)
                previous = reader.line_num
        except csv.Error as exc:
            raise BertmodelError(f"{path}: line {reader.line_num}: malformed CSV ({exc})") from None
    if not rows:
        raise BertmodelError(f"{path}: empty file")
    kind = "TAB-separated, no quoting" if tsv else "CSV"
    if header:
        names: list[Column] = [name.strip() for name in rows[0]]
        rows, starts = rows[1:], starts[1:]
        if not rows:
            raise BertmodelError(f"{path}: no records after the header line")
        width, what = len(names), f"the header has {len(names)}"
        hint = " (if the file has no header line, pass --no-header and 0-based column indices)"
    else:
        width, what = len(rows[0]), f"line {starts[0]} has {len(rows[0])}"
        names = list(range(width))
        hint = ""
    for row, start in zip(rows, starts):
        if len(row) != width:
            raise BertmodelError(f"{path}: line {start} has {len(row)} fields, {what} ({kind})")
    index = {name: i for i, name in reversed(list(enumerate(names)))}  # first of duplicates
    return Table(columns=names, get=lambda c: [row[index[c]] for row in rows],
                 line_numbers=np.asarray(starts, np.int64), class_names={}, hint=hint)


def _read_json_records(path: Path, text: str) -> Table:
    records: list[dict] = []
    starts: list[int] = []
    stripped = text.lstrip()
    if not stripped:
        raise BertmodelError(f"{path}: empty file")
    if stripped.startswith("["):  # one JSON array of objects
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BertmodelError(f"{path}: line {exc.lineno}: not valid JSON ({_json_error(exc)})") from None
        starts = [None] * len(records)
    else:
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BertmodelError(f"{path}: line {number}: not valid JSON ({_json_error(exc)})") from None
            starts.append(number)
    if not records:
        raise BertmodelError(f"{path}: empty file (no records)")
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            where = f"line {starts[i]}" if starts[i] is not None else f"row {i}"
            raise BertmodelError(f"{path}: {where}: expected a JSON object, got {type(record).__name__}")
    columns = list(dict.fromkeys(key for record in records for key in record))
    # A JSON array has no useful line numbers: records are then named "row N" (0-based).
    lines = np.asarray(starts, np.int64) if starts and starts[0] is not None else None
    return Table(columns=columns, get=lambda c: [record.get(c) for record in records],
                 line_numbers=lines, class_names={})


def _read_parquet(path: Path) -> Table:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise BertmodelError(f"{path}: not a readable Parquet file ({_first_line(exc)})") from None
    if table.num_rows == 0:
        raise BertmodelError(f"{path}: empty file (no rows)")
    return Table(columns=list(table.column_names), get=lambda c: table.column(c).to_pylist(),
                 line_numbers=None, class_names=_class_names_from_schema(table.schema))


def _class_names_from_schema(schema) -> dict[Column, list[str]]:
    """ClassLabel columns of a Parquet file written by `datasets` (it stores its
    features in the schema metadata); {} for any other file."""
    if not schema.metadata or b"huggingface" not in schema.metadata:
        return {}
    try:
        import datasets

        features = datasets.Features.from_arrow_schema(schema)
    except Exception:  # foreign or damaged metadata: read the plain values
        return {}
    return {name: list(f.names) for name, f in features.items() if isinstance(f, datasets.ClassLabel)}


def _load_from_disk(path: Path, split: str | None):
    import datasets

    if not ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file()):
        raise BertmodelError(f"{path}: not a datasets save_to_disk directory "
                             "(no state.json or dataset_dict.json)")
    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise BertmodelError(f"{path}: cannot load the saved dataset ({_first_line(exc)})") from None
    if isinstance(ds, datasets.DatasetDict):
        if split is None or split not in ds:
            asked = "no split was given" if split is None else f"it has no split {split!r}"
            raise BertmodelError(f"{path}: a DatasetDict and {asked}; its splits are {', '.join(ds)}")
        ds = ds[split]
    return ds


def _dataset_table(ds, source: str) -> Table:
    import datasets

    if len(ds) == 0:
        raise BertmodelError(f"{source}: empty dataset (no rows)")
    names = {}
    for n, f in ds.features.items():
        # A ClassLabel column, or a list of them (a sequence of tags: conll2003's ner_tags)
        label = f if isinstance(f, datasets.ClassLabel) else getattr(f, "feature", None)
        if isinstance(label, datasets.ClassLabel):
            names[n] = list(label.names)
    plain = ds.with_format(None)  # python values whatever format the caller set
    return Table(columns=list(ds.column_names), get=lambda c: list(plain[c]), line_numbers=None,
                 class_names=names, source=source)


# -- columns and values ----------------------------------------------------------------

def _select(table: Table, source: str, text_column, text_pair_column, label_column,
            labels_required: bool, fallback: bool = False) -> LabelledTexts:
    table.source = source
    columns = text_columns(table, text_column, text_pair_column, fallback)
    texts = table.texts(columns.text)
    pairs = table.texts(columns.pair, "text-pair") if columns.pair is not None else None
    labels, label_names = None, None
    if label_column is not None and (labels_required or table.has(label_column)):
        column = table.column(label_column, "label")
        label_names = table.class_names.get(column)
        labels = _labels(table.get(column), label_column, source, table.record, label_names)
    return LabelledTexts(texts=texts, pairs=pairs, labels=labels, source=source,
                         label_names=label_names, line_numbers=table.line_numbers, columns=columns)


def _texts(values: list, column, source: str, record, blank_ok: bool = False) -> list[str]:
    for i, value in enumerate(values):
        if not isinstance(value, str):
            what = "missing" if value is None else f"{type(value).__name__} {value!r}, not text"
            raise BertmodelError(f"{source}: {record(i)}: text column {column!r} is {what}")
        if not blank_ok and not value.strip():
            # As a blank label is: an example of [CLS] [SEP] alone teaches the head nothing
            # true, and is almost always a shifted column or a broken export.
            blank = sum(1 for v in values if not v.strip()) if all(isinstance(v, str) for v in values) else 1
            raise BertmodelError(f"{source}: {record(i)}: text column {column!r} is blank"
                                 + (f" ({blank:,} blank texts in all)" if blank > 1 else ""))
    return values


def _labels(values: list, column, source: str, record, class_names: list[str] | None) -> list:
    out = []
    for i, value in enumerate(values):
        if isinstance(value, str):
            value = value.strip()
        blank = (value is None or value == "" or (isinstance(value, float) and math.isnan(value))
                 or (class_names is not None and value == -1))  # datasets' "no label"
        if blank:
            raise BertmodelError(f"{source}: {record(i)}: label column {column!r} is blank"
                                 + (" (-1, datasets' 'no label')" if value == -1 else ""))
        if isinstance(value, (list, dict)):
            raise BertmodelError(f"{source}: {record(i)}: label {value!r} is a {type(value).__name__}; "
                                 "one label per record is expected (multi-label is not supported)")
        if class_names is not None:
            if not isinstance(value, int) or not 0 <= value < len(class_names):
                raise BertmodelError(f"{source}: {record(i)}: label {value!r} is not a class of "
                                     f"{column!r} ({len(class_names)} classes)")
            value = class_names[value]
        out.append(value)
    return out


def _json_error(exc: json.JSONDecodeError) -> str:
    """The decoder's message with its column: some ("Unterminated string starting at")
    only make sense with a place (the line is already in the message it goes into)."""
    return f"{exc.msg}: column {exc.colno}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
