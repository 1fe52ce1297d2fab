"""Reliability: finding record starts again after damage costs time linear in the file size.

Without a ``.idx``, each byte range of a file finds its first record by
scanning. Each range used to scan from its start until it found a record,
whatever its end: in a stretch of zeros every range scanned to the end of the
stretch, so a zero-filled 256 MB file took 125 s to verify and 2 GB did not
finish. Here a counting file object proves, without timing, that the bytes read
stay within a small constant of the file size, and that one damaged stretch is
reported once, by one range.
"""

from __future__ import annotations

import io
import random

import pytest

from transforms.errors import RecordError
from tests.helpers import encode_example
from transforms.tfrecord.framing import OVERHEAD, frame_record
from tests.helpers import read_in_ranges

_MIB = 1 << 20
# Bytes read may exceed the file's size by this constant factor, however many ranges:
# a range scans its own bytes, confirms the record start it finds (reading that
# record) and then reads it, and at its end confirms the next range's first record
# to check the hand-off. With ranges smaller than records that is about 4 reads
# per byte; a scan that went past its range's end made it grow with the range count.
_MOST_READ_PER_BYTE = 6


class _CountingFile(io.BytesIO):
    """An in-memory file that counts every byte handed out by ``read``/``readinto``."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        out = super().read(size)
        self.bytes_read += len(out)
        return out

    def readinto(self, buffer) -> int:
        count = super().readinto(buffer)
        self.bytes_read += count
        return count


def _read(data: bytes, ranges: int) -> tuple[_CountingFile, list, list[RecordError]]:
    fh = _CountingFile(data)
    cuts = [len(data) * i // ranges for i in range(1, ranges)]
    records, errors = [], []
    for item in read_in_ranges(fh, len(data), cuts, "f.tfrecord"):
        (errors if isinstance(item, RecordError) else records).append(item)
    return fh, records, errors


@pytest.mark.parametrize("size_mib", [1, 4])
def test_zero_filled_file_is_scanned_once(size_mib: int) -> None:
    """Before: each of the 128 ranges scanned to the end of the file (~64x the file at 4 MiB)."""
    data = bytes(size_mib * _MIB)
    fh, records, errors = _read(data, ranges=128)
    assert records == []
    assert [(e.offset, e.kind) for e in errors] == [(0, "crc_mismatch")]  # reported once, by range 0
    assert fh.bytes_read <= _MOST_READ_PER_BYTE * len(data), fh.bytes_read / len(data)


def _examples(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [encode_example({"id": i, "data": rng.randbytes(rng.randint(500, 4000))})
            for i in range(count)]


@pytest.mark.parametrize("ranges", [7, 128])
def test_damaged_stretch_is_scanned_once_and_reported_once(ranges: int) -> None:
    """Half of a 4 MiB file overwritten with zeros; records before and after it are all read."""
    records = _examples(1800, seed=ranges)
    framed = [frame_record(r) for r in records]
    starts, at = [], 0
    for f in framed:
        starts.append(at)
        at += len(f)
    data = bytearray(b"".join(framed))
    first, last = len(data) // 4, len(data) * 3 // 4
    data[first:last] = bytes(last - first)
    damaged = max(i for i, s in enumerate(starts) if s <= first)  # the record the zeros begin in
    after = min(i for i, s in enumerate(starts) if s >= last)  # the first record after them
    fh, got, errors = _read(bytes(data), ranges)
    assert [(e.offset, e.kind) for e in errors] == [(starts[damaged], "crc_mismatch")]
    assert [offset for offset, _ in got] == starts[:damaged] + starts[after:]
    assert [d for _, d in got] == records[:damaged] + records[after:]
    assert fh.bytes_read <= _MOST_READ_PER_BYTE * len(data), fh.bytes_read / len(data)


def test_intact_file_split_finely_reads_each_byte_a_few_times() -> None:
    """Without damage too: 512 ranges over 1.5 MiB of records stay within the bound."""
    framed = b"".join(frame_record(r) for r in _examples(600, seed=3))
    fh, got, errors = _read(framed, ranges=512)
    assert errors == []
    assert sum(len(d) + OVERHEAD for _, d in got) == len(framed)
    assert fh.bytes_read <= _MOST_READ_PER_BYTE * len(framed), fh.bytes_read / len(framed)
