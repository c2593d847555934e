"""Multiple-choice examples: read them from a table and encode each choice as a text pair.

An example is a context, an optional question and C >= 2 choices, one of them right
(`label`, its 0-based index; None for unlabelled data). The columns come from
- SWAG's CSV layout (`sent1`, `sent2`, `ending0..3`, `label`), known by its header where
  the user did not name the columns, read as transformers' run_swag.py does: context =
  sent1, question = sent2, choices = ending0, ending1, ...;
- any other table (data/tables.py: CSV, TSV, JSONL, Parquet, a save_to_disk dir, a hub
  dataset): a context column, an optional question column ("question" where the table has
  one and none is named), and the choices as one list column or as one column per choice.
Every record has the same number of choices (the batch is (B, C, T)).

Each choice becomes the pair (context, question + " " + choice) (run_swag's
`f"{header} {end}"`) in the tokenizer's pair template, `[CLS] context [SEP] question
choice [SEP]` with token_type_ids 0 then 1 for BERT (RoBERTa's `<s> A </s></s> B </s>`,
one type), and the pair cut "longest_first" as classification cuts it: data/classification.py encodes the N * C flat pairs in bulk, and
choice j of example i is flat row i * C + j. `pad_choices` pads a batch to (B, C, T_max).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bertmodel.data.classification import PAD_MULTIPLE, EncodedExamples, encode_texts, pad_batch
from bertmodel.data.tables import Column, Table
from bertmodel.errors import BertmodelError

SWAG_COLUMNS = ("sent1", "sent2", "ending0", "ending1")  # the header that says "SWAG"
DEFAULT_CONTEXT, DEFAULT_CHOICES = "context", "choices"  # FinetuneConfig's defaults
_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass
class ChoiceExamples:
    contexts: list[str]  # (N,) the text every choice of a record is paired with
    questions: list[str] | None  # (N,) put before each choice in its segment; None: no question column
    choices: list[list[str]]  # (N, C)
    labels: np.ndarray | None  # (N,) int64 index of the right choice; None when unlabelled
    source: str  # the file, directory or "name[config]:split"
    columns: dict  # the columns read: context, question, choices (a name or a list of names), label
    line_numbers: np.ndarray | None = None  # (N,) 1-based line of each record (text files)

    def __len__(self) -> int:
        return len(self.contexts)

    @property
    def num_choices(self) -> int:
        return len(self.choices[0]) if self.choices else 0

    def head(self, n: int) -> "ChoiceExamples":
        """The first n records."""
        cut = lambda values: None if values is None else values[:n]  # noqa: E731
        return ChoiceExamples(self.contexts[:n], cut(self.questions), self.choices[:n], cut(self.labels),
                              self.source, self.columns, cut(self.line_numbers))

    def record(self, i: int) -> str:
        """How errors name record i: 'line 17' in a text file, 'row 16' in Arrow data."""
        return f"line {int(self.line_numbers[i])}" if self.line_numbers is not None else f"row {i}"

    def seconds(self) -> list[str]:
        """(N * C,) the second segment of every choice, row-major: question + " " + choice."""
        questions = self.questions or [None] * len(self)
        return [f"{q} {c}" if q and q.strip() else c for q, row in zip(questions, self.choices) for c in row]


def is_swag(table: Table) -> bool:
    return all(table.has(c) for c in SWAG_COLUMNS) and not table.has(DEFAULT_CONTEXT)


def _swag_endings(table: Table) -> list[str]:
    endings = []
    while table.has(f"ending{len(endings)}"):
        endings.append(f"ending{len(endings)}")
    return endings


def read_choices(table: Table, context_column: Column = DEFAULT_CONTEXT, question_column: Column | None = None,
                 choices_column: Column = DEFAULT_CHOICES, choice_columns: str | Sequence[str] | None = None,
                 label_column: Column | None = "label", *, labels_required: bool = True,
                 blank_ok: bool = False) -> ChoiceExamples:
    """The multiple-choice examples of `table` (module docstring). `labels_required=False`
    reads labels where the label column exists (prediction data may lack it); `blank_ok`
    lets blank texts through (prediction input). Raises BertmodelError with one line
    naming the source and the record for a missing column, a blank text, a record whose
    number of choices differs from the first's, or a label that is not an integer index
    of a choice."""
    source = table.source
    if isinstance(choice_columns, str):
        choice_columns = [c.strip() for c in choice_columns.split(",") if c.strip()]
    if is_swag(table):  # SWAG's own columns, for each role the user left at its default
        context_column = "sent1" if context_column == DEFAULT_CONTEXT else context_column
        question_column = "sent2" if question_column is None else question_column
        if not choice_columns and choices_column == DEFAULT_CHOICES and not table.has(DEFAULT_CHOICES):
            choice_columns = _swag_endings(table)
    elif question_column is None and table.has("question"):
        question_column = "question"
    table.hint = (" (multiple choice: name them with --context-column, --question-column and --choices-column "
                  "or --choice-columns)")
    contexts = table.texts(context_column, "context", blank_ok)
    questions = None
    if question_column is not None:
        column = table.column(question_column, "question")
        questions = _strings(table, column, "question")  # a blank question is no question
    if choice_columns:
        if len(choice_columns) < 2:
            raise BertmodelError(f"{source}: --choice-columns names {len(choice_columns)} column; multiple choice "
                                 "needs at least 2")
        columns = [table.texts(c, "choice", blank_ok) for c in choice_columns]
        choices = [list(row) for row in zip(*columns)]
        described = list(choice_columns)
    else:
        column = table.column(choices_column, "choices")
        choices = _choice_lists(table, column, blank_ok)
        described = choices_column
    labels = None
    if label_column is not None and (labels_required or table.has(label_column)):
        column = table.column(label_column, "label")
        labels = _label_ids(table, column, len(choices[0]), labels_required)
    return ChoiceExamples(contexts, questions, choices, labels, source,
                          {"context": context_column, "question": question_column, "choices": described,
                           "label": label_column if labels is not None else None}, table.line_numbers)


def _strings(table: Table, column: Column, role: str) -> list[str]:
    values = table.get(column)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            what = "missing" if value is None else f"{type(value).__name__} {value!r}, not text"
            raise BertmodelError(f"{table.source}: {table.record(i)}: {role} column {column!r} is {what}")
    return values


def _choice_lists(table: Table, column: Column, blank_ok: bool) -> list[list[str]]:
    values = table.get(column)
    count = None
    for i, value in enumerate(values):
        where = f"{table.source}: {table.record(i)}"
        if not isinstance(value, (list, tuple)):
            raise BertmodelError(f"{where}: choices column {column!r} holds {type(value).__name__} {value!r:.60}, "
                                 "not a list of choices (one column per choice: --choice-columns)")
        if count is None:
            if len(value) < 2:
                raise BertmodelError(f"{where}: {len(value)} choice(s) in {column!r}; multiple choice needs at "
                                     "least 2")
            count = len(value)
        elif len(value) != count:
            raise BertmodelError(f"{where}: {len(value)} choices in {column!r}, but {table.record(0)} has {count}; "
                                 "every record needs the same number of choices")
        for j, choice in enumerate(value):
            if not isinstance(choice, str):
                raise BertmodelError(f"{where}: choice {j} in {column!r} is {type(choice).__name__} {choice!r}, "
                                     "not text")
            if not blank_ok and not choice.strip():
                raise BertmodelError(f"{where}: choice {j} in {column!r} is blank")
    return [list(v) for v in values]


def _label_ids(table: Table, column: Column, num_choices: int, labels_required: bool) -> np.ndarray | None:
    """The right choice's 0-based index per record: an int, an integral float, or text of
    an integer (CSV); a datasets ClassLabel column's ids are such ints."""
    values = table.get(column)
    # datasets marks unlabelled rows (SWAG's test split) with -1: all of them is no labels.
    if not labels_required and all(v is None or v == -1 or v == "-1" or v == "" for v in values):
        return None
    ids = np.empty(len(values), np.int64)
    for i, value in enumerate(values):
        index = value.strip() if isinstance(value, str) else value
        if isinstance(index, str) and _INTEGER.fullmatch(index):
            index = int(index)
        elif isinstance(index, float) and math.isfinite(index) and index.is_integer():
            index = int(index)
        where = f"{table.source}: {table.record(i)}"
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            shown = "blank" if index is None or index == "" else f"{value!r}, not an integer"
            raise BertmodelError(f"{where}: label column {column!r} is {shown} (the 0-based index of the right "
                                 "choice)")
        if not 0 <= index < num_choices:
            raise BertmodelError(f"{where}: label {index} is out of range for {num_choices} choices (0 to "
                                 f"{num_choices - 1})")
        ids[i] = index
    return ids


# -- encoding ------------------------------------------------------------------------

@dataclass
class EncodedChoices:
    sequences: EncodedExamples  # N * C flat rows: choice j of example i is row i * C + j
    num_choices: int
    labels: np.ndarray | None  # (N,) int64
    truncated: int  # examples with at least one choice cut to max_seq_length

    def __len__(self) -> int:
        return len(self.sequences) // self.num_choices

    @property
    def max_seq_length(self) -> int:
        return self.sequences.max_seq_length

    def fit_note(self) -> str:
        """What fitting the choices to max_seq_length did, as training and evaluation report it."""
        return f"{self.truncated:,} with a choice truncated to {self.max_seq_length} tokens"


def encode_choices(tokenizer, examples: ChoiceExamples, max_seq_length: int = 128,
                   engine: str = "auto") -> EncodedChoices:
    """Every choice of every example as the pair (context, question choice), wrapped in
    the tokenizer's template (`[CLS] context [SEP] question choice [SEP]` for BERT)."""
    C = examples.num_choices
    firsts = [c for c in examples.contexts for _ in range(C)]
    seconds = examples.seconds()
    sequences = encode_texts(tokenizer, firsts, seconds, max_seq_length, engine)
    truncated = 0
    if sequences.truncated:
        # A row was cut exactly where it needed more than max_seq_length tokens; the rows
        # that came out that long are the only candidates, and a budget one larger tells.
        full = np.flatnonzero(sequences.lengths == max_seq_length)
        again = encode_texts(tokenizer, [firsts[i] for i in full], [seconds[i] for i in full],
                             max_seq_length + 1, engine)
        cut = full[again.lengths > max_seq_length]
        truncated = len(np.unique(cut // C))
    return EncodedChoices(sequences, C, examples.labels, truncated)


def pad_choices(encoded: EncodedChoices, rows, pad_id: int = 0,
                pad_multiple: int = PAD_MULTIPLE) -> dict[str, np.ndarray]:
    """Examples `rows` as int64 input_ids, token_type_ids, attention_mask (B, C, T), T the
    batch's longest choice (rounded up as pad_batch rounds), and labels (B,) when known."""
    rows = np.asarray(rows, np.int64)
    C = encoded.num_choices
    flat = (rows[:, None] * C + np.arange(C)).reshape(-1)
    batch = pad_batch(encoded.sequences, flat, pad_id, pad_multiple)
    batch = {k: v.reshape(len(rows), C, -1) for k, v in batch.items()}
    if encoded.labels is not None:
        batch["labels"] = encoded.labels[rows]
    return batch
