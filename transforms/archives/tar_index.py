"""The members of a tar with their byte offsets: the index pass of a tar input.

``tar_members`` walks a tar's headers with the standard ``tarfile`` module
(GNU long names, pax headers), seeking over each member's bytes, and forgets
each header once given out, so memory does not grow with the archive. A
``.tar.gz`` is walked as one stream (it cannot be seeked); its members'
offsets are then offsets in the decompressed stream. ``Window`` makes a
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
    last = None
    try:
        archive = tarfile.open(fileobj=fh, mode="r|gz" if stream else "r:")
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
