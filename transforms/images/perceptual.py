"""A perceptual hash of an image's pixels (a 64-bit DCT pHash), its Hamming distances and its bands.

``perceptual_hash`` decodes the image small (a JPEG at a reduced libjpeg scale), makes it a
``HASH_SIDE``-square greyscale image, upright, and sets a bit for each of the 2-D DCT's 8 x 8 lowest
frequencies above the DC term that is above their median, as the original pHash does. Two hashes within
``distance`` bits agree on at least one of their ``distance + 1`` bands (``hash_bands``, pigeonhole).
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from transforms.errors import ImageError
from transforms.images.choices import MAX_NEAR_DUPLICATE_DISTANCE
from transforms.images.orientation import ORIENTATION_TAG

__all__ = ["HASH_BITS", "HASH_SIDE", "DRAFT_SIDE", "perceptual_hash", "band_widths", "hash_bands", "popcount"]

HASH_BITS = 64
HASH_SIDE = 32  # the greyscale image the DCT reads
DRAFT_SIDE = 64  # a JPEG is decoded at the smallest scale leaving both sides >= this


def _dct_rows(n: int) -> np.ndarray:
    """Rows 1-8 of the orthogonal DCT-II matrix of size ``n`` (the DC row 0 left out)."""
    k = np.arange(1, 9, dtype=np.float64)[:, None]
    x = np.arange(n, dtype=np.float64)[None, :]
    return np.sqrt(2.0 / n) * np.cos(np.pi * (2 * x + 1) * k / (2 * n))


_DCT = _dct_rows(HASH_SIDE)
_BIT_WEIGHTS = (1 << np.arange(HASH_BITS - 1, -1, -1, dtype=np.uint64)).astype(np.uint64)


def _upright(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """A square array turned as EXIF ``orientation`` (1-8) says the image is to be shown."""
    if orientation in (2, 4, 5, 7):
        pixels = pixels[:, ::-1] if orientation in (2, 7) else pixels[::-1, :]
    if orientation in (5, 6, 7, 8):  # a quarter turn: the transpose, then the flip above or below
        pixels = pixels.T[:, ::-1] if orientation in (6, 7) else pixels.T[::-1, :]
    elif orientation == 3:
        pixels = pixels[::-1, ::-1]
    return pixels


def _small_grey(data: bytes) -> tuple[np.ndarray, int]:
    """The image's first frame as a ``HASH_SIDE``-square float array of grey levels, and its orientation."""
    with Image.open(io.BytesIO(data)) as image:
        if image.format == "JPEG":
            image.draft("L", (DRAFT_SIDE, DRAFT_SIDE))
        orientation = image.getexif().get(ORIENTATION_TAG, 1)
        # Integer and float images (16-bit PNG, TIFF) as floats: "L" would clip them at 255.
        grey = image.convert("F" if image.mode[0] in "IF" else "L")
        small = grey.resize((HASH_SIDE, HASH_SIDE), Image.Resampling.LANCZOS)
    pixels = np.asarray(small, dtype=np.float64)
    return pixels, orientation if isinstance(orientation, int) and 1 <= orientation <= 8 else 1


def perceptual_hash(data: bytes) -> int:
    """The 64-bit perceptual hash of an image's pixels (see the module docstring), first bit highest.

    Raises:
        ImageError: ``undecodable``: Pillow cannot decode the pixels.
    """
    try:
        pixels, orientation = _small_grey(data)
    except Exception as err:  # Pillow's decoders raise many types on malformed data (NotImplementedError, ...)
        raise ImageError("undecodable", f"pixels cannot be decoded for the perceptual hash: "
                                        f"{type(err).__name__}: {err}") from err
    pixels = _upright(pixels, orientation)
    coefficients = (_DCT @ pixels @ _DCT.T).ravel()
    bits = coefficients > np.median(coefficients)
    return int(np.sum(_BIT_WEIGHTS[bits], dtype=np.uint64))


_BYTE_COUNTS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def popcount(values: np.ndarray) -> np.ndarray:
    """The number of set bits of each ``uint64`` in ``values`` (same shape)."""
    counter = getattr(np, "bitwise_count", None)  # numpy 2
    if counter is not None:
        return counter(values)
    as_bytes = np.ascontiguousarray(values, dtype=np.uint64).view(np.uint8)
    return _BYTE_COUNTS[as_bytes].reshape(*values.shape, 8).sum(axis=-1, dtype=np.uint8)


def band_widths(distance: int) -> tuple[int, ...]:
    """The widths of the ``distance + 1`` bands a hash is cut into, as even as can be, wider ones first."""
    if not 0 <= distance <= MAX_NEAR_DUPLICATE_DISTANCE:
        raise ValueError(f"near-duplicate distance must be in 0..{MAX_NEAR_DUPLICATE_DISTANCE}, got {distance}")
    bands = distance + 1
    base, wider = divmod(HASH_BITS, bands)
    return tuple(base + 1 if i < wider else base for i in range(bands))


def hash_bands(value: int, distance: int) -> tuple[tuple[int, int], ...]:
    """``(band index, band value)`` of each of a hash's ``distance + 1`` bands, from its highest bits."""
    out = []
    left = HASH_BITS
    for index, width in enumerate(band_widths(distance)):
        left -= width
        out.append((index, (value >> left) & ((1 << width) - 1)))
    return tuple(out)
