"""Extractive question-answering examples: SQuAD v1.1 / v2.0 JSON files and datasets in
the Hugging Face `squad` column layout, read into `SquadExample`s.

Accepted inputs (`read_squad`):
- the official nested JSON: `{"data": [{"title", "paragraphs": [{"context", "qas":
  [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"?}]}]}]}`
  (v2.0's `plausible_answers` are ignored: they are not answers);
- rows in the `squad` column layout (`id`, `title`, `context`, `question`,
  `answers: {text: [...], answer_start: [...]}`): a JSONL file (also a `.json` file of
  JSON lines, which is what `Dataset.to_json` writes), a `save_to_disk` directory, or a
  dataset by name (`datasets.load_dataset(name, config, split=split)`).

A question is impossible (v2.0) when the file says `is_impossible: true` or it has no
answers; its `answers` list is then empty. Any malformed record is a `BertmodelError`
naming the file and the record, never a partial list.

`read_squad_document` reads a nested SQuAD JSON file whose questions may lack `answers`
altogether: questions to predict answers for (`bertmodel predict RUN --file`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from bertmodel.errors import BertmodelError

ROW_COLUMNS = ("id", "title", "context", "question", "answers")


@dataclass
class SquadExample:
    id: str
    title: str
    question: str
    context: str
    answers: list[tuple[str, int]]  # (text, character offset of its start in context)
    is_impossible: bool
    source: str = field(default="", compare=False)  # file or dataset, for messages


def read_squad(source: str | Path, config: str | None = None,
               split: str | None = None) -> list[SquadExample]:
    """Every question of `source`: a SQuAD JSON file, a JSONL file, a `save_to_disk`
    directory or a dataset name (see the module docstring). `config` and `split` apply to
    datasets (split defaults to "train" for a dataset by name). Raises BertmodelError
    for a missing or empty file, malformed JSON, a missing or mistyped field, a
    duplicate id, or no questions at all."""
    path = Path(source)
    if path.is_dir():
        rows = _dataset_rows(_load_saved(path, config, split), str(path))
        examples = [_row_example(row, str(path), i) for i, row in rows]
    elif path.is_file():
        if config is not None or split is not None:
            raise BertmodelError(f"{path}: a file takes no dataset config or split")
        examples = _read_file(path)
    elif path.suffix.lower() in (".json", ".jsonl") or "/" in str(source) and not _looks_like_hub_name(str(source)):
        raise BertmodelError(f"{path}: no such file or directory")
    else:
        name = f"dataset {source}"
        rows = _dataset_rows(_load_by_name(str(source), config, split or "train"), name)
        examples = [_row_example(row, name, i) for i, row in rows]
    where = str(source) if not path.exists() else str(path)
    if not examples:
        raise BertmodelError(f"{where}: no questions")
    _check_unique_ids(examples, where)
    return examples


# --- files -----------------------------------------------------------------------------

def read_squad_document(path: str | Path) -> list[SquadExample] | None:
    """The questions of a nested SQuAD JSON file (`{"data": [articles]}`), answers optional
    (a question without any has `answers` []); None for a file of another shape (JSON
    lines, an array of rows), which a table reader reads. Errors as read_squad."""
    path = Path(path)
    text = _file_text(path)
    if not text.lstrip().startswith("{"):
        return None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # JSON lines under a .json name
            return None
        raise BertmodelError(f"{path}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    if not (isinstance(document, dict) and "data" in document):
        return None
    examples = _nested_examples(document["data"], str(path), answers_required=False)
    if not examples:
        raise BertmodelError(f"{path}: no questions")
    _check_unique_ids(examples, str(path))
    return examples


def _file_text(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BertmodelError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise BertmodelError(f"{path}: cannot read ({exc.strerror})") from None
    if not text.strip():
        raise BertmodelError(f"{path}: empty file")
    return text


def _read_file(path: Path) -> list[SquadExample]:
    text = _file_text(path)
    if path.suffix.lower() == ".jsonl":
        return _read_jsonl(path, text)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        # Dataset.to_json writes JSON lines under a .json name: one object per line.
        if exc.msg == "Extra data" and text.lstrip().startswith("{"):
            return _read_jsonl(path, text)
        raise BertmodelError(f"{path}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    if isinstance(document, dict) and "data" in document:
        return _nested_examples(document["data"], str(path))
    if isinstance(document, dict) and "context" in document:  # a one-row JSONL file
        return [_row_example(document, str(path), 0)]
    raise BertmodelError(f"{path}: not SQuAD JSON: expected an object with a 'data' list of articles")


def _read_jsonl(path: Path, text: str) -> list[SquadExample]:
    examples = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            # "msg: column N", not "msg at column N": one message ends in "starting at".
            raise BertmodelError(f"{path}: line {number}: not valid JSON ({exc.msg}: column {exc.colno})") from None
        examples.append(_row_example(row, f"{path}", number, where=f"line {number}"))
    return examples


def _nested_examples(data: Any, source: str, answers_required: bool = True) -> list[SquadExample]:
    if not isinstance(data, list):
        raise BertmodelError(f"{source}: 'data' must be a list of articles, got {type(data).__name__}")
    examples = []
    for a, article in enumerate(data):
        where = f"article {a}"
        title = _field(article, "title", str, source, where, default="")
        paragraphs = _field(article, "paragraphs", list, source, where)
        for p, paragraph in enumerate(paragraphs):
            where = f"article {a} paragraph {p}"
            context = _field(paragraph, "context", str, source, where)
            for q, qa in enumerate(_field(paragraph, "qas", list, source, where)):
                qid = qa.get("id") if isinstance(qa, dict) else None
                where = f"question {qid}" if isinstance(qid, str) else f"article {a} paragraph {p} question {q}"
                qid = _field(qa, "id", str, source, where)
                question = _field(qa, "question", str, source, where)
                answers = [_answer(item, source, where) for item in _answers(qa, source, where, answers_required)]
                impossible = _field(qa, "is_impossible", bool, source, where, default=False)
                examples.append(_example(qid, title, question, context, answers, impossible, source))
    return examples


def _unlabelled(source: str, where: str) -> BertmodelError:
    # Training and evaluation need answers; a file of questions alone is prediction input.
    return BertmodelError(f"{source}: {where}: missing field 'answers' (unlabelled questions: predict their "
                          f"answers with `bertmodel predict RUN --file {source}`)")


def _answers(qa: dict, source: str, where: str, required: bool = True) -> list:
    """The `answers` list of a nested question; one without the field is unlabelled."""
    if qa.get("answers") is None and required:
        raise _unlabelled(source, where)
    return _field(qa, "answers", list, source, where, default=[])


def _answer(item: Any, source: str, where: str) -> tuple[str, int]:
    text = _field(item, "text", str, source, where + " answer")
    start = _field(item, "answer_start", int, source, where + " answer")
    return text, start


# --- rows (JSONL, datasets) ------------------------------------------------------------

def _row_example(row: Any, source: str, index: int, where: str | None = None) -> SquadExample:
    where = where or f"row {index}"
    if not isinstance(row, dict):
        raise BertmodelError(f"{source}: {where}: expected an object with {', '.join(ROW_COLUMNS)}")
    if isinstance(row.get("id"), str):
        where = f"question {row['id']}"
    qid = _field(row, "id", str, source, where)
    title = _field(row, "title", str, source, where, default="")
    context = _field(row, "context", str, source, where)
    question = _field(row, "question", str, source, where)
    if row.get("answers") is None:
        raise _unlabelled(source, where)
    raw = _field(row, "answers", (dict, list), source, where)
    if isinstance(raw, list):  # a list of {text, answer_start} objects, as in SQuAD JSON
        answers = [_answer(item, source, where) for item in raw]
    else:
        texts = _field(raw, "text", list, source, where + " answers")
        starts = _field(raw, "answer_start", list, source, where + " answers")
        if len(texts) != len(starts):
            raise BertmodelError(f"{source}: {where}: answers has {len(texts)} texts but {len(starts)} answer_start values")
        answers = [_answer({"text": t, "answer_start": s}, source, where) for t, s in zip(texts, starts)]
    impossible = _field(row, "is_impossible", bool, source, where, default=False)
    return _example(qid, title, question, context, answers, impossible, source)


def _example(qid, title, question, context, answers, impossible, source) -> SquadExample:
    impossible = bool(impossible) or not answers
    return SquadExample(qid, title, question, context, [] if impossible else answers, impossible, source)


_MISSING = object()


def _field(record: Any, name: str, kind, source: str, where: str, default: Any = _MISSING) -> Any:
    """record[name], checked to be of `kind` (bool is not an int here)."""
    if not isinstance(record, dict):
        raise BertmodelError(f"{source}: {where}: expected an object, got {type(record).__name__}")
    value = record.get(name, _MISSING)
    if value is _MISSING or (value is None and default is not _MISSING):
        if default is _MISSING:
            raise BertmodelError(f"{source}: {where}: missing field '{name}'")
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise BertmodelError(f"{source}: {where}: field '{name}' must be {names}, got {type(value).__name__}")
    return value


def _check_unique_ids(examples: list[SquadExample], where: str) -> None:
    # Predictions are keyed by id: two questions with one id would share an answer.
    seen = set()
    for example in examples:
        if example.id in seen:
            raise BertmodelError(f"{where}: duplicate question id {example.id}")
        seen.add(example.id)


# --- datasets --------------------------------------------------------------------------

def _looks_like_hub_name(text: str) -> bool:
    return text.count("/") == 1 and not text.startswith((".", "/"))


def _load_saved(path: Path, config: str | None, split: str | None):
    import datasets

    if config is not None:
        raise BertmodelError(f"{path}: a saved dataset directory takes no config")
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises many types for a broken directory
        raise BertmodelError(f"{path}: not a dataset saved with save_to_disk ({_one_line(exc)})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split is None or split not in loaded:
            wanted = "needs a split" if split is None else f"has no split {split!r}"
            raise BertmodelError(f"{path}: {wanted} (splits: {', '.join(sorted(loaded))})")
        loaded = loaded[split]
    return loaded


def _load_by_name(name: str, config: str | None, split: str):
    import datasets

    try:
        return datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # network, unknown dataset, bad config: one line to the user
        raise BertmodelError(f"dataset {name}: cannot load ({type(exc).__name__}: {_one_line(exc)})") from None


def _dataset_rows(dataset, name: str) -> Iterable[tuple[int, dict]]:
    missing = [c for c in ROW_COLUMNS if c not in dataset.column_names and c != "title"]
    if missing:
        raise BertmodelError(f"{name}: missing column {', '.join(repr(c) for c in missing)} "
                             f"(columns: {', '.join(dataset.column_names)})")
    return enumerate(dataset)


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
