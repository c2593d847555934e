"""Write-then-rename helpers, so a crash never leaves a file that looks complete."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import random


def _temporary_name(path: pathlib.Path) -> pathlib.Path:
    # Unique per writer, so two processes never share a temporary file.
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{random.getrandbits(32):08x}")


@contextlib.contextmanager
def atomic_output(path, fsync: bool = True):
    """Yield a temporary path beside `path`; rename it to `path` if the block succeeds,
    delete it if not. For writers that stream to a file themselves (Arrow IPC)."""
    path = pathlib.Path(path)
    tmp = _temporary_name(path)
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes_atomic(path, data: bytes | memoryview, fsync: bool = True) -> None:
    path = pathlib.Path(path)
    tmp = _temporary_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path, obj, fsync: bool = True) -> None:
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"), fsync=fsync)


def sha256_file(path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def remove_stale_temporaries(directory) -> None:
    """Temporary files of killed writers (`.NAME.tmp-PID-XXXX`)."""
    for path in pathlib.Path(directory).glob(".*.tmp-*"):
        if path.is_file():
            path.unlink(missing_ok=True)
