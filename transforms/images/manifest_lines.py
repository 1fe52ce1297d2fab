"""Reading an input manifest's lines by byte range, with their 1-based line numbers (pure).

The range ``[start, end)`` owns the lines whose first byte lies in it. A JSON Lines manifest breaks
lines at ``"\\n"`` only; a CSV manifest at ``"\\r\\n"``, ``"\\n"`` or a lone ``"\\r"``, as Python's csv
module does, so ``MANIFEST:LINE`` is what an editor shows.
"""

from __future__ import annotations

import itertools
import re
from typing import BinaryIO, Iterator, Sequence

from transforms.errors import ManifestError

__all__ = ["MANIFEST_RANGE_BYTES", "MAX_LINE_BYTES", "BOM", "breaks_at_cr", "byte_ranges",
           "count_line_starts", "first_line_numbers", "lines_in_range"]

MIB = 1 << 20
# Bytes per range of an input manifest read in parallel: about a million rows.
MANIFEST_RANGE_BYTES = 64 * MIB
# Longest manifest line read; a longer one is a dead letter and is never held whole.
MAX_LINE_BYTES = 16 * MIB
BOM = b"\xef\xbb\xbf"
_CHUNK = MIB
_CSV_BREAK = re.compile(rb"\r\n|\r|\n")
_JSONL_BREAK = re.compile(rb"\n")


def breaks_at_cr(manifest: str) -> bool:
    """True if a lone ``"\\r"`` ends a line of this manifest (CSV), False if only ``"\\n"`` does (JSON Lines)."""
    return not manifest.lower().endswith(".jsonl")


def byte_ranges(size: int, range_bytes: int) -> list[tuple[int, int]]:
    """Splits ``[0, size)`` into ranges of ``range_bytes`` (the last one shorter); none for an empty file."""
    if range_bytes < 1:
        raise ValueError(f"range_bytes must be >= 1, got {range_bytes}")
    return [(start, min(start + range_bytes, size)) for start in range(0, size, range_bytes)]


def count_line_starts(fh: BinaryIO, start: int, end: int, size: int, cr: bool, name: str = "") -> int:
    """How many lines start in ``[start, end)`` of the seekable file ``fh`` (named ``name``) of ``size``
    bytes, reading ``[start - 1, end)``; ``cr``: a lone ``"\\r"`` ends a line (``breaks_at_cr``).

    Raises:
        ManifestError: The file ended before ``size`` bytes (it changed while read).
    """
    end = min(end, size)
    if start >= end:
        return 0
    count = 1 if start == 0 else 0
    at = max(start - 1, 0)
    fh.seek(at)
    prev = b""
    while at < end:
        chunk = fh.read(min(_CHUNK, end - at))
        if not chunk:
            raise ManifestError(f"{name}: file ended at byte {at}, before its {size} bytes; "
                                "did it change while the job ran?")
        at += len(chunk)
        buf = prev + chunk
        # Breaks at every position but the last: a break there starts a line past the range,
        # and a "\r" there is judged with the next chunk (which starts with that byte).
        last = len(buf) - 1
        count += buf.count(b"\n", 0, last)
        if cr:
            count += buf.count(b"\r", 0, last) - buf.count(b"\r\n", 0, last + 1)
        prev = buf[-1:]
    return count


def first_line_numbers(counts: Sequence[int]) -> list[int]:
    """The 1-based line number of each range's first line, from the lines starting in each range."""
    return list(itertools.accumulate(counts, initial=1))[:len(counts)]


def lines_in_range(fh: BinaryIO, start: int, end: int, size: int, cr: bool, name: str = "",
                   max_line: int = MAX_LINE_BYTES) -> Iterator[bytes | None]:
    """The lines that start in ``[start, end)``, in order, without their breaks (nor a UTF-8 byte
    order mark); a line longer than ``max_line`` bytes is yielded as None. The other arguments and
    the errors are ``count_line_starts``'s.
    """
    end = min(end, size)
    if start >= end:
        return
    first = start
    if start > 0:  # skip the rest of the line the byte before start lies in
        first = next(_line_spans(fh, start - 1, size, cr, -1, name))[1]
    if first >= end:
        return
    for line_start, next_start, line in _line_spans(fh, first, size, cr, max_line, name):
        if line_start == 0 and line is not None and line.startswith(BOM):
            line = line[len(BOM):]
        yield line
        if next_start >= end:
            return


def _line_spans(fh: BinaryIO, pos: int, size: int, cr: bool, max_line: int,
                name: str) -> Iterator[tuple[int, int, bytes | None]]:
    """``(line start, next line start, line or None)`` for each line from ``pos`` (a line start) on."""
    pattern = _CSV_BREAK if cr else _JSONL_BREAK
    fh.seek(pos)
    buf = bytearray()
    buf_at = pos  # file offset of buf[0]
    i = 0  # the current line's first byte in buf (0 once the line was dropped)
    searched = 0
    start = pos
    dropped = False
    while start < size:
        match = pattern.search(buf, searched)
        more = buf_at + len(buf) < size
        if match is not None and match.end() == len(buf) and buf[-1] == 0x0D and more:
            match = None  # a "\r" last in the buffer may be the first half of "\r\n"
        if match is None:
            if not more:  # the last line, without a break
                yield start, size, None if dropped or len(buf) - i > max_line else bytes(buf[i:])
                return
            if not dropped and len(buf) - i > max_line + 1:  # + 1: a "\r" last may be a break
                dropped = True
            keep = min(1, len(buf)) if dropped else len(buf) - i  # a dropped line keeps its last byte (a "\r"?)
            buf_at += len(buf) - keep
            del buf[:len(buf) - keep]
            i = 0
            searched = max(len(buf) - 1, 0)
            chunk = fh.read(min(_CHUNK, size - buf_at - len(buf)))
            if not chunk:
                raise ManifestError(f"{name}: file ended at byte {buf_at + len(buf)}, before its "
                                    f"{size} bytes; did it change while the job ran?")
            buf += chunk
            continue
        next_start = buf_at + match.end()
        too_long = dropped or match.start() - i > max_line
        yield start, next_start, None if too_long else bytes(buf[i:match.start()])
        start, i, searched, dropped = next_start, match.end(), match.end(), False
