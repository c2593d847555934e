"""Write-then-rename helpers, so a crash never leaves a file that looks complete.

They take local paths and object-store URLs alike (bertprep.storage.stores); on a store the
"rename" is a copy and a delete, which still never shows a partial object."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random

from bertprep.storage import stores as storage


def _temporary_name(path):
    # Unique per writer, so two processes never share a temporary file.
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{random.getrandbits(32):08x}")


@contextlib.contextmanager
def atomic_output(path, fsync: bool = True):
    """Yield a temporary path beside `path`; rename it to `path` if the block succeeds,
    delete it if not. For writers that stream to a file themselves (Arrow IPC)."""
    path = storage.path(path)
    tmp = _temporary_name(path)
    try:
        yield tmp
        if fsync and not storage.is_remote(tmp):
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        storage.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes_atomic(path, data: bytes | memoryview, fsync: bool = True) -> None:
    path = storage.path(path)
    if storage.is_remote(path):
        # One upload of bytes in hand: the object appears whole when it completes, or
        # not at all, so no temporary is needed.
        with storage.open_output(path) as f:
            f.write(data)
        return
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
    with storage.open_input(path) as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def remove_stale_temporaries(directory) -> None:
    """Temporary files of killed writers (`.NAME.tmp-PID-XXXX`)."""
    for path in storage.path(directory).glob(".*.tmp-*"):
        if path.is_file():
            path.unlink(missing_ok=True)
