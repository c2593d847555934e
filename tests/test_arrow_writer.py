"""bertprep.shards.writer.ArrowWriter: buffered record batches, rows and bytes back,
nothing left under the final name when writing fails."""
from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest

from bertprep.shards import ArrowWriter

SCHEMA = pa.schema([("x", pa.int32()), ("ids", pa.list_(pa.uint16()))])


def batch(start: int, rows: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"x": list(range(start, start + rows)),
                                       "ids": [[i % 7] * (i % 4) for i in range(start, start + rows)]}, schema=SCHEMA)


def test_buffers_into_batches_of_batch_rows_and_reports_rows_bytes_and_digest(tmp_path):
    path = tmp_path / "out.arrow"
    with ArrowWriter(path, SCHEMA, batch_rows=100, digest=True) as writer:
        for start, rows in [(0, 30), (30, 150), (180, 0), (180, 45)]:
            writer.write(batch(start, rows))
        assert not path.exists()  # still under its temporary name
    table = pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
    assert [b.num_rows for b in table.to_batches()] == [100, 100, 25]
    assert table.column("x").to_pylist() == list(range(225))
    assert writer.rows == 225 and writer.bytes == path.stat().st_size
    assert writer.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [p.name for p in tmp_path.iterdir()] == ["out.arrow"]


def test_without_batch_rows_each_write_is_one_batch_of_a_random_access_file(tmp_path):
    path = tmp_path / "scatter.arrow"
    with ArrowWriter(path, SCHEMA, stream=False) as writer:
        for start, rows in [(0, 3), (3, 0), (3, 5)]:
            writer.write(batch(start, rows))
    reader = pa.ipc.open_file(pa.memory_map(str(path)))
    assert [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)] == [3, 0, 5]
    assert writer.rows == 8 and writer.sha256 is None


def test_an_error_while_writing_leaves_nothing(tmp_path):
    path = tmp_path / "out.arrow"
    with pytest.raises(RuntimeError, match="stopped"):
        with ArrowWriter(path, SCHEMA, batch_rows=10) as writer:
            writer.write(batch(0, 25))
            raise RuntimeError("stopped")
    assert list(tmp_path.iterdir()) == []
