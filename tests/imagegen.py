"""Small, deterministic image files for tests, made with Pillow.

Every function returns the bytes of a real file in memory. Pixel content comes
from ``pattern`` (a fixed arithmetic pattern, no random state), so the same call
gives the same bytes for the same Pillow build.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

__all__ = [
    "pattern", "image", "encode", "jpeg", "png", "gif_animated", "bmp", "tiff", "webp",
    "png_declaring", "png_16bit", "EXIF_ORIENTATION",
]

EXIF_ORIENTATION = 0x0112


def pattern(height: int, width: int, channels: int, salt: int = 0) -> np.ndarray:
    """A uint8 array ``(height, width, channels)`` with distinct, structured values.

    Returns a 2-D array when ``channels`` is 1.
    """
    y, x, c = np.meshgrid(np.arange(height), np.arange(width), np.arange(channels), indexing="ij")
    values = ((x * 7 + y * 13 + c * 71 + salt * 29) * 37 + (x * y) % 11) % 256
    arr = values.astype(np.uint8)
    return arr[:, :, 0] if channels == 1 else arr


def image(mode: str, width: int, height: int, salt: int = 0) -> Image.Image:
    """A ``mode`` image (``L``, ``LA``, ``RGB``, ``RGBA`` or ``CMYK``) filled with ``pattern``."""
    channels = len(Image.new(mode, (1, 1)).getbands())
    return Image.frombytes(mode, (width, height), pattern(height, width, channels, salt).tobytes())


def encode(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **params)
    return out.getvalue()


def jpeg(mode: str = "RGB", size: tuple[int, int] = (32, 24), quality: int = 90,
         exif_orientation: int | None = None) -> bytes:
    """A baseline JPEG of ``size`` (width, height) in mode ``RGB``, ``L`` or ``CMYK``."""
    width, height = size
    img = image(mode, width, height)
    params: dict = {"quality": quality}
    if exif_orientation is not None:
        exif = Image.Exif()
        exif[EXIF_ORIENTATION] = exif_orientation
        params["exif"] = exif.tobytes()
    return encode(img, "JPEG", **params)


def png(mode: str = "RGB", size: tuple[int, int] = (32, 24), transparency: bool = False) -> bytes:
    """A PNG in mode ``RGB``, ``RGBA``, ``L``, ``LA`` or ``P`` (optionally with a transparent index)."""
    width, height = size
    if mode == "P":
        indexes = (pattern(height, width, 1) % 16).astype(np.uint8)
        img = Image.frombytes("P", (width, height), indexes.tobytes())
        palette = [v for i in range(16) for v in (i * 16, 255 - i * 16, (i * 53) % 256)]
        img.putpalette(palette)
        return encode(img, "PNG", **({"transparency": 0} if transparency else {}))
    return encode(image(mode, width, height), "PNG")


def png_16bit(values: np.ndarray) -> bytes:
    """A 16-bit grayscale PNG (Pillow mode ``I;16``) holding ``values`` (uint16, 2-D)."""
    img = Image.fromarray(np.asarray(values, dtype=np.uint16))
    assert img.mode == "I;16", img.mode
    return encode(img, "PNG")


def gif_animated(frames: int = 3, size: tuple[int, int] = (16, 12)) -> bytes:
    """An animated GIF with ``frames`` different frames."""
    width, height = size
    images = [image("RGB", width, height, salt=i).convert(
        "P", palette=Image.Palette.ADAPTIVE, colors=32) for i in range(frames)]
    return encode(images[0], "GIF", save_all=True, append_images=images[1:], duration=50, loop=0)


def bmp(size: tuple[int, int] = (20, 10)) -> bytes:
    width, height = size
    return encode(image("RGB", width, height), "BMP")


def tiff(size: tuple[int, int] = (20, 10)) -> bytes:
    width, height = size
    return encode(image("RGB", width, height), "TIFF")


def webp(size: tuple[int, int] = (20, 10), lossless: bool = True) -> bytes:
    width, height = size
    return encode(image("RGB", width, height), "WEBP", lossless=lossless)


def png_declaring(width: int, height: int) -> bytes:
    """A tiny 1x1 grayscale PNG whose IHDR is patched to claim ``width`` x ``height``.

    The IHDR CRC is recomputed, so the header is valid; the pixel data is not.
    """
    data = bytearray(encode(Image.new("L", (1, 1)), "PNG"))
    # 8-byte signature, then the IHDR chunk: length(4) type(4) width(4) height(4) ... crc(4)
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_stream(width: int, height: int, raw: bytes | None = None, depth: int = 8, color: int = 0,
               interlace: int = 0, idats: list[bytes] | None = None) -> bytes:
    """A PNG around given image data, every chunk's CRC valid whatever the data holds.

    ``raw`` is the inflated image data (scanlines with their filter bytes),
    stored zlib-compressed in one IDAT; or ``idats`` gives the IDAT chunks'
    data as they are.
    """
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, interlace)
    if idats is None:
        idats = [zlib.compress(raw)]
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
            + b"".join(_png_chunk(b"IDAT", data) for data in idats) + _png_chunk(b"IEND", b""))


def _adam7_rows(width: int, height: int, bits: int) -> list[bytes]:
    """Scanlines of an Adam7-interlaced image, pass after pass, each with filter type 0."""
    rows = []
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                           (1, 0, 2, 2), (0, 1, 1, 2)):
        columns = (width - x0 + dx - 1) // dx if width > x0 else 0
        for y in range(y0, height, dy):
            if columns:
                rows.append(b"\x00" + bytes((i * 7 + y * 13) % 256 for i in range((columns * bits + 7) // 8)))
    return rows


def png_streams() -> dict[str, tuple[bytes, bool]]:
    """PNGs whose chunks are all whole with valid CRCs, and whether libpng decodes them.

    Name -> (bytes, decodes). The refused ones hold damaged image data: bad
    deflate data, a zlib stream cut short or without its end, a bad filter
    type, fewer rows than IHDR declares. The decoded ones hold what libpng
    accepts: more data than the rows need, bytes after the stream's end.
    (``tests/images/test_tf_rule.py`` holds each to TensorFlow.)
    """
    width, height = 13, 9
    rows = [b"\x00" + pattern(1, width, 1, salt=y).tobytes() for y in range(height)]
    raw = b"".join(rows)
    packed = zlib.compress(raw)
    flushed = zlib.compressobj()
    unended = flushed.compress(raw) + flushed.flush(zlib.Z_SYNC_FLUSH)
    adam7 = _adam7_rows(width, height, 8)
    one_bit = b"".join(b"\x00\xaa\xf8" for _ in range(height))
    big = bytearray(b"".join(b"\x00" + bytes(2000) for _ in range(900)))  # 1.8 MB inflated
    bad_big = bytearray(big)
    bad_big[800 * 2001] = 7
    return {
        "bad_deflate_data": (png_stream(width, height, idats=[packed[:2] + b"\xff\xff\xff" + packed[5:]]),
                             False),
        "zlib_stream_cut": (png_stream(width, height, idats=[packed[:len(packed) // 2]]), False),
        "zlib_stream_without_end": (png_stream(width, height, idats=[unended]), False),
        "bad_adler32": (png_stream(width, height, idats=[packed[:-1] + bytes([packed[-1] ^ 1])]), False),
        "filter_type_7": (png_stream(width, height, b"".join(rows[:3]) + b"\x07" + rows[3][1:]
                                     + b"".join(rows[4:])), False),
        "short_rows": (png_stream(width, height, b"".join(rows[:7])), False),
        "short_by_one_byte": (png_stream(width, height, raw[:-1]), False),
        "interlaced_short": (png_stream(width, height, b"".join(adam7[:-1]), interlace=1), False),
        "one_bit_short": (png_stream(width, height, one_bit[:-3], depth=1), False),
        "big_filter_type_7_at_row_800": (png_stream(2000, 900, bytes(bad_big)), False),
        "rows_then_more_data": (png_stream(width, height, raw + rows[0] + b"\x09"), True),
        "bytes_after_stream_end": (png_stream(width, height, idats=[packed + b"after the end"]), True),
        "idat_after_stream_end": (png_stream(width, height, idats=[packed, b"\xff" * 10]), True),
        "stream_over_three_idats": (png_stream(width, height, idats=[packed[:5], packed[5:20],
                                                                      packed[20:]]), True),
        "stored_blocks": (png_stream(width, height, idats=[zlib.compress(raw, 0)]), True),
        "interlaced": (png_stream(width, height, b"".join(adam7), interlace=1), True),
        "interlaced_1x3": (png_stream(1, 3, b"".join(_adam7_rows(1, 3, 8)), interlace=1), True),
        "one_bit": (png_stream(width, height, one_bit, depth=1), True),
        "big_one_idat": (png_stream(2000, 900, bytes(big)), True),
    }


def gif_with_small_first_frame() -> bytes:
    """A 20x10 logical screen whose first frame covers only 8x10 of it (TensorFlow: 10x8; Pillow: 10x20)."""
    first = Image.new("P", (8, 10), 1)
    first.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    out = io.BytesIO()
    first.save(out, format="GIF")
    data = bytearray(out.getvalue())
    data[6:8] = (20).to_bytes(2, "little")  # logical screen width
    return bytes(data)
