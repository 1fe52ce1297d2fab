"""The members of a tar with their byte offsets: the index pass of a tar input.

``tar_members`` walks a tar's 512-byte headers itself (ustar, GNU long
names, pax ``path`` and ``size`` records, base-256 sizes; checked against the
``tarfile`` module's reading in the tests), one read per header, seeking
over each member's bytes and keeping nothing, so memory does not grow with
the archive (``tarfile`` parses a header several times slower and keeps every
one). A ``.tar.gz`` is walked as one stream with ``tarfile`` (it cannot be
seeked); its members' offsets are then offsets in the decompressed stream. ``Window`` makes a
byte range of a file look like a file, so that an inner tar (ImageNet's tar
of class tars) is walked in place, its members' offsets made absolute.
"""

from __future__ import annotations

import io
import tarfile
from typing import BinaryIO, Iterator, NamedTuple

from transforms.errors import ImageError

__all__ = ["TarMember", "Window", "tar_members", "member_path", "is_inner_tar"]


class TarMember(NamedTuple):
    """One tar header: the member's name, where its bytes start, their size, and if it is a file."""

    name: str
    offset: int
    size: int
    is_file: bool


class Window(io.RawIOBase):
    """``size`` bytes of ``fh`` from ``start``, read as a file of their own (seekable, read-only)."""

    def __init__(self, fh: BinaryIO, start: int, size: int) -> None:
        super().__init__()
        self._fh = fh
        self._start = start
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self._size - self._pos)
        if want <= 0:
            return 0
        self._fh.seek(self._start + self._pos)
        data = self._fh.read(want)
        buffer[:len(data)] = data
        self._pos += len(data)
        return len(data)


def member_path(name: str) -> str:
    """A member's name without the ``./`` or ``/`` a tar made of ``.`` or of an absolute path starts with."""
    while name.startswith(("./", "/")):
        name = name[2:] if name.startswith("./") else name[1:]
    return "" if name == "." else name


def is_inner_tar(name: str) -> bool:
    """True if a member is itself an uncompressed tar, walked as a folder of its own."""
    return name.lower().endswith(".tar")


def tar_members(fh: BinaryIO, stream: bool = False, base: int = 0) -> Iterator[TarMember]:
    """Every member of the tar read from ``fh``, in archive order.

    Args:
        fh: The tar (a seekable file, or with ``stream`` a gzip-compressed tar).
        stream: ``fh`` is a ``.tar.gz``: read as one stream, offsets in the
            decompressed bytes.
        base: Added to every offset (the offset of ``fh``'s first byte in the
            file that holds it).

    Raises:
        ImageError: ``unreadable``, the archive is not a tar or is damaged
            (the message names the last member read).
    """
    if not stream:
        yield from _walk(fh, base)
        return
    last = None
    try:
        archive = tarfile.open(fileobj=fh, mode="r|gz")
        while True:
            info = archive.next()
            if info is None:
                return
            archive.members = []  # tarfile keeps every header; each is given out once
            last = info.name
            name = member_path(info.name)
            if info.isdir():  # named as a folder, which no listing takes for an input
                name = name.rstrip("/") + "/"
            yield TarMember(name, base + info.offset_data, info.size, info.isfile())
    except (tarfile.TarError, EOFError, OSError, ValueError) as err:
        where = f" after member {last!r}" if last is not None else ""
        raise ImageError("unreadable", f"archive cannot be read{where}: {type(err).__name__}: {err}") from err


_BLOCK = 512
_REGULAR = (b"0", b"\0", b"7")  # a file; "7": contiguous, read as a file
_GNU_MAGIC = b"ustar  \0"


def _number(field: bytes) -> int:
    """An octal (or GNU base-256) number field of a header."""
    if field[:1] and field[0] & 0x80:
        value = int.from_bytes(field, "big")
        return value - (1 << (8 * len(field))) if field[0] & 0x40 else value & ~(0x80 << (8 * (len(field) - 1)))
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise ValueError(f"a number field holds {text[:12]!r}, not octal digits") from None


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax(data: bytes) -> dict[str, str]:
    """The records of a pax extended header: ``LEN key=value\n`` each."""
    records, at = {}, 0
    while at < len(data):
        space = data.find(b" ", at)
        if space < 0:
            if data[at:].strip(b"\0"):
                raise ValueError("pax header is damaged")
            break
        length = int(data[at:space])
        if length <= 0:
            raise ValueError("pax record of length 0")
        key, _, value = data[space + 1:at + length - 1].partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        at += length
    return records


def _walk(fh: BinaryIO, base: int) -> Iterator[TarMember]:
    """``tar_members`` of a seekable tar: one read per header, the members' bytes seeked over."""
    at, last = 0, None
    name = size = None  # from a GNU long-name or pax header, for the next member
    while True:
        fh.seek(at)
        header = fh.read(_BLOCK)
        if len(header) < _BLOCK or header == bytes(_BLOCK):
            if 0 < len(header) < _BLOCK:
                raise ImageError("unreadable", f"archive cannot be read after member {last!r}: it ends inside "
                                               "a header" if last is not None else "archive is not a tar: too short")
            if name is not None or size is not None:
                raise ImageError("unreadable", f"archive cannot be read after member {last!r}: it ends after a "
                                               "long-name or pax header")
            if not header and at:
                fh.seek(at - 1)
                if not fh.read(1):
                    raise ImageError("unreadable", f"archive cannot be read after member {last!r}: it ends "
                                                   "inside that member")
            return
        try:
            stored = sum(header[:148]) + 8 * 32 + sum(header[156:])
            if _number(header[148:156]) != stored:
                raise ValueError("header checksum does not match")
            kind = header[156:157]
            length = _number(header[124:136])
            data_at = at + _BLOCK
            if kind in (b"L", b"x", b"g"):
                fh.seek(data_at)
                data = fh.read(length)
                if kind == b"L":
                    name = _text(data)
                elif kind == b"x":
                    records = _pax(data)
                    name = records.get("path", name)
                    size = int(records["size"]) if "size" in records else size
            else:
                own = _text(header[:100])
                if header[257:265] != _GNU_MAGIC and header[257:262] == b"ustar" and header[345:346] != b"\0":
                    own = _text(header[345:500]) + "/" + own
                length = length if size is None else size
                full = member_path(name if name is not None else own)
                if kind == b"5":
                    full = full.rstrip("/") + "/"
                last = full
                yield TarMember(full, base + data_at, length, kind in _REGULAR)
                name = size = None
        except ValueError as err:
            if last is None and at == 0:
                raise ImageError("unreadable", f"archive is not a tar: its first 512 bytes are no tar header "
                                               f"({err})") from err
            raise ImageError("unreadable", f"archive cannot be read after member {last!r}: {err}") from err
        at = data_at + (length + _BLOCK - 1) // _BLOCK * _BLOCK
