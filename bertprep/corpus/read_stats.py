"""What reading a corpus counted (`ReadStats`), and the number and size formats of its
one-line summaries."""
from __future__ import annotations

from dataclasses import dataclass, field

from bertprep.corpus import readers
from bertprep.corpus.mix import MixPlan
from bertprep.corpus.readers import FileCounts


@dataclass
class ReadStats:
    """Counters filled while reading; pass one to iter_documents and read it after."""

    files: int = 0  # inputs read: files, saved dataset directories, datasets
    bytes: int = 0  # bytes of text, after decompression
    documents: int = 0
    sentences: int = 0
    invalid_bytes: int = 0  # undecodable byte sequences replaced with U+FFFD
    files_with_invalid: list[str] = field(default_factory=list)
    long_lines: int = 0  # lines over readers.MAX_LINE_CHARS, cut into pieces
    long_documents: int = 0  # documents over MAX_DOCUMENT_CHARS or _SENTENCES, cut into several
    hyphens_removed: int = 0  # "prose": line-end hyphens of words re-joined
    sampled_size: int = 0  # a mix: mix.SIZE_UNIT of the documents its sampling kept
    sampled_documents: int = 0
    mix: MixPlan | None = None  # a mix read by iter_documents: its shares and what it kept

    def add(self, path: str, counts: FileCounts) -> None:
        self.files += 1
        self.bytes += counts.bytes
        self.invalid_bytes += counts.invalid_bytes
        self.long_lines += counts.long_lines
        if counts.invalid_bytes:
            self.files_with_invalid.append(path)

    def summary(self) -> str:
        """One line: "3 files, 12.3 MB, 4,567 documents, 45,678 sentences; ..."."""
        text = (f"{plural(self.files, 'file')}, {format_size(self.bytes)}, {plural(self.documents, 'document')}, "
                f"{plural(self.sentences, 'sentence')}")
        if self.invalid_bytes:
            names = ", ".join(self.files_with_invalid[:5])
            if len(self.files_with_invalid) > 5:
                names += f" and {len(self.files_with_invalid) - 5:,} more"
            text += f"; {plural(self.invalid_bytes, 'invalid byte sequence')} replaced in {names}"
        if self.long_lines:
            text += f"; {plural(self.long_lines, 'line')} over {readers.MAX_LINE_CHARS:,} characters cut"
        if self.long_documents:
            text += f"; {plural(self.long_documents, 'over-long document')} cut"
        if self.hyphens_removed:
            text += f"; {self.hyphens_removed:,} words split at a line end re-joined"
        return text


def plural(count: int, noun: str) -> str:
    """plural(1, "file") -> "1 file", plural(1234, "file") -> "1,234 files"."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def format_size(n_bytes: int) -> str:
    """1234567 -> "1.2 MB" (decimal units)."""
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n_bytes >= size:
            return f"{n_bytes / size:,.1f} {unit}"
    return f"{n_bytes:,} bytes"
