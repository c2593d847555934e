"""The partition plan of build-shards: which part of which input each pair task reads.

The driver plans from what is known without reading the corpus: file sizes, a few
bytes around each cut (`bertprep.corpus.boundaries`), Parquet metadata, the row count of a
saved dataset. The plan is a list of small descriptors, each a partition of about
`--partition-size` bytes made of pieces (a byte range of a text or JSONL file, row
groups of a Parquet file, rows of a saved dataset); each pair task reads only its own
pieces. Cuts fall on document boundaries, so every document is read by exactly one
task, and the plan is a function of the inputs' bytes and the options alone: the same
on any executor, worker count or cluster (DESIGN.md, "Determinism and scale").

Inputs that cannot be cut are planned whole, one piece each (packed with their
neighbours when small): compressed files (a stream cannot be entered in the middle), a
dataset by name (streamed), and `--sentences prose` text without `--document-separator`
(a file is one document there). The first two are of a size not known when planning (a
piece without an end): their task cuts what it reads into parts of about the
partition's size, at document boundaries, as it reads (`cut_while_reading`), so its
memory stays that of one partition however large the file; a prose file is one
document, read by one task.

A mix (`CorpusSpec.mix`, bertprep/corpus/mix.py) is planned source by source, each
source once per copy its rate asks for (copy 0, 1, ...): its pieces carry the source,
the copy and the share of documents that copy keeps, and are sized, and cut, by the
text they keep (a piece of a copy keeping 0.3 of its documents counts 0.3 of its
bytes), so partitions keep their size. Copies of a small source may share a partition.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable, Iterator

from bertprep.corpus import hf_datasets
from bertprep.corpus import readers
from bertprep.storage import stores as storage
from bertprep.corpus import find_cut, sniff_layout
from bertprep.corpus import CorpusSpec, KnownWord, MixPlan, ReadStats, iter_piece_documents, plural, resolve_input_files
from bertprep.errors import BertprepError, describe_path
from bertprep.builder.partitions import text_bytes

COUNTED = ("bytes", "documents", "sentences", "invalid_bytes", "long_lines", "long_documents", "hyphens_removed")


@dataclass(frozen=True)
class Piece:
    """One contiguous part of one input."""

    path: str  # where to read it (absolute), or the --dataset name
    name: str  # the input as the user gave it, for messages
    kind: str  # "text" | "jsonl" | "parquet" | "dataset" (a saved one) | "stream" (read whole)
    start: int = 0  # text, jsonl: a byte offset; parquet: a row group; dataset: a row
    end: int | None = None  # exclusive; None: to the end of the input
    size: int = 0  # bytes planned: exact for uncompressed files, estimated otherwise
    last: bool = True  # ends where its input ends
    layout: str | None = None  # text: how it was cut (boundaries.LAYOUTS)
    wikitext: bool | None = None  # text: the file is WikiText (None: the reader decides)
    config: str | None = None  # a dataset's config
    source: str | None = None  # a mix's source (None: no mix)
    copy: int = 0  # which reading of that source (mix.py)
    keep: float = 1.0  # the share of its documents this copy keeps (sizes the piece)
    threshold: int = 1 << 64  # it keeps the documents of lower priority (mix.MixPlan.copies)


@dataclass(frozen=True)
class PartitionPlan:
    index: int
    pieces: tuple[Piece, ...]

    @property
    def size(self) -> int:
        return sum(p.size for p in self.pieces)

    def descriptor(self) -> dict:
        """As JSON holds it: what a pair marker records, to be reused only by this plan."""
        return {"index": self.index, "pieces": [asdict(p) for p in self.pieces]}

    @property
    def sized(self) -> bool:
        """Whether every piece's extent was known when planning (not a whole compressed
        file or a streamed dataset, whose text can be any multiple of its planned size)."""
        return all(p.end is not None for p in self.pieces)


class _Packer:
    """Pieces in input order into partitions of at least `target` bytes; a tail under a
    quarter of that joins the partition before it."""

    def __init__(self, target: int):
        self.target = target
        self.partitions: list[PartitionPlan] = []
        self.pieces: list[Piece] = []
        self.size = 0

    def room(self) -> int:
        return self.target - self.size

    def add(self, piece: Piece) -> None:
        self.pieces.append(piece)
        self.size += piece.size
        if self.size >= self.target:
            self._close()

    def _close(self) -> None:
        self.partitions.append(PartitionPlan(len(self.partitions), tuple(self.pieces)))
        self.pieces, self.size = [], 0

    def finish(self) -> list[PartitionPlan]:
        if self.pieces and self.partitions and self.size < self.target // 4:
            previous = self.partitions.pop()
            self.pieces = _joined([*previous.pieces, *self.pieces])
        if self.pieces:
            self._close()
        return self.partitions


def _joined(pieces: list[Piece]) -> list[Piece]:
    """Adjacent pieces of one input as one."""
    out: list[Piece] = []
    for piece in pieces:
        before = out[-1] if out else None
        if (before is not None and before.path == piece.path and before.kind == piece.kind
                and before.end is not None and before.end == piece.start
                and (before.source, before.copy) == (piece.source, piece.copy)):
            out[-1] = Piece(**{**asdict(before), "end": piece.end, "size": before.size + piece.size,
                               "last": piece.last})
        else:
            out.append(piece)
    return out


class _KeptRoom:
    """The packer as one copy of a mix's source sees it: a piece keeping `keep` of its
    documents fills the room left with `keep` of its bytes."""

    def __init__(self, packer: _Packer, keep: float):
        self.packer, self.keep = packer, keep
        self.target = packer.target

    def room(self) -> int:
        return max(1, math.ceil(self.packer.room() / self.keep))


def plan_partitions(spec: CorpusSpec, target_bytes: int, mix: MixPlan | None = None) -> list[PartitionPlan]:
    """The partitions of the corpus, in input order (see the module docstring); a mix
    needs its MixPlan (its rates say how many copies of each source to plan)."""
    if spec.mix:
        return _plan_mix(spec, target_bytes, mix)
    inputs = resolve_input_files(spec)
    if spec.split is not None:
        datasets = [p for p in inputs if readers.format_of(p) == "dataset"] + ([spec.dataset] if spec.dataset else [])
        hf_datasets.check_split_applies(spec.split, datasets)
    packer = _Packer(target_bytes)
    for path in inputs:
        for piece in _input_pieces(path, readers.format_of(path), spec, packer):
            packer.add(piece)
    if spec.dataset:
        for piece in _input_pieces(Path(spec.dataset), "dataset", spec, packer, spec.dataset_config):
            packer.add(piece)
    return packer.finish()


def _plan_mix(spec: CorpusSpec, target_bytes: int, mix: MixPlan) -> list[PartitionPlan]:
    packer = _Packer(target_bytes)
    for source in spec.mix:
        reading = spec.source_spec(source)
        files = resolve_input_files(reading)
        for copy, (keep, threshold) in enumerate(mix.copies(source.name)):
            room = _KeptRoom(packer, keep)
            for path in files:
                for piece in _input_pieces(path, readers.format_of(path), reading, room):
                    packer.add(replace(piece, size=max(1, round(piece.size * keep)), source=source.name,
                                       copy=copy, keep=keep, threshold=threshold))
    return packer.finish()


def _input_pieces(path, kind: str, spec: CorpusSpec, packer: _Packer, config: str | None = None) -> Iterator[Piece]:
    """The pieces of one input, each cut once the partition being filled has its bytes
    (packer.room() is read again after each piece is added)."""
    where = {"path": str(path) if storage.is_remote(path) else str(path.absolute()), "name": describe_path(path)}
    if kind == "dataset" and not readers.is_dataset_dir(path):
        where["path"] = str(path)  # a name on the Hub: streamed, read whole
        yield Piece(**where, kind="stream", size=packer.target, config=config)
        return
    if kind == "dataset":
        if config is not None:  # a saved directory takes none: loading it says so
            hf_datasets.load_dataset_split(path, config, spec.split_name)
        rows, nbytes = hf_datasets.saved_text_rows(path, spec.split_name, spec.text_field)
        start = 0
        while start < rows:
            # Rows of about the room left, at the column's mean bytes per row.
            count = rows - start if nbytes == 0 else max(1, math.ceil(packer.room() * rows / nbytes))
            end = min(rows, start + count)
            yield Piece(**where, kind="dataset", start=start, end=end, size=math.ceil((end - start) * nbytes / rows),
                        last=end == rows)
            start = end
        return
    if kind == "parquet":
        yield from _parquet_pieces(path, where, spec, packer)
        return
    size = path.stat().st_size
    if readers.compression_of(path):  # a compressed stream cannot be entered in the middle
        yield Piece(**where, kind=kind, size=size, layout=None)
        return
    if kind == "jsonl":
        layout, wikitext = "record", None
    else:
        layout, wikitext = sniff_layout(path, spec.sentences == "prose", spec.separator_pattern())
    start = 0
    while True:
        end = size if layout is None else find_cut(path, start + packer.room(), size, layout, spec.separator_pattern())
        yield Piece(**where, kind=kind, start=start, end=end, size=end - start, last=end == size, layout=layout,
                    wikitext=wikitext)
        if end >= size:
            return
        start = end


def _parquet_pieces(path, where: dict, spec: CorpusSpec, packer: _Packer) -> Iterator[Piece]:
    """Runs of whole row groups, sized by the text column's bytes in the file's metadata."""
    parquet, field = readers.open_parquet(path, spec.text_field)
    metadata = parquet.metadata
    sizes = []
    for group in range(metadata.num_row_groups):
        columns = metadata.row_group(group)
        sizes.append(sum(columns.column(c).total_uncompressed_size for c in range(columns.num_columns)
                         if columns.column(c).path_in_schema == field))
    start, size = 0, 0
    for group, group_size in enumerate(sizes):
        size += group_size
        if size >= packer.room() or group == len(sizes) - 1:
            yield Piece(**where, kind="parquet", start=start, end=group + 1, size=size, last=group == len(sizes) - 1)
            start, size = group + 1, 0


# ---------------------------------------------------------------- in the pair task


def iter_partition_documents(partition: PartitionPlan, spec: CorpusSpec, counts: list[dict],
                             known_word: KnownWord | None = None) -> Iterator[list[str]]:
    """The documents of one planned partition, as they are read; the read counts of
    each piece are appended to `counts` once that piece is read to its end."""
    for piece in partition.pieces:
        stats = ReadStats()
        yield from iter_piece_documents(piece, spec, stats, known_word)
        mix = {} if piece.source is None else {
            "source": piece.source, "copy": piece.copy,
            "sampled_size": stats.sampled_size, "sampled_documents": stats.sampled_documents}
        counts.append({"name": piece.name, **{key: getattr(stats, key) for key in COUNTED}, **mix})


def read_partition(partition: PartitionPlan, spec: CorpusSpec, known_word: KnownWord | None = None
                   ) -> tuple[list[list[str]], list[dict]]:
    """(documents, the read counts of each piece) of one planned partition."""
    counts: list[dict] = []
    return list(iter_partition_documents(partition, spec, counts, known_word)), counts


def cut_while_reading(documents: Iterable[list[str]], limit: int | None) -> Iterator[list[list[str]]]:
    """The documents in consecutive parts, each closed by the first document that brings
    it to `limit` bytes (UTF-8 and a newline per sentence, as `partitions.text_bytes`
    counts a partition); a last part under a quarter of that joins the one before (as
    the planner joins a small tail). limit None: one part, all of them. Always at least
    one part (empty when there are no documents).

    Memory: a part is handed over, not kept: once the consumer has dropped (or cleared)
    it, only the next part's first quarter is held while the consumer works, i.e. a
    part and a quarter of text at most. (Each yield hands out a value no local here
    still names.)"""
    if limit is None:
        yield list(documents)
        return
    held: list[list[str]] | None = None  # a full part, kept until the next one is a quarter full
    current: list[list[str]] = []
    size, parts = 0, 0
    for document in documents:
        current.append(document)
        size += text_bytes([document])
        if held is not None and size >= limit // 4:
            handed, held, parts = [held], None, parts + 1
            yield handed.pop()
        if size >= limit:
            held, current, size = current, [], 0
    document = None  # the loop's last document belongs to the last part: not kept either
    if held is not None:
        handed, held, current = [held + current], None, None
        yield handed.pop()
    elif current or not parts:
        handed, current = [current], None
        yield handed.pop()


def merge_read_stats(parts: Iterable[dict]) -> ReadStats:
    """The corpus's read statistics from every piece's counts, in plan order (an input
    read in several pieces counts as one file); an input that gave no document, only
    undecodable bytes, raises naming it. Of a mix, the first copy of each source counts:
    the corpus as it is, once."""
    stats = ReadStats()
    per_input: dict[str, list[int]] = {}
    for part in parts:
        if part.get("copy", 0):
            continue
        documents_and_invalid = per_input.setdefault(part["name"], [0, 0])
        documents_and_invalid[0] += part["documents"]
        documents_and_invalid[1] += part["invalid_bytes"]
        for key in COUNTED:
            setattr(stats, key, getattr(stats, key) + part[key])
    for name, (documents, invalid) in per_input.items():
        if documents == 0 and invalid:
            raise BertprepError(f"{name}: no usable text ({plural(invalid, 'undecodable byte sequence')})")
    stats.files = len(per_input)
    stats.files_with_invalid = [name for name, (_, invalid) in per_input.items() if invalid]
    return stats

