"""Where a plain-text file can be cut between two documents, found by seeking and reading
only a little around the cut.

A partition of a text file is a byte range [start, end) whose ends are document
boundaries of the file's layout (`bertprep.corpus.spec`), so that reading each range on its
own gives exactly the documents of the whole file: none split, none twice, none lost.
The layout of a file is decided by its first non-blank line, as the corpus reader does:

- "blank", the reference layout (a blank line ends a document): a cut goes right after
  a blank (or whitespace-only) line.
- "doc", WikiExtractor files (the first line is `<doc ...>`): right before a `<doc ...>`
  line, which closes whatever came before it.
- "heading", WikiText (the first line is ` = Title = `): right before a top-level heading.
- "separator", `--sentences prose` with `--document-separator` (a blank line ends only
  a paragraph there): right before a line the separator matches.
- "record", JSON Lines: right after any newline.
- None: no seekable boundary (`--sentences prose` without a separator, where a file is
  one document): the file is planned whole.

A boundary is only taken when it is certain, so a cut may move further along but never
lands inside a document: a line longer than MAX_BOUNDARY_LINE is never a boundary. The
one thing a few bytes cannot tell is whether a blank line lies inside a `<doc>` block of
a file that does not start with one; the reader of a "blank" range checks that its range
did not end inside one (`corpus.iter_piece_documents`).
"""
from __future__ import annotations

import codecs
import re
from typing import BinaryIO, Iterator

from bertprep.corpus import readers
from bertprep.storage import stores as storage

LAYOUTS = ("blank", "doc", "heading", "separator", "record")
WINDOW = 16 * 1024  # bytes read at a time while looking for a boundary
MAX_BOUNDARY_LINE = 4096  # bytes; longer lines are never taken as boundaries
_DOC_OPEN = re.compile(r"<doc(?:\s[^>]*)?>")
_WIKITEXT_HEADING = re.compile(r"((?:= )+)\S.*?((?: =)+)")


def wikitext_level(line: str) -> int:
    """1 for " = Title = ", 2 for " = = Section = = ", ...; 0 for other (stripped) lines."""
    match = _WIKITEXT_HEADING.fullmatch(line)
    if match is None or match.group(1).count("=") != match.group(2).count("="):
        return 0
    return match.group(1).count("=")


def is_doc_open(line: str) -> bool:
    return line.startswith("<doc") and _DOC_OPEN.fullmatch(line) is not None


def _lines(stream: BinaryIO, position: int) -> Iterator[tuple[int, int, bytes | None]]:
    """(start, end, bytes) of each line from byte `position` on, the newline included
    (the first may be the tail of a line); bytes is None for a line longer than
    MAX_BOUNDARY_LINE, which is skipped without being held."""
    stream.seek(position)
    start = consumed = position
    buffer = b""
    long = False
    while chunk := stream.read(WINDOW):
        consumed += len(chunk)
        buffer += chunk
        at = 0
        while (newline := buffer.find(b"\n", at)) >= 0:
            end = start + newline + 1 - at
            yield start, end, None if long or newline + 1 - at > MAX_BOUNDARY_LINE else buffer[at:newline + 1]
            start, at, long = end, newline + 1, False
        buffer = buffer[at:]
        if len(buffer) > MAX_BOUNDARY_LINE:
            buffer, long = b"", True
    if start < consumed:
        yield start, consumed, None if long else buffer


def _text(line: bytes, at_file_start: bool) -> str:
    """A line as the corpus reader sees it: decoded with replacement, stripped, without
    the byte order mark a file may start with."""
    text = line.decode("utf-8", "replace")
    return (text.removeprefix("\ufeff") if at_file_start else text).strip()


def _starts_document(text: str, layout: str, separator: re.Pattern | None) -> bool:
    if not text:
        return False
    is_separator = separator is not None and separator.search(text) is not None
    if layout == "separator":
        return is_separator
    if layout == "doc":
        # A `<doc>` line the separator matches is read as a separator: it opens nothing.
        return is_doc_open(text) and not is_separator
    return layout == "heading" and wikitext_level(text) == 1


def find_cut(path, desired: int, size: int, layout: str, separator: re.Pattern | None = None) -> int:
    """The first document boundary of `path` (a local path or an object-store URL) at
    or after byte `desired` (the file's size when there is none)."""
    if desired >= size:
        return size
    with storage.open_input(path) as stream:
        if layout == "blank":
            # The line holding byte desired - 1 ends at or after the cut: start there.
            back = max(0, desired - 1 - MAX_BOUNDARY_LINE)
            stream.seek(back)
            newline = stream.read(desired - 1 - back).rfind(b"\n")
            known = newline >= 0 or back == 0
            lines = _lines(stream, back + newline + 1 if known else desired - 1)
            if not known:
                next(lines, None)  # the tail of a line too long to be blank
            for start, end, line in lines:
                if line is not None and not _text(line, start == 0):
                    return end
            return size
        lines = _lines(stream, desired - 1)
        first = next(lines, None)  # the line holding byte desired - 1: it starts before the cut
        if layout == "record":
            return first[1] if first else size
        for start, _, line in lines:
            if line is not None and _starts_document(_text(line, False), layout, separator):
                return start
        return size


def sniff_layout(path, prose: bool, separator: re.Pattern | None) -> tuple[str | None, bool]:
    """(layout, wikitext) of an uncompressed text file, from its first non-blank line;
    raises, naming the file, when its start looks binary (as reading it would)."""
    with storage.open_input(path) as stream:
        head = stream.read(4 * readers.BINARY_PROBE_BYTES)  # at least the reader's probe, in characters
        text, _ = codecs.utf_8_decode(head, "replace", False)
        readers.check_not_binary(path, head, text)
        # A line too long to hold (None) is neither a title nor a <doc> line.
        first = next(("" if line is None else _text(line, start == 0) for start, _, line in _lines(stream, 0)
                      if line is None or _text(line, start == 0)), "")
    wikitext = wikitext_level(first) == 1
    if wikitext:
        return "heading", True
    if is_doc_open(first) and not (separator is not None and separator.search(first)):
        return "doc", False
    if prose:
        return ("separator" if separator is not None else None), False
    return "blank", False
