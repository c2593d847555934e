"""Where bytes go: local paths and object stores (stores.py, errors.py), atomic writes
and checksums (atomic.py), and directory locks (lock.py).
"""
from bertprep.storage.atomic import (atomic_output, remove_stale_temporaries, sha256_file, write_bytes_atomic,
                                     write_json_atomic)
from bertprep.storage.lock import DirectoryLock

__all__ = ["DirectoryLock", "atomic_output", "remove_stale_temporaries", "sha256_file", "write_bytes_atomic",
           "write_json_atomic"]
