"""TFRecord framing: how one record's bytes are laid out in a file.

A record is::

    uint64 length            (little endian)
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8`` (mod 2**32).
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Iterator, Sequence

import crc32c as _crc32c

from transforms.errors import RecordError

__all__ = ["not_tfrecord", "HEADER_SIZE", "DEFAULT_MAX_RECORD_BYTES", "FOOTER_SIZE", "OVERHEAD", "masked_crc32c",
           "frame_record", "frame_parts", "framed_size", "parse_header", "read_record", "iter_records"]

HEADER_SIZE = 12  # uint64 length + uint32 masked crc of the length
FOOTER_SIZE = 4  # uint32 masked crc of the data
OVERHEAD = HEADER_SIZE + FOOTER_SIZE

_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_LENGTH = struct.Struct("<Q")
_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
# Data of a record with an unknown remaining size (a compressed stream) is read in
# pieces of at most this many bytes, so a corrupt huge length cannot allocate memory.
_STREAM_CHUNK = 16 * 1024 * 1024
# The largest record data a reader accepts unless told otherwise (``--max_record_mb``):
# above build's largest image (256 MiB) with room for its features.
DEFAULT_MAX_RECORD_BYTES = 512 * 1024 * 1024


def _mask(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32


def masked_crc32c(data: bytes | memoryview) -> int:
    """Returns the TFRecord masked CRC32C of ``data``."""
    return _mask(_crc32c.crc32c(data))


def framed_size(data_length: int) -> int:
    """Returns how many bytes a record with ``data_length`` bytes of data occupies."""
    return data_length + OVERHEAD


def frame_record(data: bytes) -> bytes:
    """Returns ``data`` framed as one TFRecord record."""
    header, footer = frame_parts((data,))
    return header + data + footer


def frame_parts(parts: Sequence[bytes]) -> tuple[bytes, bytes]:
    """Returns the header and footer that frame ``b"".join(parts)`` as one record, without joining
    the parts (an image is not copied)."""
    crc = 0
    for part in parts:
        crc = _crc32c.crc32c(part, crc)
    length = _LENGTH.pack(sum(len(part) for part in parts))
    return length + _CRC.pack(masked_crc32c(length)), _CRC.pack(_mask(crc))


def parse_header(header: bytes) -> int | None:
    """Returns the data length a 12-byte header declares, or None if its CRC is wrong."""
    length, crc = _HEADER.unpack(header)
    if masked_crc32c(header[:8]) != crc:
        return None
    return length


def _read_exact(fh: BinaryIO, n: int, remaining: int | None) -> bytes:
    """Reads up to ``n`` bytes; in pieces when the stream's size is unknown."""
    if remaining is not None or n <= _STREAM_CHUNK:
        return fh.read(n)
    pieces = []
    while n > 0 and (piece := fh.read(min(n, _STREAM_CHUNK))):
        pieces.append(piece)
        n -= len(piece)
    return b"".join(pieces)


# Files that people give by mistake for a TFRecord file, by their first bytes.
_NOT_TFRECORD = (
    (b"\xff\xd8\xff", "a JPEG image"), (b"\x89PNG\r\n", "a PNG image"), (b"GIF8", "a GIF image"),
    (b"II*\x00", "a TIFF image"), (b"MM\x00*", "a TIFF image"), (b"RIFF", "a RIFF file (e.g. WebP)"),
    (b"\x1f\x8b\x08", "gzip data (a gzip TFRecord file needs the .gz suffix or gzip compression)"),
    (b"PK\x03\x04", "a zip file"),
)


def not_tfrecord(head: bytes) -> str | None:
    """Returns what a file starting with ``head`` is, if it is plainly not a TFRecord file."""
    return next((what for magic, what in _NOT_TFRECORD if head.startswith(magic)), None)


def read_record(fh: BinaryIO, path: str = "", offset: int = 0, remaining: int | None = None,
                max_length: int = DEFAULT_MAX_RECORD_BYTES) -> bytes | None:
    """Reads the record that starts at the current position of ``fh``.

    Args:
        path, offset: The file's name and the position's byte offset, for error messages.
        remaining: Bytes left in the file from the current position, when known; None
            (compressed streams): data is read in bounded pieces.
        max_length: The most data bytes a record may declare.

    Returns:
        The record's data, or None at a clean end of file.

    Raises:
        RecordError: ``truncated``, ``crc_mismatch``, or ``bad_length`` (the declared length does
            not fit in the file or is over ``max_length``), found before any data is read.
    """
    header = fh.read(HEADER_SIZE)
    if not header:
        return None
    if len(header) < HEADER_SIZE:
        raise RecordError(path, offset, "truncated",
                          f"file ends {len(header)} bytes into a {HEADER_SIZE}-byte record header")
    length, length_crc = _HEADER.unpack(header)
    if masked_crc32c(header[:8]) != length_crc:
        if offset == 0 and (what := not_tfrecord(header)):
            raise RecordError(path, 0, "not_tfrecord",
                              f"not a TFRecord file: it starts like {what}")
        raise RecordError(path, offset, "crc_mismatch",
                          f"length field {header[:8].hex()} has masked crc {length_crc:#010x}, "
                          f"expected {masked_crc32c(header[:8]):#010x}"
                          + ("; the file's first record header is wrong: the file is damaged or is not a "
                             "TFRecord file" if offset == 0 else ""))
    if remaining is not None and length + OVERHEAD > remaining:
        raise RecordError(path, offset, "bad_length", f"record declares {length} data bytes but only "
                          f"{max(remaining - OVERHEAD, 0)} remain in the file")
    if length > max_length:
        raise RecordError(path, offset, "bad_length",
                          f"record declares {length} data bytes, over the {max_length}-byte record-size limit "
                          f"(--max_record_mb {max_length / 2**20:g}); the length is damaged, or raise the limit")
    # The data and its CRC are read apart, so the data is never copied out of a larger buffer.
    data = _read_exact(fh, length, remaining)
    footer = fh.read(FOOTER_SIZE) if len(data) == length else b""
    if len(footer) < FOOTER_SIZE:
        raise RecordError(path, offset, "truncated", f"record declares {length} data bytes; file ends after "
                          f"{len(data) + len(footer)} of the {length + FOOTER_SIZE} bytes of data and crc")
    (data_crc,) = _CRC.unpack(footer)
    if masked_crc32c(data) != data_crc:
        raise RecordError(path, offset, "crc_mismatch", f"data of {length} bytes has masked crc "
                          f"{data_crc:#010x}, expected {masked_crc32c(data):#010x}")
    return data


def iter_records(fh: BinaryIO, path: str = "", start: int = 0, size: int | None = None,
                 max_length: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[tuple[int, bytes]]:
    """Yields ``(offset, data)`` for every record from the current position to EOF.

    Args:
        fh: Binary file-like object positioned at ``start``.
        size: Total size of the file when known (enables the length check).

    Raises:
        RecordError: On the first damaged record.
    """
    offset = start
    while (data := read_record(fh, path, offset, None if size is None else size - offset, max_length)) is not None:
        yield offset, data
        offset += len(data) + OVERHEAD
