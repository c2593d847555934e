"""Low-level readers behind `bertprep.corpus.spec`: bytes in, text out, bounded memory.

- `iter_lines(path, counts)`: a text file (plain, .gz, .bz2, .xz, .zst) as decoded lines,
  read in 1 MiB chunks. Invalid UTF-8 is replaced with U+FFFD and counted; a line longer
  than `MAX_LINE_CHARS` is cut into pieces (at the last whitespace in the second half of
  a piece when there is one), so a 100 MB line with no newline costs a few MB of memory.
- `iter_jsonl_texts`, `iter_parquet_texts`: one text per record (datasets: hf_datasets.py).

Every problem is a one-line `BertprepError` naming the file (and line, for JSONL).
"""
from __future__ import annotations

import bz2
import codecs
import gzip
import hashlib
import json
import lzma
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from bertprep.storage import stores as storage
from bertprep.errors import BertprepError, describe_path

CHUNK_BYTES = 1 << 20
# A line (a sentence in "lines" mode, a paragraph in "split" mode) longer than this is cut
# into pieces of at most this many characters. 1M characters is ~200k tokens: far past
# anything one BERT sequence (512 tokens) can use, so cutting loses nothing a model sees,
# and it bounds memory on files with no newlines at all.
MAX_LINE_CHARS = 1_000_000
# A JSONL record is parsed whole, so it cannot be cut; longer ones are an error.
MAX_JSON_LINE_CHARS = 64_000_000
# The first this many bytes of every text file are checked for binary content.
BINARY_PROBE_BYTES = 64 * 1024
BINARY_BAD_FRACTION = 0.25  # NUL or undecodable characters in the probe
BINARY_BAD_MINIMUM = 8

COMPRESSIONS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd"}
JSONL_SUFFIXES = {".jsonl", ".json", ".ndjson"}
PARQUET_SUFFIXES = {".parquet"}
DATASET_MARKERS = ("state.json", "dataset_info.json", "dataset_dict.json")
_MAGIC = {
    b"\x1f\x8b": "gzip data (name it .gz)",
    b"BZh": "bzip2 data (name it .bz2)",
    b"\xfd7zXZ": "xz data (name it .xz)",
    b"\x28\xb5\x2f\xfd": "zstd data (name it .zst)",
    b"PAR1": "a Parquet file (name it .parquet)",
    b"PK\x03\x04": "a zip archive (unpack it first)",
    b"\xff\xfe": "UTF-16 text (convert it to UTF-8)",
    b"\xfe\xff": "UTF-16 text (convert it to UTF-8)",
}
_UTF8_REPLACEMENT = "\ufffd".encode()


@dataclass
class FileCounts:
    """What reading one input found; bertprep.corpus.spec folds it into ReadStats."""

    bytes: int = 0  # bytes of text read, after decompression
    invalid_bytes: int = 0  # undecodable byte sequences replaced with U+FFFD
    long_lines: int = 0  # lines longer than MAX_LINE_CHARS, cut into pieces


def compression_of(path: Path) -> str | None:
    return COMPRESSIONS.get(path.suffix.lower())


def format_of(path: Path) -> str:
    """"dataset" (a save_to_disk directory), "jsonl", "parquet" or "text", by name."""
    if path.is_dir():
        return "dataset"
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes.pop()
    last = suffixes[-1] if suffixes else ""
    if last in JSONL_SUFFIXES:
        return "jsonl"
    if last in PARQUET_SUFFIXES:
        return "parquet"
    if last not in TEXT_NAMED and _first_line_is_json_object(path):
        # JSON Lines under a name that says nothing (petitions_2019-04, dumps without a
        # suffix): read as text, every record's keys and quotes became the corpus.
        return "jsonl"
    return "text"


# Suffixes that name text outright; a file without one is looked at (format_of).
TEXT_NAMED = {".txt", ".text", ".raw", ".tokens"}


def _first_line_is_json_object(path: Path) -> bool:
    """Whether the file's first non-blank line, within the binary probe, is a JSON object."""
    try:
        with _open_binary(path) as f:
            head = f.read(BINARY_PROBE_BYTES)
    except (OSError, BertprepError, *_corrupt_errors()):
        return False  # the reader reports what is wrong with the file
    for line in head.split(b"\n"):
        if line.strip():
            if not line.lstrip().startswith(b"{"):
                return False
            try:
                return isinstance(json.loads(line.decode("utf-8")), dict)
            except (UnicodeDecodeError, ValueError):
                return False
    return False


def is_dataset_dir(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in DATASET_MARKERS)


def _open_binary(path: Path) -> BinaryIO:
    compression = compression_of(path)
    source = storage.open_input(path) if storage.is_remote(path) else path  # an object-store URL: opened there
    if compression == "gzip":
        return gzip.open(source, "rb")
    if compression == "bzip2":
        return bz2.open(source, "rb")
    if compression == "xz":
        return lzma.open(source, "rb")
    if compression == "zstd":
        try:
            import zstandard
        except ImportError:
            raise BertprepError(
                f"{describe_path(path)}: reading .zst needs the zstandard package "
                "(pip install 'bertprep[zstd]')"
            ) from None
        raw = storage.open_input(path)
        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True)
    return storage.open_input(path)


def _corrupt_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile]
    try:
        import zstandard

        errors.append(zstandard.ZstdError)
    except ImportError:
        pass
    return tuple(errors)


def iter_chunks(path: Path, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """The file's bytes (decompressed) in chunks of about CHUNK_BYTES; of an
    uncompressed file, optionally only bytes [start, end)."""
    compression = compression_of(path)
    try:
        with _open_binary(path) as stream:
            if start:
                stream.seek(start)
            left = None if end is None else end - start
            while left is None or left > 0:
                chunk = stream.read(CHUNK_BYTES if left is None else min(CHUNK_BYTES, left))
                if not chunk:
                    break
                if left is not None:
                    left -= len(chunk)
                yield chunk
    except _corrupt_errors() as exc:
        raise BertprepError(
            f"{describe_path(path)}: truncated or corrupt {compression} data ({one_line(exc)})"
        ) from None
    except OSError as exc:
        if compression is not None and not isinstance(exc, (FileNotFoundError, PermissionError)):
            # bz2 reports bad data as a bare OSError("Invalid data stream").
            raise BertprepError(
                f"{describe_path(path)}: truncated or corrupt {compression} data ({one_line(exc)})"
            ) from None
        raise BertprepError(f"{describe_path(path)}: cannot read: {one_line(exc)}") from None


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _decode(data: bytes, final: bool, counts: FileCounts) -> tuple[str, int]:
    """Decode UTF-8 with replacement; returns (text, bytes consumed).

    The replaced sequences are counted as (U+FFFD in the output) - (U+FFFD already in the
    input): an EF BF BD triple can never be part of an invalid sequence (EF is a lead
    byte), so the difference is exact, and both counts run in C.
    """
    text, consumed = codecs.utf_8_decode(data, "replace", final)
    if "\ufffd" in text:
        counts.invalid_bytes += text.count("\ufffd") - data.count(_UTF8_REPLACEMENT, 0, consumed)
    return text, consumed


def decode_utf8(data: bytes) -> tuple[str, int]:
    """(text, invalid byte sequences replaced with U+FFFD) of a complete piece of UTF-8."""
    counts = FileCounts()
    text, _ = _decode(data, True, counts)
    return text, counts.invalid_bytes


def check_not_binary(path: Path, head: bytes, text: str) -> None:
    """Raise if the start of a file is mostly NUL or undecodable characters."""
    probe = text[:BINARY_PROBE_BYTES]
    bad = probe.count("\ufffd") + probe.count("\x00")
    if bad >= BINARY_BAD_MINIMUM and bad > BINARY_BAD_FRACTION * len(probe):
        hint = next((what for magic, what in _MAGIC.items() if head.startswith(magic)), None)
        what = f"it starts like {hint}" if hint else (
            f"{bad:,} of its first {len(probe):,} characters are NUL or undecodable"
        )
        raise BertprepError(f"{describe_path(path)}: looks like a binary file, not UTF-8 text ({what})")


def iter_text(path: Path, counts: FileCounts, start: int = 0, end: int | None = None) -> Iterator[str]:
    """The decoded text of a file in pieces of about CHUNK_BYTES; a file whose first
    64 KiB look binary raises instead. With a byte range (which starts at a line start,
    see `bertprep.corpus.boundaries`), only that part of the file."""
    pending = b""
    first = start == 0
    for chunk in iter_chunks(path, start, end):
        counts.bytes += len(chunk)
        data = pending + chunk if pending else chunk
        text, consumed = _decode(data, False, counts)
        pending = data[consumed:]  # an incomplete character at the end of the chunk
        if first:
            first = False
            check_not_binary(path, data, text)
            text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark
        if text:
            yield text
    if pending:
        text, _ = _decode(pending, True, counts)  # the truncated character becomes U+FFFD
        yield text


def _cut(line: str, limit: int) -> tuple[list[str], str]:
    """(pieces of at most limit characters, the rest, at most limit characters). A cut
    goes after the last whitespace in the second half of a piece, else at the limit."""
    pieces = []
    while len(line) > limit:
        space = max(line.rfind(" ", limit // 2, limit), line.rfind("\t", limit // 2, limit))
        at = space + 1 if space > 0 else limit
        pieces.append(line[:at])
        line = line[at:]
    return pieces, line


class LineTooLong(Exception):
    def __init__(self, line_number: int):
        self.line_number = line_number


def iter_lines(path: Path, counts: FileCounts, max_chars: int | None = None, cut: bool = True,
               start: int = 0, end: int | None = None) -> Iterator[str]:
    """The lines of a text file (or of its bytes [start, end)), without their newline,
    each at most max_chars (default MAX_LINE_CHARS) long: a longer line is cut into
    pieces and counted once in counts.long_lines (cut=True), or raises LineTooLong
    (cut=False; its number counts from `start`). Memory stays bounded by the chunk size
    and max_chars, newlines or not.
    """
    max_chars = max_chars or MAX_LINE_CHARS
    carry = ""  # the unfinished last line, at most max_chars long
    carry_was_cut = False  # pieces of the unfinished line were already yielded
    line_number = 0
    for text in iter_text(path, counts, start, end):
        lines = (carry + text).split("\n") if carry else text.split("\n")
        carry = lines.pop()
        for line in lines:
            line_number += 1
            if len(line) > max_chars:
                if not cut:
                    raise LineTooLong(line_number)
                counts.long_lines += not carry_was_cut
                pieces, line = _cut(line, max_chars)
                yield from pieces
            carry_was_cut = False
            yield line
        if len(carry) > max_chars:
            if not cut:
                raise LineTooLong(line_number + 1)
            counts.long_lines += not carry_was_cut
            carry_was_cut = True
            pieces, carry = _cut(carry, max_chars)
            yield from pieces
    if carry:
        yield carry


def cut_long_line(line: str, counts: FileCounts) -> list[str]:
    """[line], or its pieces if longer than MAX_LINE_CHARS (cut as iter_lines cuts)."""
    if len(line) <= MAX_LINE_CHARS:
        return [line]
    counts.long_lines += 1
    pieces, rest = _cut(line, MAX_LINE_CHARS)
    return [*pieces, rest]


def field_error(where: str, field: str | None, available) -> BertprepError:
    names = ", ".join(sorted(map(str, available))) or "none"
    what = f"no field {field!r}" if field else "no 'text' field"
    return BertprepError(f"{where}: {what} (fields: {names}); choose one with --text-field")


def record_text(where: str, value, field: str):
    if value is None or isinstance(value, str):
        return value
    raise BertprepError(f"{where}: field {field!r} is {type(value).__name__}, expected a string")


def lines_before(path: Path, offset: int) -> int:
    """How many lines of a file end before byte `offset` (its line number there, less
    one): only for naming a line in an error, so reading the prefix again is fine."""
    return sum(chunk.count(b"\n") for chunk in iter_chunks(path, 0, offset)) if offset else 0


def iter_jsonl_texts(path: Path, text_field: str | None, counts: FileCounts,
                     start: int = 0, end: int | None = None) -> Iterator[str]:
    """The text_field of each JSON Lines record (default "text"); null values are
    skipped. With a byte range (cut at line starts), only the records in it."""
    line_number = 0

    def where() -> str:  # built only for an error: the range's first line number costs a read
        return f"{describe_path(path)}:{lines_before(path, start) + line_number}"

    try:
        for line_number, line in enumerate(iter_lines(path, counts, MAX_JSON_LINE_CHARS, cut=False, start=start, end=end), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                if line_number == 1 and start == 0 and line.lstrip().startswith("["):
                    raise BertprepError(
                        f"{where()}: a JSON array; expected JSON Lines (one object per line)"
                    ) from None
                # json says "Unterminated string starting at" and expects a position next
                raise BertprepError(f"{where()}: invalid JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}") from None
            if not isinstance(record, dict):
                raise BertprepError(f"{where()}: expected a JSON object, got {type(record).__name__}")
            field = text_field or "text"
            if field not in record:
                raise field_error(where(), text_field, record)
            text = record[field]
            if text is not None and not isinstance(text, str):
                record_text(where(), text, field)  # raises, naming the line
            if text:
                yield text
    except LineTooLong as exc:
        raise BertprepError(
            f"{describe_path(path)}:{lines_before(path, start) + exc.line_number}: JSON record longer than "
            f"{MAX_JSON_LINE_CHARS:,} characters"
        ) from None


def open_parquet(path: Path, text_field: str | None):
    """(ParquetFile, column name) of a Parquet file whose text column is a string."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(storage.open_input(path) if storage.is_remote(path) else path)
    except (pa.ArrowException, OSError) as exc:
        raise BertprepError(f"{describe_path(path)}: not a readable Parquet file ({one_line(exc)})") from None
    field = text_field or "text"
    schema = parquet.schema_arrow
    if field not in schema.names:
        raise field_error(describe_path(path), text_field, schema.names)
    column_type = schema.field(field).type
    if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise BertprepError(f"{describe_path(path)}: column {field!r} is {column_type}, expected a string")
    return parquet, field


def iter_parquet_texts(path: Path, text_field: str | None, counts: FileCounts,
                       row_groups: list[int] | None = None) -> Iterator[str]:
    """The text_field column of a Parquet file (default "text"), in record batches; of
    the given row groups only, when named."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parquet, field = open_parquet(path, text_field)
    try:
        for batch in parquet.iter_batches(batch_size=1024, columns=[field], row_groups=row_groups):
            column = batch.column(0)
            counts.bytes += pc.sum(pc.binary_length(column)).as_py() or 0
            for text in column.to_pylist():
                if text:
                    yield text
    except (pa.ArrowException, OSError) as exc:
        raise BertprepError(f"{describe_path(path)}: corrupt Parquet data ({one_line(exc)})") from None


def hash_files(paths: list[Path]) -> dict:
    """{"bytes", "sha256"} of the files' bytes as stored, concatenated."""
    digest = hashlib.sha256()
    size = 0
    for path in paths:
        try:
            with storage.open_input(path) as stream:
                while chunk := stream.read(CHUNK_BYTES):
                    digest.update(chunk)
                    size += len(chunk)
        except OSError as exc:
            raise BertprepError(f"{describe_path(path)}: cannot read: {exc.strerror or exc}") from None
    return {"bytes": size, "sha256": digest.hexdigest()}
