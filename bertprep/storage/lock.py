"""One build per output directory at a time."""
from __future__ import annotations

import os
import pathlib

from bertprep.errors import BertprepError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; concurrent runs are not detected
    fcntl = None


class DirectoryLock:
    """An exclusive, non-blocking advisory lock on DIR/.lock, released by the OS if the
    holder dies (so a killed run never leaves a stale lock behind)."""

    def __init__(self, directory, what: str = "build-shards run"):
        self.path = pathlib.Path(directory) / ".lock"
        self.what = what  # who else might hold it, for the message
        self._fd: int | None = None

    def __enter__(self) -> "DirectoryLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise BertprepError(
                    f"{self.path.parent}: another {self.what} (pid {holder}) is writing here; wait for it to finish"
                ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock
            self._fd = None
