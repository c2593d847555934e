"""Reading a corpus: files, directories, globs or a Hugging Face dataset, as documents.

Shared by train-tokenizer and build-shards. `iter_documents(spec)` yields each document
as a non-empty list of stripped, non-empty sentence strings, streaming with bounded
memory; `iter_piece_documents` yields those of one planned part of an input (a byte
range cut between documents, see bertprep/builder/plan.py), the same as the whole file's reading
gives there. What a document is:

- Plain text in the reference layout (REFERENCE.md, "Corpus format"): a sentence per
  line, a blank (or whitespace-only) line ends a document; several blank lines in a row
  make no empty documents. `.gz` / `.bz2` / `.xz` / `.zst` are decompressed by extension.
- WikiExtractor files are recognised in any text file: each `<doc ...>` ... `</doc>` is
  one document; inside one, blank lines are ignored and the first line is dropped when
  it equals the title attribute. Each remaining line is a paragraph.
- WikiText is recognised per file, when its first non-blank line is a top-level heading
  (` = Title = `): then each top-level heading starts a new document, ` = = Section = = `
  (and deeper) heading lines are dropped, and blank lines end nothing (the original
  wiki.*.raw has one between every paragraph). The heading itself is never a sentence.
- JSONL (`.jsonl`, `.json`, `.ndjson`, compressed too), Parquet (`.parquet`) and Hugging
  Face datasets (by name, streamed, or a `save_to_disk` directory, given as `--dataset`
  or as an input path): one record is one document; its text field (`--text-field`,
  default "text") is split into lines.
- `sentences="lines"`: each line is one sentence. `sentences="split"`: each line is a
  paragraph, cut into sentences by `bertprep.corpus.sentences.split_sentences`.
- `sentences="prose"` (hard-wrapped books and articles): a blank line ends a paragraph,
  not a document; the lines of a paragraph are joined (`bertprep.corpus.prose`: words split
  across a line break are re-joined only when clearly one word) and split into
  sentences; a file, or a record, is one document. Inside `<doc>` and in WikiText,
  whose lines are whole paragraphs, it reads as "split".
- `document_separator` (a regex, any layout): a line it matches (`re.search` on the
  stripped line) ends the current document and is dropped, e.g. `^CHAPTER ` or
  `^[*]{3} (START|END) OF`.
- Documents never span input files (DESIGN.md).
- `mix` (`--mix NAME=PATH[:WEIGHT],...`, `--sampling-temperature`, `--mix-seed`): the
  corpus is several named sources, each sampled to its share (`bertprep.corpus.mix`):
  the sources are measured (a first read), then each is read once per copy its rate
  asks for, keeping the documents the mix chooses. `ReadStats` counts the first copy
  only, and `ReadStats.mix` holds what was kept.

Limits, so memory is bounded whatever the input: a line longer than
`readers.MAX_LINE_CHARS` (1M characters) is cut into pieces (counted in
`ReadStats.long_lines`); a document is closed once it reaches `MAX_DOCUMENT_CHARS`
(10M characters, several books) or `MAX_DOCUMENT_SENTENCES` (100,000) and the rest
continues as a new document (counted in `ReadStats.long_documents`).
"""
from __future__ import annotations

import html
import os
import re
from dataclasses import asdict, dataclass, replace
from typing import Iterable, Iterator

from bertprep.corpus import hf_datasets
from bertprep.corpus import readers
from bertprep.storage import stores as storage
from bertprep.corpus.boundaries import is_doc_open, wikitext_level
from bertprep.errors import BertprepError, describe_path
from bertprep.corpus.input_files import resolve_input_files, resolve_source_files
from bertprep.corpus.mix import (BUCKET_BITS, MixPlan, MixSource, bucket_of, check_mix, document_priority, keeps,
                                 parse_mix, size_of)
from bertprep.corpus.prose import KnownWord, ProseParagraphs
from bertprep.corpus.read_stats import ReadStats, format_size, plural  # noqa: F401  (names of this module too)
from bertprep.corpus.readers import FileCounts
from bertprep.corpus.sentences import split_sentences

SENTENCE_MODES = ("lines", "split", "prose")
DEFAULT_SPLIT = "train"
MAX_DOCUMENT_CHARS = 10_000_000
MAX_DOCUMENT_SENTENCES = 100_000  # bounds memory when sentences are tiny
_DOC_TITLE = re.compile(r'\btitle="([^"]*)"')
_JUNK = str.maketrans("", "", "\ufffd\x00")


@dataclass(frozen=True)
class CorpusSpec:
    """Where the text comes from and how to cut it; the CLI builds one from its options."""

    paths: tuple[str, ...] = ()  # files, directories (recursively, sorted), globs (sorted)
    text_field: str | None = None  # JSONL / Parquet / HF dataset column (default "text")
    dataset: str | None = None  # Hugging Face dataset name, or a save_to_disk directory
    dataset_config: str | None = None
    split: str | None = None  # default "train"
    sentences: str = "lines"  # "lines": a sentence per line | "split": split paragraphs | "prose": wrapped text
    document_separator: str | None = None  # a regex: a line it matches ends a document
    # Several sources sampled to shares (bertprep.corpus.mix), instead of paths; a string
    # is parsed as --mix is ("ko=petitions/*:0.7,en=wiki/*:0.3").
    mix: tuple[MixSource, ...] = ()
    sampling_temperature: float | None = None  # shares proportional to size**T (no weights given)
    mix_seed: int = 0  # which documents a fractional copy keeps

    def __post_init__(self):
        if isinstance(self.paths, (str, os.PathLike)):
            raise TypeError("CorpusSpec.paths is a tuple of paths, not one path")
        object.__setattr__(self, "paths", tuple(str(p) for p in self.paths))
        if self.sentences not in SENTENCE_MODES:
            raise BertprepError(f"sentences must be one of {', '.join(SENTENCE_MODES)}, not {self.sentences!r}")
        self.separator_pattern()  # a bad regex fails here, before any reading
        mix = parse_mix(self.mix) if isinstance(self.mix, str) else self.mix
        object.__setattr__(self, "mix", tuple(m if isinstance(m, MixSource) else MixSource(**m) for m in mix))
        check_mix(self.mix, self.sampling_temperature)
        if self.mix and (self.paths or self.dataset):
            raise BertprepError("--mix names the inputs: give them there, not also as INPUT or --dataset")

    def source_spec(self, source: MixSource) -> "CorpusSpec":
        """The spec of one source of the mix: its path, read as the mix is read."""
        return replace(self, paths=(source.path,), mix=(), sampling_temperature=None)

    def record(self) -> dict:
        """The spec as a manifest records it (JSON types); without the mix fields when
        there is no mix, so a corpus of paths records what it always did."""
        record = {**asdict(self), "paths": list(self.paths), "mix": [asdict(m) for m in self.mix]}
        if not self.mix:
            for key in ("mix", "sampling_temperature", "mix_seed"):
                record.pop(key)
        return record

    def separator_pattern(self) -> re.Pattern | None:
        if self.document_separator is None:
            return None
        try:
            pattern = re.compile(self.document_separator)
        except re.error as exc:
            raise BertprepError(f"--document-separator: {self.document_separator!r} is not a valid regular expression ({exc})") from None
        if pattern.search(""):
            raise BertprepError(f"--document-separator: {self.document_separator!r} matches an empty line, so it would match every line")
        return pattern

    @property
    def split_name(self) -> str:
        return self.split or DEFAULT_SPLIT


# ---------------------------------------------------------------- documents


def iter_documents(
    spec: CorpusSpec, stats: ReadStats | None = None, known_word: KnownWord | None = None
) -> Iterator[list[str]]:
    """Every document of the corpus in input order (see the module docstring).
    known_word (e.g. `prose.vocabulary_lookup(tokenizer)`) helps "prose" re-join words
    split across a line break; without it only the corpus's own evidence is used."""
    stats = stats if stats is not None else ReadStats()
    if spec.mix:
        yield from _mix_documents(spec, stats, known_word)
        return
    inputs = resolve_input_files(spec)
    if spec.split is not None:
        datasets = [p for p in inputs if readers.format_of(p) == "dataset"] + ([spec.dataset] if spec.dataset else [])
        hf_datasets.check_split_applies(spec.split, datasets)
    before = stats.documents
    for path in inputs:
        yield from _input_documents(path, readers.format_of(path), spec, stats, known_word)
    if spec.dataset:
        yield from _input_documents(spec.dataset, "dataset", spec, stats, known_word)
    if stats.documents == before:
        raise no_text_error(spec)


def mix_inputs(spec: CorpusSpec) -> list[tuple[str, str]]:
    """(source name, input path) of every input of a mix, in the mix's order."""
    return [(name, str(path)) for name, files in resolve_source_files(spec) for path in files]


def measure_input(spec: CorpusSpec, source: str, path) -> dict:
    """{"size", "documents", "histogram"} of one input of the mix's source `source`, read
    as spec reads it: its size in mix.SIZE_UNIT, in total and per bucket of document
    priority (no vocabulary, so both commands measure alike; "split" is measured as
    "lines", since splitting moves no character)."""
    reading = replace(spec, sentences="lines") if spec.sentences == "split" else spec
    path = storage.path(path)
    histogram = [0] * (1 << BUCKET_BITS)
    documents = 0
    for document in _input_documents(path, readers.format_of(path), reading, ReadStats(), None):
        histogram[bucket_of(document_priority(document, source, spec.mix_seed))] += size_of(document)
        documents += 1
    return {"size": sum(histogram), "documents": documents, "histogram": histogram}


def plan_mix(spec: CorpusSpec, measured: list[dict]) -> MixPlan:
    """The MixPlan of a mix from measure_input of each of its mix_inputs, in that order."""
    names = [s.name for s in spec.mix]
    sizes, documents, files = dict.fromkeys(names, 0), dict.fromkeys(names, 0), dict.fromkeys(names, 0)
    histograms = {name: [0] * (1 << BUCKET_BITS) for name in names}
    for (name, _), counts in zip(mix_inputs(spec), measured, strict=True):
        sizes[name] += counts["size"]
        documents[name] += counts["documents"]
        files[name] += 1
        histograms[name] = [a + b for a, b in zip(histograms[name], counts["histogram"])]
    return MixPlan(spec.mix, spec.sampling_temperature, spec.mix_seed, sizes, documents, files, histograms)


def _mix_documents(spec: CorpusSpec, stats: ReadStats, known_word) -> Iterator[list[str]]:
    """A mix's documents: each source read once per copy, keeping what each copy keeps
    (mix.py). Measuring first costs one more read of every input."""
    plan = plan_mix(spec, [measure_input(spec, name, path) for name, path in mix_inputs(spec)])
    stats.mix = plan
    for source in spec.mix:
        for copy, (_, threshold) in enumerate(plan.copies(source.name)):
            reading = stats if copy == 0 else ReadStats()  # the natural corpus is counted once
            for document in iter_documents(spec.source_spec(source), reading, known_word):
                if keeps(document, source.name, threshold, spec.mix_seed):
                    plan.add_kept(source.name, size_of(document), 1)
                    yield document


def _input_documents(source, kind: str, spec: CorpusSpec, stats: ReadStats, known_word) -> Iterator[list[str]]:
    """The documents of one file, saved dataset directory or (kind "dataset") spec.dataset."""
    counts = FileCounts()
    before = stats.documents
    builder = _DocumentBuilder(spec, counts, stats, known_word)
    if kind == "text":
        documents = _text_documents(readers.iter_lines(source, counts), builder)
    else:
        if kind == "jsonl":
            texts = readers.iter_jsonl_texts(source, spec.text_field, counts)
        elif kind == "parquet":
            texts = readers.iter_parquet_texts(source, spec.text_field, counts)
        else:
            config = spec.dataset_config if source == spec.dataset else None
            texts = hf_datasets.iter_dataset_texts(source, config, spec.split_name, spec.text_field, counts)
        documents = _record_documents(texts, builder)
    yield from documents
    if stats.documents == before and counts.invalid_bytes:
        raise BertprepError(
            f"{describe_path(source)}: no usable text ({plural(counts.invalid_bytes, 'undecodable byte sequence')})"
        )
    stats.add(describe_path(source), counts)


class _DocumentBuilder:
    """Collects sentences; closes documents at boundaries and at MAX_DOCUMENT_CHARS.
    In "prose", wrapped lines wait in `self.prose` until the document closes."""

    def __init__(self, spec: CorpusSpec, counts: FileCounts, stats: ReadStats, known_word=None):
        self.split = spec.sentences in ("split", "prose")
        self.prose = ProseParagraphs(known_word) if spec.sentences == "prose" else None
        self.separator = spec.separator_pattern()
        self.counts = counts
        self.stats = stats
        self.sentences: list[str] = []
        self.chars = 0

    def is_separator(self, line: str) -> bool:
        return self.separator is not None and self.separator.search(line) is not None

    def blank_line(self) -> Iterator[list[str]]:
        """A blank line: ends a paragraph in "prose", a document otherwise."""
        if self.prose is not None:
            self.prose.end_paragraph()
        else:
            yield from self.close()

    def add_line(self, line: str, wrapped: bool = True) -> Iterator[list[str]]:
        """Add one stripped, non-empty line (in "prose", part of a paragraph when
        wrapped); yields a document if it grew too long."""
        if ("\ufffd" in line or "\x00" in line) and not line.translate(_JUNK).strip():
            return  # only undecodable bytes: tokenizes to nothing, so no sentence, no boundary
        if self.prose is not None and wrapped:
            self.prose.add_line(line)
            # Bound memory: hand the buffer on (the sentence limits below then cut the
            # document), between two lines that no hyphen joins, unless there is none.
            chars = self.prose.chars
            if chars >= MAX_DOCUMENT_CHARS and (not line.endswith("-") or chars >= 2 * MAX_DOCUMENT_CHARS):
                yield from self._take_prose()
            return
        yield from self._take_prose()  # wrapped lines before an unwrapped one come first
        yield from self._add_paragraph(line)

    def _take_prose(self) -> Iterator[list[str]]:
        if self.prose is not None and self.prose.paragraphs:
            for paragraph in self.prose.take():
                yield from self._add_paragraph(paragraph)
            self.stats.hyphens_removed += self.prose.hyphens_removed
            self.prose.hyphens_removed = 0

    def _add_paragraph(self, line: str) -> Iterator[list[str]]:
        for piece in readers.cut_long_line(line, self.counts):
            for sentence in split_sentences(piece) if self.split else (piece.strip(),):
                if not sentence:  # a cut piece can be all whitespace
                    continue
                self.sentences.append(sentence)
                self.chars += len(sentence)
                if self.chars >= MAX_DOCUMENT_CHARS or len(self.sentences) >= MAX_DOCUMENT_SENTENCES:
                    self.stats.long_documents += 1
                    yield from self.close()

    def close(self) -> Iterator[list[str]]:
        yield from self._take_prose()
        if self.sentences:
            document, self.sentences, self.chars = self.sentences, [], 0
            self.stats.documents += 1
            self.stats.sentences += len(document)
            yield document


def _text_documents(lines: Iterable[str], builder: _DocumentBuilder, wikitext: bool | None = None,
                    end_state: dict | None = None) -> Iterator[list[str]]:
    """Documents of a plain-text file: reference layout, prose, WikiExtractor, WikiText.
    Whether the file is WikiText is decided by its first non-blank line, or given (a
    part of a file read alone follows its file). end_state, when given, learns whether
    the lines ended inside a <doc> block."""
    in_doc = False  # inside <doc> ... </doc>
    title: str | None = None  # a WikiExtractor title line still to drop
    for raw in lines:
        line = raw.strip()
        if not line:
            if not in_doc and not wikitext:
                yield from builder.blank_line()
            continue
        if wikitext is None:
            wikitext = wikitext_level(line) == 1
        if builder.is_separator(line):
            yield from builder.close()
            continue
        if is_doc_open(line):
            yield from builder.close()
            in_doc = True
            match = _DOC_TITLE.search(line)
            title = html.unescape(match.group(1)).strip() if match else None
            continue
        if line == "</doc>":
            yield from builder.close()
            in_doc, title = False, None
            continue
        if title is not None:
            is_title, title = line == title, None
            if is_title:
                continue
        if wikitext and line.startswith("="):
            level = wikitext_level(line)
            if level == 1:
                yield from builder.close()
            if level:
                continue
        yield from builder.add_line(line, wrapped=not in_doc and not wikitext)
    if end_state is not None:
        end_state["in_doc"] = in_doc
    yield from builder.close()


def _record_documents(texts: Iterable[str], builder: _DocumentBuilder) -> Iterator[list[str]]:
    """One document per record (or per separated section of one); its text's non-blank
    lines are sentences, paragraphs or, in "prose", wrapped lines of paragraphs."""
    for text in texts:
        for line in text.split("\n"):
            line = line.strip()
            if not line:
                if builder.prose is not None:
                    builder.prose.end_paragraph()
            elif builder.is_separator(line):
                yield from builder.close()
            else:
                yield from builder.add_line(line)
        yield from builder.close()


def iter_piece_documents(piece, spec: CorpusSpec, stats: ReadStats, known_word: KnownWord | None = None) -> Iterator[list[str]]:
    """The documents of one planned part of an input (a `bertprep.builder.plan.Piece`): a byte
    range of a text or JSONL file, row groups of a Parquet file, rows of a saved dataset,
    or a whole input. Its counts are added to stats, but not as a file (`plan.merge_read_stats`).
    A piece of a mix's source keeps the documents its copy keeps (mix.py), counted in
    stats.sampled_size and stats.sampled_documents."""
    source = getattr(piece, "source", None)
    documents = _piece_documents(piece, spec, stats, known_word)
    if source is None:
        yield from documents
        return
    for document in documents:
        if keeps(document, source, piece.threshold, spec.mix_seed):
            stats.sampled_size += size_of(document)
            stats.sampled_documents += 1
            yield document


def _piece_documents(piece, spec: CorpusSpec, stats: ReadStats, known_word) -> Iterator[list[str]]:
    counts = FileCounts()
    builder = _DocumentBuilder(spec, counts, stats, known_word)
    path = storage.path(piece.path)  # a local path or an object-store URL
    if piece.kind == "text":
        end_state: dict = {}
        lines = readers.iter_lines(path, counts, start=piece.start, end=piece.end)
        yield from _text_documents(lines, builder, piece.wikitext, end_state)
        if piece.layout in ("blank", "separator") and not piece.last and end_state["in_doc"]:
            raise BertprepError(
                f"{piece.name}: a <doc> block that does not start the file is still open at byte {piece.end:,}, "
                "where a partition was cut between documents; start the file with its <doc> line, or "
                "give a --partition-size larger than the file")
    else:
        if piece.kind == "jsonl":
            texts = readers.iter_jsonl_texts(path, spec.text_field, counts, piece.start, piece.end)
        elif piece.kind == "parquet":
            texts = readers.iter_parquet_texts(path, spec.text_field, counts, list(range(piece.start, piece.end)))
        else:  # "dataset": rows of a saved one; "stream": a dataset by name, whole
            rows = (piece.start, piece.end) if piece.end is not None else None
            texts = hf_datasets.iter_dataset_texts(piece.path, piece.config, spec.split_name, spec.text_field, counts, rows)
        yield from _record_documents(texts, builder)
    stats.bytes += counts.bytes
    stats.invalid_bytes += counts.invalid_bytes
    stats.long_lines += counts.long_lines


def no_text_error(spec: CorpusSpec) -> BertprepError:
    if spec.mix:
        return BertprepError(f"--mix {', '.join(s.name for s in spec.mix)}: no text found")
    inputs = resolve_input_files(spec)
    names = [describe_path(p) for p in inputs] + ([spec.dataset] if spec.dataset else [])
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3:,} more" if len(names) > 3 else "")
    return BertprepError(f"{shown}: no text found")
