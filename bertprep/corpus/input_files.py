"""Which files a corpus is: spec.paths (files, directories, globs, object-store URLs)
expanded into the sorted list of inputs that spec.py reads."""
from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from typing import Protocol, Sequence

from bertprep.corpus import readers
from bertprep.storage import stores as storage
from bertprep.errors import BertprepError, describe_path

# What a directory walk picks up (also compressed): WikiExtractor names its files
# wiki_00 (no suffix) and WikiText wiki.train.raw / .tokens.
TEXT_SUFFIXES = {"", ".txt", ".text", ".raw", ".tokens"}
DIRECTORY_SUFFIXES = TEXT_SUFFIXES | readers.JSONL_SUFFIXES | readers.PARQUET_SUFFIXES
_GLOB_CHARS = re.compile(r"[*?\[]")


class CorpusPaths(Protocol):
    """What of a corpus spec (spec.CorpusSpec) names its files: this module knows no more
    of it, so the spec can import this module and not the reverse. `mix` holds sources
    with a `name` and a `path` (mix.MixSource)."""

    paths: Sequence[str]
    dataset: str | None
    mix: Sequence


def resolve_source_files(spec: CorpusPaths) -> list[tuple[str, list[Path]]]:
    """(name, input files) of each source of a mix, in its order. A source that names no
    file is an error naming it; so is a file in two sources (its share would be both)."""
    sources = []
    owner: dict[Path, str] = {}
    for source in spec.mix:
        try:
            files = _resolve_paths([source.path])
        except BertprepError as exc:
            raise BertprepError(f"--mix {source.name}: {exc}") from None
        for path in files:
            other = owner.setdefault(path.resolve(), source.name)
            if other != source.name:
                raise BertprepError(f"--mix: {describe_path(path)} is in both {other} and {source.name}")
        sources.append((source.name, files))
    return sources


def resolve_input_files(spec: CorpusPaths) -> list[Path]:
    """The input files of spec.paths (or of a mix's sources, in the mix's order),
    expanded and sorted, without duplicates.

    A directory is walked recursively (sorted, hidden entries skipped) for files named
    like text, JSONL or Parquet (see DIRECTORY_SUFFIXES); a directory written by
    `datasets.save_to_disk` is returned itself, as one input. A glob expands sorted. An
    explicit file is taken whatever its name. spec.dataset is not listed here.
    """
    if getattr(spec, "mix", None):
        return [path for _, files in resolve_source_files(spec) for path in files]
    if not spec.paths and not spec.dataset:
        raise BertprepError("no input given: name files or directories, or a --dataset")
    return _resolve_paths(spec.paths)


def _resolve_paths(paths: Sequence[str]) -> list[Path]:
    found: list[Path] = []
    for given in paths:
        if storage.is_remote(given):  # an object store: listed there, files only
            found.extend(storage.list_files(given, _looks_like_corpus_file))
            continue
        path = Path(given)
        if not path.exists() and _GLOB_CHARS.search(given):
            matches = sorted(glob.glob(given, recursive=True))
            if not matches:
                raise BertprepError(f"{given}: no files match")
            for match in matches:
                found.extend(_expand(Path(match)))
        else:
            found.extend(_expand(path))
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def _expand(path: Path) -> list[Path]:
    if not path.exists():
        raise BertprepError(f"{describe_path(path)}: no such file or directory")
    if not os.access(path, os.R_OK):
        raise BertprepError(f"{describe_path(path)}: permission denied")
    if not path.is_dir() or readers.is_dataset_dir(path):
        return [path]
    files = []
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        datasets = [d for d in dirs if readers.is_dataset_dir(Path(root, d))]
        files.extend(Path(root, d) for d in datasets)  # a saved dataset is one input
        dirs[:] = [d for d in dirs if d not in datasets]
        for name in names:
            candidate = Path(root, name)
            if not name.startswith(".") and _looks_like_corpus_file(candidate):
                files.append(candidate)
    files.sort(key=lambda p: p.relative_to(path).parts)
    if not files:
        raise BertprepError(f"{describe_path(path)}: no text, JSONL or Parquet files in this directory")
    for file in files:
        if not os.access(file, os.R_OK):
            raise BertprepError(f"{describe_path(file)}: permission denied")
    return files


def _looks_like_corpus_file(path: Path) -> bool:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in readers.COMPRESSIONS:
        suffixes.pop()
    return (suffixes[-1] if suffixes else "") in DIRECTORY_SUFFIXES
