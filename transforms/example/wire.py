"""The one encoder of ``tf.train.Example`` bytes: protobuf wire format written directly.

Every record the tools write is encoded here, as protobuf's deterministic serialization writes it.
``example_parts`` gives an Example with one large bytes value (an image) left out, as the bytes
before and after it, from the value's length alone.

Wire layout (tf.train.Example's protos): an ``Example`` is ``features``
(field 1), a ``Features`` its map entries (field 1, repeated); a map entry is
``key`` (field 1) and ``value`` (field 2, a ``Feature``); a ``Feature`` holds
``bytes_list`` (field 1), ``float_list`` (2) or ``int64_list`` (3), whose
``value`` (field 1) is a bytes field each, packed varints (negative numbers as
64-bit two's complement) or packed little-endian float32.
"""

from __future__ import annotations

import functools
import struct
from typing import Mapping, NamedTuple, Sequence, Union

__all__ = ["FeatureValues", "EntryValue", "varint", "feature_entry", "map_entry", "map_entries", "key_order",
           "example_parts"]

_INT64_MASK = 0xFFFFFFFFFFFFFFFF
_BYTES_LIST, _FLOAT_LIST, _INT64_LIST = 0x0A, 0x12, 0x1A  # Feature's fields, length-delimited
_ONE = 0x0A  # field 1, length-delimited: Example.features, Features.feature, key, a list's value
_VALUE = 0x12  # field 2, length-delimited: a map entry's value


class FeatureValues(NamedTuple):
    """A feature's values with the kind of list that holds them."""

    kind: str
    values: tuple


# A map entry's value: a single bytes, str (stored as UTF-8) or int64 value, or FeatureValues.
EntryValue = Union[bytes, str, int, FeatureValues]


def varint(value: int) -> bytes:
    """Returns a non-negative integer as a protobuf base-128 varint."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field: its tag byte, the varint length, the payload."""
    size = len(payload)
    if size < 0x80:  # the common case, a one-byte length
        return bytes((tag, size)) + payload
    return bytes((tag,)) + varint(size) + payload


@functools.lru_cache(maxsize=256)
def _key_field(name: str) -> bytes:
    """The ``key`` field of a map entry (the same few names in every record)."""
    return _field(_ONE, name.encode("utf-8"))


@functools.lru_cache(maxsize=1024)
def key_order(name: str) -> tuple[int, ...]:
    """Sort key of map entries as protobuf's upb runtime orders them deterministically: bytewise,
    but of two keys where one is a prefix of the other the longer comes first."""
    return (*name.encode("utf-8"), 256)


def feature_entry(name: str, kind: str, values: Sequence) -> bytes:
    """The bytes of one map entry ``name -> Feature`` holding ``values`` in a ``kind`` list
    (``bytes``, ``str`` stored as UTF-8; ``int64``; ``float``). An empty list is written as the
    set, empty message, so TensorFlow sees a feature of the right kind with no values."""
    if kind == "bytes":
        inner = b"".join(_field(_ONE, v.encode("utf-8") if isinstance(v, str) else v) for v in values)
        feature = _field(_BYTES_LIST, inner)
    elif kind == "int64":
        packed = b"".join(varint(v & _INT64_MASK) for v in values)
        feature = _field(_INT64_LIST, _field(_ONE, packed) if values else b"")
    elif kind == "float":
        packed = struct.pack(f"<{len(values)}f", *values)
        feature = _field(_FLOAT_LIST, _field(_ONE, packed) if values else b"")
    else:
        raise ValueError(f"feature {name!r}: unknown kind {kind!r}")
    return _entry(name, feature)


def map_entry(name: str, value: EntryValue) -> bytes:
    """One map entry: ``FeatureValues``, or a single int64 (an ``int``) or bytes value."""
    if isinstance(value, FeatureValues):
        return feature_entry(name, value.kind, value.values)
    kind = type(value)
    if kind is int or ((kind is str or kind is bytes) and len(value) < _REMEMBERED_LEN):
        return _remembered_entry(name, value)
    return _single_entry(name, value)


def _single_entry(name: str, value: int | str | bytes) -> bytes:
    """``map_entry`` of one int64 or bytes value."""
    if isinstance(value, int):  # a varint of at most 10 bytes: one-byte lengths
        packed = varint(value & _INT64_MASK)
        return _entry(name, bytes((_INT64_LIST, len(packed) + 2, _ONE, len(packed))) + packed)
    if isinstance(value, (str, bytes)):
        raw = value.encode("utf-8") if isinstance(value, str) else value
        if len(raw) < 0x7E:  # one-byte lengths throughout
            return _entry(name, bytes((_BYTES_LIST, len(raw) + 2, _ONE, len(raw))) + raw)
    return feature_entry(name, "bytes", (value,))


# Entries of an int or a short str or bytes value are remembered: most entries of a record (its
# format, size, channels, class) are those of records before it, and a remembered one costs a
# fifth of one made (BENCHMARKS.md, "Where a build's marginal CPU goes").
_REMEMBERED_LEN = 0x7E
_remembered_entry = functools.lru_cache(maxsize=4096, typed=True)(_single_entry)


def _entry(name: str, feature: bytes) -> bytes:
    """The map entry ``name -> feature`` (a ``Feature``'s bytes), as ``feature_entry`` ends."""
    return _field(_ONE, _key_field(name) + _field(_VALUE, feature))


def map_entries(features: Mapping[str, EntryValue], names: Sequence[str] | None = None) -> bytes:
    """The ``Features.feature`` map entries of ``features``, sorted as protobuf sorts them (``key_order``);
    with ``names``, the entries of those, in that order."""
    names = _sorted_names(tuple(features)) if names is None else names
    return b"".join([map_entry(name, features[name]) for name in names])


@functools.lru_cache(maxsize=256)
def _sorted_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` in map-entry order (the same few name sets in every record)."""
    return tuple(sorted(names, key=key_order))


@functools.lru_cache(maxsize=256)
def _around(names: tuple[str, ...], name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The entries of ``names`` that sort before ``name``'s, and those after, each in order."""
    order = key_order(name)
    ordered = _sorted_names(names)
    return (tuple(k for k in ordered if key_order(k) < order), tuple(k for k in ordered if key_order(k) > order))


def _bytes_entry_head(name: str, value_len: int) -> bytes:
    """The bytes of the map entry ``name -> [one bytes value]`` before a value of ``value_len`` bytes."""
    value = bytes((_ONE,)) + varint(value_len)  # BytesList.value[0]
    bytes_list = len(value) + value_len
    feature = bytes((_BYTES_LIST,)) + varint(bytes_list)  # Feature.bytes_list
    feature_len = len(feature) + bytes_list
    entry_head = _key_field(name) + bytes((_VALUE,)) + varint(feature_len)  # key, value: the Feature
    entry = bytes((_ONE,)) + varint(len(entry_head) + feature_len)  # one map entry of Features.feature
    return b"".join((entry, entry_head, feature, value))


def example_parts(others: Mapping[str, EntryValue], name: str, value_len: int) -> tuple[bytes, bytes]:
    """``(head, tail)``: ``head + value + tail`` is the serialized Example of ``{**others, name: value}``,
    ``value`` a single bytes value of ``value_len`` bytes."""
    before_names, after_names = _around(tuple(others), name)  # entries sorting before ``name``'s, and after
    before, after = map_entries(others, before_names), map_entries(others, after_names)
    entry = _bytes_entry_head(name, value_len)
    features_len = len(before) + len(entry) + value_len + len(after)
    return b"".join((bytes((_ONE,)), varint(features_len), before, entry)), after
