"""What a cross-encoder trains and is evaluated on, read from any table data/tables.py
opens (TSV, CSV, JSONL, Parquet, a save_to_disk directory, a hub dataset):

- labelled pairs (`bce`, and every validation set): a query, a passage and a label, 1 for
  a relevant passage and 0 for another, or a graded relevance in [0, 1] (the
  BinaryCrossEntropyLoss layout of sentence-transformers: "(anchor, positive/negative)
  pairs, 1 if positive, 0 if negative", or "float similarity score between 0 and 1").
- groups (`listwise`): a query, its positive and its hard negatives, one row each, read
  by data/pairs.py as the bi-encoder reads them (sentence-transformers' (anchor,
  positive, negative_1, ..., negative_n) layout, or a list column of negatives; every
  row the same number); or labelled pairs, grouped by query: each relevant pair (label
  1) with every irrelevant one (label 0) of its query (any number per query).

Pair columns are found by name unless given: the query in query, question, anchor; the
passage in passage, document, text, context, response.
Every mistake is one line naming the file, the record and the problem.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertmodel.data.pairs import pairs_from_table
from bertmodel.data.tables import Column, Table
from bertmodel.errors import BertmodelError

QUERY_COLUMNS = ("query", "question", "anchor")
PASSAGE_COLUMNS = ("passage", "document", "text", "context", "response")
POSITIVE_COLUMN = "positive"


@dataclass
class RerankPairs:
    """(query, passage) pairs and their labels (float32 in [0, 1]; None: unlabelled)."""

    queries: list[str]
    passages: list[str]
    labels: np.ndarray | None
    source: str

    def __len__(self) -> int:
        return len(self.queries)

    def head(self, n: int) -> "RerankPairs":
        return RerankPairs(self.queries[:n], self.passages[:n], None if self.labels is None else self.labels[:n],
                           self.source)

    def query_ids(self) -> np.ndarray:
        """(N,) int64: the same id for the same query text, in order of first appearance."""
        seen: dict[str, int] = {}
        return np.array([seen.setdefault(q, len(seen)) for q in self.queries], np.int64)


@dataclass
class RerankGroups:
    """Each query with its candidates, the positive first, then its hard negatives."""

    queries: list[str]
    candidates: list[list[str]]
    source: str

    def __len__(self) -> int:
        return len(self.queries)

    def head(self, n: int) -> "RerankGroups":
        return RerankGroups(self.queries[:n], self.candidates[:n], self.source)

    def as_pairs(self) -> RerankPairs:
        """Every candidate as a labelled pair: 1 for the positive, 0 for the negatives."""
        queries = [q for q, c in zip(self.queries, self.candidates) for _ in c]
        passages = [p for c in self.candidates for p in c]
        labels = np.array([0.0 if j else 1.0 for c in self.candidates for j in range(len(c))], np.float32)
        return RerankPairs(queries, passages, labels, self.source)


def _found(table: Table, given: Column | None, names: tuple[str, ...], role: str, option: str) -> Column:
    if given is not None:
        return table.column(given, role)
    for name in names:
        if table.has(name):
            return name
    raise BertmodelError(f"{table.source}: no {role} column ({', '.join(names)}; {option} names another); the "
                         f"columns are {table.listing()}")


def is_grouped(table: Table, label_column: Column, positive_column: Column | None,
               negative_column: str | None = None) -> bool:
    """Whether a table holds (query, positive, negatives) rows rather than labelled pairs:
    a positive or negatives column named, or no label column and a positive or negatives
    column found by name (rows that lack only their positive are groups, so the error says
    that, not that they lack a passage)."""
    if positive_column is not None or negative_column is not None:
        return True
    return not table.has(label_column) and (table.has(POSITIVE_COLUMN) or _has_negatives(table))


def _has_negatives(table: Table) -> bool:
    """A column data/pairs.py reads as hard negatives: negatives, negative, negative_N."""
    return any(isinstance(c, str) and (c in ("negatives", "negative") or (
        c.startswith("negative_") and c.removeprefix("negative_").isdigit())) for c in table.columns)


def read_pairs(table: Table, query_column: Column | None = None, passage_column: Column | None = None,
               label_column: Column = "label", labels_required: bool = True) -> RerankPairs:
    """Labelled (query, passage) pairs; labels 0/1 (numbers, booleans, or their text in a
    TSV) or floats in [0, 1]."""
    query = _found(table, query_column, QUERY_COLUMNS, "query", "--query-column")
    passage = _found(table, passage_column, PASSAGE_COLUMNS, "passage", "--passage-column")
    labels = None
    if labels_required or table.has(label_column):
        if not table.has(label_column):
            raise BertmodelError(f"{table.source}: no label column {label_column!r} (a relevance per pair: 1, 0 or a "
                                 f"float in [0, 1]; --label-column names another); the columns are {table.listing()}")
        labels = _relevance(table, table.column(label_column, "label"))
    return RerankPairs(table.texts(query, "query"), table.texts(passage, "passage"), labels, table.source)


def _relevance(table: Table, column: Column) -> np.ndarray:
    out = np.empty(len(table.get(column)), np.float32)
    for i, value in enumerate(table.get(column)):
        number = value
        if isinstance(value, str):
            text = value.strip().lower()
            number = {"true": 1.0, "false": 0.0}.get(text, text)
            try:
                number = float(number)
            except ValueError:
                number = None
        if isinstance(number, (bool, int, float, np.bool_, np.integer, np.floating)):  # np.bool_: Arrow's
            number = float(number)
        else:
            number = None
        if number is None or not 0.0 <= number <= 1.0:  # NaN fails both comparisons
            raise BertmodelError(f"{table.source}: {table.record(i)}: label {value!r} in {column!r} is not a relevance "
                                 "in [0, 1] (1 relevant, 0 not, or a graded float between)")
        out[i] = number
    return out


def read_groups(table: Table, query_column: Column | None = None, positive_column: Column | None = None,
                negative_column: str | None = None) -> RerankGroups:
    """(query, positive, negatives...) rows (data/pairs.py reads them, as the bi-encoder
    does: every row the same number of negatives), at least one negative each."""
    tuples = pairs_from_table(table, query_column, positive_column, negative_column)
    if not tuples.num_negatives:
        raise BertmodelError(f"{table.source}: no hard negatives (negatives, negative, negative_1, ...; "
                             "--negative-column names others): listwise ranks each positive against its "
                             "query's negatives; labelled pairs train with --loss bce")
    return RerankGroups(tuples.queries, [[p, *n] for p, n in zip(tuples.positives, tuples.negatives)],
                        tuples.source)


def groups_from_pairs(pairs: RerankPairs) -> RerankGroups:
    """Labelled pairs as listwise groups: each relevant pair (label 1) of a query with all
    of that query's irrelevant ones (label 0), queries in order of first appearance. A
    graded label, or a query without a positive or without a negative, is an error."""
    graded = np.flatnonzero((pairs.labels != 0) & (pairs.labels != 1))
    if len(graded):
        raise BertmodelError(f"{pairs.source}: pair {int(graded[0])} has the graded label {pairs.labels[graded[0]]:g}; "
                             "listwise groups are built from labels 1 (positive) and 0 (negative): --loss bce "
                             "takes graded ones")
    ids = pairs.query_ids()
    order = np.argsort(ids, kind="stable")  # each query's rows together, in file order
    queries, candidates = [], []
    for rows in np.split(order, np.flatnonzero(np.diff(ids[order])) + 1) if len(ids) else []:
        positives = [pairs.passages[r] for r in rows if pairs.labels[r] == 1]
        negatives = [pairs.passages[r] for r in rows if pairs.labels[r] == 0]
        query = pairs.queries[rows[0]]
        if not positives:
            raise BertmodelError(f"{pairs.source}: the query {query[:60]!r} has no positive (no pair labelled 1); "
                                 "listwise needs one")
        if not negatives:
            raise BertmodelError(f"{pairs.source}: the query {query[:60]!r} has no negative (no pair labelled 0); "
                                 "listwise ranks a positive against its negatives")
        for positive in positives:
            queries.append(query)
            candidates.append([positive, *negatives])
    return RerankGroups(queries, candidates, pairs.source)
