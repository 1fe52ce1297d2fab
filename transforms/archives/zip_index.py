"""The members of a zip from its central directory, and one member's bytes from a range of the file.

``zip_members`` reads the central directory only (``zipfile``), so a zip of a
million images is listed without reading an image. ``member_bytes`` turns
the bytes read from a member's local header on (``local_span`` says how
many) into the member's bytes: stored or deflated, their CRC-32 checked.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from typing import BinaryIO, Iterator, NamedTuple

from transforms.errors import ImageError

__all__ = ["ZipMember", "zip_members", "LOCAL_HEADER", "local_span", "member_bytes"]

LOCAL_HEADER = 30  # the fixed part of a local file header
_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}


class ZipMember(NamedTuple):
    """One central directory entry: name, local header offset, sizes, method, CRC-32, if a file."""

    name: str
    header_offset: int
    compressed: int
    size: int
    method: int
    crc: int
    is_file: bool


def zip_members(fh: BinaryIO) -> Iterator[ZipMember]:
    """Every entry of the zip read from the seekable ``fh``, in central directory order.

    Raises:
        ImageError: ``unreadable``, the file is not a zip or its directory is damaged.
    """
    try:
        infos = zipfile.ZipFile(fh).infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
        raise ImageError("unreadable", f"archive cannot be read: {type(err).__name__}: {err}") from err
    for info in infos:
        is_file = not info.is_dir() and (info.external_attr >> 28) not in (0o12,)  # 0o12: a symbolic link
        yield ZipMember(info.filename, info.header_offset, info.compress_size, info.file_size,
                        info.compress_type, info.CRC, is_file)


def local_span(compressed: int) -> int:
    """Bytes to read from a local header on: enough for a member whose name and extra field fit 1 KiB.

    A longer header costs a second read (``member_bytes`` says how many bytes).
    """
    return LOCAL_HEADER + 1024 + compressed


def member_bytes(raw: bytes, compressed: int, size: int, method: int, crc: int) -> bytes | int:
    """A member's bytes from ``raw``, the file's bytes from its local header on.

    Returns:
        The member's bytes, or the number of bytes ``raw`` must hold (from the
        local header) when it holds fewer.

    Raises:
        ImageError: ``unreadable`` for a damaged header, an unsupported
            compression method or a CRC-32 that does not match.
    """
    if len(raw) < LOCAL_HEADER:
        return LOCAL_HEADER
    magic, _, _, _, _, _, _, _, _, name_len, extra_len = _LOCAL.unpack_from(raw)
    if magic != b"PK\x03\x04":
        raise ImageError("unreadable", "zip member's local header is damaged (no PK\\3\\4 signature)")
    start = LOCAL_HEADER + name_len + extra_len
    if len(raw) < start + compressed:
        return start + compressed
    data = raw[start:start + compressed]
    if method == zipfile.ZIP_DEFLATED:
        try:
            data = zlib.decompressobj(-15).decompress(data, size + 1)
        except zlib.error as err:
            raise ImageError("unreadable", f"zip member cannot be inflated: {err}") from err
    elif method != zipfile.ZIP_STORED:
        raise ImageError("unreadable", f"zip member uses compression method {method}; only stored and "
                                       "deflated members are read")
    if len(data) != size or zlib.crc32(data) != crc:
        raise ImageError("unreadable", f"zip member's bytes do not match its CRC-32 or size "
                                       f"({len(data)} bytes, {size} expected); the archive is damaged")
    return data
