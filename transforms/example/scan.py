"""A fast reader of the usual layout of ``tf.train.Example`` bytes, without protobuf.

``scan_example`` walks an Example laid out as writers lay it out (one ``features`` field, one map
entry per feature with its key before its value, each Feature holding one list) and returns what
``codec.decode_example`` returns. For any other bytes it returns None and the caller parses them
with ``decode_example``, so every Example is accepted or rejected as the full parse does
(``tests/example/test_scan.py``).
"""

from __future__ import annotations

import functools
import struct
from typing import Collection

__all__ = ["scan_example"]

_U64 = 1 << 64
_I64 = 1 << 63


class _Unusual(Exception):
    """The bytes are outside the layout the scan reads; the full parse decides."""


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Reads a varint of at most 10 bytes that ends before ``end``."""
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Unusual
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >= _U64:
                raise _Unusual
            return value, pos
        shift += 7


def _length(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Reads a length prefix at ``pos``; returns (length, first byte after it)."""
    if pos >= end:
        raise _Unusual
    length = data[pos]
    if length < 0x80:
        pos += 1
    else:
        length, pos = _varint(data, pos, end)
    if pos + length > end:
        raise _Unusual
    return length, pos


@functools.lru_cache(maxsize=None)
def _floats(count: int) -> struct.Struct:
    return struct.Struct(f"<{count}f")


def _values(data: bytes, tag: int, pos: int, end: int, view: memoryview | None) -> tuple[str, list]:
    """The kind and values of a Feature's list at ``data[pos:end]`` (its field ``tag``).

    With ``view`` (a memoryview of ``data``), bytes values are slices of it, not copies.
    """
    values: list = []
    if tag == 0x0A:  # bytes_list: value = 1, length-delimited, one field per value
        source = data if view is None else view
        while pos < end:
            if data[pos] != 0x0A:
                raise _Unusual
            length, pos = _length(data, pos + 1, end)
            values.append(source[pos:pos + length])
            pos += length
        return "bytes", values
    if tag == 0x1A:  # int64_list: value = 1, packed or one varint per value
        while pos < end:
            field = data[pos]
            if field == 0x0A:
                length, pos = _length(data, pos + 1, end)
                stop = pos + length
                while pos < stop:
                    value = data[pos]
                    if value < 0x80:
                        pos += 1
                    else:
                        value, pos = _varint(data, pos, stop)
                    values.append(value - _U64 if value >= _I64 else value)
            elif field == 0x08:
                value, pos = _varint(data, pos + 1, end)
                values.append(value - _U64 if value >= _I64 else value)
            else:
                raise _Unusual
        return "int64", values
    if tag == 0x12:  # float_list: value = 1, packed or one fixed32 per value
        while pos < end:
            field = data[pos]
            if field == 0x0A:
                length, pos = _length(data, pos + 1, end)
                if length % 4:
                    raise _Unusual
                values.extend(_floats(length // 4).unpack_from(data, pos))
                pos += length
            elif field == 0x0D and pos + 5 <= end:
                values.extend(_floats(1).unpack_from(data, pos + 1))
                pos += 5
            else:
                raise _Unusual
        return "float", values
    raise _Unusual


def _scan(data: bytes, views: Collection[str]) -> dict[str, tuple[str, list]]:
    end = len(data)
    out: dict[str, tuple[str, list]] = {}
    if not end:
        return out
    if data[0] != 0x0A:  # Example.features = 1
        raise _Unusual
    length, pos = _length(data, 1, end)
    if pos + length != end:  # one features field and nothing after it
        raise _Unusual
    while pos < end:
        if data[pos] != 0x0A:  # Features.feature = 1, a map entry
            raise _Unusual
        length, pos = _length(data, pos + 1, end)
        entry_end = pos + length
        if pos >= entry_end or data[pos] != 0x0A:  # key = 1
            raise _Unusual
        length, pos = _length(data, pos + 1, entry_end)
        name = data[pos:pos + length].decode("utf-8")  # proto3 strings must be UTF-8
        pos += length
        if pos >= entry_end or data[pos] != 0x12:  # value = 2
            raise _Unusual
        length, pos = _length(data, pos + 1, entry_end)
        if pos + length != entry_end or name in out:
            raise _Unusual
        if not length:
            out[name] = ("none", [])
            continue
        tag = data[pos]  # the Feature's one list: bytes 1, float 2, int64 3
        length, pos = _length(data, pos + 1, entry_end)
        if pos + length != entry_end:
            raise _Unusual
        out[name] = _values(data, tag, pos, entry_end, memoryview(data) if name in views else None)
        pos = entry_end
    return out


def scan_example(data: bytes, views: Collection[str] = ()) -> dict[str, tuple[str, list]] | None:
    """Reads an Example in the usual layout as ``codec.decode_example`` would, or returns None when the
    bytes are not in it (then ``decode_example`` must decide). ``views`` names bytes features whose values
    are returned as ``memoryview`` slices of ``data`` instead of ``bytes`` copies."""
    try:
        return _scan(data, views)
    except (_Unusual, UnicodeDecodeError):
        return None
