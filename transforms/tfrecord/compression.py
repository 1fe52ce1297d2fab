"""TFRecord compression: the names, file suffixes and zlib settings, and reading compressed files.

The reader checks the gzip/zlib checksums and notices a stream cut before its end marker, so damage to a
compressed shard is always an error: ``EOFError`` when the stream is cut short, ``zlib.error`` when the
compressed bytes are corrupt, as in the ``gzip`` module. Concatenated streams are read in turn.
"""

from __future__ import annotations

import io
import zlib
from typing import BinaryIO

__all__ = ["COMPRESSIONS", "READ_COMPRESSIONS", "SUFFIXES", "WBITS", "compression_of", "open_decompressed"]

# Compressions a shard is written with, and the suffix this project gives each.
COMPRESSIONS = ("none", "gzip", "zlib")
SUFFIXES = {"none": "", "gzip": ".gz", "zlib": ".zz"}
# What a reader accepts: ``auto`` takes the compression from the file's suffix.
READ_COMPRESSIONS = ("auto", *COMPRESSIONS)
# zlib's window bits for each compressed format (gzip's header and trailer, or zlib's).
WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}
# Suffix -> compression for ``auto``: this project's suffixes, and ``.deflate``, which
# is what Beam's WriteToTFRecord names its (zlib-wrapped) output.
_AUTO_SUFFIXES = {**{suffix: name for name, suffix in SUFFIXES.items() if suffix}, ".deflate": "zlib"}
_READ_SIZE = 1 << 20


def compression_of(path: str, compression: str = "auto") -> str:
    """Returns ``none``, ``gzip`` or ``zlib`` for a file: ``compression`` (one of
    ``READ_COMPRESSIONS``), or with ``auto`` what the path's suffix says."""
    if compression not in READ_COMPRESSIONS:
        raise ValueError(f"compression must be one of {', '.join(READ_COMPRESSIONS)}, got {compression!r}")
    if compression != "auto":
        return compression
    return next((kind for suffix, kind in _AUTO_SUFFIXES.items() if path.endswith(suffix)), "none")


class _InflateReader(io.RawIOBase):
    """Raw reader yielding the decompressed bytes of ``raw``."""

    def __init__(self, raw: BinaryIO, wbits: int) -> None:
        super().__init__()
        self._raw = raw
        self._wbits = wbits
        self._inflater = zlib.decompressobj(wbits)
        self._pending = b""  # compressed bytes read but not yet decompressed

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        want = len(buffer)
        if want == 0:
            return 0
        while True:
            if self._inflater.eof:
                rest = self._inflater.unused_data or self._raw.read(_READ_SIZE)
                if not rest:
                    return 0  # clean end after a complete stream
                self._inflater = zlib.decompressobj(self._wbits)
                self._pending = rest
            if not self._pending:
                self._pending = self._raw.read(_READ_SIZE)
                if not self._pending:
                    raise EOFError("compressed stream ends before its end-of-stream marker")
            out = self._inflater.decompress(self._pending, want)
            self._pending = self._inflater.unconsumed_tail
            if out:
                buffer[:len(out)] = out
                return len(out)


def open_decompressed(raw: BinaryIO, compression: str) -> BinaryIO:
    """Returns a readable stream of the decompressed bytes of ``raw`` (positioned at the start of
    the file; returned as is for ``none``)."""
    if compression == "none":
        return raw
    return io.BufferedReader(_InflateReader(raw, WBITS[compression]), buffer_size=_READ_SIZE)
