"""Structural checks of JPEG and PNG files: every part in place, without decoding a pixel.

``--validate structure`` runs these after Pillow has parsed the header (``image_codec.read_image_info``).
docs/images.md lists what is checked (as libpng and libjpeg, inside TensorFlow, read the file) and
what cannot be seen. No Python step runs per byte or per row (``_ScanMarkers``, ``_PngStream``);
BENCHMARKS.md, "Validation levels against corruption", has the speed.
"""

from __future__ import annotations

import functools
import re
import threading
import zlib
from dataclasses import dataclass
from operator import mul

import numpy as np

from transforms.errors import ImageError

__all__ = ["JpegFrame", "check_jpeg", "check_png", "check_structure", "STRUCTURE_FORMATS"]

# image/format values with a structural check; every other format is decoded instead.
STRUCTURE_FORMATS = ("jpeg", "png")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CRITICAL = frozenset((b"IHDR", b"PLTE", b"IDAT", b"IEND"))
# Colour type -> allowed bit depths (PNG spec, table 11.1).
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_MAX_CHUNK = 2**31 - 1


def _corrupt(detail: str) -> ImageError:
    return ImageError("corrupt_image", detail)


def _truncated(detail: str) -> ImageError:
    return ImageError("truncated", detail)


def check_png(data: bytes, crcs: bool = True) -> None:
    """Checks a PNG file's chunks and image data (see the module docstring).

    Args:
        crcs: Compare each chunk's CRC (``--validate decode`` leaves them out, as Pillow does).

    Raises:
        ImageError: ``truncated`` when the file ends before IEND or inside a chunk; else
            ``corrupt_image``, naming the chunk, its offset and what was wrong.
    """
    size = len(data)
    if data[:8] != _PNG_SIGNATURE:
        raise _corrupt("PNG signature missing at offset 0")
    view = memoryview(data)
    crc32 = zlib.crc32
    pos = 8
    idat = "none"  # none -> in (consecutive IDATs) -> after
    palette = False
    stream: _PngStream | None = None  # made from IHDR, the first chunk
    while True:
        if pos + 8 > size:
            raise _truncated(f"PNG ends at byte {size} without IEND (next chunk header at offset {pos})")
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        if not (kind.isascii() and kind.isalpha()):
            raise _corrupt(f"PNG chunk at offset {pos}: type {kind!r} is not four ASCII letters")
        name = kind.decode("ascii")
        if length > _MAX_CHUNK:
            raise _corrupt(f"PNG chunk {name} at offset {pos}: length {length} is over 2^31-1")
        end = pos + 12 + length
        if end > size:
            raise _truncated(f"PNG ends at byte {size} inside chunk {name} at offset {pos}, "
                             f"which declares {length} bytes of data")
        if crcs:
            stored = int.from_bytes(data[end - 4:end], "big")
            computed = crc32(view[pos + 4:end - 4])
            if stored != computed:
                raise _corrupt(f"PNG chunk {name} at offset {pos}: CRC mismatch "
                               f"(stored 0x{stored:08x}, computed 0x{computed:08x})")
        if stream is None:
            if kind != b"IHDR":
                raise _corrupt(f"PNG chunk {name} at offset {pos}: the first chunk must be IHDR")
            stream = _check_ihdr(data[pos + 8:end - 4], pos)
        elif kind == b"IHDR":
            raise _corrupt(f"PNG chunk IHDR at offset {pos}: a second IHDR")
        elif kind == b"IDAT":
            if idat == "after":
                raise _corrupt(f"PNG chunk IDAT at offset {pos}: IDAT chunks are not consecutive")
            if stream.color == 3 and not palette:
                raise _corrupt(f"PNG chunk IDAT at offset {pos}: palette image without PLTE before it")
            idat = "in"
            stream.feed(view[pos + 8:end - 4], pos)
        elif kind == b"IEND":
            if idat == "none":
                raise _corrupt(f"PNG chunk IEND at offset {pos}: no IDAT chunk before it")
            if idat == "in":
                stream.finish(pos)
            return
        else:
            if idat == "in":
                stream.finish(pos)
                idat = "after"
            if kind == b"PLTE":
                palette = True
            elif kind[0] < 0x61 and kind not in _PNG_CRITICAL:  # upper case: critical
                raise _corrupt(f"PNG chunk {name} at offset {pos}: unknown critical chunk")
        pos = end


def _check_ihdr(body: bytes, pos: int) -> _PngStream:
    """Checks IHDR's fields; returns the check of the image data they declare."""
    if len(body) != 13:
        raise _corrupt(f"PNG chunk IHDR at offset {pos}: length {len(body)}, not 13")
    width = int.from_bytes(body[0:4], "big")
    height = int.from_bytes(body[4:8], "big")
    depth, color, compression, filtering, interlace = body[8:13]
    if not (0 < width <= _MAX_CHUNK and 0 < height <= _MAX_CHUNK):
        raise _corrupt(f"PNG chunk IHDR at offset {pos}: size {width}x{height}")
    if depth not in _PNG_DEPTHS.get(color, ()):
        raise _corrupt(f"PNG chunk IHDR at offset {pos}: bit depth {depth} with colour type {color}")
    if compression != 0 or filtering != 0 or interlace > 1:
        raise _corrupt(f"PNG chunk IHDR at offset {pos}: compression {compression}, filter "
                       f"{filtering}, interlace {interlace} (0, 0 and 0 or 1 are defined)")
    return _PngStream(width, height, depth, color, interlace)


# Samples per pixel of each colour type: gray, -, RGB, palette, gray+alpha, -, RGBA.
_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
# Adam7's passes: (first column, first row, column step, row step).
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
# Bytes of IDAT data given to zlib at once, and most bytes it returns at once: the check holds
# no more than these (and the file) in memory, whatever size the image declares.
_INFLATE_IN = 64 * 1024
_INFLATE_OUT = 256 * 1024
# Every byte but the five filter types 0-4 (None, Sub, Up, Average, Paeth).
_FILTER_TYPES = bytes(range(5))


class _PngStream:
    """Checks a PNG's image data as libpng reads it (docs/images.md lists what), in bounded memory: each
    inflated piece is dropped once its filter bytes are read, one strided slice per pass."""

    def __init__(self, width: int, height: int, depth: int, color: int, interlace: int) -> None:
        self.color = color
        self._interlaced = bool(interlace)
        bits = depth * _PNG_SAMPLES.get(color, 1)
        # (offset in the inflated data, bytes per row with its filter byte, rows) per pass.
        self._passes: list[tuple[int, int, int]] = []
        offset = 0
        for x0, y0, dx, dy in (_ADAM7 if interlace else ((0, 0, 1, 1),)):
            columns = (width - x0 + dx - 1) // dx if width > x0 else 0
            rows = (height - y0 + dy - 1) // dy if height > y0 else 0
            if columns and rows:
                stride = 1 + (columns * bits + 7) // 8
                self._passes.append((offset, stride, rows))
                offset += stride * rows
        self._needed = offset
        self._inflated = 0  # bytes of inflated data so far
        self._zlib = zlib.decompressobj()
        self._first = -1  # offset of the first IDAT chunk

    def feed(self, data: memoryview, pos: int) -> None:
        """Inflates one IDAT chunk's data; ``pos`` is the chunk's offset, for errors."""
        if self._first < 0:
            self._first = pos
        inflater = self._zlib
        if inflater.eof:
            return  # bytes after the stream's end: libpng ignores them
        for start in range(0, len(data), _INFLATE_IN):
            pending: bytes | memoryview = data[start:start + _INFLATE_IN]
            while True:
                try:
                    out = inflater.decompress(pending, _INFLATE_OUT)
                except zlib.error as err:
                    raise _corrupt(f"PNG chunk IDAT at offset {pos}: the image data does not "
                                   f"inflate ({err})") from err
                if out and self._inflated < self._needed:
                    self._check_filters(out, pos)
                self._inflated += len(out)
                if inflater.eof:
                    if self._inflated < self._needed:
                        raise _corrupt(f"PNG chunk IDAT at offset {pos}: the image data ends "
                                       f"{self._where(self._inflated)}")
                    return
                pending = inflater.unconsumed_tail
                if not pending and len(out) < _INFLATE_OUT:  # else zlib may hold more output
                    break

    def finish(self, pos: int) -> None:
        """Checks that the stream ended in the IDAT chunks; ``pos`` is the chunk after them."""
        if not self._zlib.eof:
            raise _corrupt(f"PNG image data in the IDAT chunks from offset {self._first} to {pos} "
                           f"is cut short: its zlib stream does not end ({self._inflated} bytes "
                           f"inflated, {self._where(self._inflated)})")

    def _check_filters(self, out: bytes, pos: int) -> None:
        """Checks the filter bytes of the rows that start in ``out``."""
        low = self._inflated
        high = low + len(out)
        for index, (offset, stride, rows) in enumerate(self._passes):
            end = offset + stride * rows
            if end <= low or offset >= high:
                continue
            first = max(0, -((offset - low) // stride))  # the first row starting at or after low
            last = min(rows, -((offset - high) // stride))  # rows starting before high
            if first >= last:
                continue
            at = offset + first * stride - low
            filters = out[at:at + (last - first - 1) * stride + 1:stride]
            if filters.translate(None, _FILTER_TYPES):
                bad = next(n for n, value in enumerate(filters) if value > 4)
                part = f" of pass {index + 1}" if self._interlaced else ""
                raise _corrupt(f"PNG chunk IDAT at offset {pos}: row {first + bad}{part} has "
                               f"filter type {filters[bad]} (0-4 are defined)")

    def _where(self, inflated: int) -> str:
        """Where ``inflated`` bytes of image data end, as rows of the image (or of its passes)."""
        for index, (offset, stride, rows) in enumerate(self._passes):
            if inflated < offset + stride * rows:
                row = (inflated - offset) // stride
                part = f" of pass {index + 1}" if self._interlaced else ""
                return (f"inside row {row} of {rows}{part}, {inflated} of the {self._needed} "
                        f"bytes its rows need")
        return f"after all {self._needed} bytes its rows need"


# Markers with a length but nothing this check reads: APP0-15, COM, DNL, DHP, EXP, JPG0-13.
_SKIPPED = frozenset((*range(0xE0, 0xF0), 0xFE, 0xDC, 0xDE, 0xDF, *range(0xF0, 0xFE)))
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # DHT, JPG and DAC are not frames
_PROGRESSIVE = frozenset((0xC2, 0xC6, 0xCA, 0xCE))
# Markers with a length that libjpeg reads in a file's headers: the skipped ones, frames, DHT, DAC,
# SOS, DQT and DRI.
_READ = _SKIPPED | _SOF | {0xC4, 0xCC, 0xDA, 0xDB, 0xDD}
_MARKER_NAMES = {0xC4: "DHT", 0xCC: "DAC", 0xD8: "SOI", 0xD9: "EOI", 0xDA: "SOS", 0xDB: "DQT",
                 0xDC: "DNL", 0xDD: "DRI", 0xFE: "COM"}


def _marker_name(marker: int) -> str:
    if marker in _SOF:
        return f"SOF{marker - 0xC0}"
    if 0xE0 <= marker <= 0xEF:
        return f"APP{marker - 0xE0}"
    if 0xD0 <= marker <= 0xD7:
        return f"RST{marker - 0xD0}"
    return _MARKER_NAMES.get(marker, f"0xFF{marker:02X}")


# Every marker's name, made once: looked up for each marker of every file.
_NAMES = tuple(_marker_name(marker) for marker in range(256))


@dataclass(frozen=True)
class JpegFrame:
    """What ``check_jpeg`` read of a JPEG's frame header (SOF): its size and number of components, and
    whether the file is ``plain``: its headers before the first scan are ones Pillow reads to the same
    size and mode and no orientation (``_plain_header``), so that ``image_codec.read_image_info`` need
    not open it with Pillow as well."""

    height: int
    width: int
    components: int
    plain: bool


def check_jpeg(data: bytes, headers_only: bool = False) -> JpegFrame:
    """Checks a JPEG file's markers and scans, up to the first EOI (see the module docstring).

    Args:
        headers_only: Stop at the first scan's header (SOS), checked: what Pillow reads to open it.

    Returns:
        The frame header's size and components (``JpegFrame``).

    Raises:
        ImageError: ``truncated`` when the file ends before EOI; else ``corrupt_image``, naming the
            marker, its offset and what was wrong.
    """
    size = len(data)
    if data[:2] != b"\xff\xd8":
        raise _corrupt("JPEG does not start with SOI (0xFFD8)")
    pos = 2
    components: bytes | None = None  # the frame's component ids, once SOF is read
    frame = b""  # the frame header's body
    progressive = False
    plain = data[2:3] == b"\xff"  # so far: see _plain_header
    # Made at the first scan, for every scan; from there on, every segment must end at a marker.
    markers: _ScanMarkers | None = None
    while True:
        if pos + 2 > size:
            raise _truncated(f"JPEG ends at byte {size} without EOI")
        if data[pos] != 0xFF or data[pos + 1] == 0x00:
            if markers is not None:
                raise _corrupt(f"JPEG byte 0x{data[pos]:02X} at offset {pos} where a marker should start")
            pos = _next_marker(data, pos)  # extraneous header bytes: libjpeg and Pillow skip them
            plain = False
        while data[pos + 1] == 0xFF:  # fill bytes before a marker
            pos += 1
            plain = plain and markers is not None
            if pos + 2 > size:
                raise _truncated(f"JPEG ends at byte {size} without EOI")
        marker = data[pos + 1]
        at = pos
        pos += 2
        if marker == 0xD9:
            return _frame_of(frame, plain and markers is not None)  # Pillow opens no image without a scan
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # TEM, or RST outside a scan: no length
            plain = plain and markers is not None
            continue
        if marker not in _READ:
            raise _corrupt(f"JPEG marker {_NAMES[marker]} at offset {at}: not a marker libjpeg reads here")
        if pos + 2 > size:
            raise _truncated(f"JPEG ends at byte {size} inside marker {_NAMES[marker]} at offset {at}, "
                             "without EOI")
        length = data[pos] << 8 | data[pos + 1]
        end = pos + length
        if length < 2:
            raise _corrupt(f"JPEG marker {_NAMES[marker]} at offset {at}: segment length {length}")
        if end > size:
            raise _truncated(f"JPEG ends at byte {size} inside marker {_NAMES[marker]} at offset {at}, "
                             f"which declares {length} bytes, without EOI")
        if plain and markers is None:
            plain = _plain_header(marker, data[pos + 2:end])
        if marker == 0xC4:
            _check_dht(data[pos + 2:end], at)
        elif marker == 0xDB:
            _check_dqt(data[pos + 2:end], at)
        elif marker in _SOF:
            if components is not None:
                raise _corrupt(f"JPEG marker {_NAMES[marker]} at offset {at}: a second frame header")
            frame = data[pos + 2:end]
            components = _check_sof(frame, _NAMES[marker], at)
            progressive = marker in _PROGRESSIVE
        elif marker == 0xDD and length != 4:
            raise _corrupt(f"JPEG marker DRI at offset {at}: segment length {length}, not 4")
        elif marker == 0xDA:
            if components is None:
                raise _corrupt(f"JPEG marker SOS at offset {at}: no frame header (SOF) before the scan")
            _check_sos(data[pos + 2:end], components, progressive, at)
            if headers_only:
                return _frame_of(frame, plain)
            if markers is None:
                markers = _ScanMarkers(data, end)
            end = _scan_end(data, end, at, markers)
        pos = end


def _frame_of(body: bytes, plain: bool) -> JpegFrame:
    """The ``JpegFrame`` of a checked frame header's ``body`` (b"": none, as after an EOI that ends no image)."""
    return JpegFrame(int.from_bytes(body[1:3], "big"), int.from_bytes(body[3:5], "big"), body[5] if body else 0,
                     plain)


# Markers before the first scan that Pillow reads as libjpeg does (a length, then the segment) and
# that say nothing of orientation: APPn but APP1 (EXIF, XMP), COM, DQT, DHT, DRI, SOS and the frames
# of 8-bit DCT files Pillow opens (SOF0-2); APP0, APP2, APP13 and APP14 segments as ``_plain_header`` says.
_PLAIN_MARKERS = frozenset(range(0xE0, 0xF0)) - {0xE1} | {0xFE, 0xDB, 0xC4, 0xDD, 0xDA, 0xC0, 0xC1, 0xC2}


def _plain_header(marker: int, body: bytes) -> bool:
    """Whether a segment before the first scan keeps a JPEG plain (``JpegFrame.plain``): Pillow reads it
    without failing and the file stays a 1- or 3-component JPEG (mode L or RGB, not MPO) with no EXIF
    orientation."""
    if marker not in _PLAIN_MARKERS:
        return False
    if marker in (0xC0, 0xC1, 0xC2):  # Pillow: 8 bits, 1 (L) or 3 (RGB) components; the height known here
        return len(body) >= 6 and body[0] == 8 and body[5] in (1, 3) and body[1:3] != b"\x00\x00"
    if marker == 0xE0:  # Pillow reads JFIF's version unguarded
        return not body.startswith(b"JFIF") or len(body) >= 14
    if marker == 0xE2:  # an MPO's index; an ICC chunk's count, read unguarded
        return not body.startswith(b"MPF\0") and (not body.startswith(b"ICC_PROFILE\0") or len(body) >= 14)
    if marker == 0xED:  # Photoshop's resources, read with unguarded indexing
        return not body.startswith(b"Photoshop 3.0\0")
    if marker == 0xEE:  # Adobe's version and transform
        return not body.startswith(b"Adobe") or len(body) >= 12
    return True


# A component's sampling factors (1-4 each) and quantization table ids (0-3) that libjpeg accepts.
_SAMPLINGS = bytes(h << 4 | v for h in range(1, 5) for v in range(1, 5))
_TABLES = bytes(range(4))
# A DC table's symbols (bit counts 0-15).
_DC_SYMBOLS = bytes(range(16))


def _check_sof(body: bytes, name: str, at: int) -> bytes:
    """Checks a frame header; returns its component ids."""
    if len(body) < 6:
        raise _corrupt(f"JPEG marker {name} at offset {at}: segment length {len(body) + 2}, under 8")
    count = body[5]
    width = int.from_bytes(body[3:5], "big")
    if count == 0 or width == 0:
        raise _corrupt(f"JPEG marker {name} at offset {at}: {count} components, width {width}")
    if len(body) != 6 + 3 * count:
        raise _corrupt(f"JPEG marker {name} at offset {at}: segment length {len(body) + 2} for "
                       f"{count} components (needs {8 + 3 * count})")
    if body[7::3].translate(None, _SAMPLINGS) or body[8::3].translate(None, _TABLES):  # name the first
        for index in range(count):
            ident, sampling, table = body[6 + 3 * index:9 + 3 * index]
            if not (1 <= sampling >> 4 <= 4 and 1 <= sampling & 0x0F <= 4) or table > 3:
                raise _corrupt(f"JPEG marker {name} at offset {at}: component {ident} has sampling "
                               f"0x{sampling:02X} and quantization table {table}")
    return body[6::3]


def _check_sos(body: bytes, components: bytes, progressive: bool, at: int) -> None:
    """Checks a scan header; a progressive scan's parameters as libjpeg does (``JERR_BAD_PROGRESSION``)."""
    count = body[0] if body else 0
    if not 1 <= count <= 4 or len(body) != 4 + 2 * count:
        raise _corrupt(f"JPEG marker SOS at offset {at}: segment length {len(body) + 2} for "
                       f"{count} components")
    for ident in body[1:1 + 2 * count:2]:
        if ident not in components:
            raise _corrupt(f"JPEG marker SOS at offset {at}: component {ident} is not in the frame")
    if progressive:
        start, end, approx = body[-3:]
        high, low = approx >> 4, approx & 0x0F
        bad = (end != 0) if start == 0 else (start > end or end > 63 or count != 1)
        if bad or (high != 0 and low != high - 1) or low > 13:
            raise _corrupt(f"JPEG marker SOS at offset {at}: progressive scan of coefficients "
                           f"{start}..{end}, bits {high}/{low}")


# The share of the 16-bit code space a Huffman code of 1, 2, ..., 16 bits takes (Kraft's inequality):
# a table's codes fit their lengths, the all-ones code unused, when their shares sum under 2^16.
_CODE_SPACE = tuple(1 << (16 - bits) for bits in range(1, 17))


@functools.lru_cache(maxsize=1024)
def _code_counts(counts: bytes) -> tuple[int, bool]:
    """A DHT table's 16 code-length counts -> (codes, whether they fit): tables repeat from file to file
    (an encoder's defaults), so the sums are made once per kind of table."""
    return sum(counts), sum(map(mul, counts, _CODE_SPACE)) < 1 << 16


def _check_dht(body: bytes, at: int) -> None:
    """Checks Huffman tables as libjpeg builds them (``jpeg_make_d_derived_tbl``)."""
    pos = 0
    size = len(body)
    while pos < size:
        if pos + 17 > size:
            raise _corrupt(f"JPEG marker DHT at offset {at}: table at byte {pos} of the segment is cut short")
        kind = body[pos]
        if kind & 0x0F > 3 or kind >> 4 > 1:
            raise _corrupt(f"JPEG marker DHT at offset {at}: table class/id 0x{kind:02X}")
        counts = body[pos + 1:pos + 17]
        count, fits = _code_counts(counts)
        if count > 256:
            raise _corrupt(f"JPEG marker DHT at offset {at}: a table of {count} codes (at most 256)")
        if not fits:  # codes overflow their lengths: name the first
            code = 0
            for bits, n in enumerate(counts, 1):  # canonical codes must fit their lengths, all-ones unused
                code += n
                if n and code >= 1 << bits:
                    raise _corrupt(f"JPEG marker DHT at offset {at}: table 0x{kind:02X} has more "
                                   f"codes of up to {bits} bits than fit")
                code <<= 1
        if kind < 0x10 and pos + 17 + count <= size and \
                body[pos + 17:pos + 17 + count].translate(None, _DC_SYMBOLS):  # a symbol over 15
            raise _corrupt(f"JPEG marker DHT at offset {at}: DC table 0x{kind:02X} has a symbol over 15")
        pos += 17 + count
    if pos != size:
        raise _corrupt(f"JPEG marker DHT at offset {at}: tables need {pos + 2} bytes, "
                       f"the segment length is {size + 2}")


def _check_dqt(body: bytes, at: int) -> None:
    pos = 0
    while pos < len(body):
        precision, ident = body[pos] >> 4, body[pos] & 0x0F
        if precision > 1 or ident > 3:
            raise _corrupt(f"JPEG marker DQT at offset {at}: table precision/id 0x{body[pos]:02X}")
        pos += 65 + 64 * precision
    if pos != len(body):
        raise _corrupt(f"JPEG marker DQT at offset {at}: tables need {pos + 2} bytes, "
                       f"the segment length is {len(body) + 2}")


def _next_marker(data: bytes, pos: int) -> int:
    """Offset of the next 0xFF that starts a marker (not 0xFF00) at or after ``pos``."""
    size = len(data)
    while True:
        ff = data.find(b"\xff", pos)
        if ff < 0 or ff + 1 >= size:
            raise _truncated(f"JPEG ends at byte {size} without EOI")
        if data[ff + 1] != 0x00:
            return ff
        pos = ff + 2


# A marker inside entropy-coded data: 0xFF, then neither a stuffed 0x00 nor a fill 0xFF.
_MARKER = re.compile(rb"\xff[^\x00\xff]")
# A run of 0xFF bytes: only its last byte can start a marker.
_FILL = re.compile(rb"\xff+")
# From this many bytes of scan data on, numpy finds the markers faster than the regex.
_NUMPY_FROM = 8 * 1024
# Bytes numpy looks at in one pass: its flags (one byte per byte) stay the window's size whatever
# the file holds, even nothing but 0xFF bytes.
_NUMPY_WINDOW = 256 * 1024
# Each thread's flags, made once: a new array for every file costs more than the search.
_BUFFERS = threading.local()


class _ScanMarkers:
    """Finds the markers (``_MARKER``) in a JPEG's entropy-coded data, from the first scan's data on:
    a regex search per marker, or from ``_NUMPY_FROM`` bytes on, flags set in two numpy passes per
    window (0xFF, then a byte other than 0x00) and searched with ``argmax``."""

    def __init__(self, data: bytes, start: int) -> None:
        self._data = data
        self._numpy = len(data) - start >= _NUMPY_FROM
        self._bytes = np.frombuffer(data, np.uint8) if self._numpy else None
        self._low = self._high = 0  # the window [low, high) that _flags covers
        self._flags: np.ndarray | None = None

    def next(self, pos: int) -> int:
        """Offset of the first marker at or after ``pos``, or -1 if there is none."""
        data = self._data
        if not self._numpy:
            found = _MARKER.search(data, pos)
            return -1 if found is None else found.start()
        last = len(data) - 1  # a marker needs the byte after its 0xFF
        while pos < last:
            if not self._low <= pos < self._high:
                self._load(pos)
            at = pos - self._low
            at += int(self._flags[at:].argmax())
            if not self._flags[at]:  # none in the rest of the window
                pos = self._high
                continue
            ff = self._low + at
            if data[ff + 1] != 0xFF:
                return ff
            end = _FILL.match(data, ff).end()  # fill bytes: the last one may start a marker
            if end > last:
                return -1
            if data[end] != 0x00:
                return end - 1
            pos = end + 1
        return -1

    def _load(self, low: int) -> None:
        """Flags the bytes in ``[low, low + _NUMPY_WINDOW)`` that are 0xFF followed by a byte other
        than 0x00."""
        high = min(low + _NUMPY_WINDOW, len(self._data) - 1)
        flags = getattr(_BUFFERS, "flags", None)
        if flags is None or len(flags) < high - low:
            flags = _BUFFERS.flags = np.empty(max(high - low, _NUMPY_WINDOW), np.bool_)
        flags = flags[:high - low]
        np.equal(self._bytes[low:high], 0xFF, out=flags)
        following = self._bytes[low + 1:high + 1]
        self._flags = np.logical_and(flags.view(np.uint8), following, out=flags)  # and not 0x00
        self._low, self._high = low, high


def _scan_end(data: bytes, pos: int, sos: int, markers: _ScanMarkers) -> int:
    """Offset of the marker that ends the entropy-coded data starting at ``pos``; restart markers
    on the way must count RST0..RST7 in order."""
    expected = 0
    while True:
        ff = markers.next(pos)
        if ff < 0:
            raise _truncated(f"JPEG ends at byte {len(data)} inside the scan data of SOS at offset {sos}, "
                             "without EOI")
        following = data[ff + 1]
        if not 0xD0 <= following <= 0xD7:
            return ff
        if following - 0xD0 != expected:
            raise _corrupt(f"JPEG restart marker RST{following - 0xD0} at offset {ff} in the scan "
                           f"of SOS at offset {sos}: expected RST{expected}")
        expected = (expected + 1) & 7
        pos = ff + 2


def check_structure(data: bytes, image_format: str) -> None:
    """Checks the structure of a file whose header said ``jpeg`` or ``png``; raises ``ImageError``."""
    if image_format not in STRUCTURE_FORMATS:
        raise ValueError(f"no structural check for {image_format!r} (only {STRUCTURE_FORMATS})")
    (check_jpeg if image_format == "jpeg" else check_png)(data)
