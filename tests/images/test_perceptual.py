"""Unit tests of transforms.images.perceptual on a real, messy corpus (Pillow's test images, scikit-image's data).

The hash's golden values, bands and the copies it finds are in
``tests/images/test_near_duplicates.py``; here: every file of the corpus
either hashes or is an ``undecodable`` image error, and the pairs the hash
finds within the default distance are images that look alike.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from PIL import Image, ImageOps

from tests.messy_corpus import pillow_test_images, skimage_images
from transforms.errors import ImageError
from transforms.images.choices import DEFAULT_NEAR_DUPLICATE_DISTANCE
from transforms.images.perceptual import perceptual_hash, popcount

# Pairs within the default distance whose thumbnails do not correlate (below _LOOK_ALIKE): two
# mostly blank text renderings. A pair that joins them is a false pair the hash gained.
KNOWN_UNLIKE = {("pillow/different_transparency_merged.png", "pillow/test_combine_caron_below_ls.png")}
_LOOK_ALIKE = 0.45  # correlation of 16 x 16 grey thumbnails (16-bit RGB and RGBA TIFFs of one picture: 0.49)
_MAX_BYTES = 30_000_000


def test_an_image_pillow_cannot_decode_in_any_way_is_an_undecodable_image_error() -> None:
    # A DDS file whose pixel format Pillow does not implement: Pillow raises NotImplementedError.
    with open(os.path.join(pillow_test_images(), "unimplemented_pixel_format.dds"), "rb") as fh:
        data = fh.read()
    with pytest.raises(ImageError) as raised:
        perceptual_hash(data)
    assert raised.value.reason == "undecodable" and "Unimplemented pixel format" in str(raised.value)


def _corpus() -> dict[str, str]:
    found = {}
    for label, root in (("pillow", pillow_test_images()), ("skimage", skimage_images())):
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                if not name.endswith((".py", ".pyc")) and os.path.getsize(path) <= _MAX_BYTES:
                    found[f"{label}/{os.path.relpath(path, root)}"] = path
    return found


def _thumbnail(path: str) -> np.ndarray | None:
    """A 16 x 16 grey thumbnail from a full decode (None for a one-colour image, which every hash
    of one size pairs with another)."""
    with Image.open(path) as image:
        image = ImageOps.exif_transpose(image)
        grey = image.convert("F" if image.mode[0] in "IF" else "L").resize((16, 16), Image.Resampling.BOX)
    pixels = np.asarray(grey, dtype=np.float64)
    return None if pixels.std() < 1e-3 * max(1.0, float(np.abs(pixels).max())) else pixels


@pytest.mark.slow
def test_pairs_the_hash_finds_in_the_messy_corpus_are_images_that_look_alike() -> None:
    hashes = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the corpus holds files Pillow warns about
        for name, path in sorted(_corpus().items()):
            with open(path, "rb") as fh:
                data = fh.read()
            try:
                hashes[name] = perceptual_hash(data)
            except ImageError:
                continue  # not an image Pillow decodes: not compared, as in a build
        names = sorted(hashes)
        values = np.array([hashes[n] for n in names], dtype=np.uint64)
        apart = popcount(values[:, None] ^ values[None, :])
        rows, cols = np.nonzero(np.triu(apart <= DEFAULT_NEAR_DUPLICATE_DISTANCE, 1))
        thumbnails = {n: _thumbnail(_corpus_path(n)) for n in {names[i] for i in (*rows, *cols)}}
    assert len(hashes) > 700  # most of the corpus decodes
    unlike = set()
    for i, j in zip(rows, cols):
        a, b = thumbnails[names[i]], thumbnails[names[j]]
        if a is not None and b is not None and np.corrcoef(a.ravel(), b.ravel())[0, 1] < _LOOK_ALIKE:
            unlike.add((names[i], names[j]))
    assert unlike <= KNOWN_UNLIKE, sorted(unlike - KNOWN_UNLIKE)
    # And the copies of one picture in other formats and sizes are found.
    hopper = [f"pillow/hopper.{ext}" for ext in ("jpg", "png", "bmp", "gif", "webp", "tif")]
    assert all(apart[names.index(a), names.index(b)] <= DEFAULT_NEAR_DUPLICATE_DISTANCE
               for a in hopper for b in hopper), hopper


def _corpus_path(name: str) -> str:
    label, rel = name.split("/", 1)
    return os.path.join(pillow_test_images() if label == "pillow" else skimage_images(), rel)
