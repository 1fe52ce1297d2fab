"""The fast Example scan agrees with the full protobuf parse, and never accepts what it rejects."""

from __future__ import annotations

import math
import random

import pytest

from tests.example.test_codec import _SMALL_HEX, _ld, _varint
from tests.verify.test_checks import _record
from tests.tfrecord_fixtures import image_example
from transforms.errors import ExampleError
from transforms.example.codec import decode_example
from tests.helpers import encode_example
from transforms.example.scan import scan_example
from transforms.verify.checks import check_record
from transforms.verify.ranges import RangeChecker

# The bytes tests/example/test_codec.py's test_decode_rejects_garbage shows the full parse rejecting.
_REJECTED = [
    b"\xff",
    b"\x0a",
    b"\x0a\x05ab",
    b"\x0a\x03\x0a\x01\xff",
    b"garbage!",
    b"\x0b",
    _ld(1, _ld(1, _ld(1, b"\xc3\x28") + _ld(2, b""))),
    bytes.fromhex(_SMALL_HEX)[:-1],
    b"\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
    b"\xff\xff\xff",  # tests/verify/test_checks.py's parse_error record
]


def _decoded_or_none(data: bytes):
    try:
        return decode_example(data)
    except ExampleError:
        return None


@pytest.mark.parametrize("data", _REJECTED)
def test_bytes_the_full_parse_rejects_are_left_to_it(data: bytes) -> None:
    with pytest.raises(ExampleError):
        decode_example(data)
    assert scan_example(data) is None


@pytest.mark.parametrize("data", _REJECTED)
def test_range_checker_reports_the_same_parse_error(data: bytes) -> None:
    checker = RangeChecker("f", "train", True)
    checker.add(8, data)
    check, _ = check_record("f", 8, data, True)
    assert checker.result().problems == list(check.problems)
    assert [p.kind for p in check.problems] == ["parse_error"]


_GOOD = [
    b"",
    bytes.fromhex(_SMALL_HEX),
    encode_example({"f": [0.5, -2.25, math.inf], "i": [0, 1, -1, 2**63 - 1, -2**63, 300],
                    "b": [b"", b"x" * 300], "s": "naïve"}),
    encode_example({"e": [], "n": [], "g": []}, {"e": "bytes", "n": "int64", "g": "float"}),
    _ld(1, _ld(1, _ld(1, b"none") + _ld(2, b""))),  # a Feature with no list set
    _ld(1, _ld(1, _ld(1, b"u") + _ld(2, _ld(3, b"\x08\x05\x08\x07")))),  # unpacked int64
    _ld(1, _ld(1, _ld(1, b"u") + _ld(2, _ld(2, b"\x0d\x00\x00\x80\x3f")))),  # unpacked float
    _record(),
    image_example(3, "tulip", b"\xff\xd8" + bytes(5000), "jpeg", 10, 20),
]


@pytest.mark.parametrize("data", _GOOD)
def test_scan_reads_what_the_full_parse_reads(data: bytes) -> None:
    assert scan_example(data) == decode_example(data)


# Layouts protobuf accepts and merges, which the scan leaves to it.
_MERGED = [
    _ld(1, _ld(1, _ld(1, b"a") + _ld(2, b""))) * 2,  # two features fields
    _ld(1, _ld(1, _ld(1, b"a") + _ld(2, b"")) * 2),  # one name twice
    _ld(1, _ld(1, _ld(2, b"") + _ld(1, b"a"))),  # value before key
    _ld(1, _ld(1, _ld(1, b"a") + _ld(2, _ld(1, b"") + _ld(3, b"")))),  # two lists, the last wins
    _ld(1, _ld(1, _ld(1, b"a") + _ld(2, b""))) + _varint(2 << 3) + b"\x01",  # unknown field
    _ld(1, _ld(1, _ld(1, b"u") + _ld(2, _ld(2, b"\x15\x00\x00\x80\x3f")))),  # unknown list field
]


@pytest.mark.parametrize("data", _MERGED)
def test_unusual_layouts_are_left_to_the_full_parse(data: bytes) -> None:
    assert decode_example(data) is not None
    assert scan_example(data) is None


def _mutations(data: bytes, rng: random.Random):
    for cut in range(len(data)):
        yield data[:cut]
    for pos in range(len(data)):
        for value in (0x00, 0x7F, 0x80, 0xFF, data[pos] ^ 0x01, rng.randrange(256)):
            yield data[:pos] + bytes([value]) + data[pos + 1:]
        yield data[:pos] + data[pos + 1:]
        yield data[:pos] + b"\x80" + data[pos:]


@pytest.mark.parametrize("data", [bytes.fromhex(_SMALL_HEX), _GOOD[2], _GOOD[3],
                                  image_example(1, "rose", b"IMG", "png", 5, 6)])
def test_no_damaged_example_is_accepted_unless_the_full_parse_accepts_it(data: bytes) -> None:
    rng = random.Random(len(data))
    scanned = 0
    for mutant in _mutations(data, rng):
        fast = scan_example(mutant)
        if fast is not None:
            scanned += 1
            full = _decoded_or_none(mutant)
            assert full is not None, mutant.hex()
            assert repr(sorted(fast.items())) == repr(sorted(full.items())), mutant.hex()  # NaN != NaN
    assert scanned > 0


def test_views_are_slices_of_the_record_with_the_same_bytes() -> None:
    data = image_example(3, "tulip", b"\xff\xd8" + bytes(5000), "jpeg", 10, 20)
    viewed = scan_example(data, views=("image/encoded",))
    kind, (image,) = viewed["image/encoded"]
    assert kind == "bytes" and isinstance(image, memoryview) and image.obj is data
    assert bytes(image) == decode_example(data)["image/encoded"][1][0]
    assert isinstance(viewed["image/format"][1][0], bytes)
