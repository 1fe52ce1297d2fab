"""Many encoded values in one bytes object: how grouped values travel packed (pure, no Beam).

A *pack* is the concatenation of frames ``length (4 bytes, little-endian) | value``.
"""

from __future__ import annotations

import struct
import zlib
from typing import Hashable, Iterator

__all__ = ["PACK_BYTES", "HELD_BYTES", "COMPRESS_MIN_BYTES", "Packer", "pack", "unpack"]

# A pack is handed out once it holds this many bytes.
PACK_BYTES = 1 << 20
# Everything a Packer holds is handed out once it reaches this many bytes.
HELD_BYTES = 16 << 20

_LENGTH = struct.Struct("<I")
# A packer that compresses compresses packs of at least this many bytes (smaller ones gain little
# and cost a compressor's set-up each); the pack's first byte says which it did.
COMPRESS_MIN_BYTES = 256
_ZLIB, _RAW = b"\x01", b"\x00"


def pack(values: list[bytes]) -> bytes:
    """Returns the pack of ``values`` (each an encoded value), in order."""
    return b"".join(_LENGTH.pack(len(value)) + value for value in values)


def unpack(packed: bytes, compressed: bool = False) -> Iterator[bytes]:
    """Yields the values of a pack (``compressed``: by ``Packer(compress=True)``), in order (``ValueError``: cut)."""
    if compressed:  # a marker byte, then the pack, zlib-compressed or as it is
        packed = zlib.decompress(memoryview(packed)[1:]) if packed[:1] == _ZLIB else packed[1:]
    at, end = 0, len(packed)
    unpack_length = _LENGTH.unpack_from
    while at < end:
        if at + 4 > end:
            raise ValueError(f"a pack of {end} bytes ends inside a frame's length at byte {at}")
        (length,) = unpack_length(packed, at)
        at += 4
        if at + length > end:
            raise ValueError(f"a pack of {end} bytes ends inside a value of {length} bytes at byte {at}")
        yield packed[at:at + length]
        at += length


class Packer:
    """Gathers encoded values by key into packs of at most about ``pack_bytes``.

    ``add`` returns the key's pack when it is full; once the packer is ``full``, and at the end,
    ``drain`` hands out every pack. With ``compress`` a first byte says whether it is zlib-compressed.
    """

    def __init__(self, pack_bytes: int = PACK_BYTES, held_bytes: int = HELD_BYTES, compress: bool = False) -> None:
        if pack_bytes < 1 or held_bytes < 1:
            raise ValueError(f"pack_bytes and held_bytes must be positive, got {pack_bytes}, {held_bytes}")
        self._compress = compress
        self._pack_bytes = pack_bytes
        self._held_bytes = held_bytes
        self._packs: dict[Hashable, bytearray] = {}
        self._held = 0

    @property
    def held(self) -> int:
        """Bytes of the packs not handed out yet."""
        return self._held

    def add(self, key: Hashable, value: bytes) -> bytes | None:
        """Adds ``value`` to ``key``'s pack; returns the pack if that made it full, else None."""
        packed = self._packs.get(key)
        if packed is None:
            packed = self._packs[key] = bytearray()
        packed += _LENGTH.pack(len(value))
        packed += value
        self._held += 4 + len(value)
        return self._take(key) if len(packed) >= self._pack_bytes else None

    def full(self) -> bool:
        """True when the packer holds ``held_bytes`` or more: time to ``drain`` it."""
        return self._held >= self._held_bytes

    def drain(self) -> Iterator[tuple[Hashable, bytes]]:
        """Yields ``(key, pack)`` of every key, emptying the packer."""
        for key in list(self._packs):
            yield key, self._take(key)

    def _take(self, key: Hashable) -> bytes:
        packed = self._packs.pop(key)
        self._held -= len(packed)
        if not self._compress:
            return bytes(packed)
        return _RAW + packed if len(packed) < COMPRESS_MIN_BYTES else _ZLIB + zlib.compress(packed, 1)
