"""A deterministic dataset of photo JPEGs for the benchmarks, in class folders.

Every image is derived from one of the real photographs that scikit-image
(``skimage/data``) and scikit-learn (``sklearn/datasets/images``) ship: a
random crop with a common aspect ratio, a resize, an optional mirror flip, a
small colour jitter (per-channel gain and offset), camera-like sharpening and
grain, and a JPEG quality drawn from 85..95. Each image has a target size
drawn from a log-normal distribution with a mean of 110 KB (ImageNet's mean
file size); the pixel count is corrected once after a trial encode so the file
lands near its target.

Image ``i`` depends only on ``i`` (its own seeded generators), so a smaller
dataset is a prefix of a larger one: images are generated once into a pool
under ``benchmarks/.cache/photos/`` and each dataset folder is a farm of hard
links to a prefix of the pool.

    python benchmarks/photos.py --size_mb 150      # prints the dataset folder
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
from PIL import Image, ImageFilter

__all__ = ["Dataset", "Recipe", "dataset", "quarter_of", "recipe", "CACHE", "MEAN_BYTES", "NUM_CLASSES"]

CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache")
POOL = os.path.join(CACHE, "photos")
MEAN_BYTES = 110_000  # ImageNet's mean JPEG size
NUM_CLASSES = 100
_SIGMA = 0.55  # log-normal spread of file sizes
_VERSION = 1  # bump when the recipe changes: the pool is regenerated
# (source file, weight): colour photographs count more than grayscale ones.
_SKIMAGE = (("astronaut.png", 3), ("chelsea.png", 3), ("coffee.png", 3),
            ("motorcycle_left.png", 3), ("motorcycle_right.png", 3), ("rocket.jpg", 3),
            ("hubble_deep_field.jpg", 2), ("retina.jpg", 2), ("ihc.png", 2), ("camera.png", 1),
            ("coins.png", 1), ("brick.png", 1), ("grass.png", 1), ("gravel.png", 1),
            ("moon.png", 1))
_SKLEARN = (("china.jpg", 3), ("flower.jpg", 3))
_ASPECTS = ((4, 3), (3, 4), (3, 2), (2, 3), (1, 1), (16, 9), (5, 4))
_BYTES_PER_PIXEL_GUESS = 0.42


@dataclass(frozen=True)
class Dataset:
    """A generated dataset folder: ``root/<class>/<image>.jpg``."""

    root: str
    images: int
    bytes: int
    pixels: int


def _sources() -> list[tuple[str, int]]:
    import skimage  # bench-only dependencies, needed only to generate the pool
    import sklearn

    skimage_dir = os.path.join(os.path.dirname(skimage.__file__), "data")
    sklearn_dir = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images")
    found = [(os.path.join(skimage_dir, n), w) for n, w in _SKIMAGE]
    found += [(os.path.join(sklearn_dir, n), w) for n, w in _SKLEARN]
    missing = [p for p, _ in found if not os.path.exists(p)]
    if missing:
        raise SystemExit(f"source photos missing: {missing}; pip install -e '.[bench]'")
    return found


_LOADED: dict[str, Image.Image] = {}


def _source_image(path: str) -> Image.Image:
    if path not in _LOADED:
        with Image.open(path) as img:
            _LOADED[path] = img.convert("RGB")
    return _LOADED[path]


_TILE = 2400  # the largest side an image may have
_GRAIN: list[np.ndarray] = []


def _grain_tiles() -> tuple[np.ndarray, np.ndarray]:
    """Fixed standard-normal noise (x16, int8) for luminance and chroma; made once per process."""
    if not _GRAIN:
        noise = np.random.default_rng(20240601)
        for shape in ((_TILE, _TILE, 1), (_TILE, _TILE, 3)):
            _GRAIN.append(np.clip(noise.standard_normal(shape, dtype=np.float32) * 16, -127, 127)
                          .astype(np.int8))
    return _GRAIN[0], _GRAIN[1]


def _render(src: Image.Image, box: tuple[int, int, int, int], size: tuple[int, int], flip: bool,
            gains: np.ndarray, offset: float, grain: float, sharpen: int,
            noise_at: tuple[int, int]) -> Image.Image:
    img = src.crop(box).resize(size, Image.Resampling.BICUBIC)
    if flip:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    img = img.filter(ImageFilter.UnsharpMask(radius=1, percent=sharpen, threshold=2))
    w, h = size
    luma, chroma = _grain_tiles()
    y, x = noise_at[0] % (_TILE - h + 1), noise_at[1] % (_TILE - w + 1)
    pixels = np.asarray(img, dtype=np.float32) * gains + offset
    pixels += luma[y:y + h, x:x + w] * np.float32(grain / 16)
    pixels += chroma[y:y + h, x:x + w] * np.float32(grain / 32)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _encode(img: Image.Image, quality: int) -> bytes:
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=quality)
    return out.getvalue()


@dataclass(frozen=True)
class Recipe:
    """What photo ``index`` is made of: its source photograph, the crop box in it, a mirror flip."""

    source: str  # the source file's name
    box: tuple[int, int, int, int]
    flip: bool


def _recipe(index: int, sources: list[tuple[str, int]]) -> tuple[random.Random, str, float, tuple, dict]:
    """Image ``index``'s generator (left where the quality is drawn), source, target size, aspect, render args."""
    rng = random.Random(f"photo-{_VERSION}-{index}")
    path = rng.choices([p for p, _ in sources], weights=[w for _, w in sources])[0]
    src = _source_image(path)
    mu = math.log(MEAN_BYTES) - _SIGMA ** 2 / 2
    target = min(max(rng.lognormvariate(mu, _SIGMA), 12_000), 600_000)
    aw, ah = rng.choice(_ASPECTS)
    sw, sh = src.size
    fraction = rng.uniform(0.35, 1.0)  # of the largest crop with this aspect
    scale = min(sw / aw, sh / ah) * math.sqrt(fraction)
    cw, ch = max(int(aw * scale), 16), max(int(ah * scale), 16)
    x, y = rng.randint(0, sw - cw), rng.randint(0, sh - ch)
    args = dict(box=(x, y, x + cw, y + ch), flip=rng.random() < 0.5,
                gains=np.array([rng.uniform(0.9, 1.1) for _ in range(3)], dtype=np.float32),
                offset=rng.uniform(-10, 10), grain=rng.uniform(3.0, 9.0),
                sharpen=rng.randint(80, 150), noise_at=(rng.getrandbits(16), rng.getrandbits(16)))
    return rng, path, target, (aw, ah), args


def recipe(index: int) -> Recipe:
    """Which photograph image ``index`` is cut from, where, and whether it is mirrored."""
    _, path, _, _, args = _recipe(index, _sources())
    return Recipe(os.path.basename(path), args["box"], args["flip"])


def make_photo(index: int, sources: list[tuple[str, int]]) -> tuple[bytes, int]:
    """Returns image ``index`` as JPEG bytes, and its pixel count."""
    rng, path, target, (aw, ah), args = _recipe(index, sources)
    src = _source_image(path)
    quality = rng.randint(85, 95)

    def size_for(pixels: float) -> tuple[int, int]:
        side = math.sqrt(pixels / (aw * ah))
        return (min(max(int(aw * side), 32), 2400), min(max(int(ah * side), 32), 2400))

    size = size_for(target / _BYTES_PER_PIXEL_GUESS)
    data = _encode(_render(src, size=size, **args), quality)
    if abs(len(data) / target - 1) > 0.1:  # one correction: bytes scale about with pixels
        size = size_for(size[0] * size[1] * target / len(data))
        data = _encode(_render(src, size=size, **args), quality)
    return data, size[0] * size[1]


def _relpath(index: int) -> str:
    return os.path.join(f"class_{index % NUM_CLASSES:03d}", f"img_{index:07d}.jpg")


def _generate(indexes: list[int]) -> list[tuple[int, int, int]]:
    sources = _sources()
    out = []
    for index in indexes:
        data, pixels = make_photo(index, sources)
        path = os.path.join(POOL, _relpath(index))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "wb") as fh:
            fh.write(data)
        os.replace(path + ".tmp", path)
        out.append((index, len(data), pixels))
    return out


def _pool_index() -> dict:
    path = os.path.join(POOL, "index.json")
    if os.path.exists(path):
        with open(path) as fh:
            index = json.load(fh)
        if index.get("version") == _VERSION:
            return index
    return {"version": _VERSION, "sizes": [], "pixels": []}


def _grow_pool(total_bytes: int, workers: int) -> dict:
    """Generates images until the pool's prefix holds ``total_bytes``; returns the pool index."""
    index = _pool_index()
    sizes, pixels = index["sizes"], index["pixels"]
    batch = 64 * workers
    with ProcessPoolExecutor(workers) as pool:
        while sum(sizes) < total_bytes:
            start = len(sizes)
            chunks = [list(range(start + k, start + batch, workers)) for k in range(workers)]
            results = sorted(r for part in pool.map(_generate, chunks) for r in part)
            sizes.extend(size for _, size, _ in results)
            pixels.extend(px for _, _, px in results)
            print(f"  photos: {len(sizes)} images, {sum(sizes) / 1e6:.0f} MB", file=sys.stderr)
            with open(os.path.join(POOL, "index.json.tmp"), "w") as fh:
                json.dump(index, fh)
            os.replace(os.path.join(POOL, "index.json.tmp"), os.path.join(POOL, "index.json"))
    return index


def _link_farm(root: str, count: int, sizes: list[int], pixels: list[int]) -> Dataset:
    done = os.path.join(root, ".dataset.json")
    if os.path.exists(done):
        with open(done) as fh:  # the folder may have moved (another checkout's cache)
            return Dataset(**{**json.load(fh), "root": root})
    for i in range(count):
        target = os.path.join(root, _relpath(i))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            os.link(os.path.join(POOL, _relpath(i)), target)
    result = Dataset(root, count, sum(sizes[:count]), sum(pixels[:count]))
    with open(done, "w") as fh:  # a hidden file: the build job skips it
        json.dump(asdict(result), fh)
    return result


def dataset(size_mb: float, workers: int = 2) -> Dataset:
    """Returns the dataset of about ``size_mb`` MB (10**6 bytes), generating what is missing."""
    total = int(size_mb * 1e6)
    index = _grow_pool(total, workers)
    sizes, pixels = index["sizes"], index["pixels"]
    count, running = 0, 0
    while running < total:
        running += sizes[count]
        count += 1
    return _link_farm(os.path.join(CACHE, f"photos-{size_mb:g}mb"), count, sizes, pixels)


def quarter_of(full: Dataset) -> Dataset:
    """Returns the first quarter (by image index) of a dataset, as its own folder."""
    index = _pool_index()
    return _link_farm(full.root + "-quarter", full.images // 4, index["sizes"], index["pixels"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size_mb", type=float, default=1000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    found = dataset(args.size_mb, args.workers)
    print(f"{found.root}: {found.images} images, {found.bytes / 1e6:.1f} MB, "
          f"mean {found.bytes / found.images / 1e3:.1f} KB, "
          f"mean {found.pixels / found.images / 1e3:.0f} kpixels, "
          f"{found.bytes / found.pixels:.2f} bytes/pixel")


if __name__ == "__main__":
    main()
