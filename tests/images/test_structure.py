"""Unit tests of transforms.images.structure (``--validate structure``) on golden corruptions."""

from __future__ import annotations

import io
import os
import re
import struct
import zlib
from typing import Callable

import numpy as np
import pytest
from PIL import Image

from tests import imagegen
from transforms.errors import ImageError
from transforms.images import image_codec as images
from transforms.images.structure import check_jpeg, check_png, check_structure

# --- Building and taking apart files --------------------------------------------------------


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    """(type, data) of every chunk of a PNG, in order."""
    out, pos = [], 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        out.append((png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]))
        pos += 12 + length
    return out


def _png_of(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + b"".join(_chunk(kind, body) for kind, body in chunks)


def _chunk_offset(png: bytes, kind: bytes) -> int:
    return png.index(kind) - 4


def _interlaced_png(width: int = 13, height: int = 9) -> bytes:
    """An 8-bit gray Adam7-interlaced PNG (Pillow reads these but does not write them)."""
    pixels = imagegen.pattern(height, width, 1)
    raw = b""
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                           (1, 0, 2, 2), (0, 1, 1, 2)):
        if x0 >= width or y0 >= height:
            continue
        for y in range(y0, height, dy):
            raw += b"\x00" + pixels[y, x0::dx].tobytes()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 1)
    return _png_of([(b"IHDR", ihdr), (b"IDAT", zlib.compress(raw)), (b"IEND", b"")])


def _saved(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **params)
    return out.getvalue()


def _photo(width: int = 96, height: int = 64) -> Image.Image:
    """Noisy pixels, so that entropy-coded data holds stuffed 0xFF00 bytes."""
    rng = np.random.default_rng(7)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def _segments(jpeg: bytes) -> list[tuple[int, int, int]]:
    """(marker, offset, end) of the marker segments before the first scan's data, and SOS."""
    out, pos = [], 2
    while True:
        marker = jpeg[pos + 1]
        (length,) = struct.unpack(">H", jpeg[pos + 2:pos + 4])
        out.append((marker, pos, pos + 2 + length))
        if marker == 0xDA:
            return out
        pos += 2 + length


def _segment(jpeg: bytes, marker: int) -> tuple[int, int]:
    return next((start, end) for m, start, end in _segments(jpeg) if m == marker)


def _restart_jpeg() -> bytes:
    return _saved(_photo(), "JPEG", quality=90, restart_marker_blocks=2)


def _apng() -> bytes:
    frames = [imagegen.image("RGB", 16, 12, salt=i) for i in range(3)]
    return _saved(frames[0], "PNG", save_all=True, append_images=frames[1:], duration=40)


def _mpo() -> bytes:
    frames = [imagegen.image("RGB", 16, 12, salt=i) for i in range(2)]
    return _saved(frames[0], "MPO", save_all=True, append_images=frames[1:])


# --- Valid files: every kind passes ---------------------------------------------------------

VALID: dict[str, Callable[[], bytes]] = {
    "jpeg_baseline": lambda: imagegen.jpeg("RGB"),
    "jpeg_gray": lambda: imagegen.jpeg("L"),
    "jpeg_cmyk": lambda: imagegen.jpeg("CMYK"),
    "jpeg_exif_app1": lambda: imagegen.jpeg("RGB", exif_orientation=6),
    "jpeg_progressive": lambda: _saved(_photo(), "JPEG", quality=85, progressive=True),
    "jpeg_optimized_444": lambda: _saved(_photo(), "JPEG", optimize=True, subsampling=0),
    "jpeg_restart_markers": _restart_jpeg,
    "jpeg_icc_and_comment": lambda: _saved(_photo(), "JPEG", icc_profile=b"\x00" * 70000,
                                           comment=b"a comment"),
    "jpeg_bytes_after_eoi": lambda: imagegen.jpeg("RGB") + b"trailing bytes \xff\xd8\xff",
    "jpeg_extraneous_header_bytes": lambda: (lambda d, at: d[:at] + b"\x00junk" + d[at:])(
        imagegen.jpeg("RGB"), _segment(imagegen.jpeg("RGB"), 0xDB)[0]),
    "jpeg_fill_bytes_before_marker": lambda: (lambda d, at: d[:at] + b"\xff\xff" + d[at:])(
        imagegen.jpeg("RGB"), _segment(imagegen.jpeg("RGB"), 0xDA)[0]),
    "mpo_two_frames": _mpo,
    "png_rgb": lambda: imagegen.png("RGB"),
    "png_rgba": lambda: imagegen.png("RGBA"),
    "png_gray_alpha": lambda: imagegen.png("LA"),
    "png_palette_transparent": lambda: imagegen.png("P", transparency=True),
    "png_16bit": lambda: imagegen.png_16bit(np.arange(40, dtype=np.uint16).reshape(5, 8) * 1600),
    "png_interlaced": _interlaced_png,
    "png_many_idat": lambda: _png_of([(b"IHDR", _chunks(imagegen.png("RGB"))[0][1])]
                                     + [(b"IDAT", part) for part in (lambda z: (z[:10], z[10:20], z[20:]))(
                                         b"".join(b for k, b in _chunks(imagegen.png("RGB")) if k == b"IDAT"))]
                                     + [(b"IEND", b"")]),
    "png_text_after_idat": lambda: (lambda c: _png_of(c[:-1] + [(b"tEXt", b"k\x00v"), c[-1]]))(
        _chunks(imagegen.png("RGB"))),
    "apng": _apng,
    "png_bytes_after_iend": lambda: imagegen.png("RGB") + b"garbage after IEND",
}


@pytest.mark.parametrize("name", list(VALID))
def test_valid_files_pass(name: str) -> None:
    data = VALID[name]()
    fmt = "png" if data.startswith(b"\x89PNG") else "jpeg"
    check_structure(data, fmt)
    info = images.read_image_info(data, "structure")
    assert info == images.read_image_info(data, "decode")  # what the structure level returns


def test_valid_cases_are_what_they_say() -> None:
    # Guards the table: each case holds the feature it is named for.
    progressive = VALID["jpeg_progressive"]()
    assert progressive.count(b"\xff\xda") > 1 and b"\xff\xc2" in progressive
    restart = _restart_jpeg()
    assert all(bytes((0xFF, 0xD0 + n)) in restart for n in range(8))
    scan_data = restart[_segment(restart, 0xDA)[1]:]
    assert b"\xff\x00" in scan_data  # stuffed bytes
    assert Image.open(io.BytesIO(VALID["jpeg_cmyk"]())).mode == "CMYK"
    assert b"Exif" in VALID["jpeg_exif_app1"]()
    assert Image.open(io.BytesIO(_interlaced_png())).info.get("interlace") == 1
    assert Image.open(io.BytesIO(VALID["png_16bit"]())).mode == "I;16"
    assert Image.open(io.BytesIO(_apng())).n_frames == 3
    assert Image.open(io.BytesIO(_mpo())).n_frames == 2
    assert [k for k, _ in _chunks(VALID["png_many_idat"]())].count(b"IDAT") == 3


# --- Golden corruptions ---------------------------------------------------------------------


def _jpeg_cut_in_scan() -> tuple[bytes, str]:
    data = _saved(_photo(), "JPEG", quality=90)
    _, scan = _segment(data, 0xDA)
    sos = _segment(data, 0xDA)[0]
    cut = (scan + len(data)) // 2
    return data[:cut], (f"JPEG ends at byte {cut} inside the scan data of SOS at offset {sos}, "
                        "without EOI")


def _jpeg_cut_in_segment() -> tuple[bytes, str]:
    data = imagegen.jpeg("RGB")
    start, end = _segment(data, 0xC4)
    return data[:end - 3], f"JPEG ends at byte {end - 3} inside marker DHT at offset {start}, " \
                           f"which declares {end - start - 2} bytes, without EOI"


def _jpeg_without_eoi() -> tuple[bytes, str]:
    data = imagegen.jpeg("RGB")
    assert data.endswith(b"\xff\xd9")
    return data[:-2], "inside the scan data of SOS"


def _jpeg_rst_out_of_order() -> tuple[bytes, str]:
    data = bytearray(_restart_jpeg())
    at = data.index(b"\xff\xd1")
    data[at + 1] = 0xD5
    return bytes(data), f"JPEG restart marker RST5 at offset {at} in the scan of SOS at offset " \
                        f"{_segment(bytes(data), 0xDA)[0]}: expected RST1"


def _jpeg_unknown_marker_in_scan() -> tuple[bytes, str]:
    data = bytearray(_saved(_photo(), "JPEG", quality=90))
    at = _segment(bytes(data), 0xDA)[1] + 40
    data[at:at + 2] = b"\xff\x3a"
    return bytes(data), f"JPEG marker 0xFF3A at offset {at}: not a marker libjpeg reads here"


def _jpeg_bad_length_after_scan() -> tuple[bytes, str]:
    data = imagegen.jpeg("RGB")
    # A comment segment before EOI whose length stops one byte short of its text.
    damaged = data[:-2] + b"\xff\xfe\x00\x04abc" + data[-2:]
    at = len(data) - 2 + 6
    return damaged, f"JPEG byte 0x63 at offset {at} where a marker should start"


def _jpeg_without_sof() -> tuple[bytes, str]:
    data = imagegen.jpeg("RGB")
    start, end = _segment(data, 0xC0)
    damaged = data[:start] + data[end:]
    sos = _segment(damaged, 0xDA)[0]
    return damaged, f"JPEG marker SOS at offset {sos}: no frame header (SOF) before the scan"


def _jpeg_two_frames() -> tuple[bytes, str]:
    data = imagegen.jpeg("RGB")
    start, end = _segment(data, 0xC0)
    return data[:end] + data[start:end] + data[end:], f"JPEG marker SOF0 at offset {end}: a second frame header"


def _jpeg_bad_huffman_counts() -> tuple[bytes, str]:
    data = bytearray(imagegen.jpeg("RGB"))
    start, _ = _segment(bytes(data), 0xC4)
    data[start + 5] += 2  # three 1-bit codes (and the table's length no longer adds up either)
    return bytes(data), f"JPEG marker DHT at offset {start}: table 0x.. has more codes of up to 1 bits"


def _jpeg_bad_sos_component() -> tuple[bytes, str]:
    data = bytearray(imagegen.jpeg("RGB"))
    start, _ = _segment(bytes(data), 0xDA)
    data[start + 5] = 9
    return bytes(data), f"JPEG marker SOS at offset {start}: component 9 is not in the frame"


def _jpeg_bad_sampling() -> tuple[bytes, str]:
    data = bytearray(imagegen.jpeg("RGB"))
    start, _ = _segment(bytes(data), 0xC0)
    data[start + 11] = 0x50
    return bytes(data), f"JPEG marker SOF0 at offset {start}: component 1 has sampling 0x50"


def _png_cut_in_idat() -> tuple[bytes, str]:
    data = imagegen.png("RGB")
    at = _chunk_offset(data, b"IDAT")
    (length,) = struct.unpack(">I", data[at:at + 4])
    cut = at + 8 + length // 2
    return data[:cut], f"PNG ends at byte {cut} inside chunk IDAT at offset {at}, " \
                       f"which declares {length} bytes of data"


def _png_without_iend() -> tuple[bytes, str]:
    data = imagegen.png("RGB")
    return data[:-12], f"PNG ends at byte {len(data) - 12} without IEND (next chunk header at " \
                       f"offset {len(data) - 12})"


def _png_bad_idat_crc() -> tuple[bytes, str]:
    data = bytearray(imagegen.png("RGB"))
    at = _chunk_offset(bytes(data), b"IDAT")
    data[at + 20] ^= 0x10
    return bytes(data), f"PNG chunk IDAT at offset {at}: CRC mismatch (stored 0x"


def _png_bad_ihdr_crc() -> tuple[bytes, str]:
    data = bytearray(imagegen.png("RGB"))
    data[29] ^= 0x01  # the IHDR's CRC itself
    return bytes(data), "PNG chunk IHDR at offset 8: CRC mismatch"


def _png_rebuilt(edit: Callable[[list], list]) -> bytes:
    return _png_of(edit(_chunks(imagegen.png("RGB"))))


PNG_CHUNKS = lambda: _chunks(imagegen.png("RGB"))  # noqa: E731

CORRUPT: dict[str, tuple[Callable[[], tuple[bytes, str]], str]] = {
    "jpeg_cut_in_scan": (_jpeg_cut_in_scan, "truncated"),
    "jpeg_cut_in_segment": (_jpeg_cut_in_segment, "truncated"),
    "jpeg_without_eoi": (_jpeg_without_eoi, "truncated"),
    "jpeg_rst_out_of_order": (_jpeg_rst_out_of_order, "corrupt_image"),
    "jpeg_unknown_marker_in_scan": (_jpeg_unknown_marker_in_scan, "corrupt_image"),
    "jpeg_bad_length_after_scan": (_jpeg_bad_length_after_scan, "corrupt_image"),
    "jpeg_without_sof": (_jpeg_without_sof, "corrupt_image"),
    "jpeg_two_frames": (_jpeg_two_frames, "corrupt_image"),
    "jpeg_bad_huffman_counts": (_jpeg_bad_huffman_counts, "corrupt_image"),
    "jpeg_bad_sos_component": (_jpeg_bad_sos_component, "corrupt_image"),
    "jpeg_bad_sampling": (_jpeg_bad_sampling, "corrupt_image"),
    "png_cut_in_idat": (_png_cut_in_idat, "truncated"),
    "png_without_iend": (_png_without_iend, "truncated"),
    "png_bad_idat_crc": (_png_bad_idat_crc, "corrupt_image"),
    "png_bad_ihdr_crc": (_png_bad_ihdr_crc, "corrupt_image"),
    "png_first_chunk_not_ihdr": (lambda: (_png_rebuilt(lambda c: [(b"tEXt", b"k\x00v")] + c),
                                          "PNG chunk tEXt at offset 8: the first chunk must be IHDR"),
                                 "corrupt_image"),
    "png_no_idat": (lambda: (_png_rebuilt(lambda c: [x for x in c if x[0] != b"IDAT"]),
                             "PNG chunk IEND at offset 33: no IDAT chunk before it"), "corrupt_image"),
    "png_idat_not_consecutive": (
        lambda: (_png_rebuilt(lambda c: c[:-1] + [(b"tEXt", b"k\x00v"), (b"IDAT", b"x"), c[-1]]),
                 "IDAT chunks are not consecutive"), "corrupt_image"),
    "png_unknown_critical_chunk": (
        lambda: (_png_rebuilt(lambda c: c[:1] + [(b"ABCD", b"")] + c[1:]),
                 "PNG chunk ABCD at offset 33: unknown critical chunk"), "corrupt_image"),
    "png_chunk_type_not_letters": (
        lambda: (_png_rebuilt(lambda c: c[:1] + [(b"ab1d", b"")] + c[1:]),
                 "PNG chunk at offset 33: type b'ab1d' is not four ASCII letters"), "corrupt_image"),
    "png_palette_without_plte": (
        lambda: (_png_of([x for x in _chunks(imagegen.png("P")) if x[0] != b"PLTE"]),
                 "palette image without PLTE before it"), "corrupt_image"),
    "png_bad_depth": (
        lambda: (_png_rebuilt(lambda c: [(b"IHDR", c[0][1][:8] + b"\x03" + c[0][1][9:])] + c[1:]),
                 "PNG chunk IHDR at offset 8: bit depth 3 with colour type 2"), "corrupt_image"),
}


@pytest.mark.parametrize("name", list(CORRUPT))
def test_golden_corruptions(name: str) -> None:
    make, reason = CORRUPT[name]
    data, message = make()
    check = check_png if data.startswith(b"\x89PNG") else check_jpeg
    with pytest.raises(ImageError) as info:
        check(data)
    assert info.value.reason == reason
    pattern = re.escape(message).replace(r"0x\.\.", "0x..")
    assert re.search(pattern, info.value.detail), info.value.detail
    # The structure level of read_image_info runs the same check once Pillow has read the header.
    try:
        images.read_image_info(data, "header")
    except ImageError:
        return  # Pillow's header parse refuses this one first
    with pytest.raises(ImageError) as via_level:
        images.read_image_info(data, "structure")
    assert via_level.value.detail == info.value.detail


def test_a_damaged_png_pillow_decodes_is_refused() -> None:
    """Pillow does not check IDAT CRCs: a flipped byte in the last IDAT's CRC passes decode."""
    data = bytearray(imagegen.png("RGB"))
    iend = _chunk_offset(bytes(data), b"IEND")
    data[iend - 1] ^= 0xFF
    assert images.read_image_info(bytes(data), "decode") == images.read_image_info(imagegen.png("RGB"))
    with pytest.raises(ImageError, match=r"corrupt_image: PNG chunk IDAT at offset \d+: CRC mismatch"):
        images.read_image_info(bytes(data), "structure")


# --- PNG image data: inflated and walked, as libpng reads it ------------------------------------

# Damaged image data inside whole chunks with valid CRCs -> what the check says.
PNG_STREAM_DAMAGE = {
    "bad_deflate_data": "PNG chunk IDAT at offset 33: the image data does not inflate (Error -3 "
                        "while decompressing data: invalid block type)",
    "zlib_stream_cut": "PNG image data in the IDAT chunks from offset 33 to ",
    "zlib_stream_without_end": "is cut short: its zlib stream does not end (126 bytes inflated, "
                               "after all 126 bytes its rows need)",
    "bad_adler32": "the image data does not inflate (Error -3 while decompressing data: incorrect "
                   "data check)",
    "filter_type_7": "PNG chunk IDAT at offset 33: row 3 has filter type 7 (0-4 are defined)",
    "short_rows": "PNG chunk IDAT at offset 33: the image data ends inside row 7 of 9, 98 of the "
                  "126 bytes its rows need",
    "short_by_one_byte": "the image data ends inside row 8 of 9, 125 of the 126 bytes its rows need",
    "interlaced_short": "the image data ends inside row 3 of 4 of pass 7, 122 of the 136 bytes",
    "one_bit_short": "the image data ends inside row 8 of 9, 24 of the 27 bytes its rows need",
    "big_filter_type_7_at_row_800": "PNG chunk IDAT at offset 33: row 800 has filter type 7",
}


@pytest.mark.parametrize("name", sorted(imagegen.png_streams()))
def test_png_image_data_is_checked_as_libpng_reads_it(name: str) -> None:
    data, decodes = imagegen.png_streams()[name]
    if decodes:
        check_png(data)
        assert images.read_image_info(data, "structure") == images.read_image_info(data, "full")
        return
    with pytest.raises(ImageError) as info:
        check_png(data)
    assert info.value.reason == "corrupt_image"
    assert PNG_STREAM_DAMAGE[name] in info.value.detail, info.value.detail
    # Every level that reads past the header refuses it, Pillow's decode or not.
    for level in ("structure", "decode", "full"):
        with pytest.raises(ImageError, match="corrupt_image: PNG") as via_level:
            images.read_image_info(data, level)
        assert via_level.value.detail == info.value.detail


def test_png_stream_cases_are_what_they_say() -> None:
    # Guards the table: the damage is inside the image data, every chunk whole with its CRC.
    streams = imagegen.png_streams()
    assert set(PNG_STREAM_DAMAGE) == {name for name, (_, decodes) in streams.items() if not decodes}
    for name, (data, _) in streams.items():
        chunks = _chunks(data)
        assert [kind for kind, _ in chunks if kind != b"IDAT"] == [b"IHDR", b"IEND"], name
        assert data == _png_of(chunks), name  # every CRC as zlib computes it
    assert Image.open(io.BytesIO(streams["interlaced"][0])).info.get("interlace") == 1
    # Pillow decodes these without an error: only the stream check sees them.
    for name in ("short_rows", "zlib_stream_without_end", "interlaced_short", "one_bit_short"):
        Image.open(io.BytesIO(streams[name][0])).load()
    assert len(zlib.decompress(_chunks(streams["big_one_idat"][0])[1][1])) > 4 * 256 * 1024


def test_png_check_without_crcs_still_checks_the_image_data() -> None:
    data = bytearray(imagegen.png("RGB"))
    data[data.index(b"IEND") - 5] ^= 0xFF  # the last IDAT's CRC
    check_png(bytes(data), crcs=False)
    with pytest.raises(ImageError, match="CRC mismatch"):
        check_png(bytes(data))
    with pytest.raises(ImageError, match="filter type 7"):
        check_png(imagegen.png_streams()["filter_type_7"][0], crcs=False)


def test_png_image_data_check_holds_little_memory_whatever_the_image_declares() -> None:
    """64 MiB of inflated rows for a 65536x65536 image: inflated piece by piece, never kept."""
    import tracemalloc

    packer = zlib.compressobj(9)
    row = b"\x00" + bytes(65536)
    packed = b"".join(packer.compress(row * 16) for _ in range(64)) + packer.flush()
    data = imagegen.png_stream(65536, 65536, idats=[packed])
    tracemalloc.start()
    try:
        with pytest.raises(ImageError, match=r"ends inside row 1024 of 65536, 67109888 of the"):
            check_png(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024, peak


def test_jpeg_truncated_at_every_length_inside_the_scans() -> None:
    data = VALID["jpeg_progressive"]()
    first_scan = _segment(data, 0xDA)[1]
    for cut in range(first_scan, len(data) - 1):
        with pytest.raises(ImageError) as info:
            check_jpeg(data[:cut])
        assert info.value.reason == "truncated", (cut, info.value)
        assert f"JPEG ends at byte {cut}" in info.value.detail


# --- The fast marker search against the plain loop it replaced -------------------------------


def _reference_scan_end(data: bytes, pos: int, sos: int) -> int:
    """The scan-end search as first written: one Python step per 0xFF byte."""
    size = len(data)
    expected = 0
    while True:
        ff = data.find(b"\xff", pos)
        if ff < 0 or ff + 1 >= size:
            raise ImageError("truncated", f"JPEG ends at byte {size} inside the scan data of SOS at "
                             f"offset {sos}, without EOI")
        following = data[ff + 1]
        if following == 0x00:
            pos = ff + 2
        elif following == 0xFF:
            pos = ff + 1
        elif 0xD0 <= following <= 0xD7:
            if following - 0xD0 != expected:
                raise ImageError("corrupt_image", f"JPEG restart marker RST{following - 0xD0} at offset "
                                 f"{ff} in the scan of SOS at offset {sos}: expected RST{expected}")
            expected = (expected + 1) & 7
            pos = ff + 2
        else:
            return ff


def _reference_check_dht(body: bytes, at: int) -> None:
    """The Huffman table check as first written: the code-space loop over every table."""
    pos = 0
    while pos < len(body):
        if pos + 17 > len(body):
            raise ImageError("corrupt_image", f"JPEG marker DHT at offset {at}: table at byte {pos} of "
                             "the segment is cut short")
        if body[pos] & 0x0F > 3 or body[pos] >> 4 > 1:
            raise ImageError("corrupt_image", f"JPEG marker DHT at offset {at}: table class/id "
                             f"0x{body[pos]:02X}")
        counts = body[pos + 1:pos + 17]
        count = sum(counts)
        if count > 256:
            raise ImageError("corrupt_image", f"JPEG marker DHT at offset {at}: a table of {count} "
                             "codes (at most 256)")
        code = 0
        for bits, n in enumerate(counts, 1):
            code += n
            if n and code >= 1 << bits:
                raise ImageError("corrupt_image", f"JPEG marker DHT at offset {at}: table "
                                 f"0x{body[pos]:02X} has more codes of up to {bits} bits than fit")
            code <<= 1
        if body[pos] >> 4 == 0 and pos + 17 + count <= len(body) and \
                max(body[pos + 17:pos + 17 + count], default=0) > 15:
            raise ImageError("corrupt_image", f"JPEG marker DHT at offset {at}: DC table "
                             f"0x{body[pos]:02X} has a symbol over 15")
        pos += 17 + count
    if pos != len(body):
        raise ImageError("corrupt_image", f"JPEG marker DHT at offset {at}: tables need {pos + 2} "
                         f"bytes, the segment length is {len(body) + 2}")


def _verdict(check: Callable[[bytes], None], data: bytes) -> tuple[str, str] | None:
    try:
        check(data)
    except ImageError as err:
        return err.reason, err.detail
    return None


def _damaged_scans(data: bytes, rng: np.random.Generator, count: int) -> list[bytes]:
    """Random damage aimed at the entropy-coded data and its markers: cuts, flipped bytes,
    inserted or deleted bytes, inserted 0xFF, 0xFF00, fill and restart markers, RSTs swapped."""
    scan = _segment(data, 0xDA)[1]
    restarts = [m.start() for m in re.finditer(rb"\xff[\xd0-\xd7]", data)]
    inserts = [b"\xff", b"\xff\x00", b"\xff\xff", b"\x00", b"\xff\xd9", b"\xff\xc4", b"\xff\xda",
               *(bytes((0xFF, 0xD0 + n)) for n in range(8))]
    out = [data[:scan] + b"\xff\xd9"] + [data[:scan] + x + data[scan:] for x in inserts]  # at its start
    for _ in range(count):
        damaged = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            if len(damaged) <= scan:  # cut before the scan already
                break
            at = int(rng.integers(scan - 8, len(damaged)))
            action = int(rng.integers(0, 6))
            if action == 0:
                del damaged[at:]
            elif action == 1 and at < len(damaged):
                damaged[at] ^= int(rng.integers(1, 256))
            elif action == 2:
                damaged[at:at] = inserts[int(rng.integers(0, len(inserts)))]
            elif action == 3:
                del damaged[at:at + int(rng.integers(1, 4))]
            elif action == 4 and restarts:
                rst = restarts[int(rng.integers(0, len(restarts)))]
                if rst + 1 < len(damaged):
                    damaged[rst:rst + 2] = bytes((0xFF, 0xD0 + int(rng.integers(0, 8))))
            elif action == 5 and restarts:
                rst = restarts[int(rng.integers(0, len(restarts)))]
                del damaged[rst:rst + 2]
        out.append(bytes(damaged))
    return out


@pytest.mark.slow
def test_marker_search_gives_the_plain_loops_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The regex and the numpy search (both forced, whatever the size) against the loop, on
    intact and randomly damaged JPEGs: the same verdict, reason and message, every time."""
    from transforms.images import structure

    bases = {"baseline": _saved(_photo(), "JPEG", quality=90),
             "restart": _restart_jpeg(),
             "restart_rows_progressive": _saved(_photo(160, 96), "JPEG", quality=95, progressive=True,
                                                restart_marker_rows=1),
             "large_restart": _saved(_photo(400, 300), "JPEG", quality=95, restart_marker_blocks=3),
             "mpo": _mpo()}
    assert len(bases["large_restart"]) > structure._NUMPY_FROM
    rng = np.random.default_rng(11)
    cases = [(name, data) for name, base in bases.items()
             for data in [base, base[:-2], base + b"\xff"] + _damaged_scans(base, rng, 150)]
    verdicts = {}
    # numpy in windows of 1 MiB (one window per file here), and of 7 bytes, so that markers,
    # stuffed bytes and fill bytes straddle the windows' edges.
    for search, numpy_from, window in (("regex", 2**62, 1 << 20), ("numpy", 0, 1 << 20),
                                       ("numpy, small windows", 0, 7)):
        monkeypatch.setattr(structure, "_NUMPY_FROM", numpy_from)
        monkeypatch.setattr(structure, "_NUMPY_WINDOW", window)
        verdicts[search] = [_verdict(check_jpeg, data) for _, data in cases]
    monkeypatch.setattr(structure, "_scan_end",
                        lambda data, pos, sos, markers: _reference_scan_end(data, pos, sos))
    monkeypatch.setattr(structure, "_check_dht", _reference_check_dht)
    reference = [_verdict(check_jpeg, data) for _, data in cases]
    for index, (name, _) in enumerate(cases):
        assert verdicts["regex"][index] == reference[index], (name, index)
        assert verdicts["numpy"][index] == reference[index], (name, index)
        assert verdicts["numpy, small windows"][index] == reference[index], (name, index)
    outcomes = [v[1].split(":")[0] if v else "accepted" for v in reference]
    assert outcomes.count("accepted") >= 5  # the intact files, and damage libjpeg tolerates
    assert sum("restart marker RST" in v[1] for v in reference if v) >= 20
    assert sum(v[0] == "truncated" for v in reference if v) >= 50


def test_marker_search_memory_stays_bounded_on_a_scan_of_0xff_bytes() -> None:
    """A 64 MiB scan of fill bytes and restart markers, read to its end: numpy's arrays stay
    within its window."""
    import tracemalloc

    from transforms.images import structure

    head = _saved(_photo(64, 48), "JPEG", quality=90)
    scan = _segment(head, 0xDA)[1]
    blocks = (b"\xff" * 4094 + bytes((0xFF, 0xD0 + n % 8)) for n in range(16 * 1024))  # RST0..7 in order
    data = head[:scan] + b"".join(blocks) + b"\xff\xd9"  # 64 MiB of scan data, then EOI
    tracemalloc.start()
    try:
        verdict = _verdict(check_jpeg, data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert verdict is None  # the whole scan was searched, window after window, to EOI
    assert len(data) - scan > 200 * structure._NUMPY_WINDOW > structure._NUMPY_FROM
    # Per byte of one window: flags (1 + 1 + 1) and, were every byte 0xFF, two offsets (8 + 8).
    assert peak < 20 * structure._NUMPY_WINDOW


def test_huffman_table_check_gives_the_plain_loops_verdicts() -> None:
    """Random code-length counts, around the code-space limit, against the loop."""
    from transforms.images.structure import _check_dht

    rng = np.random.default_rng(5)
    overfull = accepted = 0
    for _ in range(3000):
        counts = [0] * 16
        for _ in range(int(rng.integers(1, 40))):  # codes of random lengths, often just too many
            counts[int(rng.integers(0, 16))] += int(rng.integers(1, 20))
        shape = rng.random()
        if shape < 0.3:  # all the codes one length can hold (all-ones unused), give or take one
            length = int(rng.integers(1, 9))
            counts = [0] * 16
            counts[length - 1] = (1 << length) - 1 + int(rng.integers(-1, 2))
        elif shape < 0.6:  # one code of each length, and one or two of the longest: full at two
            length = int(rng.integers(1, 17))
            counts = [1] * (length - 1) + [int(rng.integers(1, 3))] + [0] * (16 - length)
        counts = [min(max(n, 0), 255) for n in counts]
        header = bytes((int(rng.choice((0x00, 0x01, 0x10, 0x13))), *counts))
        body = header + bytes(rng.integers(0, 20, sum(counts), dtype=np.uint8))
        if rng.random() < 0.2:
            body = body[:int(rng.integers(0, len(body)))]
        expected = _verdict(lambda b: _reference_check_dht(b, 100), body)
        assert _verdict(lambda b: _check_dht(b, 100), body) == expected, counts
        accepted += expected is None
        overfull += expected is not None and "bits than fit" in expected[1]
    assert accepted > 300 and overfull > 600, (accepted, overfull)


def test_png_truncated_at_every_length() -> None:
    data = _interlaced_png()
    for cut in range(8, len(data)):
        with pytest.raises(ImageError) as info:
            check_png(data[:cut])
        assert info.value.reason == "truncated", (cut, info.value)
        assert f"PNG ends at byte {cut}" in info.value.detail


def _outcome(data: bytes, level: str) -> object:
    try:
        return images.read_image_info(data, level)
    except ImageError as err:
        return err.reason, err.detail


@pytest.mark.parametrize("name", ["gif_animated", "bmp", "tiff", "webp"])
def test_other_formats_are_decoded(name: str) -> None:
    data = getattr(imagegen, name)()
    cuts = [len(data) * n // 8 for n in range(1, 8)] + [len(data)]
    outcomes = [_outcome(data[:cut], "structure") for cut in cuts]
    assert outcomes == [_outcome(data[:cut], "decode") for cut in cuts]
    assert isinstance(outcomes[-1], images.ImageInfo)
    assert any(isinstance(outcome, tuple) for outcome in outcomes)  # some cut is refused
    with pytest.raises(ValueError, match=f"no structural check for '{name.split('_')[0]}'"):
        check_structure(data, name.split("_")[0])


# --- No false positives on a real, messy corpus ---------------------------------------------


@pytest.mark.slow
def test_structure_accepts_every_jpeg_and_png_decode_accepts() -> None:
    """Pillow's own test images and scikit-image's data (downloaded once, see messy_corpus)."""
    from tests.messy_corpus import pillow_test_images, skimage_images

    checked = {"jpeg": 0, "png": 0}
    refused = []
    for source in (pillow_test_images(), skimage_images()):
        for folder, _, names in os.walk(source):
            for name in sorted(names):
                with open(os.path.join(folder, name), "rb") as fh:
                    data = fh.read()
                try:
                    info = images.read_image_info(data, "decode")
                except ImageError:
                    continue
                if info.format not in checked:
                    continue
                checked[info.format] += 1
                try:
                    check_structure(data, info.format)
                except ImageError as err:
                    refused.append(f"{name}: {err}")
    assert refused == []
    assert checked["jpeg"] > 50 and checked["png"] > 300, checked


def test_apng_is_also_decoded() -> None:
    """Pillow refuses an APNG whose default image has no fcTL; structure alone would keep it."""
    chunks = dict(_chunks(_apng()))  # its one IHDR and one IDAT
    damaged = _png_of([(b"IHDR", chunks[b"IHDR"]), (b"acTL", struct.pack(">II", 1, 0)),
                       (b"IDAT", chunks[b"IDAT"]), (b"fdAT", struct.pack(">I", 0) + chunks[b"IDAT"]),
                       (b"IEND", b"")])  # as Pillow's Tests/images/apng/chunk_no_fctl.png
    check_png(damaged)  # its chunks are whole
    with pytest.raises(ImageError) as decoded:
        images.read_image_info(damaged, "decode")
    with pytest.raises(ImageError) as structure:
        images.read_image_info(damaged, "structure")
    assert structure.value.detail == decoded.value.detail


# --- The JPEG check against the one it replaced, on a real corpus ----------------------------


def _reference_check_sof(body: bytes, name: str, at: int) -> bytes:
    """The frame header check as it was: a loop over the components."""
    if len(body) < 6:
        raise ImageError("corrupt_image", f"JPEG marker {name} at offset {at}: segment length {len(body) + 2}, "
                         "under 8")
    count, width = body[5], int.from_bytes(body[3:5], "big")
    if count == 0 or width == 0:
        raise ImageError("corrupt_image", f"JPEG marker {name} at offset {at}: {count} components, width {width}")
    if len(body) != 6 + 3 * count:
        raise ImageError("corrupt_image", f"JPEG marker {name} at offset {at}: segment length {len(body) + 2} "
                         f"for {count} components (needs {8 + 3 * count})")
    for index in range(count):
        ident, sampling, table = body[6 + 3 * index:9 + 3 * index]
        if not (1 <= sampling >> 4 <= 4 and 1 <= sampling & 0x0F <= 4) or table > 3:
            raise ImageError("corrupt_image", f"JPEG marker {name} at offset {at}: component {ident} has "
                             f"sampling 0x{sampling:02X} and quantization table {table}")
    return body[6::3]


def _reference_check_jpeg(data: bytes) -> None:
    """``check_jpeg`` as it was before its marker search used numpy flags and its header loop was
    trimmed, with the plain scan-end loop, frame and Huffman checks above (the same verdicts as its regex
    and numpy search, ``test_marker_search_gives_the_plain_loops_verdicts``)."""
    from transforms.images import structure as s

    size = len(data)
    if data[:2] != b"\xff\xd8":
        raise ImageError("corrupt_image", "JPEG does not start with SOI (0xFFD8)")
    pos, components, progressive, scanned = 2, None, False, False
    while True:
        if pos + 2 > size:
            raise ImageError("truncated", f"JPEG ends at byte {size} without EOI")
        if data[pos] != 0xFF or data[pos + 1] == 0x00:
            if scanned:
                raise ImageError("corrupt_image", f"JPEG byte 0x{data[pos]:02X} at offset {pos} where a "
                                 "marker should start")
            pos = s._next_marker(data, pos)
        while data[pos + 1] == 0xFF:
            pos += 1
            if pos + 2 > size:
                raise ImageError("truncated", f"JPEG ends at byte {size} without EOI")
        marker, at = data[pos + 1], pos
        pos += 2
        if marker == 0xD9:
            return
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:
            continue
        name = s._marker_name(marker)
        if marker not in s._SKIPPED and marker not in s._SOF and marker not in (0xC4, 0xCC, 0xDA, 0xDB, 0xDD):
            raise ImageError("corrupt_image", f"JPEG marker {name} at offset {at}: not a marker libjpeg "
                             "reads here")
        if pos + 2 > size:
            raise ImageError("truncated", f"JPEG ends at byte {size} inside marker {name} at offset {at}, "
                             "without EOI")
        length = int.from_bytes(data[pos:pos + 2], "big")
        end = pos + length
        if length < 2:
            raise ImageError("corrupt_image", f"JPEG marker {name} at offset {at}: segment length {length}")
        if end > size:
            raise ImageError("truncated", f"JPEG ends at byte {size} inside marker {name} at offset {at}, "
                             f"which declares {length} bytes, without EOI")
        body = data[pos + 2:end] if marker not in s._SKIPPED else b""
        if marker in s._SOF:
            if components is not None:
                raise ImageError("corrupt_image", f"JPEG marker {name} at offset {at}: a second frame header")
            components = _reference_check_sof(body, name, at)
            progressive = marker in s._PROGRESSIVE
        elif marker == 0xC4:
            _reference_check_dht(body, at)
        elif marker == 0xDB:
            s._check_dqt(body, at)
        elif marker == 0xDD and length != 4:
            raise ImageError("corrupt_image", f"JPEG marker DRI at offset {at}: segment length {length}, not 4")
        elif marker == 0xDA:
            if components is None:
                raise ImageError("corrupt_image", f"JPEG marker SOS at offset {at}: no frame header (SOF) "
                                 "before the scan")
            s._check_sos(body, components, progressive, at)
            end = _reference_scan_end(data, end, at)
            scanned = True
        pos = end


# Pillow test JPEGs to damage: progressive, CMYK, 16-bit tables, MPO, junk and 0xFF00 in headers,
# APP markers after SOF, a file cut short.
_DAMAGED = ("hopper.jpg", "hopper_gray.jpg", "hopper_16bit_qtables.jpg", "pil_sample_cmyk.jpg",
            "flower.jpg", "frame_size.mpo", "icc-after-SOF.jpg", "jpeg_ff00_header.jpg",
            "junk_jpeg_header.jpg", "truncated_jpeg.jpg", "app13.jpg", "rgb.jpg")


def test_jpeg_check_gives_the_replaced_checks_verdicts_on_pillows_images(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file of Pillow's test images, and cuts and flipped bytes of a dozen of its JPEGs:
    the same verdict, reason and message as the check before, with each marker search forced."""
    from tests.messy_corpus import pillow_test_images
    from transforms.images import structure

    root = pillow_test_images()
    cases = []
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            with open(os.path.join(folder, name), "rb") as fh:
                cases.append((name, fh.read()))
    rng = np.random.default_rng(7)
    for name in _DAMAGED:
        with open(os.path.join(root, name), "rb") as fh:
            data = fh.read()
        for cut in sorted(set(rng.integers(2, len(data), 40).tolist())):
            cases.append((f"{name}[:{cut}]", data[:cut]))
        tables = [m.start() for m in re.finditer(rb"\xff\xc4", data)]
        frame = re.search(rb"\xff[\xc0\xc1\xc2]", data).start()
        for _ in range(80):
            damaged = bytearray(data)
            for _ in range(int(rng.integers(1, 4))):
                at = int(rng.integers(0, len(damaged)))
                action = int(rng.integers(0, 6))
                if action == 0:  # a bit flipped
                    damaged[at] ^= 1 << int(rng.integers(0, 8))
                elif action == 1:  # a byte replaced, often by a marker's 0xFF
                    damaged[at] = 0xFF if rng.random() < 0.5 else int(rng.integers(0, 256))
                elif action == 2:  # stuffed, fill and restart bytes inserted
                    damaged[at:at] = (b"\xff", b"\xff\xff", b"\xff\xff\x00", b"\xff\x00", b"\xff\xd0")[
                        int(rng.integers(0, 5))]
                elif action == 3 and tables:  # a Huffman table's count or symbol, around 15-16
                    at = min(tables[int(rng.integers(0, len(tables)))] + int(rng.integers(4, 40)),
                             len(damaged) - 1)
                    damaged[at] = int(rng.integers(0, 20))
                elif action == 4:
                    del damaged[at:at + int(rng.integers(1, 4))]
                elif action == 5:  # a component's sampling factors or quantization table
                    table = int(rng.integers(0, 2))
                    at = min(frame + 11 + 3 * int(rng.integers(0, 3)) + table, len(damaged) - 1)
                    damaged[at] = int(rng.integers(0, 6 if table else 0x50))
            cases.append((f"{name} damaged", bytes(damaged)))
    reference = [_verdict(_reference_check_jpeg, data) for _, data in cases]
    for search, numpy_from in (("default", structure._NUMPY_FROM), ("regex", 2**62), ("numpy", 0)):
        monkeypatch.setattr(structure, "_NUMPY_FROM", numpy_from)
        for (name, data), expected in zip(cases, reference):
            assert _verdict(check_jpeg, data) == expected, (search, name)
    jpegs = [v for (_, data), v in zip(cases, reference) if data[:2] == b"\xff\xd8"]
    assert len(jpegs) > 1000 and jpegs.count(None) >= 60
    assert sum(v is not None and v[0] == "truncated" for v in jpegs) >= 300
    assert sum(v is not None and v[0] == "corrupt_image" for v in jpegs) >= 50
