"""EXIF orientation: read it from a header, and turn an image upright for ``--image_mode tf`` (pure).

docs/images.md, "Upright images", says what each ``--exif_orientation`` stores. Pillow gives no
lossless JPEG rotation: ``upright_jpeg`` re-encodes with the source's own tables and subsampling.
"""

from __future__ import annotations

import io

from PIL import Image, JpegImagePlugin

from transforms.errors import ImageError
from transforms.images.choices import EXIF_ORIENTATION_MODES

__all__ = ["ORIENTATION_TAG", "ORIENTATION_FEATURE", "EXIF_ORIENTATION_MODES", "SWAPS_SIDES", "UPRIGHT_HOW",
           "exif_orientation", "turned_upright", "upright_jpeg"]

ORIENTATION_TAG = 0x0112
# The record key ``--exif_orientation keep`` writes (int64, 1-8; 1 when the source has none).
ORIENTATION_FEATURE = "image/orientation"
# Orientations whose upright image has the width and height swapped.
SWAPS_SIDES = (5, 6, 7, 8)
# ImageInfo.upright values -> how the summary names them.
UPRIGHT_HOW = {"jpeg_reencoded": "JPEG re-encoded with the source's quantization tables",
               "lossless": "lossless, as PNG"}

# What ImageOps.exif_transpose does for each orientation.
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
# libjpeg's tables for quality 95 (luminance, chrominance), natural order: the coarsest
# an upright JPEG whose block grid moved is encoded with (each entry the finer of these and
# the source's), so that a second quantization on new blocks stays visually lossless.
_QUALITY_95 = {
    0: [2, 1, 1, 2, 2, 4, 5, 6, 1, 1, 1, 2, 3, 6, 6, 6, 1, 1, 2, 2, 4, 6, 7, 6, 1, 2, 2, 3, 5, 9, 8, 6,
        2, 2, 4, 6, 7, 11, 10, 8, 2, 4, 6, 6, 8, 10, 11, 9, 5, 6, 8, 9, 10, 12, 12, 10, 7, 9, 10, 10, 11,
        10, 10, 10],
    1: [2, 2, 2, 5, 10, 10, 10, 10, 2, 2, 3, 7, 10, 10, 10, 10, 2, 3, 6, 10, 10, 10, 10, 10, 5, 7, 10,
        10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10,
        10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10],
}
# The source axes each orientation's transform reverses: (x, y).
_FLIPS = {2: (True, False), 3: (True, True), 4: (False, True), 5: (False, False),
          6: (False, True), 7: (True, True), 8: (True, False)}
# Pillow's JPEG subsampling codes (JpegImagePlugin.get_sampling): 4:4:4, 4:2:2, 4:2:0.
_SUBSAMPLING_444, _SUBSAMPLING_422, _SUBSAMPLING_420 = 0, 1, 2


def exif_orientation(img: Image.Image) -> int:
    """The EXIF orientation of an opened image, from its header (a PNG's from chunks before its image
    data), as ``ImageOps.exif_transpose`` reads it: 1-8, 1 when it has none or a malformed one."""
    try:
        if img.format == "PNG":  # PngImageFile.getexif() decodes the image to look for a late eXIf
            if not any(key in img.info for key in ("exif", "Raw profile type exif", "XML:com.adobe.xmp")):
                return 1
            value = Image.Image.getexif(img).get(ORIENTATION_TAG, 1)
        else:
            value = img.getexif().get(ORIENTATION_TAG, 1)
    except Exception:  # malformed EXIF blocks raise assorted types; exif_transpose would fail too
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def turned_upright(img: Image.Image, orientation: int) -> Image.Image:
    """``img`` (loaded) transposed as ``ImageOps.exif_transpose`` does for ``orientation``."""
    method = _TRANSPOSE.get(orientation)
    return img if method is None else img.transpose(method)


def upright_jpeg(data: bytes, orientation: int) -> bytes | None:
    """A JPEG turned upright for ``orientation``, re-encoded with the source's tables; None for CMYK.

    Its ICC profile and its other EXIF tags are kept; the orientation tag is removed.

    Raises:
        ImageError: The source cannot be decoded or encoded.
    """
    try:
        img = Image.open(io.BytesIO(data))
        if img.mode not in ("L", "RGB"):
            return None
        tables = img.quantization
        sampling = JpegImagePlugin.get_sampling(img) if img.mode == "RGB" else _SUBSAMPLING_444
        icc = img.info.get("icc_profile")
        progressive = bool(img.info.get("progressive") or img.info.get("progression"))
        exif = img.getexif()
        exif.pop(ORIENTATION_TAG, None)
        img.load()
    except Exception as err:  # Pillow's decoders raise many types on malformed data
        raise ImageError("undecodable", f"cannot turn the JPEG upright: {type(err).__name__}: {err}") from err
    if not _keeps_block_grid(orientation, img.width, img.height, sampling):
        tables = {slot: [min(a, b) for a, b in zip(table, _QUALITY_95.get(slot, table))]
                  for slot, table in tables.items()}
    swaps = orientation in SWAPS_SIDES
    if swaps:
        tables = {slot: _transposed(table) for slot, table in tables.items()}
    if sampling not in (_SUBSAMPLING_444, _SUBSAMPLING_420) and (swaps or sampling != _SUBSAMPLING_422):
        sampling = _SUBSAMPLING_444  # 4:2:2 turned sideways is 4:4:0, which Pillow cannot write
    out = io.BytesIO()
    params = {"qtables": tables, "subsampling": sampling, "progressive": progressive,
              "exif": exif.tobytes() if len(exif) else b""}
    if icc:
        params["icc_profile"] = icc
    try:
        turned_upright(img, orientation).save(out, format="JPEG", **params)
    except (OSError, ValueError) as err:
        raise ImageError("undecodable", f"cannot store the upright JPEG: {type(err).__name__}: {err}") from err
    return out.getvalue()


def _keeps_block_grid(orientation: int, width: int, height: int, sampling: int) -> bool:
    """Whether the turned image's blocks are the source's blocks turned: a flip moves the block grid
    unless the flipped side is a whole number of MCUs."""
    mcu_w, mcu_h = {_SUBSAMPLING_422: (16, 8), _SUBSAMPLING_420: (16, 16)}.get(sampling, (8, 8))
    flips_x, flips_y = _FLIPS[orientation]
    return not (flips_x and width % mcu_w) and not (flips_y and height % mcu_h)


def _transposed(table) -> list[int]:
    """A quantization table (64 values in natural order) for the transposed frequencies."""
    values = list(table)
    return [values[col * 8 + row] for row in range(8) for col in range(8)]
