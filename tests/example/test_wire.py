"""Records written as pieces: the same bytes as the joined record, byte for byte."""

from __future__ import annotations

import io
import os
import random

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from transforms.tfrecord.framing import frame_parts, frame_record, iter_records
from transforms.example.codec import decode_example
from tests.helpers import encode_example
from transforms.example.wire import example_parts, map_entries, varint
from tests.helpers import example_bytes
from transforms.images.records import image_example_parts
from tests.helpers import image_example
from transforms.images.image_codec import ImageInfo
from transforms.tfrecord.shard_writer import ShardWriter

# Image lengths around every varint length boundary of the nested messages.
_LENGTHS = (0, 1, 100, 109, 110, 111, 127, 128, 16_250, 16_383, 16_384, 2**21 - 130,
            2**21, 150_000)
_INFOS = (ImageInfo("jpeg", 1, 1, 1), ImageInfo("png", 300, 400, 3),
          ImageInfo("raw", 2**31, 70_000, 4))
_LABELS = ((0, "a", "x.jpg"), (1000, "class_é", "a/" + "b" * 300 + ".jpg"), (-1, "", ""))


@pytest.mark.parametrize("length", _LENGTHS)
def test_image_example_parts_join_to_image_example(length):
    image = random.Random(length).randbytes(length)
    for info in _INFOS:
        for label, text, filename in _LABELS:
            head, tail = image_example_parts(len(image), info, label, text, filename, "f" * 64)
            record = image_example(image, info, label, text, filename, "f" * 64)
            assert head + image + tail == record == _protobuf_reencoded(record)


def _protobuf_reencoded(record: bytes) -> bytes:
    """``record`` parsed and serialized again by protobuf's own messages (deterministic)."""
    decoded = decode_example(record)
    return encode_example({name: values for name, (_, values) in decoded.items()},
                          {name: kind for name, (kind, _) in decoded.items()})


@pytest.mark.parametrize("cut", [(), (0,), (5,), (0, 5, 5, 9), (1, 2, 3)])
def test_frame_parts_frames_the_joined_data(cut):
    data = os.urandom(10)
    bounds = (0, *cut, len(data))
    parts = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    header, footer = frame_parts(parts)
    assert header + data + footer == frame_record(data)


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_write_parts_writes_what_write_writes(compression):
    records = [os.urandom(n) for n in (0, 1, 500, 70_000, 3)]
    outputs = []
    for as_parts in (False, True):
        fh, index = io.BytesIO(), io.BytesIO()
        writer = ShardWriter(fh, compression, index if compression == "none" else None)
        for i, record in enumerate(records):
            if as_parts:
                writer.write_parts((record[:2], record[2:7], record[7:]), i % 2)
            else:
                writer.write(record, i % 2)
        stats = writer.close()
        outputs.append((fh.getvalue(), index.getvalue(), stats))
    assert outputs[0] == outputs[1]
    if compression == "none":
        assert [data for _, data in iter_records(io.BytesIO(outputs[1][0]))] == records


_INT64 = st.integers(min_value=-2**63, max_value=2**63 - 1)
_VALUES = st.one_of(st.text(max_size=300), st.binary(max_size=300), _INT64)


@given(st.dictionaries(st.text(min_size=1, max_size=40), _VALUES, max_size=8))
def test_map_entries_match_protobuf_serialization(features):
    """The hand-written map entries are the bytes protobuf writes inside the Example.

    Keys that are prefixes of each other are left out: protobuf's upb runtime
    writes ``ab`` before ``a``, its C++ and Python runtimes ``a`` before ``ab``.
    The image schema's keys are not prefixes of each other.
    """
    names = [name.encode("utf-8") for name in features]
    assume(not any(a != b and b.startswith(a) for a in names for b in names))
    example = encode_example(features)
    entries = map_entries(features)
    # An Example is one field: tag 0x0A, the varint length of Features, then the entries.
    assert example == (b"\x0a" + varint(len(entries)) + entries if entries else b"") == example_bytes(features)


@given(st.dictionaries(st.text(min_size=1, max_size=40), _VALUES, max_size=6), st.text(min_size=1, max_size=40),
       st.integers(min_value=0, max_value=20_000))
def test_example_parts_frame_a_value_left_out(others, name, length):
    """Head, value and tail join to the whole Example, whose size the parts give without the value."""
    others.pop(name, None)
    value = bytes(length)
    head, tail = example_parts(others, name, length)
    whole = example_bytes({**others, name: value})
    assert head + value + tail == whole
    assert len(head) + length + len(tail) == len(whole)


def test_remembered_map_entries_are_those_made_anew():
    from transforms.example import wire

    values = [1, True, 0, -1, 2**63 - 1, "jpeg", b"jpeg", "é" * 40, b"x" * 125, b"x" * 126, "y" * 300,
              bytearray(b"raw"), b""]
    made = [wire._single_entry("image/k", value) for value in values]
    for _ in range(2):  # the second time from the cache
        assert [wire.map_entry("image/k", value) for value in values] == made
    assert wire.map_entry("image/k", True) == wire.map_entry("image/k", 1)
    kept = wire._remembered_entry.cache_info().currsize
    wire.map_entry("image/k", b"z" * 10_000)
    wire.map_entry("image/k", bytearray(b"unhashable"))
    assert wire._remembered_entry.cache_info().currsize == kept  # long or unhashable values are not kept
    assert b"\x0a" + varint(len(made[5])) + made[5] == example_bytes({"image/k": b"jpeg"})
