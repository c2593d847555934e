"""Read word-tagged sentences (NER and the like): CoNLL text, or tables with a list of
words and a list of tags per row.

CoNLL layout: a word per line, its tag in the last whitespace-separated column (the
other columns, such as CoNLL-2003's POS and chunk tags, are ignored), a line that is
blank after stripping between sentences (WNUT-17 has lines holding a lone TAB there),
`-DOCSTART-` lines skipped. A file whose lines all have a single column is untagged
(words only, for prediction). A last column of numbers is refused (a score or weight
column after the tags, `word tag 1.0`, would be read as the tags); integers alone in a
second column are plain labels.

Tables (JSONL, Parquet, a save_to_disk dir, a hub dataset): a column of word lists and
one of tag lists, the tags strings, or integer ids with the dataset's ClassLabel names
(conll2003's ner_tags).

Entity tags (O, B-X, I-X, ...) are kept in IOB2. A file's scheme is detected over all
its sentences (metrics/entities.py): IOB1 (an I- that opens an entity, as the original
CoNLL-2003 files) and BIOES are converted, and the reader says which it saw. Tags of
another form (POS tags such as NN, VBD) are plain labels: scheme "plain", no entities.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertmodel.data.tables import SUFFIX_FORMATS, Table, open_hub_table, open_table
from bertmodel.errors import BertmodelError
from bertmodel.metrics.entities import detect_scheme, to_iob2

TABLE_SUFFIXES = {suffix for suffix, fmt in SUFFIX_FORMATS.items() if fmt in ("jsonl", "parquet")}
DEFAULT_TAG_COLUMNS = ("tags", "ner_tags")  # what --tags-column is when not given, in order
ENTITY_TAG = re.compile(r"O|[BIESLU]-.+")
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
INTEGER = re.compile(r"[-+]?\d+")


@dataclass
class TaggedSentences:
    words: list[list[str]]
    tags: list[list[str]] | None  # IOB2 tags, one per word; None: untagged
    source: str
    line_numbers: np.ndarray | None = None  # (N,) 1-based first line of each sentence (text files)
    scheme: str = "IOB2"  # the scheme the source was written in (converted to IOB2), or "plain"
    label_names: list[str] | None = None  # tag order the data declares (a datasets ClassLabel)

    def __len__(self) -> int:
        return len(self.words)

    def head(self, n: int) -> "TaggedSentences":
        """The first n sentences."""
        cut = lambda values: None if values is None else values[:n]  # noqa: E731
        return TaggedSentences(self.words[:n], cut(self.tags), self.source, cut(self.line_numbers), self.scheme,
                               self.label_names)

    def record(self, i: int) -> str:
        """How errors name sentence i: 'line 17' in a text file, 'row 16' in Arrow data."""
        return f"line {int(self.line_numbers[i])}" if self.line_numbers is not None else f"row {i}"


def read_tagged(path=None, *, dataset: str | None = None, dataset_config: str | None = None,
                split: str | None = None, tokens_column: str = "tokens", tags_column: str | None = None,
                tags_required: bool = True, tag_names: list[str] | None = None) -> TaggedSentences:
    """Sentences of a CoNLL file, a table file, a save_to_disk dir or a hub dataset.
    tag_names: how integer tags are read where the data declares no names (a trained
    model's tag set, whose ids they are)."""
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise BertmodelError(f"{path}: no such file or directory")
        if path.is_dir() or path.suffix.lower() in TABLE_SUFFIXES:
            table = open_table(path, split=split if path.is_dir() else None)
            data = _from_table(table, tokens_column, tags_column, tags_required, tag_names)
        else:
            data = read_conll(path, tags_required)
    elif dataset:
        table = open_hub_table(dataset, config=dataset_config, split=split or "train")
        data = _from_table(table, tokens_column, tags_column, tags_required, tag_names)
    else:
        raise BertmodelError("give the data: a file or --dataset NAME")
    if not len(data):
        raise BertmodelError(f"{data.source}: no sentences")
    return _to_iob2(data)


def read_conll(path: Path, tags_required: bool = True) -> TaggedSentences:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BertmodelError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    words: list[list[str]] = []
    tags: list[list[str]] = []
    starts: list[int] = []
    columns: dict[int, int] = {}  # fields per line -> first line with that many (tagged or not)
    widest = 0  # the most fields on a line
    sentence_words: list[str] = []
    sentence_tags: list[str] = []

    def close() -> None:
        if sentence_words:
            words.append(sentence_words.copy())
            tags.append(sentence_tags.copy())
            sentence_words.clear()
            sentence_tags.clear()

    for number, line in enumerate(text.split("\n"), start=1):
        fields = line.split()
        if not fields:
            close()
            continue
        if fields[0] == "-DOCSTART-":
            close()
            continue
        columns.setdefault(min(len(fields), 2), number)
        widest = max(widest, len(fields))
        if not sentence_words:
            starts.append(number)
        sentence_words.append(fields[0])
        sentence_tags.append(fields[-1] if len(fields) > 1 else "")
    close()
    if not words:
        raise BertmodelError(f"{path}: no sentences (a CoNLL file has a word and its tag per line)")
    if len(columns) == 2:  # some lines with a tag, some without
        raise BertmodelError(f"{path}: line {columns[1]} has a word and no tag, but line {columns[2]} has a tag; "
                             "give every word a tag (the last column), or none")
    tagged = 2 in columns
    if not tagged and tags_required:
        raise BertmodelError(f"{path}: no tags (each line holds only a word); training and evaluation need the "
                             "tag in the last column")
    if tagged:
        _refuse_numeric_tags(path, tags, columns[2], widest)
    return TaggedSentences(words, tags if tagged else None, str(path), np.asarray(starts, np.int64))


def _refuse_numeric_tags(path: Path, tags: list[list[str]], first_line: int, widest: int) -> None:
    """A last column of numbers is not tags (CoNLL readers take the last column, so a
    score after the tag, `word tag 1.0`, would be learnt or scored as the tags). Integers
    in a second and last column stay plain labels (ids given as text)."""
    seen = {t for sentence in tags for t in sentence}
    if not all(NUMBER.fullmatch(t) for t in seen):
        return
    if widest < 3 and all(INTEGER.fullmatch(t) for t in seen):
        return
    shown = ", ".join(sorted(seen)[:3]) + (", ..." if len(seen) > 3 else "")
    raise BertmodelError(f"{path}: line {first_line}: the last column holds numbers ({shown}), not tags; the tag is "
                         "read from the last column: put it last (or drop the columns after it)")


def _from_table(table: Table, tokens_column: str, tags_column: str | None, tags_required: bool,
                tag_names: list[str] | None = None) -> TaggedSentences:
    lines = table.line_numbers
    record = table.record
    words = table.get(table.column(tokens_column, "tokens"))
    for i, value in enumerate(words):
        if not isinstance(value, (list, tuple)) or not all(isinstance(w, str) for w in value):
            raise BertmodelError(f"{table.source}: {record(i)}: {tokens_column!r} is not a list of words "
                                 f"(got {_show(value)})")
        if not value:
            raise BertmodelError(f"{table.source}: {record(i)}: {tokens_column!r} is an empty list")
    words = [list(w) for w in words]
    if tags_column is None:
        tags_column = next((c for c in DEFAULT_TAG_COLUMNS if table.has(c)), None)
        if tags_column is None:
            if tags_required:
                raise BertmodelError(f"{table.source}: no tags column ({' or '.join(DEFAULT_TAG_COLUMNS)}); the "
                                     f"columns are {', '.join(map(str, table.columns))}; name it with --tags-column")
            return TaggedSentences(words, None, table.source, lines)
    elif not table.has(tags_column) and not tags_required:
        return TaggedSentences(words, None, table.source, lines)
    column = table.column(tags_column, "tags")
    names = table.class_names.get(column) or (list(tag_names) if tag_names else None)
    tags = []
    for i, (sentence, value) in enumerate(zip(words, table.get(column))):
        if not isinstance(value, (list, tuple)):
            raise BertmodelError(f"{table.source}: {record(i)}: {tags_column!r} is not a list of tags "
                                 f"(got {_show(value)})")
        if len(value) != len(sentence):
            raise BertmodelError(f"{table.source}: {record(i)}: {len(sentence)} words but {len(value)} tags")
        tags.append([_tag(t, names, table.source, record(i), tags_column) for t in value])
    return TaggedSentences(words, tags, table.source, lines, label_names=names)


def _tag(value, names: list[str] | None, source: str, where: str, column: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if names is None:
            raise BertmodelError(f"{source}: {where}: integer tag {value} in {column!r} and no tag names (a datasets "
                                 "ClassLabel) to read it by; give the tags as strings")
        if not 0 <= value < len(names):
            raise BertmodelError(f"{source}: {where}: tag id {value} is not one of the {len(names)} tag names")
        return names[value]
    raise BertmodelError(f"{source}: {where}: tag {_show(value)} in {column!r} is neither a string nor an id")


def _to_iob2(data: TaggedSentences) -> TaggedSentences:
    if data.tags is None:
        return data
    for i, tags in enumerate(data.tags):
        if any(not t for t in tags):
            raise BertmodelError(f"{data.source}: {data.record(i)}: a blank tag")
    if not any(t != "O" and ENTITY_TAG.fullmatch(t) for tags in data.tags for t in tags):
        data.scheme = "plain"  # labels, not entities (no B-/I-/E-/S- tag): nothing to convert
        return data
    for i, tags in enumerate(data.tags):  # entity tags, every one: a stray "B_PER" is an error, not a type
        if bad := next((t for t in tags if not ENTITY_TAG.fullmatch(t)), None):
            raise BertmodelError(f"{data.source}: {data.record(i)}: tag {bad!r} is not O or B-/I-/E-/S- and a type, "
                                 "as the file's other tags are")
    scheme = detect_scheme(data.tags)
    if scheme != "IOB2":
        converted = []
        for i, tags in enumerate(data.tags):
            try:
                converted.append(to_iob2(tags, scheme))
            except ValueError as exc:
                raise BertmodelError(f"{data.source}: {data.record(i)}: {exc}") from None
        data.tags = converted
    data.scheme = scheme
    return data


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"
