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
