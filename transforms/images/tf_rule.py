"""What ``tf.io.decode_image(data, expand_animations=False)`` yields, predicted from the bytes.

No TensorFlow needed: the build job decides with it which images keep their bytes, the verify job
checks that a stored image decodes to the size its record states; ``tests/images/test_tf_rule.py``
checks it against real TensorFlow 2.21. docs/images.md, "Image modes", says what decodes; beyond it:
PNG channels are gray 1, gray+alpha 2, RGB 3, RGBA 4, palette 3 (4 with a ``tRNS`` chunk); a GIF is
also refused for an LZW code size over 8, or an extension with an empty first sub-block before its
first frame; a BMP decodes only if its file ends where its pixels do, never with an OS/2 header.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from transforms.errors import ImageError

__all__ = ["TfShape", "tf_shape", "tf_format"]


@dataclass(frozen=True)
class TfShape:
    """The tensor ``tf.io.decode_image(..., channels=0, expand_animations=False)`` returns, and the
    format (``jpeg``, ``png``, ``gif``, ``bmp`` or ``webp``) it decoded."""

    format: str
    height: int
    width: int
    channels: int


def tf_format(data: bytes) -> str:
    """The format TensorFlow's ``decode_image`` sniffs from the first bytes, or ``unknown``."""
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:3] == b"GIF":
        return "gif"
    if data[:2] == b"BM":
        return "bmp"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "tiff"
    return "unknown"


def _refuse(fmt: str, why: str) -> ImageError:
    return ImageError("tf_undecodable", f"TensorFlow cannot decode this {fmt} image: {why}")


def tf_shape(data: bytes) -> TfShape:
    """Predicts, from headers alone, what ``tf.io.decode_image`` returns for ``data`` (it must decode
    with both ``channels=0`` and ``channels=3``).

    Raises:
        ImageError: ``tf_undecodable``, naming the format and why.
    """
    fmt = tf_format(data)
    parse = _PARSERS.get(fmt)
    if parse is None:
        raise _refuse(fmt, "decode_image reads only JPEG, PNG, GIF, BMP and WebP")
    try:
        return parse(data)
    except (struct.error, IndexError) as err:
        raise _refuse(fmt, f"header ends early ({len(data)} bytes)") from err


# Baseline, extended and progressive, Huffman (SOF0-2) or arithmetic-coded (SOF9-10).
_SOF_OK = {0xC0, 0xC1, 0xC2, 0xC9, 0xCA}
_SOF_ALL = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # DHT, JPG, DAC are not frames


def _jpeg(data: bytes) -> TfShape:
    pos = 2
    while True:
        while data[pos] != 0xFF:  # libjpeg skips extraneous bytes (with a warning)
            pos += 1
        while data[pos] == 0xFF:  # fill bytes
            pos += 1
        marker = data[pos]
        pos += 1
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:
            continue
        if marker in (0xD9, 0xDA):
            raise _refuse("jpeg", "no frame header before the image data")
        (length,) = struct.unpack(">H", data[pos:pos + 2])
        if marker in _SOF_ALL:
            precision, height, width, components = struct.unpack(">BHHB", data[pos + 2:pos + 8])
            if marker not in _SOF_OK:
                raise _refuse("jpeg", f"frame type SOF{marker - 0xC0} (lossless or hierarchical)")
            if precision != 8:
                raise _refuse("jpeg", f"{precision}-bit samples")
            if components not in (1, 3, 4):
                raise _refuse("jpeg", f"{components} components")
            if height == 0 or width == 0:
                raise _refuse("jpeg", f"frame header declares {width}x{height}")
            return TfShape("jpeg", height, width, 1 if components == 1 else 3)
        if length < 2:
            raise _refuse("jpeg", f"marker segment at byte {pos - 2} has length {length}")
        pos += length


def _png(data: bytes) -> TfShape:
    if data[12:16] != b"IHDR":
        raise _refuse("png", "first chunk is not IHDR")
    width, height, depth, color = struct.unpack(">IIBB", data[16:26])
    if width == 0 or height == 0:
        raise _refuse("png", f"IHDR declares {width}x{height}")
    channels = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(color)
    if channels is None:
        raise _refuse("png", f"colour type {color}")
    if color == 3 and _png_has_trns(data):
        channels = 4
    return TfShape("png", height, width, channels)


def _png_has_trns(data: bytes) -> bool:
    """Whether a ``tRNS`` chunk comes before the first ``IDAT`` (libpng reads no further)."""
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"tRNS":
            return True
        if kind in (b"IDAT", b"IEND"):
            return False
        pos += 12 + length
    return False


def _gif(data: bytes) -> TfShape:
    flags = data[10]
    has_global = bool(flags & 0x80)
    pos = 13 + (3 << ((flags & 7) + 1) if has_global else 0)
    while data[pos] == 0x21:  # extensions before the first frame: label, then sub-blocks
        if data[pos + 2] == 0:
            raise _refuse("gif", f"extension at byte {pos} has an empty first sub-block")
        pos += 2
        while data[pos]:  # data sub-blocks, ended by a zero length
            pos += 1 + data[pos]
        pos += 1
    if data[pos] != 0x2C:
        raise _refuse("gif", f"block 0x{data[pos]:02x} at byte {pos} where the first frame should be")
    width, height, local = struct.unpack("<HHB", data[pos + 5:pos + 10])
    pos += 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0)
    if not local & 0x80 and not has_global:
        raise _refuse("gif", "the first frame has no colour map")
    if data[pos] > 8:
        raise _refuse("gif", f"the first frame's LZW code size is {data[pos]} (at most 8)")
    if width == 0 or height == 0:
        raise _refuse("gif", f"the first frame is {width}x{height}")
    return TfShape("gif", height, width, 3)


def _bmp(data: bytes) -> TfShape:
    offset, header = struct.unpack("<II", data[10:18])
    if header < 40:
        raise _refuse("bmp", f"OS/2 header ({header} bytes)")
    width, height, _, bits, compression = struct.unpack("<iiHHI", data[18:34])
    if bits not in (24, 32):
        why = "decodes palette indices as gray" if bits == 8 else "decodes only 24- and 32-bit"
        raise _refuse("bmp", f"{bits}-bit pixels ({why})")
    if compression not in (0, 3):
        raise _refuse("bmp", f"compression {compression}")
    if width <= 0 or height == 0:
        raise _refuse("bmp", f"header declares {width}x{height}")
    channels = bits // 8
    row = (channels * width + 3) // 4 * 4
    if offset + row * abs(height) != len(data):
        raise _refuse("bmp", f"file has {len(data)} bytes, not the {offset + row * abs(height)} "
                             "its header and pixels need")
    return TfShape("bmp", abs(height), width, channels)


def _webp(data: bytes) -> TfShape:
    chunk = data[12:16]
    if chunk == b"VP8X":
        flags = data[20]
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        alpha = bool(flags & 0x10)
    elif chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        width, height = 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
        alpha = bool(bits >> 28 & 1)
    elif chunk == b"VP8 ":
        width, height = (v & 0x3FFF for v in struct.unpack("<HH", data[26:30]))
        alpha = False
    else:
        raise _refuse("webp", f"first chunk is {chunk!r}")
    if alpha:
        raise _refuse("webp", "alpha channel (decode_image with channels=3 refuses it)")
    return TfShape("webp", height, width, 3)


_PARSERS = {"jpeg": _jpeg, "png": _png, "gif": _gif, "bmp": _bmp, "webp": _webp}
