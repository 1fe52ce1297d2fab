"""``--image_mode tf`` stores every format Pillow decodes, as PNG.

AVIF, JPEG 2000, TGA, PPM/PGM/PBM, ICO, PSD, DDS and the rest of what Pillow
reads were ``unsupported_format`` dead letters. Files made with Pillow, then
Pillow's own ``Tests/images`` corpus (``tests/messy_corpus.py``), go through
the real build and ``encode_image``; every record is decoded with real
TensorFlow to its recorded shape and to Pillow's pixels. ``passthrough``
still refuses what TensorFlow cannot decode.
"""

from __future__ import annotations

import collections
import io
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

import numpy as np
import pytest
from PIL import Image

from tests.messy_corpus import pillow_test_images
from tests.shard_fixtures import dead_letters, examples, load_manifest, run_build, shard_files, write
from transforms.errors import ImageError
from transforms.images import image_codec as codec
from transforms.images.records import EncodeSettings, encode_image, passthrough_formats

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[compat]')")


def _photo(mode: str, size=(23, 17)) -> Image.Image:
    import skimage.data

    return Image.fromarray(skimage.data.chelsea()[50:50 + size[1], 100:100 + size[0]]).convert(mode)


def _saved(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **params)
    return out.getvalue()


# Relative path -> (bytes, image/source_format).
_MADE = {
    "a/photo.avif": (_saved(_photo("RGB"), "AVIF", quality=90), "avif"),
    "a/photo.jp2": (_saved(_photo("RGB"), "JPEG2000"), "jpeg2000"),
    "a/photo.tga": (_saved(_photo("RGBA"), "TGA", compression="tga_rle"), "tga"),
    "a/photo.ppm": (_saved(_photo("RGB"), "PPM"), "ppm"),
    "a/gray.pgm": (_saved(_photo("L"), "PPM"), "ppm"),
    "a/bits.pbm": (_saved(_photo("1"), "PPM"), "ppm"),
    "a/icon.ico": (_saved(_photo("RGBA", (32, 32)), "ICO", sizes=[(32, 32)]), "ico"),
    "a/photo.dds": (_saved(_photo("RGBA", (16, 16)), "DDS"), "dds"),
    "a/photo.qoi": (_saved(_photo("RGB"), "QOI"), "qoi"),
    "a/photo.sgi": (_saved(_photo("RGB"), "SGI"), "sgi"),
    "a/photo.pcx": (_saved(_photo("RGB"), "PCX"), "pcx"),
}


def _pillow_pixels(data: bytes) -> np.ndarray:
    """The first frame as Pillow decodes it, in the channels TensorFlow gives for its PNG."""
    img = Image.open(io.BytesIO(data))
    img.load()
    if img.mode == "1":
        img = img.convert("L")
    elif img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    elif img.mode == "PA":
        img = img.convert("RGBA")
    arr = np.asarray(img)
    return arr[..., None] if arr.ndim == 2 else arr


@pytest.mark.parametrize("name", sorted(_MADE))
def test_tf_mode_stores_a_png_tensorflow_decodes_to_pillows_pixels(name):
    data, fmt = _MADE[name]
    stored, info = encode_image(data, EncodeSettings())
    assert (info.format, info.source_format) == ("png", fmt)
    decoded = tf.io.decode_image(stored, channels=0, expand_animations=False).numpy()
    assert decoded.shape == (info.height, info.width, info.channels)
    np.testing.assert_array_equal(decoded, _pillow_pixels(data))
    with pytest.raises(ImageError) as err:
        encode_image(data, EncodeSettings(mode="passthrough"))
    assert err.value.reason == "unsupported_format"


@pytest.mark.slow
def test_build_converts_them_and_counts_each_format(tmp_path, capsys):
    root, out = tmp_path / "in", str(tmp_path / "out")
    for name, (data, _) in _MADE.items():
        write(str(root / name), data)
    status, stdout, stderr = run_build(capsys, "--input", str(root), "--output_dir", out, "--num_shards", "1")
    assert status == 0, stderr
    records = {ex["image/filename"].decode(): ex for n in shard_files(out) for ex in examples(os.path.join(out, n))}
    assert sorted(records) == sorted(_MADE)
    for name, ex in records.items():
        shape = tf.io.decode_image(ex["image/encoded"], channels=0, expand_animations=False).shape
        assert tuple(shape) == (ex["image/height"], ex["image/width"], ex["image/channels"]), name
        assert ex["image/source_format"].decode() == _MADE[name][1]
    counts = dict(sorted(collections.Counter(fmt for _, fmt in _MADE.values()).items()))
    images = load_manifest(out)["images"]
    assert images["converted"] == images["source_formats"] == counts
    assert ("  converted to PNG for TensorFlow: 11 records (avif 1, dds 1, ico 1, jpeg2000 1, pcx 1, "
            "ppm 3, qoi 1, sgi 1, tga 1)\n") in stdout
    from beam_jobs import verify_shards

    assert verify_shards.run(["--output_dir", out, "--decode_images"]) == 0
    # passthrough still refuses what TensorFlow cannot decode
    write(str(root / "a" / "kept.png"), _saved(_photo("RGB"), "PNG"))
    status, _, stderr = run_build(capsys, "--input", str(root), "--output_dir", str(tmp_path / "pass"),
                                  "--image_mode", "passthrough", "--max_bad_fraction", "1")
    assert status == 0, stderr
    dead = dead_letters(str(tmp_path / "pass"))
    assert {d["reason"] for d in dead} == {"unsupported_format"} and len(dead) == len(_MADE)


@pytest.mark.slow
def test_pillows_corpus_in_other_formats_decodes_in_tensorflow():
    converted, refused = collections.Counter(), collections.Counter()
    root = pillow_test_images()
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            data = open(os.path.join(folder, name), "rb").read()
            try:
                fmt = codec.read_image_info(data, "header").format
            except ImageError:
                continue
            if fmt in passthrough_formats:
                continue
            try:
                stored, info = encode_image(data, EncodeSettings())
            except ImageError as err:  # what Pillow recognises but cannot decode
                assert err.reason in ("undecodable", "truncated", "decompression_bomb"), (name, err)
                refused[fmt] += 1
                continue
            decoded = tf.io.decode_image(stored, channels=0, expand_animations=False)
            assert tuple(decoded.shape) == (info.height, info.width, info.channels), name
            converted[info.source_format] += 1
    assert {"avif", "jpeg2000", "tga", "ppm", "ico", "psd", "dds", "qoi", "sgi", "pcx", "icns",
            "blp", "xbm", "xpm", "fits", "sun"} <= set(converted), converted
    assert sum(converted.values()) >= 150, converted
    assert {"eps", "wmf"} <= set(refused)  # need Ghostscript, a Windows metafile handler
