"""Unit tests of ``transforms/archives/zip_index.py``: a member's claims checked against its bytes."""

from __future__ import annotations

import io
import random
import struct
import zipfile
import zlib

import pytest

from transforms.archives.zip_index import compressed_bound, member_bytes, zip_members
from transforms.errors import ImageError

PAYLOAD = b"image bytes " * 200


def _member(method: int = zipfile.ZIP_DEFLATED, flags: int = 0) -> tuple[bytes, tuple[int, int, int, int]]:
    """(the zip's bytes from its first local header on, (compressed, size, method, crc) from its directory)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        archive.writestr("a/b.jpg", PAYLOAD)
    data = bytearray(buffer.getvalue())
    struct.pack_into("<H", data, 6, flags)
    (member,) = zip_members(io.BytesIO(bytes(data)))
    return bytes(data), (member.compressed, member.size, member.method, member.crc)


def _local(data: bytes, offset: int, value: int, fmt: str = "<I") -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


@pytest.mark.parametrize("change, why", [
    (lambda d: _local(d, 8, 0, "<H"), "local header says method 0, its central directory 8"),
    (lambda d: _local(d, 14, 1), "local header says CRC-32 1"),
    (lambda d: _local(d, 18, 5), "local header says compressed size 5"),
    (lambda d: _local(d, 22, 7), "local header says size 7"),
])
def test_a_local_header_that_disagrees_with_the_directory_is_damage(change, why):
    data, (compressed, size, method, crc) = _member()
    with pytest.raises(ImageError, match=why):
        member_bytes(change(data), compressed, size, method, crc)


def test_sizes_after_the_data_or_in_zip64_are_not_compared():
    data, (compressed, size, method, crc) = _member(flags=0x08)
    assert member_bytes(_local(_local(data, 14, 0), 18, 0), compressed, size, method, crc) == PAYLOAD
    data, (compressed, size, method, crc) = _member()
    assert member_bytes(_local(_local(data, 18, 0xFFFFFFFF), 22, 0xFFFFFFFF), compressed, size, method,
                        crc) == PAYLOAD


def test_a_deflate_stream_must_end_where_its_compressed_size_says():
    data, (compressed, size, method, crc) = _member(flags=0x08)  # the local header's sizes are not compared
    with pytest.raises(ImageError, match="7 bytes after the end of its deflate stream"):
        member_bytes(data, compressed + 7, size, method, crc)
    with pytest.raises(ImageError, match="does not end within its"):
        member_bytes(data, compressed - 3, size, method, crc)


def test_inflating_stops_one_byte_past_the_size_claimed():
    stream = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb = stream.compress(b"\0" * (32 << 20)) + stream.flush()  # 32 MiB in about 32 KB
    header = struct.pack("<4sHHHHHIIIHH", b"PK\3\4", 20, 0x08, 8, 0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(ImageError, match="more than the 1000 bytes"):
        member_bytes(header + bomb, len(bomb), 1000, zipfile.ZIP_DEFLATED, 0)


@pytest.mark.parametrize("size", [0, 1, 1000, 1 << 20])
def test_compressed_bound_holds_for_incompressible_bytes(size):
    data = random.Random(size).randbytes(size)
    stream = zlib.compressobj(9, zlib.DEFLATED, -15)
    assert len(stream.compress(data) + stream.flush()) <= compressed_bound(size, zipfile.ZIP_DEFLATED)
    assert compressed_bound(size, zipfile.ZIP_STORED) == size
