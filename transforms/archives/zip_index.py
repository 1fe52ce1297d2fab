"""The members of a zip from its central directory, and one member's bytes from a range of the file.

``zip_members`` reads the central directory only, so a zip of a million images is listed without
reading an image. The directory's sizes are claims, checked before a byte is read and again after:
a member whose bytes would run past the central directory is damaged, the local header must agree
with the directory, and inflating stops one byte past the size claimed (a deflate bomb costs that
much).
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from typing import BinaryIO, Iterator, NamedTuple

from transforms.errors import ImageError

__all__ = ["ZipMember", "zip_members", "LOCAL_HEADER", "local_span", "compressed_bound", "member_bytes"]

LOCAL_HEADER = 30  # the fixed part of a local file header
_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_DATA_DESCRIPTOR = 0x08  # flag bit 3: the local header's CRC-32 and sizes are zero, given after the data
_ZIP64 = 0xFFFFFFFF  # a local header's size that stands for its zip64 extra field


class ZipMember(NamedTuple):
    """One central directory entry: name, local header offset, sizes, method, CRC-32, if a file, and
    why its bytes cannot be where the directory says ("" if they can)."""

    name: str
    header_offset: int
    compressed: int
    size: int
    method: int
    crc: int
    is_file: bool
    damage: str = ""


def zip_members(fh: BinaryIO) -> Iterator[ZipMember]:
    """Every entry of the zip read from the seekable ``fh``, in central directory order.

    Raises:
        ImageError: ``unreadable``, the file is not a zip or its directory is damaged.
    """
    try:
        archive = zipfile.ZipFile(fh)
        infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
        raise ImageError("unreadable", f"archive cannot be read: {type(err).__name__}: {err}") from err
    end = archive.start_dir  # where the central directory starts: no member's bytes go past it
    for info in infos:
        is_file = not info.is_dir() and (info.external_attr >> 28) not in (0o12,)  # 0o12: a symbolic link
        damage = "" if info.header_offset + LOCAL_HEADER + info.compress_size <= end else (
            f"zip member's compressed size ({info.compress_size} bytes, its central directory says) runs past "
            f"the end of the archive's members (byte {end}); the archive is damaged; not read")
        yield ZipMember(info.filename, info.header_offset, info.compress_size, info.file_size,
                        info.compress_type, info.CRC, is_file, damage)


def local_span(compressed: int) -> int:
    """Bytes to read from a local header on: enough for a member whose name and extra field fit 1 KiB (a
    longer header costs a second read, of as many bytes as ``member_bytes`` says)."""
    return LOCAL_HEADER + 1024 + compressed


def compressed_bound(size: int, method: int) -> int:
    """The most compressed bytes a member of ``size`` bytes needs: ``size`` stored, zlib's deflateBound
    deflated (a raw stream of stored blocks, never more); any other method: ``size``."""
    if method != zipfile.ZIP_DEFLATED:
        return size
    return size + (size >> 12) + (size >> 14) + (size >> 25) + 13


def member_bytes(raw: bytes, compressed: int, size: int, method: int, crc: int) -> bytes | int:
    """A member's bytes from ``raw``, the file's bytes from its local header on.

    Returns:
        The member's bytes, or the number of bytes ``raw`` must hold when it holds fewer.

    Raises:
        ImageError: ``unreadable`` for a damaged or disagreeing header, an unsupported method,
            a deflate stream that does not end at ``compressed`` bytes, or bytes that do not match
            ``size`` or the CRC-32.
    """
    if len(raw) < LOCAL_HEADER:
        return LOCAL_HEADER
    magic, _, flags, local_method, _, _, local_crc, local_compressed, local_size, name_len, extra_len = \
        _LOCAL.unpack_from(raw)
    if magic != b"PK\x03\x04":
        raise ImageError("unreadable", "zip member's local header is damaged (no PK\\3\\4 signature)")
    _check_local_header(flags, (local_method, local_crc, local_compressed, local_size),
                        (method, crc, compressed, size))
    start = LOCAL_HEADER + name_len + extra_len
    if len(raw) < start + compressed:
        return start + compressed
    data = raw[start:start + compressed]
    if method == zipfile.ZIP_DEFLATED:
        data = _inflate(data, compressed, size)
    elif method != zipfile.ZIP_STORED:
        raise ImageError("unreadable", f"zip member uses compression method {method}; only stored and "
                                       "deflated members are read")
    if len(data) != size or zlib.crc32(data) != crc:
        raise ImageError("unreadable", f"zip member's bytes do not match its CRC-32 or size "
                                       f"({len(data)} bytes, {size} expected); the archive is damaged")
    return data


def _check_local_header(flags: int, local: tuple[int, int, int, int], central: tuple[int, int, int, int]) -> None:
    """Raises ``unreadable`` where the local header's method, CRC-32 or sizes disagree with the directory's.

    The CRC-32 and sizes are compared only where the local header holds them (not flag bit 3, zip64).
    """
    fields = ("method", "CRC-32", "compressed size", "size")
    for at, (field, here, there) in enumerate(zip(fields, local, central)):
        if at and (flags & _DATA_DESCRIPTOR or (at >= 2 and here == _ZIP64)):
            continue
        if here != there:
            raise ImageError("unreadable", f"zip member's local header says {field} {here}, its central "
                                           f"directory {there}; the archive is damaged")


def _inflate(data: bytes, compressed: int, size: int) -> bytes:
    """The raw deflate stream ``data`` inflated, to at most ``size`` + 1 bytes; it must end at its last byte."""
    inflater = zlib.decompressobj(-15)
    try:
        out = inflater.decompress(data, size + 1)
    except zlib.error as err:
        raise ImageError("unreadable", f"zip member cannot be inflated: {err}") from err
    if len(out) > size:
        raise ImageError("unreadable", f"zip member inflates to more than the {size} bytes its central "
                                       "directory says (inflating stopped there); the archive is damaged")
    if not inflater.eof:
        raise ImageError("unreadable", f"zip member's deflate stream does not end within its {compressed} "
                                       "compressed bytes; the archive is damaged")
    if inflater.unused_data:
        raise ImageError("unreadable", f"zip member has {len(inflater.unused_data)} bytes after the end of its "
                                       f"deflate stream (its central directory says {compressed} compressed "
                                       "bytes); the archive is damaged")
    return out
