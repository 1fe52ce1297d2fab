"""Reading one member of a container input (``archives.members.MemberRef``): a tar or zip member, a
``.tar.gz`` member, a Parquet row's image.

A ``.tar.gz`` cannot be read from the middle: each process keeps one decompressing stream per
archive, which reads on to the member (an earlier member restarts it). A Parquet row's image is read
with its row group's image column, kept for the next rows; a row group whose image column is larger
than ``PARQUET_GROUP_BYTES`` (or twice ``--max_image_mb``) is not read: its rows are ``too_large``.
"""

from __future__ import annotations

import collections
import gzip
import threading

from transforms.archives.members import PARQUET, TAR, TGZ, WEBDATASET, ZIP, MemberRef
from transforms.archives.parquet_rows import group_problem, image_at, image_column, open_images
from transforms.archives.zip_index import compressed_bound, local_span, member_bytes
from transforms.errors import ImageError
from transforms.filesystems import naming_s3_errors
from transforms.storage.files import RangeReader, open_for_read

__all__ = ["PARQUET_CACHE_BYTES", "PARQUET_GROUP_BYTES", "PARQUET_OPEN_FILES", "read_member", "forget_cached"]

_MIB = 1 << 20
PARQUET_CACHE_BYTES = 256 * _MIB  # row groups' image columns kept by a process (one at least)
PARQUET_GROUP_BYTES = 1024 * _MIB  # the most a row group's image column may hold uncompressed to be read
PARQUET_OPEN_FILES = 8  # Parquet files a process keeps open
_RANGES = RangeReader()
_LOCK = threading.Lock()
_STREAMS: dict[str, tuple[threading.Lock, list]] = {}  # .tar.gz -> (its lock, [open gzip stream or None])
_GROUPS: collections.OrderedDict = collections.OrderedDict()  # (file, group, column) -> (values, bytes)
_PARQUETS: collections.OrderedDict = collections.OrderedDict()  # (file, column) -> (its lock, [fh, ParquetFile])


def read_member(ref: MemberRef, max_bytes: int) -> bytes:
    """The bytes of one member (``OSError`` as ``open_for_read``; ``ImageError``: too large, unreadable)."""
    if ref.length > max_bytes:
        raise ImageError("too_large", f"archive member has {ref.length} bytes, over --max_image_mb "
                                      f"({max_bytes / _MIB:g} MiB); not read")
    if ref.kind in (TAR, WEBDATASET):
        data = _RANGES.read(ref.container, ref.offset, ref.size)
    elif ref.kind == ZIP:
        _check_compressed_size(ref, max_bytes)
        raw = _RANGES.read(ref.container, ref.offset, local_span(ref.size))
        data = member_bytes(raw, ref.size, ref.length, ref.method, ref.crc)
        if isinstance(data, int):  # a local header longer than the first read
            raw = _RANGES.read(ref.container, ref.offset, data)
            data = member_bytes(raw, ref.size, ref.length, ref.method, ref.crc)
            if isinstance(data, int):
                raise ImageError("unreadable", "archive ends inside the member")
    elif ref.kind == TGZ:
        data = _stream_read(ref)
    elif ref.kind == PARQUET:
        data = _row_image(ref, max_bytes)
    else:
        raise ValueError(f"unknown member kind {ref.kind!r}")
    if ref.kind != PARQUET and len(data) != ref.length:
        raise ImageError("unreadable", f"archive ends inside the member ({len(data)} of {ref.length} bytes)")
    if len(data) > max_bytes:
        raise ImageError("too_large", f"row's image has {len(data)} bytes, over --max_image_mb "
                                      f"({max_bytes / _MIB:g} MiB)")
    return data


def _check_compressed_size(ref: MemberRef, max_bytes: int) -> None:
    """Refuses a zip member, unread, whose compressed size (a claim of its central directory) is more than
    deflate needs for ``max_bytes`` (``too_large``) or for its own size (``unreadable``)."""
    if ref.size > compressed_bound(max_bytes, ref.method):
        raise ImageError("too_large", f"zip member's compressed size is {ref.size} bytes (its central "
                                      f"directory says), over --max_image_mb ({max_bytes / _MIB:g} MiB); "
                                      "not read")
    if ref.size > compressed_bound(ref.length, ref.method):
        raise ImageError("unreadable", f"zip member's compressed size is {ref.size} bytes, more than its "
                                       f"{ref.length} bytes ever need (its central directory says both); "
                                       "the archive is damaged; not read")


def forget_cached(streams: bool = True) -> None:
    """Drops the Parquet row groups kept, closes the Parquet files and, with ``streams``, the ``.tar.gz``
    streams kept open (a later job may read a file of the same name)."""
    with _LOCK:
        _GROUPS.clear()
        files = list(_PARQUETS.values())
        _PARQUETS.clear()
        kept = list(_STREAMS.values()) if streams else []
        if streams:
            _STREAMS.clear()
    for lock, slot in files + kept:
        _close(lock, slot)


def _stream_read(ref: MemberRef) -> bytes:
    """A ``.tar.gz`` member, read on from where this process's stream of the archive is."""
    with _LOCK:
        lock, slot = _STREAMS.setdefault(ref.container, (threading.Lock(), [None]))
    with lock, naming_s3_errors(ref.container):
        stream = slot[0]
        if stream is None or stream.tell() > ref.offset:
            if stream is not None:
                stream.close()
            stream = slot[0] = gzip.GzipFile(fileobj=open_for_read(ref.container), mode="rb")
        try:
            stream.seek(ref.offset)
            return stream.read(ref.size)
        except (EOFError, gzip.BadGzipFile) as err:
            slot[0] = None
            raise ImageError("unreadable", f"archive cannot be read to the member: {err}") from err


def _row_image(ref: MemberRef, max_bytes: int) -> bytes:
    """A Parquet row's image, from its row group's image column (kept for the group's next rows)."""
    key = (ref.container, ref.offset, ref.column)
    with _LOCK:
        cached = _GROUPS.get(key)
        if cached is not None:
            _GROUPS.move_to_end(key)
    if cached is None:
        lock, slot = _open_parquet(ref.container, ref.column)
        with lock, naming_s3_errors(ref.container):
            if slot[1] is None:  # not opened yet, or closed by another thread since
                fh = open_for_read(ref.container)
                try:
                    slot[1] = open_images(fh, ref.column)
                except BaseException:
                    fh.close()
                    raise
                slot[0] = fh
            problem = group_problem(slot[1], ref.offset, ref.column, max(PARQUET_GROUP_BYTES, 2 * max_bytes))
            if problem:
                raise ImageError("too_large", problem)
            cached = image_column(slot[1], ref.offset, ref.column)
        with _LOCK:
            _GROUPS[key] = cached
            while len(_GROUPS) > 1 and sum(size for _, size in _GROUPS.values()) > PARQUET_CACHE_BYTES:
                _GROUPS.popitem(last=False)
    return image_at(cached[0], ref.size, max_bytes)


def _open_parquet(path: str, column: str) -> tuple[threading.Lock, list]:
    """The lock and ``[fh, ParquetFile]`` (None until opened, under the lock) of a Parquet file kept open to
    read ``column``; the least recently used one closed past ``PARQUET_OPEN_FILES``."""
    key = (path, column)
    with _LOCK:
        entry = _PARQUETS.get(key)
        if entry is not None:
            _PARQUETS.move_to_end(key)
            return entry
        entry = _PARQUETS[key] = (threading.Lock(), [None, None])
        closed = [_PARQUETS.popitem(last=False)[1] for _ in range(len(_PARQUETS) - PARQUET_OPEN_FILES)]
    for lock, slot in closed:
        _close(lock, slot)
    return entry


def _close(lock: threading.Lock, slot: list) -> None:
    """Closes the file or stream a slot holds (its first item) and empties the slot."""
    with lock:
        if slot[0] is not None:
            slot[0].close()
        slot[:] = [None] * len(slot)
