"""Finding and opening input files through Beam's file systems, with fast S3 access.

Paths the user gives are turned into files once (``match_files``): a path that
names an existing file is that file, even when it holds ``*``, ``?`` or ``[``;
anything else is a pattern, matched once. The ``FileMetadata`` (path and size)
of a match is what the readers get: a path that came out of a match is never
matched again (Beam's ``FileSystems.match`` cannot quote wildcard characters,
so ``b[1].tfrecord`` matched again is ``b1.tfrecord``).

Every remote path goes through ``apache_beam.io.filesystems.FileSystems``
(gs://, s3://, ...); local paths are opened directly (17 us less per file
than through Beam's local file system, whose result is the same file object),
and s3:// reads reuse one Beam ``S3IO`` per thread:
Beam 2.77's S3 filesystem builds a new boto3 session and client for every
call, about 0.28 s of CPU per file, which would dominate reading many small
images. The shared ``S3IO`` is Beam's own, made from the same pipeline
options (measured against an S3 API server on loopback: 0.28 s -> 0.009 s
of CPU per 100 KB object); its client bounds each call in time and tries
(``beam_compat.s3_read_client``), errors are otherwise unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import posixpath
import stat
import threading
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Sequence

from apache_beam.io.filesystem import CompressionTypes, FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems

from transforms import beam_compat

try:  # present with apache-beam[aws]
    from apache_beam.io.aws.clients.s3.messages import S3ClientError
    _S3_ERRORS: tuple[type[Exception], ...] = (S3ClientError,)
except ImportError:  # pragma: no cover - depends on the installed extras
    _S3_ERRORS = ()

__all__ = ["path_problem", "open_for_read", "read_bytes", "naming_s3_errors", "exact_file", "is_folder",
           "match_files", "same_file", "WILDCARDS", "NotRegularFileError", "file_size",
           "read_at_most", "peek_local", "LocalListing", "list_local_tree", "walk_local_tree",
           "scan_local_folder", "LEVEL_SCHEMES", "list_store_level", "list_store_below", "RangeReader", "local_bytes_at_least"]

# Characters Beam's FileSystems.match reads as wildcards anywhere in a pattern.
WILDCARDS = "*?["

_LOG = logging.getLogger(__name__)
_local = threading.local()
_ERRNO = {403: errno.EACCES, 404: errno.ENOENT}


def _shared_s3io():
    """Beam's S3IO for this thread, rebuilt when the pipeline options change.

    Its client bounds each call in time and tries (``beam_compat.s3_read_client``),
    so an unreachable endpoint makes an input unreadable instead of holding it
    for Beam's ten minutes of retries.
    """
    from apache_beam.io.aws import s3io

    # FileSystems keeps the options of the running pipeline (set by beam.Pipeline and
    # by the job before it builds one); its filesystems are made from them the same way.
    options = beam_compat.filesystem_options()
    cached = getattr(_local, "s3io", None)
    if cached is None or cached[0] is not options:
        cached = (options, s3io.S3IO(client=beam_compat.s3_read_client(options)))
        _local.s3io = cached
    return cached[1]


def _os_error(path: str, err: Exception) -> OSError:
    """An S3 client error as the OSError a local read would raise, naming the object.

    Beam's S3 client raises ``S3ClientError`` (not an ``OSError``) for any
    answer but 404 on opening, e.g. 403 when the object may not be read,
    and its message does not name the object.
    """
    code = getattr(err, "code", None)
    return OSError(_ERRNO.get(code, errno.EIO), f"S3 answered {code}: {getattr(err, 'message', err)}", path)


class NotRegularFileError(OSError):
    """A local path names something other than a regular file (a FIFO, a device, a folder)."""


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _open_local(path: str) -> BinaryIO:
    """Opens a local regular file; anything else is refused before a byte is read.

    One ``open`` with ``O_NONBLOCK`` (so a FIFO with no writer cannot block it)
    and one ``fstat`` of the opened descriptor (so what is checked is what is read).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise NotRegularFileError(errno.EINVAL, f"not a regular file ({kind})", path)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


_schemes: frozenset = frozenset()


def _has_file_system(scheme: str) -> bool:
    """True if one of Beam's registered file systems reads ``scheme://`` paths."""
    global _schemes
    if scheme not in _schemes:  # file systems may register later (an import): look again
        _schemes = frozenset(fs.scheme() for fs in FileSystem.get_all_subclasses())
    return scheme in _schemes


def path_problem(path: str) -> str | None:
    """Why no file system can open ``path``, whatever any store holds, or None.

    A path holding a NUL byte (no operating system or store takes one), and a
    URI whose scheme no file system of Beam's reads (``file://``, ``http://``):
    Beam raises ``ValueError`` for both, not an ``OSError``.
    """
    if "\0" in path:
        return "path holds a NUL byte, which no file system accepts"
    scheme = FileSystems.get_scheme(path) if "://" in path else None
    if scheme is not None and not _has_file_system(scheme):
        known = ", ".join(f"{s}://" for s in sorted(s for s in _schemes if s))
        return (f"no file system reads {scheme}:// paths (a local path is written without a "
                f"scheme; these are read: {known})")
    return None


def open_for_read(path: str) -> BinaryIO:
    """Opens a file for reading its bytes as they are (no decompression).

    Raises:
        OSError: The file is missing or unreadable (``FileNotFoundError`` when missing,
            ``PermissionError`` when access is denied, ``NotRegularFileError`` for a local
            FIFO, device or folder; ``EINVAL`` for a path no file system can open,
            ``path_problem``).
        apache_beam.io.filesystem.BeamIOError: The file system refused the call.
    """
    problem = path_problem(path)
    if problem:
        raise OSError(errno.EINVAL, problem, path)
    if path.startswith("s3://"):
        with naming_s3_errors(path):
            return _shared_s3io().open(path, "rb")
    if "://" not in path:  # local: what Beam's LocalFileSystem opens, without its layers
        return _open_local(path)
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def file_size(fh: BinaryIO) -> int | None:
    """Size of an opened file without reading it, or None if the stream cannot tell.

    Local files answer from ``fstat``; Beam's gs:// and s3:// readers know the
    object's size once opened and answer a seek to the end without a download.
    """
    try:
        return os.fstat(fh.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        pass
    try:
        if not fh.seekable():
            return None
        here = fh.tell()
        size = fh.seek(0, io.SEEK_END)
        fh.seek(here)
        return size
    except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
        return None


def peek_local(fh: BinaryIO, length: int) -> bytes | None:
    """The next ``length`` bytes of a local file without moving its position; None for other streams.

    One ``pread``: the file is then read as if it had not been peeked at.
    """
    try:
        fd = fh.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None
    return os.pread(fd, length, fh.tell())


def read_at_most(fh: BinaryIO, limit: int) -> bytes:
    """Reads until the end of ``fh`` or ``limit`` bytes, whichever comes first."""
    parts = []
    left = limit
    while left > 0:
        chunk = fh.read(min(left, 1 << 24))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts) if len(parts) != 1 else parts[0]


def read_bytes(path: str) -> bytes:
    """Reads a whole file (see ``open_for_read``; errors while reading are raised the same way)."""
    with open_for_read(path) as fh, naming_s3_errors(path):
        return fh.read()


def local_bytes_at_least(folders: Sequence[str], limit: int) -> int | None:
    """Bytes of the files below local ``folders``, counted until ``limit`` is reached.

    A cheap look at how large a local input is (``stat`` of the files, links
    not followed, stopping at ``limit``). None when a path is not a local
    folder (a URL, a manifest): its size is not known without reading it.
    """
    total = 0
    stack = []
    for folder in folders:
        if "://" in folder or not os.path.isdir(folder):
            return None
        stack.append(folder)
    while stack and total < limit:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue  # an unreadable folder is the job's to report
    return total


class RangeReader:
    """Reads byte ranges of files, from any thread, reading no byte outside the range.

    Local files stay open, up to ``max_open`` of them per thread (the oldest
    closed first), and are read with ``os.pread``; each thread has its own
    descriptors, so none is closed while another thread reads it. A remote
    range is one ranged request: Beam's gs:// and s3:// readers buffer 16 MiB
    ahead, so the range is read from the unbuffered stream below them
    (``beam_compat.unbuffered``).

    Args:
        max_open: Local files kept open at once by each thread.
    """

    def __init__(self, max_open: int = 64) -> None:
        self._max_open = max_open
        self._local = threading.local()
        self._tables: list[dict[str, int]] = []
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"_max_open": self._max_open}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["_max_open"])

    def read(self, path: str, offset: int, length: int) -> bytes:
        """The ``length`` bytes at ``offset`` (fewer only if the file ends first)."""
        if "://" in path:
            with naming_s3_errors(path), FileSystems.open(
                    path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
                raw = beam_compat.unbuffered(fh)
                raw.seek(offset)
                return read_at_most(raw, length)
        fd = self._fd(path)
        parts, done = [], 0
        while done < length:
            chunk = os.pread(fd, length - done, offset + done)
            if not chunk:
                break
            parts.append(chunk)
            done += len(chunk)
        return b"".join(parts) if len(parts) != 1 else parts[0]

    def _fd(self, path: str) -> int:
        fds = getattr(self._local, "fds", None)
        if fds is None:
            fds = self._local.fds = {}
            with self._lock:
                self._tables.append(fds)
        fd = fds.get(path)
        if fd is None:
            if len(fds) >= self._max_open:
                os.close(fds.pop(next(iter(fds))))
            fd = fds[path] = os.open(path, os.O_RDONLY)
        return fd

    def close(self) -> None:
        """Closes the local files kept open (call when no thread reads any more)."""
        with self._lock:
            tables = list(self._tables)
        for fds in tables:  # each thread keeps its table: a later read opens its file again
            while fds:
                os.close(fds.popitem()[1])


@dataclass(frozen=True)
class LocalListing:
    """Files and unreadable folders below a local folder.

    Attributes:
        files: Path of every file, in the order listed.
        unreadable: ``(folder, error)`` of every folder that could not be listed.
    """

    files: tuple[str, ...]
    unreadable: tuple[tuple[str, OSError], ...]


def list_local_tree(root: str) -> LocalListing:
    """Lists a local folder recursively as Beam's local file system does, reporting what it skips.

    Beam's ``LocalFileSystem`` lists with ``os.walk`` without an error handler, so a
    folder it may not read vanishes with its files. This walks the same way
    (``walk_local_tree``) and returns the folders it could not list.
    """
    unreadable: list[tuple[str, OSError]] = []
    files = []
    for path, err in walk_local_tree(root):
        if err is None:
            files.append(path)
        else:
            unreadable.append((path, err))
    return LocalListing(tuple(files), tuple(unreadable))


def walk_local_tree(root: str) -> Iterator[tuple[str, OSError | None]]:
    """Every file below a local folder as ``(path, None)``, every folder it cannot list as ``(folder, error)``.

    Walks as Beam's local file system lists: ``os.walk``, links to folders not
    followed (so no folder is listed twice and a link loop cannot trap it),
    entries that cannot be stat-ed (dangling links) left out, as Beam leaves
    them out. One folder's names are held at a time.
    """
    errors: list[OSError] = []
    for folder, _, names in os.walk(root, onerror=errors.append):
        while errors:
            err = errors.pop(0)
            yield err.filename or root, err
        for name in names:
            path = os.path.join(folder, name)
            if os.path.exists(path):  # Beam drops what os.path.getsize cannot stat
                yield path, None
    for err in errors:
        yield err.filename or root, err


def scan_local_folder(folder: str) -> Iterator[tuple[str, bool]]:
    """The entries of one local folder as ``(path, is_folder)``, as ``walk_local_tree`` sees them.

    A link to a folder is neither (it is not followed); an entry that cannot be
    stat-ed is left out.

    Raises:
        OSError: The folder cannot be listed.
    """
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                try:
                    link = entry.is_symlink()
                except OSError:
                    link = False
                if not link:
                    yield entry.path, True
            elif os.path.exists(entry.path):
                yield entry.path, False


# Object stores whose keys this module can list one level at a time (with a delimiter).
LEVEL_SCHEMES = ("gs://", "s3://")


def _list_store(prefix: str, by_level: bool) -> Iterator[tuple[str, bool]]:
    """``(path, is_prefix)`` below a gs:// or s3:// prefix: one level, or every object below it."""
    scheme, _, rest = prefix.partition("://")
    bucket, _, key_prefix = rest.partition("/")
    delimiter = {"Delimiter": "/"} if by_level else {}
    if scheme == "s3":
        client = beam_compat.s3_boto3_client()
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key_prefix,
                                                                  **delimiter)
        for page in pages:
            for item in page.get("Contents", []):
                yield f"s3://{bucket}/{item['Key']}", False
            for item in page.get("CommonPrefixes", []):
                yield f"s3://{bucket}/{item['Prefix']}", True
        return
    if scheme == "gs":
        blobs = beam_compat.gcs_storage_client().list_blobs(
            bucket, prefix=key_prefix, delimiter="/" if by_level else None)
        for page in blobs.pages:
            for blob in page:
                yield f"gs://{bucket}/{blob.name}", False
            for sub in sorted(page.prefixes):
                yield f"gs://{bucket}/{sub}", True
        return
    raise ValueError(f"{prefix}: only gs:// and s3:// prefixes are listed without matching")


def list_store_level(prefix: str) -> Iterator[tuple[str, bool]]:
    """The objects and sub-prefixes directly below a gs:// or s3:// prefix, as ``(path, is_prefix)``.

    ``prefix`` ends with ``/``; a sub-prefix is yielded with its ``/``. Lists with a
    ``/`` delimiter through the client Beam's file system uses (``beam_compat``),
    so a level costs one listing of its own keys, not of everything below it.
    Keys are taken as they are (no wildcard matching), so names holding ``*``,
    ``?`` or ``[`` are listed like any other.

    Raises:
        ValueError: ``prefix`` is not on gs:// or s3://.
    """
    return _list_store(prefix, by_level=True)


def list_store_below(prefix: str) -> Iterator[str]:
    """Every object below a gs:// or s3:// prefix (ending with ``/``), without wildcard matching.

    Raises:
        ValueError: ``prefix`` is not on gs:// or s3://.
    """
    return (path for path, _ in _list_store(prefix, by_level=False))


@contextlib.contextmanager
def naming_s3_errors(path: str) -> Iterator[None]:
    """Raises Beam's S3 client errors inside the block as ``OSError``s naming ``path``.

    Beam's S3 client raises ``S3ClientError`` (not an ``OSError``) for a refused
    read or upload, with a message naming the S3 operation and status but not
    the object; reads then become dead letters like unreadable local files, and
    a refused upload's one-line failure names the object.
    """
    try:
        yield
    except _S3_ERRORS as err:
        raise _os_error(path, err) from err


def _is_local(path: str) -> bool:
    return "://" not in path


def exact_file(path: str) -> FileMetadata | None:
    """Returns the metadata of the file named exactly ``path``, without matching.

    Returns:
        Its path (as given) and size, or None when no file has that name (a
        folder is not a file).
    """
    if _is_local(path):
        try:
            stat = os.stat(path)
        except OSError:
            return None
        if not os.path.isfile(path):
            return None
        return FileMetadata(path, stat.st_size, stat.st_mtime)
    if path.endswith("/") or not FileSystems.exists(path):
        return None
    return FileSystems.get_filesystem(path).metadata(path)


def is_folder(path: str) -> bool:
    """True if ``path`` names a folder: a local directory, or a prefix with objects below it.

    A bucket path is a folder when it ends with ``/`` or when no object has
    its name but some object lies below it; a path holding wildcard
    characters is only a folder locally (a bucket cannot be listed below it
    without matching other names).
    """
    if _is_local(path):
        return os.path.isdir(path)
    if path.endswith("/"):
        return True
    if any(c in WILDCARDS for c in path) or FileSystems.exists(path):
        return False
    below = FileSystems.match([path + "/*"], limits=[1])[0].metadata_list
    return bool(below)


def match_files(patterns: Sequence[str]) -> list[list[FileMetadata]]:
    """Returns, per path or pattern, the files it names; each path is matched at most once.

    A path that names an existing file is that file, whatever characters it
    holds; a path without wildcard characters that names no file names
    nothing (a folder included); anything else is matched once with
    ``FileSystems.match``. Keep the returned metadata: never match its paths
    again.
    """
    found: list[list[FileMetadata] | None] = []
    to_match: list[str] = []
    for pattern in patterns:
        meta = exact_file(pattern)
        if meta is not None:
            found.append([meta])
        elif any(c in WILDCARDS for c in pattern):
            found.append(None)
            to_match.append(pattern)
        else:
            found.append([])
    matched = iter(FileSystems.match(to_match) if to_match else [])
    return [metas if metas is not None else list(next(matched).metadata_list) for metas in found]


def _normal(path: str) -> str:
    scheme, sep, rest = path.partition("://")
    if not sep:
        return os.path.realpath(path)
    return f"{scheme}://{posixpath.normpath(rest)}"


def same_file(a: str, b: str) -> bool:
    """True if the paths name one file: the same path once normalized, or (locally) one file
    through a symbolic or hard link."""
    if _normal(a) == _normal(b):
        return True
    if _is_local(a) and _is_local(b) and os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return False
