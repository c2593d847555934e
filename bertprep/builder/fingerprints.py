"""What identifies a build's inputs in its manifest and plan: the size and sha256 of each
file as stored, a saved dataset's fingerprint and the hash of its Arrow files, a dataset
by name's builder and version. Hashing reads every byte, so build-shards runs
`fingerprint_source` as one task per input on its executor, never in its driver.
"""
from __future__ import annotations

from bertprep.corpus import hf_datasets
from bertprep.corpus import readers
from bertprep.storage import stores as storage
from bertprep.corpus import CorpusSpec, resolve_input_files
from bertprep.errors import describe_path


def fingerprint_sources(spec: CorpusSpec) -> list[tuple]:
    """What input_fingerprints hashes, one small descriptor per input: ("file", path),
    ("saved", directory, split) for a saved dataset among the paths, or ("dataset",
    name or directory, config, split) for --dataset."""
    sources: list[tuple] = []
    for path in resolve_input_files(spec):
        kind = "saved" if readers.format_of(path) == "dataset" else "file"
        sources.append((kind, str(path), spec.split_name) if kind == "saved" else (kind, str(path)))
    if spec.dataset:
        sources.append(("dataset", spec.dataset, spec.dataset_config, spec.split_name))
    return sources


def fingerprint_source(source: tuple) -> dict:
    """One input's fingerprint (see input_fingerprints); reads every byte of a file."""
    if source[0] == "file":
        return {"path": describe_path(source[1]), **readers.hash_files([storage.path(source[1])])}
    if source[0] == "saved":
        return {"path": describe_path(source[1]), **hf_datasets.dataset_fingerprint(storage.path(source[1]), None, source[2])}
    return hf_datasets.dataset_fingerprint(*source[1:])


def input_fingerprints(spec: CorpusSpec) -> list[dict]:
    """Per input, what a build manifest records: {"path", "bytes", "sha256"} of each file
    as stored (compressed files are hashed compressed); for a dataset, its name or
    directory, config, split and `datasets` fingerprint. build-shards computes the same
    with its executor, one task per input (fingerprint_source), so that its driver
    reads no input."""
    return [fingerprint_source(source) for source in fingerprint_sources(spec)]
