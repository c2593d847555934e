"""The one Arrow writer of build-shards, as datasets' ArrowWriter is of datasets.

    with ArrowWriter(path, schema, batch_rows=4096, digest=True) as writer:
        writer.write(batch_or_table)
    writer.rows, writer.bytes, writer.sha256

Rows are buffered and written as record batches of `batch_rows` (the last one shorter);
with `batch_rows=None` every `write` is one record batch of its own, so a reader can
fetch the k-th batch alone (the scatter files: batch s holds the rows for shard s). The
file is written under a temporary name beside `path` and renamed on a clean exit (the
digest, when asked, is taken of the complete file first); on an error it is removed.
`stream=True` writes the IPC stream format (`datasets.Dataset.from_file` maps it),
`stream=False` the IPC file format, whose footer allows random access to batches.
"""
from __future__ import annotations

import pyarrow as pa

from bertprep.storage import stores as storage
from bertprep.storage import atomic_output, sha256_file


class ArrowWriter:
    def __init__(self, path, schema: pa.Schema, *, stream: bool = True, batch_rows: int | None = None,
                 digest: bool = False, fsync: bool = True):
        self.path = storage.path(path)  # a local path or an object-store URL
        self.schema = schema
        self.stream = stream
        self.batch_rows = batch_rows
        self.digest = digest
        self.fsync = fsync
        self.rows = 0  # rows written
        self.bytes = 0  # size of the finished file
        self.sha256: str | None = None
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0

    def __enter__(self) -> "ArrowWriter":
        self._output = atomic_output(self.path, fsync=self.fsync)
        self._tmp = self._output.__enter__()
        try:
            self._sink = storage.open_output(self._tmp)
            opener = pa.ipc.new_stream if self.stream else pa.ipc.new_file
            self._writer = opener(self._sink, self.schema)
        except BaseException as exc:
            self._output.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        """Add rows: with batch_rows set, full record batches are written as they fill;
        without, `data` (one record batch) is written as it is."""
        if self.batch_rows is None:
            if not isinstance(data, pa.RecordBatch):
                raise TypeError("without batch_rows every write is one record batch: pass a RecordBatch")
            self._write_batch(data)
            return
        for batch in (data.to_batches() if isinstance(data, pa.Table) else [data]):
            if batch.num_rows:
                self._pending.append(batch)
                self._pending_rows += batch.num_rows
            while self._pending_rows >= self.batch_rows:
                self._flush(self.batch_rows)

    def _flush(self, rows: int) -> None:
        table = pa.Table.from_batches(self._pending, schema=self.schema)
        pieces = table.slice(0, rows).to_batches()
        # A slice of one batch is written as it is (zero copy); pieces of several are
        # joined into one record batch.
        self._write_batch(pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces))
        rest = table.slice(rows)
        self._pending, self._pending_rows = rest.to_batches(), rest.num_rows

    def _write_batch(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            try:
                if self._pending_rows:
                    self._flush(self._pending_rows)
                self._writer.close()
                self._sink.close()
                self.bytes = self._tmp.stat().st_size
                if self.digest:
                    self.sha256 = sha256_file(self._tmp)
            except BaseException as error:
                exc_type, exc, tb = type(error), error, error.__traceback__
        if exc_type is not None:
            self._sink.close()
            # atomic_output removes the temporary and re-raises the error.
            self._output.__exit__(exc_type, exc, tb)
            raise exc
        self._output.__exit__(None, None, None)  # renames the temporary to `path`
        return False


__all__ = ["ArrowWriter"]
