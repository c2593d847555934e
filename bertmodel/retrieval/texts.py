"""Embeddings of a file's texts for users who index elsewhere (`bertmodel embed`), and a
file or BEIR corpus read as a collection to search (`bertmodel search`: inference/rank.py).

`embed_file` reads a column of a JSONL/CSV/TSV/Parquet file or save_to_disk directory
(or a BEIR corpus.jsonl: title + text as BEIR encodes a passage), encodes it as queries
or passages with the run's prefixes and lengths, and writes Parquet: the id column (where
the file has one: `_id`, `id`) and `embedding`, a fixed-size list of float32, one row per
record in the file's order. The output is written whole or not at all, never over the
input, and over an earlier file only with overwrite.

`read_corpus` takes a BEIR directory or such a file as the corpus of a search."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bertmodel.data.beir import CORPUS, BeirData, is_beir_dir, passage_text, read_beir_corpus
from bertmodel.errors import BertmodelError

TEXT_COLUMNS = ("text", "passage", "document", "sentence", "query", "question", "anchor")
ID_COLUMNS = ("_id", "id")


@dataclass
class FileTexts:
    texts: list[str]
    ids: list[str] | None
    column: str
    source: str


def read_texts(path, column: str | None = None, split: str | None = None, option: str = "--column") -> FileTexts:
    """The texts of `column` (default: the first of TEXT_COLUMNS the file has; a table
    with title and text columns and no column asked: title + " " + text, as BEIR), with
    the file's ids where it has an id column. `option`: the command's option for the
    column, which a refusal names."""
    from bertmodel.data.tables import open_table

    table = open_table(path, split=split)
    id_column = next((c for c in ID_COLUMNS if table.has(c)), None)
    ids = None if id_column is None else [str(v) for v in table.get(id_column)]
    if column is None and table.has("title") and table.has("text"):
        titles = table.get("title")
        texts = [passage_text({"title": t or "", "text": x}) for t, x in zip(titles, table.texts("text"))]
        return FileTexts(texts, ids, "title + text", table.source)
    if column is None:
        column = next((c for c in TEXT_COLUMNS if table.has(c)), None)
        if column is None:
            raise BertmodelError(f"{table.source}: no text column ({', '.join(TEXT_COLUMNS)}); the columns are "
                                 f"{table.listing()}; {option} names another")
    texts = table.texts(column)
    if not texts:
        raise BertmodelError(f"{table.source}: no rows")
    return FileTexts(texts, ids, str(column), table.source)


def check_output(out, inputs: list[Path], overwrite: bool) -> Path:
    out = Path(out)
    for source in inputs:
        if out.exists() and source.exists() and out.resolve() == Path(source).resolve():
            raise BertmodelError(f"{out}: is the input; write the embeddings elsewhere")
    if out.exists() and not overwrite:
        raise BertmodelError(f"{out}: already exists; pass --overwrite to replace it")
    if out.is_dir():
        raise BertmodelError(f"{out}: is a directory; give a .parquet file")
    return out


def embed_file(model, path, out, column: str | None = None, kind: str = "passage", device: str = "cpu",
               batch_size: int = 64, overwrite: bool = False, split: str | None = None, log=None) -> tuple[Path, int, int]:
    """Write `out` (Parquet) with the embeddings of `path`'s texts; (out, rows, dimension)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bertmodel.retrieval.embedder import load_embedder

    if kind not in ("query", "passage"):
        raise BertmodelError(f"--kind must be query or passage, got {kind!r}")
    out = check_output(out, [Path(path), Path(model)], overwrite)
    found = read_texts(path, column, split)
    embedder = load_embedder(model, device=device, batch_size=batch_size)
    if log:
        log(f"{found.source}: {len(found.texts):,} texts ({found.column}) as {kind}s, "
            f"up to {embedder.settings[f'max_{kind}_length']} tokens each")
    vectors = embedder.encode(found.texts, kind)
    flat = pa.array(vectors.reshape(-1), type=pa.float32())
    columns = {"embedding": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])}
    if found.ids is not None:
        columns = {"id": pa.array(found.ids, type=pa.string()), **columns}
    table = pa.table(columns)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(table, tmp)
        check_output(out, [Path(path)], overwrite)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out, len(found.texts), vectors.shape[1]


def read_corpus(corpus, column: str | None = None) -> BeirData:
    """A BEIR directory's corpus, or a file's texts as one (ids: the file's, else the row
    number from 0). No queries or judgements: search supplies the queries."""
    corpus = Path(corpus)
    if is_beir_dir(corpus):
        return BeirData(read_beir_corpus(corpus), {}, {}, "search", str(corpus / CORPUS))
    found = read_texts(corpus, column)
    ids = found.ids or [str(i) for i in range(len(found.texts))]
    if len(set(ids)) != len(ids):
        duplicated = next(i for i in ids if ids.count(i) > 1)
        raise BertmodelError(f"{found.source}: duplicated id {duplicated!r}")
    return BeirData({i: {"title": "", "text": t} for i, t in zip(ids, found.texts)}, {}, {}, "search", found.source)
