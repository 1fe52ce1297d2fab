"""Tests of the verify preview: which records become samples, and the picture drawn."""

from __future__ import annotations

import io
import random

from PIL import Image

from tests.tfrecord_fixtures import image_bytes, image_example
from transforms.verify.preview import PREVIEW_PER_CLASS, PreviewSample, preview_sample, render_preview
from transforms.example.codec import decode_example
from tests.helpers import encode_example


def _features(label: int, fmt: str = "png"):
    encoded = image_bytes("rose", fmt, 20, 10, random.Random(label))
    return decode_example(image_example(label, f"class{label}", encoded, fmt, 10, 20))


def test_preview_sample_takes_image_records_of_low_labels() -> None:
    sample = preview_sample(_features(2))
    assert (sample.label, sample.text, sample.format, sample.height, sample.width) == (2, "class2", "png", 10, 20)
    assert preview_sample(_features(2), max_label=2) is None
    assert preview_sample(decode_example(encode_example({"x": 1}))) is None
    assert preview_sample(None) is None


def _sample(label: int, key: str, encoded: bytes, fmt: str = "png") -> PreviewSample:
    return PreviewSample(label, f"class{label}", key, encoded, fmt, 10, 20, 3)


def _png(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def test_render_preview_rows_per_class_and_a_bar_per_shard() -> None:
    good = image_bytes("rose", "png", 20, 10, random.Random(0))
    samples = [_sample(label, f"{i:02d}", good) for label in (0, 1) for i in range(PREVIEW_PER_CLASS + 2)]
    samples.append(_sample(2, "k", b"broken"))  # drawn as undecodable, not an error
    samples.append(_sample(3, "r", bytes(10 * 20 * 3), "raw"))
    sizes = [("train", f"train-{i:05d}-of-00003.tfrecord", 1000 + i) for i in range(3)]
    one_class = _png(render_preview(samples[:1], sizes, "one"))
    four = _png(render_preview(samples, sizes, "four", class_counts={0: 8, 1: 8}))
    assert four.width == one_class.width
    assert four.height - one_class.height == 3 * (96 + 18 + 8)  # one row per class
    empty = _png(render_preview([], [], "nothing"))
    assert empty.size[0] >= 640
    # The bars are drawn in the split's colour.
    assert (66, 133, 244) in {px for px in four.getdata()}
