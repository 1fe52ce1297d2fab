"""What turning JPEGs upright for their EXIF orientation costs (``--image_mode tf``).

On scikit-image's photos, saved as phone-like JPEG (quality 90, 4:2:0) with
an EXIF orientation, cropped to whole 16x16 MCUs (as phone photos are:
4032x3024) and left at their own size (the flip then moves the block grid):

- quality: mean and largest absolute difference between Pillow's decode of
  the stored JPEG and ``ImageOps.exif_transpose`` of the source, and the
  stored size over the source's;
- time: ``encode_image`` of an image with orientation 6 (decoded, turned,
  encoded) over the same image with orientation 1 (kept: inspected only), in
  the same run; and reading the orientation (``exif_orientation``) over the
  whole ``inspect_image`` of a kept image.

    python benchmarks/exif_upright.py      # prints a table and one JSON line
"""

from __future__ import annotations

import io
import json
import os
import sys
import time

import numpy as np
from PIL import Image, ImageOps

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from transforms.images.codec import inspect_image  # noqa: E402
from transforms.images.orientation import ORIENTATION_TAG, exif_orientation  # noqa: E402
from transforms.images.records import EncodeSettings, encode_image  # noqa: E402

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "motorcycle_left")


def _photo(name: str) -> Image.Image:
    import skimage.data

    if name == "motorcycle_left":
        return Image.fromarray(skimage.data.stereo_motorcycle()[0])
    return Image.fromarray(getattr(skimage.data, name)())


def _jpeg(img: Image.Image, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[ORIENTATION_TAG] = orientation
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90, subsampling=2, exif=exif.tobytes())
    return out.getvalue()


def _best_of(fn, repeats: int = 7) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure() -> dict:
    rows = []
    settings = EncodeSettings()
    for name in PHOTOS:
        full = _photo(name)
        whole = full.crop((0, 0, full.width // 16 * 16, full.height // 16 * 16))
        for grid, img in (("whole MCUs", whole), ("own size", full)):
            for orientation in (3, 6, 8):
                source = _jpeg(img, orientation)
                stored, info = encode_image(source, settings)
                want = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(source))), dtype=np.int16)
                got = np.asarray(Image.open(io.BytesIO(stored)), dtype=np.int16)
                diff = np.abs(got - want)
                rows.append({"photo": name, "size": f"{img.width}x{img.height}", "grid": grid,
                             "orientation": orientation, "mean_diff": round(float(diff.mean()), 3),
                             "max_diff": int(diff.max()), "size_ratio": round(len(stored) / len(source), 3)})
        kept, turned = _jpeg(full, 1), _jpeg(full, 6)
        t_kept = _best_of(lambda: encode_image(kept, settings))
        t_turned = _best_of(lambda: encode_image(turned, settings))
        t_inspect = _best_of(lambda: inspect_image(kept, "structure"))
        t_orientation = _best_of(lambda: exif_orientation(Image.open(io.BytesIO(turned))), 50) - \
            _best_of(lambda: Image.open(io.BytesIO(turned)), 50)
        rows.append({"photo": name, "size": f"{full.width}x{full.height}", "kept_ms": round(t_kept * 1e3, 2),
                     "turned_ms": round(t_turned * 1e3, 2), "turned_over_kept": round(t_turned / t_kept, 1),
                     "orientation_us": round(max(t_orientation, 0) * 1e6, 1),
                     "orientation_over_inspect": round(max(t_orientation, 0) / t_inspect, 4)})
    return {"rows": rows}


def main() -> None:
    result = measure()
    for row in result["rows"]:
        print("  ".join(f"{key}={value}" for key, value in row.items()))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
