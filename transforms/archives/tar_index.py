"""The members of a tar with their byte offsets: the index pass of a tar input.

``tar_members`` walks a tar's 512-byte headers itself (ustar, GNU long names, pax ``path`` and
``size``, base-256 sizes), one read per header, seeking over each member's bytes and keeping
nothing (``tarfile`` is several times slower and keeps every header). A ``.tar.gz`` is walked
through its decompressed stream; an inner tar is walked in place, its reads kept inside its bytes.

A hostile tar is bounded: each step reads one header and moves strictly forward, holding at most
``MAX_EXTENDED_BYTES`` of a pax or long-name header. A size that is negative or runs past the
archive's end is that member's damage (``MemberDamage``).
"""

from __future__ import annotations

import gzip
import io
import zlib
from typing import BinaryIO, Iterator, NamedTuple

from transforms.errors import ImageError

__all__ = ["TarMember", "MemberDamage", "MAX_EXTENDED_BYTES", "tar_members", "member_path", "is_inner_tar"]

# The most bytes of one pax extended header or GNU long name that are read (held) at once.
MAX_EXTENDED_BYTES = 1 << 20


class TarMember(NamedTuple):
    """One tar header: the member's name, where its bytes start, their size, and if it is a file."""

    name: str
    offset: int
    size: int
    is_file: bool


class MemberDamage(ImageError):
    """``unreadable``: the header of ``member`` (its path) claims what the archive does not hold (a
    negative size, bytes past its end); the walk cannot go on past it."""

    def __init__(self, member: str, detail: str) -> None:
        super().__init__("unreadable", detail)
        self.member = member

    def __reduce__(self):
        return (type(self), (self.member, self.detail))


def member_path(name: str) -> str:
    """A member's name without the ``./`` a tar made of ``.`` starts with (an absolute name stays absolute)."""
    while name.startswith("./"):
        name = name[2:]
    return "" if name == "." else name


def is_inner_tar(name: str) -> bool:
    """True if a member is itself an uncompressed tar, walked as a folder of its own."""
    return name.lower().endswith(".tar")


def tar_members(fh: BinaryIO, stream: bool = False, start: int = 0, size: int | None = None) -> Iterator[TarMember]:
    """Every member of the tar read from the seekable ``fh`` (with ``stream``, a ``.tar.gz`` read as one
    stream, offsets in the decompressed bytes), in archive order. With ``size``, the tar is the ``size``
    bytes of ``fh`` from ``start`` (an inner tar), offsets still ``fh``'s.

    Raises:
        ImageError: ``unreadable``, the archive is not a tar or is damaged (naming the last member read).
    """
    if stream:
        yield from _walk(gzip.GzipFile(fileobj=fh, mode="rb"), 0, None)
    else:
        yield from _walk(fh, start, fh.seek(0, io.SEEK_END) if size is None else start + size)


_BLOCK = 512
_REGULAR = (b"0", b"\0", b"7")  # a file; "7": contiguous, read as a file
_GNU_MAGIC = b"ustar  \0"
_LARGEST = 1 << 62  # past any stream's end (a file offset is under 2**63)


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


def _walk(fh: BinaryIO, start: int, end: int | None) -> Iterator[TarMember]:
    """``tar_members`` of a tar from ``start`` to ``end`` of ``fh`` (None: a stream, read to its end): one
    read per header, never past ``end``, the members' bytes seeked over, every step strictly forward."""

    def read(at: int, length: int) -> bytes:
        return fh.read(length if end is None else max(0, min(length, end - at)))

    at, last = start, None
    name = size = None  # from a GNU long-name or pax header, for the next member
    need = 0  # where the last member's bytes end: the archive must reach it
    while True:
        try:
            reached = fh.seek(at)
            header = read(at, _BLOCK)
        except (EOFError, zlib.error, gzip.BadGzipFile) as err:  # a damaged or cut .tar.gz
            where = f" after member {last!r}" if last is not None else ""
            raise ImageError("unreadable", f"archive cannot be read{where}: {type(err).__name__}: {err}") from err
        if len(header) < _BLOCK or header == bytes(_BLOCK):
            if 0 < len(header) < _BLOCK:
                raise ImageError("unreadable", f"archive cannot be read after member {last!r}: it ends inside "
                                               "a header" if last is not None else "archive is not a tar: too short")
            if name is not None or size is not None:
                raise ImageError("unreadable", f"archive cannot be read after member {last!r}: it ends after a "
                                               "long-name or pax header")
            if not header and reached < need:
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
                if not 0 <= length <= MAX_EXTENDED_BYTES:
                    raise ValueError(f"a pax or long-name header of {length} bytes (at most "
                                     f"{MAX_EXTENDED_BYTES} are read)")
                fh.seek(data_at)
                data = read(data_at, length)
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
                if length < 0:
                    raise MemberDamage(full, f"member's header gives a negative size, {length} bytes; the "
                                             "archive cannot be read past it")
                if data_at + length > (_LARGEST if end is None else end):
                    raise MemberDamage(full, f"member's header claims {length} bytes, past the archive's end "
                                             + ("(no archive is that large)" if end is None else
                                                f"({max(end - data_at, 0)} bytes follow the header)"))
                last, need = full, data_at + length
                yield TarMember(full, data_at, length, kind in _REGULAR)
                name = size = None
        except ValueError as err:  # a field that is no number, a pax record that cannot be read
            if last is None and at == start:
                raise ImageError("unreadable", f"archive is not a tar: its first 512 bytes are no tar header "
                                               f"({err})") from err
            raise ImageError("unreadable", f"archive cannot be read after member {last!r}: {err}") from err
        at = data_at + (length + _BLOCK - 1) // _BLOCK * _BLOCK  # forward: no length is negative (above)
