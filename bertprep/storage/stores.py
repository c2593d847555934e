"""Where build-shards reads and writes: local paths, and object-store URLs.

`path(p)` is a `pathlib.Path` for a local path and a `StorePath` for a URL (`s3://`,
`gs://`, `hdfs://`, anything `pyarrow.fs` opens, else anything `fsspec` does). A
StorePath has the part of pathlib's API the build uses (`/`, `name`, `exists`,
`iterdir`, `read_text`, `unlink`, ...), so most code handles both alike; the few
operations that differ go through the functions below (`open_input`, `open_output`,
`open_random_access`, `replace`, `rmtree`, `local_copy`).

What differs on an object store, and how the build copes:
- No atomic rename: `replace` copies then deletes (server-side on S3). A reader can
  still never see half an object (an upload appears whole when it completes), and a
  result counts only once its marker, written last, exists.
- No directories: a "directory" is a key prefix; `mkdir` makes nothing that matters.
- No advisory locks: two builds into one URL at once are not detected (`lock_for`).
Credentials and endpoints come from the usual environment of each library (for S3:
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or AWS_PROFILE, an
instance role, AWS_DEFAULT_REGION, and AWS_ENDPOINT_URL for an S3-compatible server; for
GCS: GOOGLE_APPLICATION_CREDENTIALS or the instance's service account, and
STORAGE_EMULATOR_HOST for an emulator, as Google's own clients read it).
Failures become one-line errors naming the URL (bertprep.storage.errors).
"""
from __future__ import annotations

import contextlib
import fnmatch
import functools
import io
import os
import pathlib
import posixpath
import re
import shutil
import tempfile
from dataclasses import dataclass

from bertprep.errors import BertprepError
from bertprep.storage.errors import StoreError, errors as _errors, one_line, store_error  # noqa: F401 (re-exported)

BUCKET_SCHEMES = ("s3", "gs", "gcs")  # the URL's authority is a bucket, the rest a key
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")


def is_remote(path) -> bool:
    """True for an object-store URL or a StorePath (a `file://` URL is a local path)."""
    if isinstance(path, StorePath):
        return True
    match = _URL.match(str(path)) if isinstance(path, str) else None
    return match is not None and match.group(1).lower() != "file"


def path(p):
    """A StorePath for a URL (or a StorePath), a pathlib.Path otherwise."""
    if isinstance(p, (StorePath, pathlib.Path)):
        return p
    text = os.fspath(p)
    if is_remote(text):
        return StorePath(text)
    return pathlib.Path(text.removeprefix("file://"))


@functools.lru_cache(maxsize=None)
def _filesystem(scheme: str, authority: str):
    """(filesystem, prefix of keys): one per bucket and process (S3 buckets may live in
    different regions, which pyarrow resolves per bucket)."""
    import pyarrow.fs as pafs

    uri = f"{scheme}://{authority}"
    emulator = os.environ.get("STORAGE_EMULATOR_HOST") if scheme in ("gs", "gcs") else None
    if emulator:
        # Google's clients (google-cloud-storage, gcsfs) send gs:// to this endpoint,
        # unauthenticated, when it is set: a GCS emulator, or a gateway in front of one.
        protocol, _, host = emulator.rstrip("/").rpartition("://")
        try:
            return pafs.GcsFileSystem(anonymous=True, scheme=protocol or "http", endpoint_override=host), authority
        except Exception as exc:  # e.g. a pyarrow built without GCS
            raise BertprepError(f"{uri}: cannot use STORAGE_EMULATOR_HOST={emulator} ({one_line(exc)})") from None
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
        return fs, root.rstrip("/") if scheme in BUCKET_SCHEMES else ""
    except Exception as exc:  # an unknown scheme, or a library pyarrow was built without
        try:
            import fsspec
            from pyarrow.fs import FSSpecHandler, PyFileSystem

            fs = PyFileSystem(FSSpecHandler(fsspec.filesystem(scheme)))
            return fs, authority
        except Exception:
            raise BertprepError(f"{uri}: no filesystem for {scheme}:// ({one_line(exc)})") from None


_BUCKETS_SEEN: set[tuple[str, str]] = set()


def forget_filesystems() -> None:
    """Drop the filesystems and bucket checks made so far (for a process whose
    credentials or endpoint changed since)."""
    _filesystem.cache_clear()
    _BUCKETS_SEEN.clear()


def _bucket_exists(scheme: str, bucket: str, where) -> bool:
    if (scheme, bucket) not in _BUCKETS_SEEN:
        root = StorePath(f"{scheme}://{bucket}")
        with _errors(where):
            if root.fs.get_file_info(root.fs_path).type.name == "NotFound":
                return False
        _BUCKETS_SEEN.add((scheme, bucket))
    return True


@dataclass(frozen=True)
class _Stat:
    st_size: int
    st_mtime_ns: int


class StorePath:
    """A file or directory (a key prefix) on an object store, addressed by URL."""

    def __init__(self, url: str, _info=None):
        match = _URL.match(url)
        if match is None:
            raise ValueError(f"not a URL: {url}")
        self.scheme = match.group(1).lower()
        rest = match.group(2).rstrip("/")
        self.authority, _, key = rest.partition("/")
        self.key = posixpath.normpath(key) if key else ""
        if self.key == ".":
            self.key = ""
        self._info = _info  # what a listing already said about this entry

    # --- names -----------------------------------------------------------------

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}" + (f"/{self.key}" if self.key else "")

    def __repr__(self) -> str:
        return f"StorePath({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, StorePath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __truediv__(self, name) -> "StorePath":
        return StorePath(f"{self}/{name}")

    @property
    def name(self) -> str:
        return posixpath.basename(self.key)

    @property
    def suffixes(self) -> list[str]:
        return pathlib.PurePosixPath(self.name).suffixes if self.name else []

    @property
    def suffix(self) -> str:
        return pathlib.PurePosixPath(self.name).suffix if self.name else ""

    @property
    def parent(self) -> "StorePath":
        return StorePath(f"{self.scheme}://{self.authority}/{posixpath.dirname(self.key)}")

    def with_name(self, name: str) -> "StorePath":
        return self.parent / name

    def relative_to(self, other: "StorePath") -> pathlib.PurePosixPath:
        key = pathlib.PurePosixPath(self.key)
        return key.relative_to(other.key) if other.key else key

    def resolve(self) -> "StorePath":
        return self

    # --- the filesystem ----------------------------------------------------------

    @property
    def fs(self):
        return _filesystem(self.scheme, self.authority)[0]

    @property
    def fs_path(self) -> str:
        root = _filesystem(self.scheme, self.authority)[1]
        if not root:  # a filesystem of absolute paths (HDFS): the authority is the cluster
            return "/" + self.key
        return "/".join(p for p in (root, self.key) if p)

    def info(self):
        if self._info is None:
            with _errors(self):
                self._info = self.fs.get_file_info(self.fs_path)
        return self._info

    def exists(self) -> bool:
        return self.info().type.name != "NotFound"

    def is_file(self) -> bool:
        return self.info().type.name == "File"

    def is_dir(self) -> bool:
        return self.info().type.name == "Directory"

    def stat(self) -> _Stat:
        """Asked afresh (not what a listing said): a changed input must show."""
        self._info = None
        info = self.info()
        if info.type.name == "NotFound":
            raise FileNotFoundError(str(self))
        return _Stat(info.size or 0, info.mtime_ns or 0)

    def iterdir(self):
        return iter(self._with_infos(recursive=False))

    def _with_infos(self, recursive: bool) -> list["StorePath"]:
        import pyarrow.fs as pafs

        with _errors(self):
            infos = self.fs.get_file_info(pafs.FileSelector(self.fs_path, recursive=recursive, allow_not_found=True))
        base = self.fs_path.rstrip("/") + "/"
        found = [StorePath(f"{self}/{info.path[len(base):]}", _info=info) for info in infos if info.path.startswith(base)]
        return sorted(found, key=str)

    def glob(self, pattern: str):
        return [p for p in self._with_infos(recursive=False) if fnmatch.fnmatchcase(p.name, pattern)]

    def rglob(self, pattern: str):
        return [p for p in self._with_infos(recursive=True) if fnmatch.fnmatchcase(p.name, pattern)]

    def check_bucket(self) -> None:
        """Raise, naming this URL, when its bucket does not exist (checked once per
        process), so a mistyped bucket fails before any work."""
        if self.scheme in BUCKET_SCHEMES and not _bucket_exists(self.scheme, self.authority, self):
            raise BertprepError(f"{self}: the bucket does not exist")

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        # Object stores have no directories: nothing to make but a check of the bucket.
        self.check_bucket()
        if self.scheme not in BUCKET_SCHEMES:
            with _errors(self):
                self.fs.create_dir(self.fs_path, recursive=True)

    def read_bytes(self) -> bytes:
        with open_input(self) as f:
            return f.read()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def unlink(self, missing_ok: bool = False) -> None:
        with _errors(self):
            try:
                self.fs.delete_file(self.fs_path)
            except FileNotFoundError:
                if not missing_ok:
                    raise
        self._info = None


def open_input(p):
    """A binary, seekable file to read (a pyarrow NativeFile on a store: each read is a
    ranged request, so read in large pieces)."""
    p = path(p)
    if not isinstance(p, StorePath):
        return open(p, "rb")
    with _errors(p):
        return p.fs.open_input_file(p.fs_path)


def open_whole(p):
    """A small file to read in many small pieces (an .npz): on a store, fetched in one
    request and read from memory."""
    p = path(p)
    if not isinstance(p, StorePath):
        return open(p, "rb")
    return io.BytesIO(p.read_bytes())


def open_random_access(p):
    """An Arrow random-access file: memory-mapped locally, ranged reads on a store."""
    import pyarrow as pa

    p = path(p)
    if not isinstance(p, StorePath):
        return pa.memory_map(str(p))
    return open_input(p)


def open_output(p):
    """A binary file to write (pyarrow's OSFile locally, an upload on a store). Write to
    a temporary name and `replace` it: on a store the upload completes on close even
    when the writer failed, so only the rename makes it count."""
    import pyarrow as pa

    p = path(p)
    if not isinstance(p, StorePath):
        return pa.OSFile(str(p), "wb")
    with _errors(p):
        return p.fs.open_output_stream(p.fs_path)


def replace(src, dst) -> None:
    """os.replace, or on a store a copy and a delete (the destination appears whole)."""
    src, dst = path(src), path(dst)
    if not isinstance(src, StorePath):
        os.replace(src, dst)
        return
    with _errors(dst):
        src.fs.move(src.fs_path, dst.fs_path)
    dst._info = None


def copy_file(src: StorePath, dst: StorePath) -> None:
    with _errors(dst):
        src.fs.copy_file(src.fs_path, dst.fs_path)


def rmtree(p, ignore_errors: bool = False) -> None:
    p = path(p)
    if not isinstance(p, StorePath):
        shutil.rmtree(p, ignore_errors=ignore_errors)
        return
    try:
        with _errors(p):
            if not p.key:  # a bucket's root: empty it, never delete the bucket
                p.fs.delete_dir_contents(p.fs_path, missing_dir_ok=True)
            elif p.fs.get_file_info(p.fs_path).type.name != "NotFound":
                try:
                    p.fs.delete_dir(p.fs_path)
                except FileNotFoundError:
                    # pyarrow's GCS deletes the contents, then the "dir/" marker object,
                    # and fails when a prefix never had one (its objects were written
                    # directly): gone is what was asked, so only something left is an error.
                    if p.fs.get_file_info(p.fs_path).type.name != "NotFound":
                        raise
    except (OSError, BertprepError):
        if not ignore_errors:
            raise


@contextlib.contextmanager
def local_copy(directory):
    """A local directory holding the files of `directory` (itself when local)."""
    directory = path(directory)
    if not isinstance(directory, StorePath):
        yield directory
        return
    with tempfile.TemporaryDirectory(prefix="bertprep-") as tmp:
        for entry in directory.iterdir():
            if entry.is_file():
                (pathlib.Path(tmp) / entry.name).write_bytes(entry.read_bytes())
        yield pathlib.Path(tmp)


def _glob_regex(pattern: str) -> re.Pattern:
    """A glob as glob.glob(recursive=True) reads it: `*` and `?` stay within one name,
    `**/` spans any number of them."""
    parts = re.split(r"(\*\*/|\*|\?|\[[^\]]*\])", pattern)
    regex = {"**/": "(?:[^/]+/)*", "*": "[^/]*", "?": "[^/]"}
    return re.compile("".join(regex.get(p, p if p.startswith("[") and p.endswith("]") and len(p) > 1 else re.escape(p))
                              for p in parts))


def list_files(given: str, wanted) -> list[StorePath]:
    """The files a URL names: itself, every file below a prefix for which `wanted(path)`
    holds (recursively, sorted, hidden names skipped), or a glob's matches (sorted)."""
    if re.search(r"[*?\[]", given):
        base = StorePath(given[: re.search(r"[*?\[]", given).start()].rsplit("/", 1)[0])
        pattern = _glob_regex(str(StorePath(given)))
        matches = [p for p in base._with_infos(recursive=True) if p.is_file() and pattern.fullmatch(str(p))
                   and not any(part.startswith(".") for part in p.relative_to(base).parts)]  # as glob.glob
        if not matches:
            raise BertprepError(f"{given}: no files match")
        return matches
    top = StorePath(given)
    if top.is_file():
        return [top]
    if not top.exists():
        top.mkdir()  # names a missing bucket as such
        raise BertprepError(f"{given}: no such file or directory")
    files = [p for p in top._with_infos(recursive=True)
             if p.is_file() and not any(part.startswith(".") for part in p.relative_to(top).parts) and wanted(p)]
    if not files:
        raise BertprepError(f"{given}: no text, JSONL or Parquet files under this prefix")
    return files


def lock_for(directory, what: str = "build-shards run"):
    """The directory's lock; none on a store, which has no advisory locks."""
    from bertprep.storage.lock import DirectoryLock

    return contextlib.nullcontext() if is_remote(directory) else DirectoryLock(directory, what)
