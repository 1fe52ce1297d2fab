"""Deterministic procedural images for demos, tests and benchmarks (pure, no Beam).

Each class has its own look (a colour scheme and a shape), so a contact sheet
of the output shows at a glance whether labels and images still match.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from typing import Iterator

import numpy as np
from PIL import Image, ImageDraw

__all__ = ["SampleImage", "CLASS_STYLES", "sample_images", "render_image"]

# class name -> (base RGB colour, shape)
CLASS_STYLES: dict[str, tuple[tuple[int, int, int], str]] = {
    "daisy": ((235, 225, 90), "ellipse"),
    "rose": ((200, 40, 60), "rectangle"),
    "tulip": ((230, 120, 200), "triangle"),
    "sunflower": ((250, 170, 20), "ellipse"),
    "dandelion": ((160, 200, 60), "rectangle"),
}


@dataclass(frozen=True)
class SampleImage:
    """One generated file: where it goes (relative path) and its bytes."""

    relpath: str
    label: str
    data: bytes


def render_image(label: str, width: int, height: int, rng: random.Random) -> Image.Image:
    """Draws one image of a class: a tinted gradient, the class's shape, and noise."""
    base, shape = CLASS_STYLES.get(label, ((128, 128, 128), "ellipse"))
    nprng = np.random.default_rng(rng.getrandbits(32))
    y = np.linspace(0.6, 1.2, height, dtype=np.float32)[:, None, None]
    x = np.linspace(0.8, 1.1, width, dtype=np.float32)[None, :, None]
    pixels = np.asarray(base, dtype=np.float32)[None, None, :] * y * x
    pixels = pixels + nprng.normal(0.0, 12.0, size=(height, width, 3)).astype(np.float32)
    img = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(1, 4)):
        x0, y0 = rng.randint(0, width // 2), rng.randint(0, height // 2)
        x1, y1 = x0 + rng.randint(width // 6, width // 2), y0 + rng.randint(height // 6, height // 2)
        fill = tuple(min(255, c + rng.randint(-40, 40)) for c in base[::-1])
        if shape == "ellipse":
            draw.ellipse((x0, y0, x1, y1), fill=fill)
        elif shape == "rectangle":
            draw.rectangle((x0, y0, x1, y1), fill=fill)
        else:
            draw.polygon([(x0, y1), ((x0 + x1) // 2, y0), (x1, y1)], fill=fill)
    return img


def sample_images(total_bytes: int, classes: tuple[str, ...] = ("daisy", "rose", "tulip"),
                  seed: int = 0) -> Iterator[SampleImage]:
    """Yields class-folder images until about ``total_bytes`` have been produced.

    Images are dealt to ``classes`` in turn, each side 160 to 640 pixels; every fifth image is a PNG,
    the rest JPEG at quality 90. Everything is a function of ``seed``.
    """
    rng = random.Random(seed)
    produced = index = 0
    while produced < total_bytes:
        label = classes[index % len(classes)]
        img = render_image(label, rng.randint(160, 640), rng.randint(160, 640), rng)
        out = io.BytesIO()
        if index % 5 == 4:
            img.save(out, format="PNG")
            name = f"{label}/{label}_{index:06d}.png"
        else:
            img.save(out, format="JPEG", quality=90)
            name = f"{label}/{label}_{index:06d}.jpg"
        data = out.getvalue()
        produced += len(data)
        index += 1
        yield SampleImage(name, label, data)
