"""Reading files on local disk, gs:// and s3:// alike: opening, whole reads, sizes, byte ranges, sha256.

``open_for_read`` opens a local path directly (17 us less per file than through Beam) and only if
it is a regular file. s3:// and gs:// are read in bounded ranges (``Range: bytes=a-b``) on the
process's client (``open_store``): Beam's readers ask for ``bytes=a-`` (the rest of the object,
paid for even when the reader stops early), and its gs:// reader reads 16 MiB ahead.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import threading
from typing import BinaryIO, Callable, Iterator

from transforms.filesystems import (BeamIOError, CompressionTypes, filesystem_of, naming_s3_errors, shared_s3io,
                                    store_client, unbuffered)
from transforms.storage.paths import STORES, bucket_key, is_local, path_problem
from transforms.tfrecord.file_hash import FileHash

__all__ = ["STORAGE_ERRORS", "error_reason", "NotRegularFileError", "open_for_read", "open_local", "read_descriptor",
           "file_size", "read_at_most", "open_file", "read_file", "read_if_present", "open_lines", "exists",
           "file_hash", "hashes_match", "local_copy", "read_range", "read_prefix", "open_store", "STORE_READ_CHUNK",
           "PAST_RANGE_CHUNK", "RangeReader"]

# What a file system call raises when storage refuses it: an OSError (local disk, or an S3
# error named by ``naming_s3_errors``), or Beam's own error wrapping one per path.
STORAGE_ERRORS: tuple[type[Exception], ...] = (OSError, BeamIOError)


def error_reason(err: Exception) -> str:
    """The innermost reason of a file system error, on one line."""
    details = getattr(err, "exception_details", None)
    if isinstance(details, dict) and details:
        err = next(iter(details.values()))
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err).splitlines()[0] if str(err) else type(err).__name__


class NotRegularFileError(OSError):
    """A local path names something other than a regular file (a FIFO, a device, a folder)."""


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def open_for_read(path: str) -> BinaryIO:
    """Opens a file for reading its bytes as they are (no decompression).

    A local path is opened as Beam's LocalFileSystem opens it, without its layers, and only if it is a
    regular file: ``O_NONBLOCK``: a FIFO with no writer cannot block it; ``fstat`` of the descriptor: what
    is checked is what is read.

    Raises:
        OSError: Missing (``FileNotFoundError``), denied (``PermissionError``), a local FIFO, device or
            folder (``NotRegularFileError``), or a path no file system can open (``EINVAL``).
        apache_beam.io.filesystem.BeamIOError: The file system refused the call.
    """
    if not is_local(path):
        problem = path_problem(path)
        if problem:
            raise OSError(errno.EINVAL, problem, path)
        return open_file(path)
    fd, _ = open_local(path)  # checks the path as above
    try:
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_local(path: str) -> tuple[int, os.stat_result]:
    """A local regular file opened for reading as ``open_for_read`` opens one: its descriptor (the caller closes
    it) and the ``fstat`` that checked it (its size, times, inode). Raises as ``open_for_read``."""
    problem = path_problem(path)
    if problem:
        raise OSError(errno.EINVAL, problem, path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            kind = next((name for test, name in _KINDS if test(found.st_mode)), "not a file")
            raise NotRegularFileError(errno.EINVAL, f"not a regular file ({kind})", path)
        return fd, found
    except BaseException:
        os.close(fd)
        raise


def read_descriptor(fd: int, limit: int) -> bytes:
    """Reads from ``fd`` (``os.read``, at most 16 MiB a call) until its end or ``limit`` bytes."""
    return _read_all(lambda done: os.read(fd, min(limit - done, 1 << 24)), limit)


def file_size(fh: BinaryIO) -> int | None:
    """Size of an opened file without reading it (``fstat``, or a seek to the end), or None."""
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


def read_at_most(fh: BinaryIO, limit: int) -> bytes:
    """Reads until the end of ``fh`` or ``limit`` bytes, whichever comes first."""
    return _read_all(lambda done: fh.read(min(limit - done, 1 << 24)), limit)


def _read_all(read: Callable[[int], bytes], length: int) -> bytes:
    """Calls ``read(bytes done)`` until ``length`` bytes are read or it gives none; the bytes, joined."""
    parts, done = [], 0
    while done < length:
        chunk = read(done)
        if not chunk:
            break
        parts.append(chunk)
        done += len(chunk)
    return b"".join(parts) if len(parts) != 1 else parts[0]


def open_file(path: str, decompress: bool = False, size: int | None = None, until: int | None = None) -> BinaryIO:
    """Opens ``path`` for reading (``decompress``: a name ending ``.gz``, ``.bz2``, ... decompressed);
    ``size`` and ``until`` as ``open_store``'s."""
    if path.startswith(STORES) and (not decompress or CompressionTypes.detect_compression_type(path)
                                     == CompressionTypes.UNCOMPRESSED):
        return open_store(path, size=size, until=until)
    return filesystem_of(path).open(path, compression_type=CompressionTypes.AUTO if decompress
                                    else CompressionTypes.UNCOMPRESSED)


def read_file(path: str) -> bytes:
    """A whole file's bytes, through Beam's file system (``open_file``)."""
    with open_file(path) as fh:
        return fh.read()


def exists(path: str) -> bool:
    """True if a file (or, locally, a folder) of that exact name exists; nothing is matched."""
    return filesystem_of(path).exists(path)


def read_if_present(path: str) -> bytes | None:
    """A small file's bytes, or None if it does not exist (asked first: stores raise differing errors)."""
    if not exists(path):
        return None
    try:
        with naming_s3_errors(path), open_file(path) as fh:
            return fh.read()
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def open_lines(path: str, buffer_bytes: int | None = None) -> Iterator[Iterator[bytes] | None]:
    """The lines of a text file, read as they are used (newlines kept); None if it does not exist.

    ``buffer_bytes``: read ahead at most this many bytes (Beam's store readers buffer 16 MiB).
    """
    if not exists(path):
        yield None
        return
    with naming_s3_errors(path), open_file(path) as fh:
        raw = unbuffered(fh) if buffer_bytes is not None else fh
        reader = io.BufferedReader(raw, buffer_bytes) if raw is not fh else fh
        yield iter(reader.readline, b"")


def file_hash(path: str, sha256: bool = False) -> FileHash:
    """The CRC32C (and with ``sha256`` the sha256) of a file's bytes, read once in blocks of 1 MiB."""
    digest = FileHash(sha256=sha256)
    with open_file(path) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest


def hashes_match(path: str, crc32c: str | None, sha256: str | None = None) -> bool:
    """Whether a file's bytes have the CRC32C (``file_hash``'s form) and sha256 given (None: not checked)."""
    digest = file_hash(path, sha256 is not None)
    return (crc32c is None or digest.crc32c == crc32c) and (sha256 is None or digest.sha256 == sha256)


@contextlib.contextmanager
def local_copy(path: str) -> Iterator[str]:
    """A local path holding the file's bytes (a store's copied to a temporary file), for ArrayRecord's reader."""
    if is_local(path):
        yield path
        return
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="local-copy-") as folder:
        local = os.path.join(folder, path.rsplit("/", 1)[-1])
        with open_file(path) as fh, open(local, "wb") as out, naming_s3_errors(path):
            shutil.copyfileobj(fh, out, 1 << 22)
        yield local


def _s3_range(path: str, offset: int, length: int) -> tuple[bytes, int | None]:
    """One ``GET`` of ``bytes=offset-(offset+length-1)``; the bytes and the object's size (None: not told)."""
    import botocore.exceptions

    bucket, key = bucket_key(path)
    client = store_client("s3")
    for attempt in range(2):  # a body cut off while read is asked for once more, as Beam does
        try:
            answer = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}")
        except botocore.exceptions.ClientError as err:
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 416:  # the range starts at or past the end
                return b"", None
            raise _answered("S3", status, err, path) from err
        except botocore.exceptions.BotoCoreError as err:
            raise OSError(errno.EIO, f"S3 gave no answer ({type(err).__name__}: {err})", path) from err
        try:
            with contextlib.closing(answer["Body"]) as body:
                data = body.read()
        except (botocore.exceptions.BotoCoreError, OSError) as err:
            if attempt:
                raise OSError(errno.EIO, f"reading bytes {offset}-{offset + length - 1} failed: {err}",
                              path) from err
            continue
        total = answer.get("ContentRange", "").rpartition("/")[2]
        return data, int(total) if total.isdigit() else None
    raise AssertionError("unreachable")


def _gcs_range(path: str, offset: int, length: int) -> tuple[bytes, int | None]:
    """One media ``GET`` of ``bytes=offset-(offset+length-1)``; the bytes (the size is not told)."""
    from google.api_core import exceptions

    bucket, key = bucket_key(path)
    blob = store_client("gs").bucket(bucket).blob(key)
    try:
        return blob.download_as_bytes(start=offset, end=offset + length - 1, raw_download=True,
                                      checksum=None), None
    except exceptions.RequestRangeNotSatisfiable:
        return b"", None
    except exceptions.GoogleAPICallError as err:
        raise _answered("GCS", err.code, err, path) from err


def _answered(store: str, status: int | None, err: Exception, path: str) -> OSError:
    """A store's refusal as an ``OSError``: ``FileNotFoundError`` for 404, ``PermissionError`` for 403, else ``EIO``."""
    return OSError({403: errno.EACCES, 404: errno.ENOENT}.get(status, errno.EIO), f"{store} answered {status}: {err}",
                   path)


def _remote_range(path: str, offset: int, length: int) -> tuple[bytes, int | None]:
    if length <= 0:
        return b"", None
    if path.startswith("s3://"):
        return _s3_range(path, offset, length)
    if path.startswith("gs://"):
        return _gcs_range(path, offset, length)
    with open_file(path) as fh:  # any other store: Beam's reader, below its read buffer
        raw = unbuffered(fh)
        raw.seek(offset)
        return read_at_most(raw, length), None


def read_range(path: str, offset: int, length: int) -> bytes:
    """The ``length`` bytes at ``offset`` (fewer only if the file ends first); one request on a store
    (``OSError``: ``FileNotFoundError``, ``PermissionError``, or ``EIO`` where the store failed)."""
    if is_local(path):
        with open(path, "rb") as fh:
            return _pread_all(fh.fileno(), offset, length)
    return _remote_range(path, offset, length)[0]


def read_prefix(path: str, length: int) -> tuple[bytes, int | None]:
    """The first ``length`` bytes of a file (all of a shorter one) and its size (None: gs:// does not tell);
    ``OSError`` as ``read_range``, a local path as ``open_for_read``."""
    if is_local(path):
        with open_for_read(path) as fh:
            return read_at_most(fh, length), os.fstat(fh.fileno()).st_size
    problem = path_problem(path)
    if problem:
        raise OSError(errno.EINVAL, problem, path)
    return _remote_range(path, 0, length)


def _pread_all(fd: int, offset: int, length: int) -> bytes:
    return _read_all(lambda done: os.pread(fd, length - done, offset + done), length)


# What an s3:// or gs:// file opened for reading asks for at a time (``open_store``): one bounded request each.
STORE_READ_CHUNK = 4 << 20
# What a file opened to read a byte range asks for first past it (``_StoreFile``).
PAST_RANGE_CHUNK = 4 << 10
# Fetched blocks a file opened to read a byte range keeps (a scan confirms a record start past
# the range, then seeks back to read it).
_HELD_BYTES = 8 << 20
_HELD_BLOCKS = 32


class _StoreFile(io.RawIOBase):
    """An s3:// or gs:// object read in bounded ranges (``read_range``), seekable; its size known on opening.

    A request that starts before ``until`` ends there at the latest; past it, a request that jumps
    ahead asks for ``PAST_RANGE_CHUNK`` (a record header), and one that goes on from the last
    asks for twice as much, up to ``STORE_READ_CHUNK``. With ``until``, fetched blocks are kept (at most
    ``_HELD_BYTES``), so a seek back into them reads no byte again.
    """

    def __init__(self, path: str, first: bytes | None, size: int, until: int | None) -> None:
        super().__init__()
        self._path, self._size, self._pos, self._first, self._until = path, size, 0, first, until
        self._held: list[tuple[int, bytes]] = []  # blocks fetched (with ``until``), the newest last

    def readall(self) -> bytes:
        """The rest of the object, ``STORE_READ_CHUNK`` bytes a request (``RawIOBase`` would ask 8 KiB at a time)."""
        parts = []
        while True:
            part = self.read(min(STORE_READ_CHUNK, max(self._size - self._pos, 0)) or 1)
            if not part:
                return b"".join(parts)
            parts.append(part)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def _from_held(self, want: int) -> bytes | None:
        for start, block in reversed(self._held):
            if start <= self._pos < start + len(block):
                return block[self._pos - start:self._pos - start + want]
        return None

    def _hold(self, start: int, block: bytes) -> None:
        self._held.append((start, block))
        while len(self._held) > _HELD_BLOCKS or sum(len(b) for _, b in self._held) > _HELD_BYTES:
            self._held.pop(0)

    def _past_step(self) -> int:
        """What to ask for past ``until``: twice a block fetched there that this read goes on from
        (it starts at most that block's length past its end), else ``PAST_RANGE_CHUNK``."""
        for start, block in reversed(self._held):
            end = start + len(block)
            if start >= self._until and end <= self._pos <= end + len(block):
                return min(2 * len(block), STORE_READ_CHUNK)
        return PAST_RANGE_CHUNK

    def readinto(self, buffer) -> int:
        left = self._size - self._pos
        if left <= 0:
            return 0
        want = min(len(buffer), left)
        held = self._from_held(want)  # blocks are held only with ``until``
        if self._first is not None and self._pos < len(self._first):
            data = self._first[self._pos:self._pos + want]
            if self._pos + len(data) >= len(self._first):
                self._first = None  # read past: not held (a seek back reads again)
        elif held is not None:
            data = held
        else:
            if self._until is not None:
                want = min(want, self._until - self._pos) if self._pos < self._until else min(self._past_step(), left)
            data = _remote_range(self._path, self._pos, want)[0]
            if self._until is not None:
                self._hold(self._pos, data)
                data = data[:len(buffer)]
        buffer[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        self._first = None
        self._held = []
        super().close()


def _store_size(path: str) -> int:
    """An s3:// or gs:// object's size: one metadata request (``HEAD``; a GCS metadata ``GET``)."""
    if path.startswith("gs://"):
        from google.api_core import exceptions

        bucket, key = bucket_key(path)
        try:
            blob = store_client("gs").bucket(bucket).get_blob(key)
        except exceptions.GoogleAPICallError as err:
            raise OSError(errno.EIO, f"GCS answered {err.code}: {err}", path) from err
        if blob is None:
            raise FileNotFoundError(errno.ENOENT, "GCS answered 404", path)
        return blob.size
    with naming_s3_errors(path):
        return shared_s3io().size(path)


def open_store(path: str, size: int | None = None, until: int | None = None) -> BinaryIO:
    """Opens an s3:// or gs:// object for reading in ranges of ``STORE_READ_CHUNK`` bytes, one request each.

    Opening reads the first chunk in one ``GET``, which also tells the size on S3 (no ``HEAD``), unless
    ``size`` is known. With ``until`` (where a shard's split ends) no request reaches past it unless
    the reader reads past it, and then from ``PAST_RANGE_CHUNK`` up. ``OSError`` as ``read_range``.
    """
    first = None
    if size is None:
        first, size = _remote_range(path, 0, STORE_READ_CHUNK)
        if size is None:  # an empty object (416), or a store that did not say: what the first read got
            size = len(first) if len(first) < STORE_READ_CHUNK else _store_size(path)
    return io.BufferedReader(_StoreFile(path, first, size, until), STORE_READ_CHUNK)


class RangeReader:
    """Reads byte ranges of files, from any thread, reading no byte outside the range.

    Local files stay open, up to ``max_open`` per thread (the oldest closed first), read with
    ``os.pread``; a remote range is one bounded request (``read_range``).
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
        return _pread_all(self._fd(path), offset, length) if is_local(path) else _remote_range(path, offset, length)[0]

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
