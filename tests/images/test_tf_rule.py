"""Every record the default build writes decodes in TensorFlow, and verify applies the same rule.

The rule (``transforms.images.tf_rule``) is pure code; these tests hold it to
real TensorFlow: small made images for each case, then a real, messy corpus
(Pillow's ``Tests/images`` and scikit-image's data, see ``tests/messy_corpus.py``)
built once per image mode with the real build job and read back with
``tf.io.decode_image(..., channels=3|0, expand_animations=False)``.
"""

from __future__ import annotations

import base64
import collections
import io
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

import numpy as np
import pytest
from PIL import Image, ImageOps

from tests import imagegen
from tests.messy_corpus import make_corpus
from tests.shard_fixtures import dead_letters, examples, load_manifest, shard_files
from transforms.errors import ImageError
from transforms.images.image_codec import read_image_info
from tests.helpers import first_frame_png
from transforms.images.png_chunks import fix_png_chunks
from transforms.images.records import EncodeSettings, encode_image, passthrough_formats
from transforms.images.tf_rule import tf_shape
from transforms.verify.checks import image_problem

tf = pytest.importorskip(
    "tensorflow", reason="TensorFlow is not installed (pip install -e '.[compat]')")


def tf_decodes(data: bytes) -> tuple[int, int, int] | str:
    """(height, width, channels) of ``decode_image`` with channels=0, if channels=3 agrees; else why not."""
    try:
        three = tf.io.decode_image(data, channels=3, expand_animations=False).shape
        zero = tf.io.decode_image(data, channels=0, expand_animations=False).shape
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as err:
        return err.message.splitlines()[0]
    if tuple(three) != (zero[0], zero[1], 3):
        return f"channels=3 gives {tuple(three)}, channels=0 {tuple(zero)}"
    return tuple(int(n) for n in zero)


def _saved(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **params)
    return out.getvalue()


def _gradient(mode: str, size=(13, 7)) -> Image.Image:
    arr = (np.arange(size[0] * size[1] * 4, dtype=np.uint32) % 251).astype(np.uint8)
    return Image.frombytes("RGBA", size, arr.tobytes()).convert(mode)


def _gif_with_small_first_frame() -> bytes:
    return imagegen.gif_with_small_first_frame()


# Arithmetic-coded JPEGs (SOF9 sequential, SOF10 progressive), which Pillow cannot write:
# `jpegtran -copy none -arithmetic [-progressive]` (libjpeg-turbo 2.1.5) of
# `imagegen.jpeg("RGB", (13, 7))`, as golden bytes.
JPEG_ARITHMETIC = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAMCAgMCAgMDAwMEAwMEBQgFBQQEBQoHBwYIDAoMDAsKCwsNDhIQDQ4RDgsLEBYQ"
    "ERMUFRUVDA8XGBYUGBIUFRT/2wBDAQMEBAUEBQkFBQkUDQsNFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU"
    "FBQUFBQUFBQUFBQUFBT/yQARCAAHAA0DASIAAhEBAxEB/8wACgAQEAUBEBEF/9oADAMBAAIRAxEAPwDQsmNYjiIj8s6SkGj3"
    "Qz2rI5O5Wjki2UMqVmWwzGotxRm1mkhABvS7qaHyDbMMEZbQ+axvlPqAoktiYgiQUAfjsqIzxyrIxTTvMbTKogC4lJUuTwHG"
    "AMkSwg9EvujAhizgz23ZUMYnlj2xNYD/2Q==")
JPEG_ARITHMETIC_PROGRESSIVE = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAMCAgMCAgMDAwMEAwMEBQgFBQQEBQoHBwYIDAoMDAsKCwsNDhIQDQ4RDgsLEBYQ"
    "ERMUFRUVDA8XGBYUGBIUFRT/2wBDAQMEBAUEBQkFBQkUDQsNFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU"
    "FBQUFBQUFBQUFBQUFBT/ygARCAAHAA0DASIAAhEBAxEB/8wABgAQARD/2gAMAwEAAhADEAAAAc6Ib+yRkP/MAAQQBf/aAAgB"
    "AQABBQIYFaU0cT0hBPb/zAAEEQX/2gAIAQMBAT8BhtjiXsZISUd44OY8cP/MAAQRBf/aAAgBAgEBPwGdXFLs/DZZqvUffKnA"
    "/8wABBAF/9oACAEBAAY/AiPl6lGAAhJR5cUJw5VMMdXyQP/MAAQQBf/aAAgBAQABPyHVEQJiKcXXutt29j1lQP/aAAwDAQAC"
    "AAMAAAAQVP/MAAQRBf/aAAgBAwEBPxA1HxXPG6rygP/MAAQRBf/aAAgBAgEBPxDrYmZHvvLRCP/MAAQQBf/aAAgBAQABPxAh"
    "HC4SmNlnUqTGhT7RGEpxBWD/2Q==")

CASES = {
    # name: (bytes, what tf_shape predicts: (height, width, channels) or None for refused)
    "jpeg_arithmetic": (JPEG_ARITHMETIC, (7, 13, 3)),
    "jpeg_arithmetic_progressive": (JPEG_ARITHMETIC_PROGRESSIVE, (7, 13, 3)),
    "jpeg_rgb": (_saved(_gradient("RGB"), "JPEG"), (7, 13, 3)),
    "jpeg_gray": (_saved(_gradient("L"), "JPEG"), (7, 13, 1)),
    "jpeg_cmyk": (_saved(_gradient("CMYK"), "JPEG"), (7, 13, 3)),
    "jpeg_progressive": (_saved(_gradient("RGB"), "JPEG", progressive=True), (7, 13, 3)),
    "png_rgba": (_saved(_gradient("RGBA"), "PNG"), (7, 13, 4)),
    "png_la": (_saved(_gradient("LA"), "PNG"), (7, 13, 2)),
    "png_16bit": (_saved(Image.fromarray(np.full((7, 13), 40000, np.uint16)), "PNG"), (7, 13, 1)),
    "png_palette": (_saved(_gradient("RGB").convert("P"), "PNG"), (7, 13, 3)),
    "png_palette_trns": (_saved(_gradient("P"), "PNG", transparency=0), (7, 13, 4)),
    "png_1bit": (_saved(_gradient("1"), "PNG"), (7, 13, 1)),
    "gif": (_saved(_gradient("P"), "GIF"), (7, 13, 3)),
    "gif_small_first_frame": (_gif_with_small_first_frame(), (10, 8, 3)),
    "bmp_24": (_saved(_gradient("RGB"), "BMP"), (7, 13, 3)),
    "bmp_32": (_saved(_gradient("RGBA"), "BMP"), (7, 13, 4)),
    "bmp_8_palette": (_saved(_gradient("P"), "BMP"), None),  # TF: palette indices as gray
    "bmp_1": (_saved(_gradient("1"), "BMP"), None),
    "webp_rgb": (_saved(_gradient("RGB"), "WEBP", lossless=True), (7, 13, 3)),
    "webp_rgba": (_saved(_gradient("RGBA"), "WEBP", lossless=True), None),
    "tiff": (_saved(_gradient("RGB"), "TIFF"), None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_predicts_what_tensorflow_decodes(name):
    data, expected = CASES[name]
    try:
        predicted = tf_shape(data)
        got = (predicted.height, predicted.width, predicted.channels)
    except ImageError as err:
        assert err.reason == "tf_undecodable" and "image" in err.detail
        got = None
    assert got == expected
    actual = tf_decodes(data)
    if expected is not None:
        assert actual == expected
    else:  # TensorFlow fails, or decodes something else than the image (BMP palette indices)
        true_shape = (Image.open(io.BytesIO(data)).height, Image.open(io.BytesIO(data)).width,
                      3 if name != "webp_rgba" else 4)
        assert actual != true_shape


@pytest.mark.parametrize("name", sorted(CASES))
def test_default_mode_stores_what_tensorflow_decodes_as_recorded(name):
    data, _ = CASES[name]
    stored, info = encode_image(data, EncodeSettings())
    assert tf_decodes(stored) == (info.height, info.width, info.channels)
    assert info.source_format == name.split("_")[0]
    if info.source_format in ("jpeg", "png"):
        assert stored == data
    else:
        assert info.format == "png" and stored[:8] == b"\x89PNG\r\n\x1a\n"
    features = {"image/encoded": ("bytes", [stored]), "image/format": ("bytes", [info.format.encode()]),
                "image/height": ("int64", [info.height]), "image/width": ("int64", [info.width]),
                "image/channels": ("int64", [info.channels])}
    assert image_problem(features) is None


def test_arithmetic_jpegs_are_what_they_say_and_decode_to_the_huffman_pixels():
    assert b"\xff\xc9\x00\x11" in JPEG_ARITHMETIC and b"\xff\xca\x00\x11" in JPEG_ARITHMETIC_PROGRESSIVE
    huffman = tf.io.decode_image(imagegen.jpeg("RGB", (13, 7)), channels=3).numpy()
    for data in (JPEG_ARITHMETIC, JPEG_ARITHMETIC_PROGRESSIVE):
        np.testing.assert_array_equal(tf.io.decode_image(data, channels=3).numpy(), huffman)


def test_default_mode_converts_losslessly():
    data = _saved(Image.fromarray(np.arange(7 * 13, dtype=np.uint16).reshape(7, 13) * 700), "TIFF")
    stored, info = encode_image(data, EncodeSettings())
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(stored))),
                                  np.asarray(Image.open(io.BytesIO(data))))
    assert (info.format, info.source_format, info.channels) == ("png", "tiff", 1)


def test_verify_names_the_format_tensorflow_cannot_decode():
    data, _ = CASES["tiff"]
    features = {"image/encoded": ("bytes", [data]), "image/format": ("bytes", [b"tiff"]),
                "image/height": ("int64", [7]), "image/width": ("int64", [13]),
                "image/channels": ("int64", [3])}
    problem = image_problem(features)
    assert problem is not None and "TensorFlow cannot decode this tiff image" in problem


# --- The corpus -------------------------------------------------------------------------

# reencode and raw decode every image fully either way; resized, their output stays small.
CORPUS_MODES = {"tf": [], "passthrough": ["--image_mode", "passthrough"],
                "reencode": ["--image_mode", "reencode", "--image_format", "png", "--resize", "24x16"],
                "raw": ["--image_mode", "raw", "--resize", "24x16"]}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("corpus"))
    make_corpus(root)
    return root


@pytest.fixture(scope="module")
def corpus_builds(corpus, tmp_path_factory):
    """Image mode -> (output folder, [record features]) for one build of the corpus per mode."""
    from beam_jobs import build_shards

    builds = {}
    for mode, flags in CORPUS_MODES.items():
        out = str(tmp_path_factory.mktemp(f"corpus_{mode}"))
        assert build_shards.run(["--input", corpus, "--output_dir", out, "--num_shards", "1",
                                 "--max_bad_fraction", "1", *flags]) == 0
        records = [ex for name in shard_files(out) for ex in examples(os.path.join(out, name))]
        builds[mode] = (out, records)
    return builds


def _counts(records, which) -> dict[str, int]:
    return dict(sorted(collections.Counter(which(ex) for ex in records if which(ex)).items()))


@pytest.mark.slow
def test_corpus_default_build_decodes_in_tensorflow(corpus_builds, corpus):
    out, records = corpus_builds["tf"]
    assert len(records) > 500
    fixes, turned = collections.Counter(), 0
    for ex in records:
        shape = (ex["image/height"], ex["image/width"], ex["image/channels"])
        assert tf_decodes(ex["image/encoded"]) == shape, ex["image/filename"]
        source = open(os.path.join(corpus, ex["image/filename"].decode()), "rb").read()
        if read_image_info(source, "header").orientation != 1:  # stored upright
            turned += 1
            upright = ImageOps.exif_transpose(Image.open(io.BytesIO(source)))
            assert (ex["image/width"], ex["image/height"]) == upright.size, ex["image/filename"]
            continue
        if ex["image/format"] == ex["image/source_format"]:  # kept, a PNG's colour chunk fixed
            fixed, fix = fix_png_chunks(source)
            assert ex["image/format"] in (b"jpeg", b"png") and ex["image/encoded"] == fixed
        else:
            assert ex["image/format"] == b"png"
            fix = fix_png_chunks(first_frame_png(source))[1]
        fixes[fix] += bool(fix)
    images = load_manifest(out)["images"]
    assert images["png_chunks_fixed"] == {fix: n for fix, n in sorted(fixes.items()) if fix}
    assert images["png_chunks_fixed"]["iccp_to_srgb"] >= 10  # Pillow's and scikit-image's HP profiles
    assert images["source_formats"] == _counts(records, lambda ex: ex["image/source_format"].decode())
    assert images["converted"] == _counts(
        records, lambda ex: ex["image/source_format"].decode()
        if ex["image/source_format"] != ex["image/format"] else None)
    assert images["tf_undecodable"] == {}
    assert sum(images["exif_oriented"].values()) == turned >= 5  # Pillow's EXIF test images
    # every format Pillow decodes
    assert {"tiff", "bmp", "gif", "webp", "avif", "jpeg2000", "tga", "ppm", "ico", "psd", "dds"} <= \
        set(images["converted"])


@pytest.mark.slow
def test_corpus_passthrough_counts_what_tensorflow_cannot_decode(corpus_builds, corpus):
    out, records = corpus_builds["passthrough"]
    undecodable = []
    for ex in records:
        source = open(os.path.join(corpus, ex["image/filename"].decode()), "rb").read()
        assert ex["image/encoded"] == source
        shape = (ex["image/height"], ex["image/width"], ex["image/channels"])
        if tf_decodes(ex["image/encoded"]) != shape:
            undecodable.append(ex["image/format"].decode())
        try:
            tf_shape(source)
        except ImageError:
            assert undecodable and undecodable[-1] == ex["image/format"].decode()
    images = load_manifest(out)["images"]
    assert images["tf_undecodable"] == dict(sorted(collections.Counter(undecodable).items()))
    assert images["tf_undecodable"]["tiff"] == images["source_formats"]["tiff"]
    assert images["converted"] == {}
    tf_records = corpus_builds["tf"][1]  # and the formats only tf mode reads
    assert len(records) == sum(ex["image/source_format"].decode() in passthrough_formats for ex in tf_records)


@pytest.mark.slow
def test_corpus_reencode_and_raw_decode(corpus_builds):
    # tf mode reads every format Pillow decodes, as reencode and raw do
    assert len(corpus_builds["reencode"][1]) == len(corpus_builds["raw"][1]) == len(corpus_builds["tf"][1])
    for ex in corpus_builds["reencode"][1]:
        assert tf_decodes(ex["image/encoded"]) == (ex["image/height"], ex["image/width"], 3) == (16, 24, 3)
    for ex in corpus_builds["raw"][1]:
        shape = [ex["image/height"], ex["image/width"], ex["image/channels"]]
        assert tf.reshape(tf.io.decode_raw(ex["image/encoded"], tf.uint8), shape).shape == shape


# libpng's warnings about the PNGs of the corpus left in a build: not about colour chunks.
_KEPT_PNG_WARNINGS = {"tRNS chunk has out-of-range samples for bit_depth", "IDAT: Extra compressed data"}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["tf", "reencode"])
def test_corpus_pngs_decode_without_colour_chunk_warnings(corpus_builds, mode, tmp_path):
    from tests.icc_fixtures import png_warnings, tensorflow_decodes

    pngs = [ex["image/encoded"] for ex in corpus_builds[mode][1] if ex["image/format"] == b"png"]
    assert len(pngs) > 100
    warned = collections.Counter(warning for result in tensorflow_decodes(pngs, str(tmp_path))
                                 for warning in png_warnings(result))
    assert set(warned) <= _KEPT_PNG_WARNINGS, warned


@pytest.mark.slow
def test_corpus_verify_agrees_with_tensorflow(corpus_builds):
    from beam_jobs import verify_shards

    out, _ = corpus_builds["tf"]
    assert verify_shards.run(["--output_dir", out, "--decode_images"]) == 0
    out, records = corpus_builds["passthrough"]
    report = os.path.join(out, "..", "passthrough_report.json")
    assert verify_shards.run(["--output_dir", out, "--decode_images", "--report", report]) == 1
    import json

    problems = json.load(open(report))["problems"]
    assert {p["kind"] for p in problems} == {"decode_error"}
    named = collections.Counter(p["detail"].split("TensorFlow")[1].split()[3]
                                if "TensorFlow" in p["detail"] else "?" for p in problems)
    assert dict(sorted(named.items())) == load_manifest(out)["images"]["tf_undecodable"]


# --- PNG image data TensorFlow refuses ----------------------------------

PNG_STREAMS = imagegen.png_streams()


def _png_features(data: bytes, height: int = 9, width: int = 13) -> dict:
    return {"image/encoded": ("bytes", [data]), "image/format": ("bytes", [b"png"]),
            "image/height": ("int64", [height]), "image/width": ("int64", [width]),
            "image/channels": ("int64", [1])}


@pytest.mark.parametrize("name", sorted(PNG_STREAMS))
def test_png_image_data_cases_are_what_tensorflow_decodes(name):
    data, decodes = PNG_STREAMS[name]
    got = tf_decodes(data)
    if decodes:
        assert isinstance(got, tuple), got
    else:
        assert isinstance(got, str) and f"Invalid PNG data, size {len(data)}" in got, got


@pytest.mark.parametrize("name", sorted(PNG_STREAMS))
def test_default_mode_and_verify_refuse_png_data_tensorflow_refuses(name):
    data, decodes = PNG_STREAMS[name]
    height, width = Image.open(io.BytesIO(data)).height, Image.open(io.BytesIO(data)).width
    problem = image_problem(_png_features(data, height, width))
    if decodes:
        stored, info = encode_image(data, EncodeSettings())
        assert stored == data and tf_decodes(stored) == (info.height, info.width, info.channels)
        assert problem is None
        return
    for settings in (EncodeSettings(), EncodeSettings(validate="decode"), EncodeSettings(validate="full"),
                     EncodeSettings(mode="passthrough")):
        with pytest.raises(ImageError) as err:
            encode_image(data, settings)
        assert err.value.reason == "corrupt_image"
    assert problem is not None and "does not decode: " in problem, problem
    if name in PILLOW_DECODES:  # verify used to pass these: Pillow decodes them
        assert "does not decode: corrupt_image: PNG" in problem, problem


# Damaged PNGs whose first frame Pillow decodes without an error.
PILLOW_DECODES = ("interlaced_short", "one_bit_short", "short_rows", "zlib_stream_without_end")


@pytest.mark.parametrize("flags", [[], ["--validate", "full"], ["--image_mode", "passthrough"]],
                         ids=["default", "full", "passthrough"])
def test_build_dead_letters_png_data_tensorflow_refuses(tmp_path, flags):
    from beam_jobs import build_shards

    root = tmp_path / "in"
    for name, (data, _) in PNG_STREAMS.items():
        os.makedirs(root / "a", exist_ok=True)
        (root / "a" / f"{name}.png").write_bytes(data)
    out = str(tmp_path / "out")
    assert build_shards.run(["--input", str(root), "--output_dir", out, "--num_shards", "1",
                             "--max_bad_fraction", "1", *flags]) == 0
    dead = {os.path.basename(d["path"]): d["reason"] for d in dead_letters(out)}
    assert dead == {f"{name}.png": "corrupt_image" for name, (_, decodes) in PNG_STREAMS.items()
                    if not decodes}
    records = [ex for name in shard_files(out) for ex in examples(os.path.join(out, name))]
    assert sorted(ex["image/filename"].decode() for ex in records) == sorted(
        f"a/{name}.png" for name, (_, decodes) in PNG_STREAMS.items() if decodes)
    for ex in records:
        assert tf_decodes(ex["image/encoded"]) == (ex["image/height"], ex["image/width"],
                                                   ex["image/channels"])
    assert load_manifest(out)["images"]["tf_undecodable"] == {}
