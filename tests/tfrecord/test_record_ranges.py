"""Unit tests for the pure reading layer: record_ranges, record_index and decompress.

A file is read as consecutive byte ranges at every split point; the records
must be exactly those of a front-to-back read, and a damaged byte anywhere must
produce exactly one error, at the start of the damaged record.
"""

from __future__ import annotations

import gzip
import io
import itertools
import random
import struct
import zlib

import pytest

from transforms.tfrecord import record_ranges
from transforms.tfrecord.compression import compression_of, open_decompressed
from transforms.errors import RecordError
from transforms.tfrecord.framing import frame_record, masked_crc32c
from transforms.tfrecord.record_index import check_index, index_name, index_starts, read_index
from tests.helpers import format_index
from transforms.tfrecord.record_ranges import ByteRange, find_record_start, read_range, read_stream
from tests.helpers import read_in_ranges

# --- Test files -------------------------------------------------------------------


def _header(length: int) -> bytes:
    field = struct.pack("<Q", length)
    return field + struct.pack("<I", masked_crc32c(field))


def _payloads(seed: int = 1, count: int = 10) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(0, 50)) for _ in range(count)]


def _with_lookalikes() -> list[bytes]:
    """Records whose data holds things that look like record starts."""
    records = _payloads(seed=2, count=9)
    # A valid header whose data CRC is wrong.
    records[1] = b"ab" + _header(5) + b"12345" + b"\x00\x00\x00\x00" + b"tail"
    # A complete, valid record stored inside another one.
    records[3] = b"xx" + frame_record(b"hello world") + b"yy"
    # A short TFRecord stream inside a record.
    records[5] = frame_record(b"a") + frame_record(b"bb") + frame_record(b"")
    # A valid header whose length jumps exactly to the next real record start.
    tail = b"pad"
    records[7] = b"q" + _header(len(tail)) + tail
    return records


def _frame_all(records: list[bytes]) -> bytes:
    return b"".join(frame_record(r) for r in records)


def _starts(records: list[bytes]) -> list[int]:
    out, at = [], 0
    for r in records:
        out.append(at)
        at += len(r) + 16
    return out


def _read(data: bytes, cuts: list[int], index=None) -> tuple[list[tuple[int, bytes]], list[RecordError]]:
    records, errors = [], []
    for item in read_in_ranges(io.BytesIO(data), len(data), cuts, "f.tfrecord", index):
        (errors if isinstance(item, RecordError) else records).append(item)
    return records, errors


FILES = {
    "plain": _payloads(),
    "lookalikes": _with_lookalikes(),
    "empty_records": [b"", b"", b"x", b""],
}


# --- record_index -------------------------------------------------------------------


def test_format_and_check_index_round_trip() -> None:
    data = format_index([16, 20, 100])
    assert data == b"0 16\n16 20\n36 100\n"
    assert check_index(data, 136).starts == (0, 16, 36)
    assert check_index(b"", 0).starts == ()
    assert index_name("a/train-00000-of-00001.tfrecord") == "a/index/train-00000-of-00001.tfrecord.idx"
    assert index_name("s.tfrecord") == "index/s.tfrecord.idx"


@pytest.mark.parametrize("data, size, offset, kind, words", [
    (b"0 16\n16 20\n", 40, 36, "size_mismatch", "covers 36 bytes"),       # file longer
    (b"0 16\n16 20\n", 30, 30, "size_mismatch", "covers 36 bytes"),       # file cut short
    (b"0 16\n20 20\n", 40, 16, "bad_length", "starts at 20"),             # gap
    (b"0 16\n16 8\n", 24, 16, "bad_length", "less than the 16 bytes"),    # impossible length
    (b"0 16\nxx yy\n", 32, 16, "parse_error", "not 'offset length'"),     # garbage
    (b"0 16 3\n", 16, 0, "parse_error", "not 'offset length'"),
    (b"5 16\n", 21, 0, "bad_length", "starts at 5"),
])
def test_check_index_rejects(data: bytes, size: int, offset: int, kind: str, words: str) -> None:
    check = check_index(data, size)
    assert not check.usable
    assert (check.offset, check.kind) == (offset, kind)
    assert words in check.problem


def test_read_index_looks_in_index_folder_then_beside_the_shard() -> None:
    files = {"out/index/s.tfrecord.idx": b"new", "out/s.tfrecord.idx": b"old"}
    assert read_index("out/s.tfrecord", files.get) == ("out/index/s.tfrecord.idx", b"new")
    del files["out/index/s.tfrecord.idx"]
    assert read_index("out/s.tfrecord", files.get) == ("out/s.tfrecord.idx", b"old")
    assert read_index("out/t.tfrecord", files.get) is None


def test_index_starts_ignores_an_index_that_does_not_fit(caplog: pytest.LogCaptureFixture) -> None:
    assert index_starts("s.tfrecord", 36, None) is None
    assert index_starts("s.tfrecord", 36, ("i.idx", b"0 16\n16 20\n")) == (0, 16)
    assert not caplog.records
    assert index_starts("s.tfrecord", 40, ("i.idx", b"0 16\n16 20\n")) is None
    assert "Ignoring i.idx: index covers 36 bytes" in caplog.text and "scanning s.tfrecord" in caplog.text


# --- decompress -----------------------------------------------------------------------


@pytest.mark.parametrize("path, given, expected", [
    ("a.tfrecord", "auto", "none"), ("a.tfrecord.gz", "auto", "gzip"),
    ("a.tfrecord.zz", "auto", "zlib"), ("a.tfrecord.deflate", "auto", "zlib"),
    ("a.tfrecord.gz", "none", "none"), ("a.tfrecord", "gzip", "gzip"),
])
def test_compression_of(path: str, given: str, expected: str) -> None:
    assert compression_of(path, given) == expected


def test_compression_of_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="compression must be one of"):
        compression_of("a", "bz2")


_STREAM = _frame_all(_payloads(seed=3, count=40)) * 3


@pytest.mark.parametrize("kind, packed", [
    ("gzip", gzip.compress(_STREAM, mtime=0)),
    ("zlib", zlib.compress(_STREAM)),
    ("gzip", gzip.compress(_STREAM[:1000], mtime=0) + gzip.compress(_STREAM[1000:], mtime=0)),
    ("zlib", zlib.compress(_STREAM[:777]) + zlib.compress(_STREAM[777:])),
])
def test_open_decompressed_reads_whole_and_concatenated_streams(kind: str, packed: bytes) -> None:
    assert open_decompressed(io.BytesIO(packed), kind).read() == _STREAM


@pytest.mark.parametrize("kind", ["gzip", "zlib"])
def test_cut_compressed_stream_always_fails(kind: str) -> None:
    packed = gzip.compress(_STREAM, mtime=0) if kind == "gzip" else zlib.compress(_STREAM)
    for cut in range(1, len(packed)):
        with pytest.raises((EOFError, zlib.error)):
            open_decompressed(io.BytesIO(packed[:cut]), kind).read()


@pytest.mark.parametrize("kind", ["gzip", "zlib"])
def test_flipped_compressed_byte_never_yields_wrong_records(kind: str) -> None:
    records = _payloads(seed=4, count=6)
    expected = list(zip(_starts(records), records))
    plain = _frame_all(records)
    packed = gzip.compress(plain, mtime=0) if kind == "gzip" else zlib.compress(plain)
    unnoticed = []
    for position in range(len(packed)):
        damaged = bytearray(packed)
        damaged[position] ^= 0x10
        try:
            got = list(read_stream(open_decompressed(io.BytesIO(bytes(damaged)), kind), "f.gz"))
        except RecordError as err:
            assert err.path == "f.gz"
            assert err.kind in ("crc_mismatch", "truncated", "bad_length")
            continue
        assert got == expected, position
        unnoticed.append(position)
    # Only bytes no checksum covers: the gzip header's mtime/xfl/os fields, and
    # padding bits after the last deflate block.
    header_fields = set(range(4, 10)) if kind == "gzip" else set()
    assert set(unnoticed) - header_fields <= {len(packed) - (9 if kind == "gzip" else 5)}


def test_read_stream_offsets_are_decompressed_positions() -> None:
    records = _payloads(seed=5, count=5)
    packed = gzip.compress(_frame_all(records), mtime=0)
    got = list(read_stream(open_decompressed(io.BytesIO(packed), "gzip")))
    assert got == list(zip(_starts(records), records))


# --- find_record_start ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FILES))
def test_find_record_start_at_every_position(name: str) -> None:
    records = FILES[name]
    data = _frame_all(records)
    starts = _starts(records)
    fh = io.BytesIO(data)
    for position in range(len(data) + 2):
        expected = next((s for s in starts if s >= position), len(data))
        assert find_record_start(fh, len(data), position) == expected, position


def test_find_record_start_in_large_window_of_zero_bytes() -> None:
    records = [bytes(3_000_000), b"after"]
    data = _frame_all(records)
    assert find_record_start(io.BytesIO(data), len(data), 1) == 3_000_016


def _naive_candidates(window: bytes, base: int, size: int, limit: int) -> list[int]:
    out = []
    for i in range(min(len(window) - 11, limit)):
        length, crc = struct.unpack_from("<QI", window, i)
        if masked_crc32c(window[i:i + 8]) == crc and base + i + length + 16 <= size:
            out.append(base + i)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_header_candidates_are_exactly_the_valid_headers_that_fit(seed: int) -> None:
    """Zero runs, zero-length and other headers, random bytes, and lengths at the edge of fitting."""
    rng = random.Random(seed)
    parts = [bytes(rng.randrange(1, 40)), _header(0), rng.randbytes(30), _header(7),
             bytes(20), _header(0) + bytes(4), rng.randbytes(5), _header(rng.randrange(1, 300)),
             _header(1 << 40), bytes(rng.randrange(12, 30))]
    rng.shuffle(parts)
    window = b"".join(parts)
    for size in (len(window), len(window) + 7, len(window) + 200, len(window) + (1 << 41)):
        for limit in (len(window), len(window) // 2):
            assert (record_ranges._header_candidates(window, 0, size, limit)
                    == _naive_candidates(window, 0, size, limit)), (size, limit)
        assert (record_ranges._header_candidates(window, 100, size + 100, len(window))
                == _naive_candidates(window, 100, size + 100, len(window)))


# --- read_in_ranges: good files ----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "idx"])
def test_every_single_split_point_reads_each_record_once(name: str, indexed: bool) -> None:
    records = FILES[name]
    data = _frame_all(records)
    index = tuple(_starts(records)) if indexed else None
    expected = list(zip(_starts(records), records))
    for cut in range(1, len(data)):
        got, errors = _read(data, [cut], index)
        assert not errors, (cut, errors)
        assert got == expected, cut


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "idx"])
def test_every_pair_of_split_points_reads_each_record_once(indexed: bool) -> None:
    records = FILES["lookalikes"]
    data = _frame_all(records)
    index = tuple(_starts(records)) if indexed else None
    expected = list(zip(_starts(records), records))
    for cuts in itertools.combinations(range(1, len(data), 5), 2):
        got, errors = _read(data, list(cuts), index)
        assert not errors and got == expected, cuts


def test_long_embedded_stream_is_an_error_not_a_duplicate() -> None:
    nested = _frame_all([b"n%d" % i for i in range(record_ranges.CONFIRM_RECORDS + 4)])
    records = [b"first", b"<" + nested + b">", b"last"]
    data = _frame_all(records)
    cut = _starts(records)[1] + 16 + 1 + 5  # inside the nested stream
    got, errors = _read(data, [cut])
    assert len(errors) >= 1
    assert "without a .idx index" in str(errors[0])
    # With the index the same split is exact.
    got, errors = _read(data, [cut], tuple(_starts(records)))
    assert not errors and [r for _, r in got] == records


# --- read_in_ranges: damaged files -------------------------------------------------------


def _owner(starts: list[int], position: int) -> int:
    """Start of the record holding byte ``position``."""
    return max(s for s in starts if s <= position)


@pytest.mark.parametrize("name", ["plain", "lookalikes"])
@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "idx"])
def test_flipped_byte_anywhere_gives_exactly_one_error_at_its_record(name: str, indexed: bool) -> None:
    records = FILES[name]
    data = _frame_all(records)
    starts = _starts(records)
    index = tuple(starts) if indexed else None
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0x04
        for cuts in ([], [len(data) // 3, 2 * len(data) // 3], [position] if position else [1]):
            got, errors = _read(bytes(damaged), cuts, index)
            assert len(errors) == 1, (position, cuts, errors)
            assert errors[0].path == "f.tfrecord"
            assert errors[0].offset == _owner(starts, position), (position, cuts)
            assert errors[0].kind in ("crc_mismatch", "bad_length", "truncated")
            assert all(offset != errors[0].offset for offset, _ in got)


@pytest.mark.parametrize("name", ["plain", "lookalikes"])
def test_cut_file_at_every_length(name: str) -> None:
    records = FILES[name]
    data = _frame_all(records)
    starts = _starts(records)
    for length in range(1, len(data)):
        cut_data = data[:length]
        for cuts in ([], [length // 2] if length > 1 else []):
            got, errors = _read(cut_data, cuts)
            if length in starts:  # a cut between records leaves a shorter, valid file
                assert not errors and len(got) == starts.index(length)
                continue
            assert len(errors) == 1, (length, cuts)
            assert errors[0].offset == _owner(starts, length - 1)
            assert errors[0].kind in ("truncated", "bad_length")


def test_index_that_disagrees_with_a_record_is_an_error() -> None:
    records = _payloads(seed=6, count=4)
    data = _frame_all(records)
    starts = _starts(records)
    # Same total, but the boundary between records 1 and 2 is moved by 4 bytes.
    wrong = (starts[0], starts[1], starts[2] + 4, starts[3])
    got, errors = _read(data, [], wrong)
    assert [e.offset for e in errors] == [starts[1]]
    assert "index says" in errors[0].detail


def test_huge_length_is_rejected_as_bad_length() -> None:
    data = _header(2**40) + b"x" * 100
    with pytest.raises(RecordError) as caught:
        list(read_range(io.BytesIO(data), len(data), ByteRange(), "big"))
    assert (caught.value.kind, caught.value.offset) == ("bad_length", 0)


# --- The record-size limit (A5) ------------------------------------------------------------


def _gzip_of_zeros_after(head: bytes, zeros: int) -> bytes:
    """gzip of ``head`` then ``zeros`` zero bytes, compressed piece by piece (a small file)."""
    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    pieces = [packer.compress(head)]
    block = bytes(1 << 20)
    for _ in range(zeros >> 20):
        pieces.append(packer.compress(block))
    return b"".join(pieces) + packer.flush()


def test_gzip_stream_claiming_3_gib_is_bad_length_without_inflating_it() -> None:
    import tracemalloc

    packed = _gzip_of_zeros_after(frame_record(b"ok") + _header(3 << 30), 256 << 20)
    assert len(packed) < 2 << 20
    tracemalloc.start()
    try:
        with pytest.raises(RecordError) as caught:
            list(read_stream(open_decompressed(io.BytesIO(packed), "gzip"), "bomb.tfrecord.gz"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (caught.value.path, caught.value.offset, caught.value.kind) == (
        "bomb.tfrecord.gz", 18, "bad_length")
    assert peak < 32 << 20


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "idx"])
def test_a_record_over_max_length_is_one_bad_length_at_its_offset_from_any_split(indexed: bool) -> None:
    records = [b"a" * 10, b"b" * 40, b"c" * 10, b"d" * 5]
    data = _frame_all(records)
    starts = _starts(records)
    index = tuple(starts) if indexed else None
    for cut in range(1, len(data)):
        got, errors = [], []
        for item in read_in_ranges(io.BytesIO(data), len(data), [cut], "f", index, max_length=39):
            (errors if isinstance(item, RecordError) else got).append(item)
        assert [(e.offset, e.kind) for e in errors] == [(starts[1], "bad_length")], cut
        assert "39-byte record-size limit" in errors[0].detail
        assert starts[1] not in [offset for offset, _ in got]
    got, errors = _read(data, [len(data) // 2], index)
    assert not errors and [r for _, r in got] == records
