"""Reading the TFRecord records that start inside a byte range of a file.

A file is split by byte range: the range ``[start, stop)`` owns the records whose first byte lies in it.
TFRecord has no sync markers, so a reader that starts in the middle of a file must find the first record start
at or after ``start``:

- with a ``.idx`` sidecar (see ``record_index``) the starts are known;
- without one, a position is a record start when its 12-byte header has a valid masked CRC and
  fits in the file, the next ``CONFIRM_RECORDS`` headers it chains to are valid too (or the chain
  ends exactly at the end of the file), and its data CRC matches. This rejects a valid-looking
  header inside image bytes, and a short run of records embedded in a record's data.

Whether a position is a record start depends on that position alone, so every reader that scans a byte finds the
same starts. A range scans only its own bytes: one that holds no record start owns no record.

Every range reader also checks the hand-off to the next range (``_check_hand_off``), so a damaged record between
the two is reported by exactly one range, and a file that cannot be split safely without an index fails loudly
instead of yielding a record twice. Each byte is read a small constant number of times whatever the ranges
(``tests/reliability/test_resync.py``).
"""

from __future__ import annotations

import bisect
import math
import struct
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Protocol, Sequence

import numpy as np

from transforms.errors import RecordError
from transforms.tfrecord.framing import (DEFAULT_MAX_RECORD_BYTES, HEADER_SIZE, OVERHEAD, masked_crc32c,
                                         parse_header, read_record)

__all__ = ["CONFIRM_RECORDS", "Claims", "ByteRange", "find_record_start", "read_range", "read_stream"]

# Headers that must chain validly after a candidate record start found by scanning.
CONFIRM_RECORDS = 16
# Bytes of the file examined per step when scanning for a record start: the first
# step, and the most (the step doubles).
_FIRST_WINDOW = 64 << 10
_SCAN_WINDOW = 1 << 20
_LENGTH = struct.Struct("<Q")
_EMPTY_HEADER = _LENGTH.pack(0) + struct.pack("<I", masked_crc32c(_LENGTH.pack(0)))


class Claims(Protocol):
    """What a range reader needs from a range tracker (Beam's ``RangeTracker`` has it)."""

    def start_position(self) -> int: ...

    def stop_position(self) -> int | float: ...

    def try_claim(self, position: int) -> bool: ...


@dataclass
class ByteRange:
    """A fixed byte range ``[start, stop)`` (``stop``: ``math.inf`` for the rest of the file), for reading
    without a Beam range tracker."""

    start: int = 0
    stop: int | float = math.inf

    def start_position(self) -> int:
        return self.start

    def stop_position(self) -> int | float:
        return self.stop

    def try_claim(self, position: int) -> bool:
        return position < self.stop


def _header_candidates(window: bytes, base: int, size: int, limit: int) -> list[int]:
    """Returns the file offsets in ``window[:limit]`` where a valid header that fits starts.

    Vectorized with numpy: a length that fits has zero high bytes, which rules out almost every position of
    image data at once; length 0 has one CRC; the few others' masked CRCs are computed once per distinct length.
    """
    count = min(len(window) - HEADER_SIZE + 1, limit)
    longest = size - base - OVERHEAD  # the longest data any header in the window may declare
    if count <= 0 or longest < 0:
        return []
    arr = np.frombuffer(window, dtype=np.uint8)
    significant = (longest.bit_length() + 7) // 8  # bytes of a length that may be non-zero
    plausible = np.ones(count, dtype=bool)
    for i in range(significant, 8):
        plausible &= arr[i:i + count] == 0
    if not plausible.any():
        return []
    empty = plausible.copy()
    for i in range(significant):
        empty &= arr[i:i + count] == 0
    others = np.flatnonzero(plausible & ~empty)
    for i, byte in enumerate(_EMPTY_HEADER[8:]):
        empty &= arr[8 + i:8 + i + count] == byte
    starts = np.flatnonzero(empty)
    starts = starts[starts <= longest]  # a record of length 0 still needs its 16 bytes
    if others.size:
        lengths = np.ndarray((count,), dtype="<u8", buffer=window, strides=(1,))[others]
        fits = lengths.astype(np.int64) <= longest - others  # what is left after each position
        others, lengths = others[fits], lengths[fits]
    if others.size:
        crcs = np.ndarray((count,), dtype="<u4", buffer=window, offset=8, strides=(1,))[others]
        values, inverse = np.unique(lengths, return_inverse=True)
        expected = np.array([masked_crc32c(_LENGTH.pack(int(v))) for v in values], dtype=np.uint32)
        starts = np.union1d(starts, others[expected[inverse.reshape(-1)] == crcs])
    return (starts + base).tolist()


def _chain_is_clean(fh: BinaryIO, position: int, size: int, steps: int) -> bool:
    """True if ``steps`` valid headers chain from ``position`` (or reach the end exactly)."""
    for _ in range(steps):
        if position == size:
            return True
        if position + HEADER_SIZE > size:
            return False
        fh.seek(position)
        length = parse_header(fh.read(HEADER_SIZE))
        if length is None or position + length + OVERHEAD > size:
            return False
        position += length + OVERHEAD
    return True


def _is_record_start(fh: BinaryIO, position: int, size: int, max_length: int) -> bool:
    """True if ``position`` passes the checks a scan applies to a candidate record start."""
    if not _chain_is_clean(fh, position, size, CONFIRM_RECORDS):
        return False
    fh.seek(position)
    try:  # the record reads with both CRCs correct, and is not over ``max_length``
        read_record(fh, "", position, size - position, max_length)
    except RecordError:  # the candidate is not a record start; scanning goes on
        return False
    return True


def find_record_start(fh: BinaryIO, size: int, position: int,
                      limit: int | float | None = None,
                      max_length: int = DEFAULT_MAX_RECORD_BYTES) -> int:
    """Returns the first record start at or after ``position`` found by scanning (the module
    docstring says what passes), or ``size`` when there is none.

    Args:
        fh: Seekable binary file-like object of the (uncompressed) file, of ``size`` bytes.
        limit: Look only at positions before this one (a range's end); None for the rest of the file.
        max_length: The most data bytes a record may hold; a longer one is not a record start.
    """
    position = max(position, 0)
    last = size if limit is None else min(size, limit)  # candidates lie in [position, last)
    step = _FIRST_WINDOW  # records are often small: look near first, then further at a time
    while position < last and position + HEADER_SIZE <= size:
        end = min(position + step, last)
        fh.seek(position)
        window = fh.read(end - position + HEADER_SIZE - 1)
        for candidate in _header_candidates(window, position, size, end - position):
            if _is_record_start(fh, candidate, size, max_length):
                return candidate
        position = end
        step = min(step * 2, _SCAN_WINDOW)
    return size


def _check_hand_off(fh: BinaryIO, size: int, position: int, stop: int | float,
                    path: str, max_length: int) -> None:
    """Checks that the next range's reader, which starts at the first record start found from
    ``stop``, starts where this range's chain goes on.

    Among the bytes this range's chain covers past ``stop``, no record start may come before the
    chain's next record, and that record must be one (or the end of the file); where it is not, the
    chain is followed record by record until it is. The cost is the bytes of this range's last
    records, never a scan to the next record start.

    Args:
        position: Where this range's chain of records continues (at or after ``stop``, or ``size``).

    Raises:
        RecordError: The first damaged record between ``position`` and the next reader's start, or
            an ambiguous split point.
    """
    if stop >= size:
        return
    scan_from = int(stop)
    while True:
        found = find_record_start(fh, size, scan_from, position, max_length)
        if found < position:  # the next reader would start inside this range's record
            raise RecordError(path, found, "bad_length", f"bytes at {found} inside a record look like a run of "
                              f"valid records, so the file cannot be split at byte {int(stop)} without a .idx "
                              "index; read it unsplit")
        if position >= size or _is_record_start(fh, position, size, max_length):
            return
        fh.seek(position)
        data = read_record(fh, path, position, size - position, max_length)
        scan_from = position + 1
        position += len(data) + OVERHEAD


def _read_indexed(fh: BinaryIO, size: int, claims: Claims, path: str,
                  starts: Sequence[int], max_length: int) -> Iterator[tuple[int, bytes]]:
    first = bisect.bisect_left(starts, claims.start_position())
    here = -1
    for i in range(first, len(starts)):
        position = starts[i]
        if not claims.try_claim(position):
            return
        if here != position:
            fh.seek(position)
        data = read_record(fh, path, position, size - position, max_length)
        end = starts[i + 1] if i + 1 < len(starts) else size
        if len(data) + OVERHEAD != end - position:
            raise RecordError(
                path, position, "bad_length",
                f"record is {len(data) + OVERHEAD} bytes framed but the .idx index says {end - position}")
        here = position + len(data) + OVERHEAD
        yield position, data


def read_range(fh: BinaryIO, size: int, claims: Claims, path: str = "",
               index: Sequence[int] | None = None,
               max_length: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[tuple[int, bytes]]:
    """Yields ``(offset, data)`` for each record of an uncompressed file that the range owns.

    Args:
        fh: Seekable binary file-like object of the whole file, of ``size`` bytes.
        claims: The range; ``try_claim`` is called with each record start before it is read.
        index: Record starts from a usable ``.idx`` (``IndexCheck.starts``), or None to scan.
        max_length: The most data bytes a record may hold; more is ``bad_length``.

    Raises:
        RecordError: A record the range owns is damaged, or (without an index) a damaged record lies
            between this range's chain and the next range's start.
    """
    if index is not None:
        yield from _read_indexed(fh, size, claims, path, index, max_length)
        return
    start = claims.start_position()
    # A range scans only its own bytes: a record start found past its end is not its own.
    position = 0 if start <= 0 else find_record_start(fh, size, start, claims.stop_position(),
                                                      max_length)
    fh.seek(position)
    owns_chain = start <= 0  # a reader that claimed nothing hands off where it started
    while position < size:
        if not claims.try_claim(position):
            break
        owns_chain = True
        data = read_record(fh, path, position, size - position, max_length)
        yield position, data
        position += len(data) + OVERHEAD
    if owns_chain:
        _check_hand_off(fh, size, position, claims.stop_position(), path, max_length)


def read_stream(fh: BinaryIO, path: str = "", claims: Claims | None = None,
                max_length: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[tuple[int, bytes]]:
    """Yields ``(offset, data)`` for every record of a stream read front to back (a compressed file;
    offsets in the decompressed stream).

    Args:
        claims: Optional tracker; each record start is claimed after it is read.
        max_length: The most data bytes a record may declare; more is ``bad_length``, found before
            any of its data is inflated.

    Raises:
        RecordError: A damaged record, a cut compressed stream (``truncated``) or corrupt
            compressed bytes (``crc_mismatch``).
    """
    offset = 0
    while True:
        try:
            data = read_record(fh, path, offset, None, max_length)
        except EOFError as err:
            raise RecordError(path, offset, "truncated",
                              f"compressed stream is cut short: {err}") from err
        except zlib.error as err:
            raise RecordError(path, offset, "crc_mismatch",
                              f"compressed data is corrupt: {err}") from err
        if data is None or (claims is not None and not claims.try_claim(offset)):
            return
        yield offset, data
        offset += len(data) + OVERHEAD
