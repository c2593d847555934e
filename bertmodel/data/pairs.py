"""What a bi-encoder trains on: (query, positive) pairs or (query, positive, negatives...)
tuples, read from every source sentence-transformers users keep them in.

- a table (TSV, CSV, JSONL, Parquet, a `save_to_disk` directory, `--dataset NAME`;
  data/tables.py opens them all) with sentence-transformers' column names: the query in
  `anchor`, `query` or `question` (or --query-column), the positive in `positive`
  (or --positive-column), hard negatives in `negatives` (a list column), else
  `negative`, `negative_1`, `negative_2`, ... (or --negative-column: comma-separated
  columns, or one list column). Every row must then carry the same number of negatives:
  each becomes a candidate of every query in its batch, as in sentence-transformers'
  (anchor, positive, negative_1, ..., negative_n) layout;
- a BEIR directory (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv; data/beir.py): one
  pair per judged relevant (score > 0) passage of the split, the passage as
  title + " " + text, as BEIR's models encode it;
- a SQuAD file (JSON, JSONL, or a `save_to_disk` directory in the squad layout;
  data/squad.py): (question, its paragraph) pairs, unanswerable v2.0 questions skipped
  (their paragraph does not answer them).

`read_pairs(path)` tells them apart; `pairs_from_table` is the table reader on its own.
Every mistake is one line naming the file and the problem (no positive column, an empty
file, a blank text, rows with unequal negatives).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bertmodel.data.beir import BeirData
from bertmodel.data.tables import Column, Table, open_hub_table, open_table
from bertmodel.errors import BertmodelError

QUERY_COLUMNS = ("anchor", "query", "question")
POSITIVE_COLUMNS = ("positive",)
NEGATIVES_LIST = "negatives"


@dataclass
class Pairs:
    """Training tuples: queries[i] with positives[i] and negatives[i] (the same number for
    every row, possibly none)."""

    queries: list[str]
    positives: list[str]
    negatives: list[list[str]]
    source: str
    columns: dict = field(default_factory=dict)  # what was read: {"query", "positive", "negatives"} or the format

    def __len__(self) -> int:
        return len(self.queries)

    @property
    def num_negatives(self) -> int:
        return len(self.negatives[0]) if self.negatives else 0

    def head(self, n: int) -> "Pairs":
        return Pairs(self.queries[:n], self.positives[:n], self.negatives[:n], self.source, self.columns)

    def text_ids(self) -> np.ndarray:
        """(N, 2 + negatives) int64: one id per distinct text (the same string, the same
        id, across every column), which the loss uses to keep a row's duplicates out of
        its negatives."""
        seen: dict[str, int] = {}
        rows = [[seen.setdefault(t, len(seen)) for t in (q, p, *n)]
                for q, p, n in zip(self.queries, self.positives, self.negatives)]
        return np.asarray(rows, np.int64).reshape(len(rows), 2 + self.num_negatives)

    def describe(self) -> str:
        """"query 'anchor', positive 'positive', 2 negatives", as a run logs it."""
        if "format" in self.columns:
            return self.columns["format"]
        negatives = self.columns.get("negatives") or []
        shown = f"query {self.columns.get('query')!r}, positive {self.columns.get('positive')!r}"
        return shown + (f", negatives {', '.join(map(repr, negatives))} ({self.num_negatives} per row)"
                        if negatives else "")


def read_pairs(path, *, query_column: Column | None = None, positive_column: Column | None = None,
               negative_column: str | None = None, split: str | None = None) -> Pairs:
    """Pairs from a BEIR directory (its `split`, default train), a SQuAD file or
    directory, or any table (columns as the module docstring)."""
    from bertmodel.data.beir import is_beir_dir

    path = Path(path)
    if not path.exists():
        raise BertmodelError(f"{path}: no such file or directory")
    if is_beir_dir(path):
        return read_beir_pairs(path, split or "train")
    if is_squad_file(path):
        return read_squad_pairs(path)
    table = open_table(path, split=split)
    if _is_squad_layout(table) and query_column is None and positive_column is None:
        return read_squad_pairs(path, split=split if path.is_dir() else None)
    return pairs_from_table(table, query_column, positive_column, negative_column)


def read_hub_pairs(name: str, *, config: str | None = None, split: str = "train",
                   query_column: Column | None = None, positive_column: Column | None = None,
                   negative_column: str | None = None) -> Pairs:
    """Pairs from one split of a Hugging Face dataset by name (columns as a table's)."""
    table = open_hub_table(name, config=config, split=split)
    return pairs_from_table(table, query_column, positive_column, negative_column)


def pairs_from_table(table: Table, query_column: Column | None = None, positive_column: Column | None = None,
                     negative_column: str | None = None) -> Pairs:
    if not table.columns or not len(table.get(table.columns[0])):
        raise BertmodelError(f"{table.source}: no rows")
    query = _found(table, query_column, QUERY_COLUMNS, "query", "--query-column")
    positive = _found(table, positive_column, POSITIVE_COLUMNS, "positive", "--positive-column")
    names = _negative_columns(table, negative_column)
    queries, positives = table.texts(query, "query"), table.texts(positive, "positive")
    negatives = _negatives(table, names)
    return Pairs(queries, positives, negatives, table.source,
                 {"query": query, "positive": positive, "negatives": names})


def read_beir_pairs(path, split: str = "train") -> Pairs:
    """One (query, passage) pair per relevant judgement of the split (score > 0), in the
    qrels' order; a split with none is an error."""
    from bertmodel.data.beir import read_beir

    return beir_pairs(read_beir(path, split), path)


def beir_pairs(beir, path, what: str = "BEIR split") -> Pairs:
    """The relevant judgements (score > 0) of a collection's split as pairs."""
    from bertmodel.data.beir import passage_text

    split = beir.split
    queries, positives = [], []
    for qid, judged in beir.qrels.items():
        for docid, score in judged.items():
            if score > 0:
                queries.append(beir.queries[qid])
                positives.append(passage_text(beir.corpus[docid]))
    if not queries:
        raise BertmodelError(f"{path}: qrels/{split}.tsv judges no passage relevant (score > 0): no training pairs")
    return Pairs(queries, positives, [[] for _ in queries], str(path),
                 {"format": f"{what} {split!r} (relevant judgements as pairs)"})


def pairs_collection(pairs: Pairs) -> BeirData:
    """Validation pairs as a collection: each distinct passage (positive or negative) one
    entry of the corpus, each distinct query one query, its positives judged relevant (1)."""
    passages: dict[str, str] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for query, positive, negatives in zip(pairs.queries, pairs.positives, pairs.negatives):
        qid = queries.setdefault(query, f"q{len(queries)}")
        pid = passages.setdefault(positive, f"p{len(passages)}")
        for negative in negatives:
            passages.setdefault(negative, f"p{len(passages)}")
        qrels.setdefault(qid, {})[pid] = 1
    return BeirData({pid: {"title": "", "text": text} for text, pid in passages.items()},
                    {qid: text for text, qid in queries.items()}, qrels, "validation", pairs.source)


def read_squad_pairs(path, split: str | None = None) -> Pairs:
    """(question, paragraph) for every answerable question of a SQuAD file or directory."""
    from bertmodel.data.squad import read_squad

    examples = [e for e in read_squad(path, split=split) if not e.is_impossible]
    if not examples:
        raise BertmodelError(f"{path}: no answerable questions (SQuAD v2.0's unanswerable ones make no pairs)")
    return Pairs([e.question for e in examples], [e.context for e in examples], [[] for _ in examples], str(path),
                 {"format": "SQuAD (question, paragraph)"})


def is_squad_file(path: Path) -> bool:
    """A nested SQuAD JSON file: {"data": [{"title", "paragraphs": ...}], ...}."""
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    with open(path, "rb") as f:
        head = f.read(4096).decode("utf-8", errors="replace").lstrip()
    return head.startswith("{") and '"data"' in head and '"paragraphs"' in head


def _is_squad_layout(table: Table) -> bool:
    """Rows in the squad column layout (JSONL, save_to_disk) rather than pairs."""
    return all(table.has(c) for c in ("context", "question", "answers")) and not table.has("positive")


def _found(table: Table, given: Column | None, names: tuple[str, ...], role: str, option: str) -> Column:
    if given is not None:
        return table.column(given, role)
    for name in names:
        if table.has(name):
            return name
    raise BertmodelError(f"{table.source}: no {role} column ({', '.join(names)}; {option} names another); the "
                         f"columns are {table.listing()}")


def _negative_columns(table: Table, given: str | None) -> list[Column]:
    """--negative-column (comma-separated), else `negatives`, else negative, negative_1, ...
    in that order; none: pairs only."""
    if given is not None:
        return [table.column(c.strip(), "negative") for c in str(given).split(",") if c.strip()]
    if table.has(NEGATIVES_LIST):
        return [NEGATIVES_LIST]
    names = [c for c in table.columns if isinstance(c, str) and (c == "negative" or (
        c.startswith("negative_") and c.removeprefix("negative_").isdigit()))]
    return sorted(names, key=lambda c: -1 if c == "negative" else int(c.removeprefix("negative_")))


def _negatives(table: Table, names: list[Column]) -> list[list[str]]:
    """Each row's negatives, every row the same number (a batch's candidates are a matrix)."""
    n = len(table.get(table.columns[0]))
    if not names:
        return [[] for _ in range(n)]
    columns = [table.get(name) for name in names]
    rows, count = [], None
    for i in range(n):
        row = []
        for name, values in zip(names, columns):
            value = values[i]
            for item in value if isinstance(value, (list, tuple, np.ndarray)) else [value]:
                if not isinstance(item, str) or not item.strip():
                    what = "missing" if item is None else (
                        "blank" if isinstance(item, str) else f"{type(item).__name__} {item!r:.40}, not text")
                    raise BertmodelError(f"{table.source}: {table.record(i)}: negative in {name!r} is {what}")
                row.append(item)
        if count is None:
            count = len(row)
        elif len(row) != count:
            raise BertmodelError(f"{table.source}: {table.record(i)}: {len(row)} negatives where the first row has "
                                 f"{count}; every row needs the same number (each is a candidate of its whole batch)")
        rows.append(row)
    return rows
