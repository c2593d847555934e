"""BEIR directories: a retrieval test collection as BEIR's `GenericDataLoader` reads it.

```
DIR/corpus.jsonl        {"_id": "d1", "title": "...", "text": "..."}   one passage per line
DIR/queries.jsonl       {"_id": "q1", "text": "..."}                   one query per line
DIR/qrels/test.tsv      query-id <TAB> corpus-id <TAB> score            a header line, then judgements
DIR/qrels/{train,dev}.tsv
```
As GenericDataLoader: the first qrels line is a header and is skipped; scores are
integers (graded relevance; 0 is judged non-relevant); the queries kept are those the
split's qrels judge; a passage's missing title is "". Where GenericDataLoader would go on
with a broken collection (a qrels id that names no passage or query is silently
unscorable there, a duplicated `_id` silently replaces the first), this reader refuses
with one line naming the file, the line and the problem, and so for malformed lines, an
empty corpus and a split the directory lacks. An integer `_id` is read as its decimal
string (qrels ids are strings).
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from bertmodel.errors import BertmodelError

SPLITS = ("train", "dev", "test")
CORPUS, QUERIES, QRELS = "corpus.jsonl", "queries.jsonl", "qrels"


@dataclass
class BeirData:
    corpus: dict[str, dict[str, str]]  # passage id -> {"title", "text"}
    queries: dict[str, str]            # query id -> text (those the split judges)
    qrels: dict[str, dict[str, int]]   # query id -> {passage id: relevance}
    split: str = "test"
    source: str = field(default="", compare=False)

    def passage_texts(self, ids=None) -> list[str]:
        """title + " " + text, stripped, as BEIR's and sentence-transformers' models
        encode a passage (a passage without a title is its text)."""
        ids = self.corpus if ids is None else ids
        return [passage_text(self.corpus[i]) for i in ids]


def passage_text(doc: dict[str, str]) -> str:
    return (doc.get("title", "") + " " + doc["text"]).strip()


def is_beir_dir(path) -> bool:
    """A directory with corpus.jsonl, queries.jsonl and a qrels/ folder."""
    path = Path(path)
    return (path.is_dir() and (path / CORPUS).is_file() and (path / QUERIES).is_file()
            and (path / QRELS).is_dir())


def beir_splits(path) -> list[str]:
    """The splits a BEIR directory has qrels for (file stems under qrels/, sorted)."""
    return sorted(p.stem for p in (Path(path) / QRELS).glob("*.tsv"))


def beir_split(path, asked: str | None) -> str:
    """The split of a BEIR directory to evaluate on: the one asked for (read_beir refuses
    one the directory lacks, naming those it has); by default ("validation", which is
    no BEIR split's name) dev, else test."""
    if asked not in (None, "validation"):
        return asked
    have = beir_splits(path)
    return next((split for split in ("dev", "test") if split in have), "dev")


def read_beir(path, split: str = "test") -> BeirData:
    """The corpus, the split's queries and its qrels (see the module docstring);
    BertmodelError naming the file for anything BEIR could not score."""
    path = Path(path)
    if not path.is_dir():
        raise BertmodelError(f"{path}: no such directory (a BEIR directory holds {CORPUS}, {QUERIES}, {QRELS}/)")
    for name in (CORPUS, QUERIES):
        if not (path / name).is_file():
            raise BertmodelError(f"{path}: not a BEIR directory: no {name}")
    qrels_path = path / QRELS / f"{split}.tsv"
    if not qrels_path.is_file():
        have = beir_splits(path)
        raise BertmodelError(f"{path}: no split {split!r} (no {QRELS}/{split}.tsv; splits: "
                             f"{', '.join(have) if have else 'none'})")
    corpus = read_beir_corpus(path)
    queries = {i: _text(r, "text", f, n) for i, r, f, n in _records(path / QUERIES)}
    qrels, lines = _read_qrels(qrels_path)
    for (qid, docid), number in lines.items():
        if qid not in queries:
            raise BertmodelError(f"{qrels_path}: line {number}: query {qid!r} is not in {QUERIES}")
        if docid not in corpus:
            raise BertmodelError(f"{qrels_path}: line {number}: passage {docid!r} is not in {CORPUS}")
    return BeirData(corpus, {q: queries[q] for q in qrels}, qrels, split, str(path))


def read_beir_corpus(path) -> dict[str, dict[str, str]]:
    """A BEIR directory's corpus.jsonl: passage id -> {"title", "text"}; an empty one is an error."""
    path = Path(path)
    corpus = {i: {"title": _text(r, "title", f, n, default=""), "text": _text(r, "text", f, n)}
              for i, r, f, n in _records(path / CORPUS)}
    if not corpus:
        raise BertmodelError(f"{path / CORPUS}: empty corpus (no passages)")
    return corpus


def read_qrels(path) -> dict[str, dict[str, int]]:
    """{query id: {passage id: relevance}} of a BEIR qrels TSV (header skipped)."""
    return _read_qrels(Path(path))[0]


def _read_qrels(path: Path) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], int]]:
    """The qrels and the line each judgement is on (for messages)."""
    qrels: dict[str, dict[str, int]] = {}
    lines: dict[tuple[str, str], int] = {}
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_MINIMAL)
            if next(reader, None) is None:
                raise BertmodelError(f"{path}: empty file (a header line, then query-id, corpus-id, score)")
            for row in reader:
                number = reader.line_num
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) != 3:
                    raise BertmodelError(f"{path}: line {number}: expected 3 tab-separated fields (query-id, "
                                         f"corpus-id, score), got {len(row)}")
                qid, docid, score = row
                try:
                    relevance = int(score)
                except ValueError:
                    raise BertmodelError(f"{path}: line {number}: score {score!r} is not an integer") from None
                if (qid, docid) in lines:
                    raise BertmodelError(f"{path}: line {number}: duplicated judgement of query {qid!r}, passage "
                                         f"{docid!r} (first on line {lines[qid, docid]})")
                qrels.setdefault(qid, {})[docid] = relevance
                lines[qid, docid] = number
    except UnicodeDecodeError as exc:
        raise BertmodelError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except csv.Error as exc:
        raise BertmodelError(f"{path}: malformed TSV ({exc})") from None
    if not qrels:
        raise BertmodelError(f"{path}: no judgements (only a header line)")
    return qrels, lines


def _records(path: Path):
    """(id, record, file, line number) of each JSON line; duplicated ids refused."""
    seen: dict[str, int] = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BertmodelError(f"{path}: line {number}: not valid JSON ({exc.msg}: column "
                                         f"{exc.colno})") from None
                if not isinstance(record, dict):
                    raise BertmodelError(f"{path}: line {number}: expected an object with '_id' and 'text'")
                rid = record.get("_id")
                if isinstance(rid, int) and not isinstance(rid, bool):
                    rid = str(rid)
                if not isinstance(rid, str) or not rid:
                    raise BertmodelError(f"{path}: line {number}: " + ("missing field '_id'" if rid is None else
                                         f"'_id' must be a non-empty string, got {rid!r}"))
                if rid in seen:
                    raise BertmodelError(f"{path}: line {number}: duplicated id {rid!r} (first on line {seen[rid]})")
                seen[rid] = number
                yield rid, record, path, number
    except UnicodeDecodeError as exc:
        raise BertmodelError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _text(record: dict, name: str, path: Path, number: int, default: str | None = None) -> str:
    value = record.get(name)
    if value is None and default is not None:
        return default
    if value is None:
        raise BertmodelError(f"{path}: line {number}: missing field {name!r}")
    if not isinstance(value, str):
        raise BertmodelError(f"{path}: line {number}: field {name!r} must be a string, got {type(value).__name__}")
    return value


# --- writing -----------------------------------------------------------------------------

def write_beir(out, corpus: dict[str, dict[str, str]], queries: dict[str, str],
               qrels_by_split: dict[str, dict[str, dict[str, int]]], overwrite: bool = False,
               progress: bool = False) -> Path:
    """A BEIR directory at `out`, written beside it under a temporary name and renamed
    into place, so a half-written collection is never read. An existing `out` is replaced
    only with `overwrite`, and only when it is empty or a BEIR directory itself (the
    replacement removes it whole). `progress`: a bar of the records written (passages,
    queries, judgements) on stderr."""
    import shutil

    from bertprep.progress import progress_bar

    out = Path(out)
    if out.exists():
        if not overwrite:
            raise BertmodelError(f"{out}: already exists; pass --overwrite to replace it")
        if not out.is_dir() or (any(out.iterdir()) and not is_beir_dir(out)):
            raise BertmodelError(f"{out}: exists and is not a BEIR directory; not replacing it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / QRELS).mkdir(parents=True)
    judgements = sum(len(judged) for qrels in qrels_by_split.values() for judged in qrels.values())
    with progress_bar(progress, total=len(corpus) + len(queries) + judgements, desc="writing", unit="record") as bar:
        _write_jsonl(tmp / CORPUS, ({"_id": i, "title": d.get("title", ""), "text": d["text"]}
                                    for i, d in corpus.items()), bar)
        _write_jsonl(tmp / QUERIES, ({"_id": i, "text": t} for i, t in queries.items()), bar)
        for split, qrels in qrels_by_split.items():
            with open(tmp / QRELS / f"{split}.tsv", "w", encoding="utf-8", newline="") as handle:
                writer = csv.writer(handle, delimiter="\t", quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
                writer.writerow(["query-id", "corpus-id", "score"])
                for qid, judged in qrels.items():
                    writer.writerows([qid, docid, score] for docid, score in judged.items())
                    bar.update(len(judged))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def _write_jsonl(path: Path, records, bar) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            bar.update(1)
