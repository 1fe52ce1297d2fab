"""Hostile tars built byte by byte: headers that claim sizes the archive does not have, and unsafe names.

Each builder returns a small tar's bytes (a few KiB). Headers are made with
``tarfile.TarInfo.tobuf`` and then given the size field under test, their
checksum made again, so only what a test names is wrong.
"""

from __future__ import annotations

import io
import tarfile

from tests import imagegen

BLOCK = 512


def base256(value: int, width: int = 12) -> bytes:
    """A GNU base-256 number field (two's complement, high bit set): ``-512`` is ``ff .. fe 00``."""
    data = (value % (1 << (8 * width))).to_bytes(width, "big")
    return bytes([data[0] | 0x80]) + data[1:]


def header(name: str, size: int, kind: bytes = tarfile.REGTYPE, size_field: bytes | None = None) -> bytes:
    """One ustar header; ``size_field`` replaces its 12-byte size field (the checksum made again)."""
    info = tarfile.TarInfo(name)
    info.size, info.type = max(size, 0), kind
    block = bytearray(info.tobuf(format=tarfile.USTAR_FORMAT))
    if size_field is not None:
        block[124:136] = size_field.ljust(12, b"\0") if len(size_field) < 12 else size_field
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % BLOCK)


def member(name: str, data: bytes) -> bytes:
    """A regular member: its header and its bytes, padded to whole blocks."""
    return header(name, len(data)) + padded(data)


def pax(records: dict[str, str]) -> bytes:
    """A pax extended header (``x``) holding ``records``, for the member after it."""
    body = b""
    for key, value in records.items():
        line = f" {key}={value}\n".encode()
        length = len(line) + 1
        while len(str(length)) + len(line) != length:
            length = len(str(length)) + len(line)
        body += str(length).encode() + line
    return header("././@PaxHeader", len(body), tarfile.XHDTYPE) + padded(body)


def end() -> bytes:
    """The two zero blocks a tar ends with."""
    return bytes(2 * BLOCK)


def jpeg(salt: int = 0) -> bytes:
    return imagegen.jpeg("RGB", size=(16 + salt, 12))


def negative_size_tar(pax_size: bool = False, names: tuple[str, str, str] = ("rose/a.jpg", "rose/bad.jpg",
                                                                                "tulip/c.jpg")) -> bytes:
    """Three members, the second claiming -512 bytes (GNU base-256, or a pax ``size=-512`` record)."""
    first, bad, last = names
    if pax_size:
        damaged = pax({"size": "-512"}) + header(bad, 0)
    else:
        damaged = header(bad, 0, size_field=base256(-512))
    return member(first, jpeg(0)) + damaged + padded(jpeg(1)) + member(last, jpeg(2)) + end()


def huge_pax_size_tar() -> bytes:
    """A member whose pax ``size`` record claims 99999999999999999999 bytes, between two good ones."""
    return (member("rose/a.jpg", jpeg(0)) + pax({"size": "9" * 20}) + header("rose/huge.jpg", 0)
            + padded(jpeg(1)) + member("tulip/c.jpg", jpeg(2)) + end())


def tar_of(members: dict[str, bytes]) -> bytes:
    """A plain tar of ``name -> bytes`` (an outer tar of inner tars, a WebDataset shard)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()
