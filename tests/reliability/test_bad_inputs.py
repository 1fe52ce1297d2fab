"""Reliability: bad images and bad manifest rows through the real build job.

One input manifest lists every case of ``CASES`` plus rows that are wrong in
themselves (a missing file, an unknown label, an empty path, a path given
twice). The build job runs on it in each image mode; every case has a stated
outcome per mode, either a record with a format, size and channel count, or a
dead letter with its reason, and in every run records + dead letters equal
the manifest's rows.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from PIL import Image, ImageOps

from tests import imagegen
from tests.shard_fixtures import dead_letters, examples, load_manifest, shard_files, write

# A 16-bit ramp that tells scaling (v >> 8) from clipping (min(v, 255)) apart.
GRAY16 = np.array([[0, 255, 256, 511, 4096], [32768, 40000, 65279, 65280, 65535]], dtype=np.uint16)
LABELS = ("rose", "tulip")
MODES = ("tf", "passthrough", "header", "reencode", "raw")  # header: passthrough with --validate header
FLAGS = {
    "tf": [],  # the default
    "passthrough": ["--image_mode", "passthrough"],
    "header": ["--image_mode", "passthrough", "--validate", "header"],
    "reencode": ["--image_mode", "reencode", "--image_format", "png"],  # lossless: pixels can be checked
    "raw": ["--image_mode", "raw"],
}


@dataclass(frozen=True)
class Record:
    """Expected record: ``image/format``, height, width, channels."""

    format: str
    height: int
    width: int
    channels: int


@dataclass(frozen=True)
class Dead:
    """Expected dead letter with this reason."""

    reason: str


def _cut_jpeg() -> bytes:
    data = imagegen.jpeg("RGB", size=(64, 48))
    return data[: int(len(data) * 0.7)]  # inside the entropy-coded data, header intact


def _cut_png() -> bytes:
    data = imagegen.png("RGB", size=(64, 48))
    idat = data.index(b"IDAT")
    return data[: idat + 40]  # inside the pixel data, header intact


def _all(outcome) -> dict[str, object]:
    return {mode: outcome for mode in MODES}


def _decoded(h: int, w: int, source: str) -> dict[str, object]:
    """Outcome of a good image: passthrough stores ``source``; reencode/raw give 8-bit RGB.

    The tf mode keeps JPEG and PNG and stores a GIF's first frame as a palette PNG.
    """
    fmt, channels = source.split(":")
    kept = Record(fmt, h, w, int(channels))
    return {"tf": kept if fmt in ("jpeg", "png") else Record("png", h, w, 3), "passthrough": kept, "header": kept, "reencode": Record("png", h, w, 3),
            "raw": Record("raw", h, w, 3)}


# name -> (file name, bytes, outcome per mode)
CASES: dict[str, tuple[str, Callable[[], bytes], dict[str, object]]] = {
    "plain_jpeg": ("plain.jpg", lambda: imagegen.jpeg("RGB", size=(30, 20)), _decoded(20, 30, "jpeg:3")),
    "truncated_jpeg": ("truncated.jpg", _cut_jpeg,
                       {**_all(Dead("truncated")), "header": Record("jpeg", 48, 64, 3)}),
    "truncated_png": ("truncated.png", _cut_png,
                      {**_all(Dead("truncated")), "header": Record("png", 48, 64, 3)}),
    "zero_bytes": ("zero.jpg", lambda: b"", _all(Dead("empty_file"))),
    "text_named_jpg": ("notes.jpg", lambda: b"shopping list: eggs, milk\n" * 4, _all(Dead("not_an_image"))),
    "decompression_bomb": ("bomb.png", lambda: imagegen.png_declaring(20000, 20000),
                           _all(Dead("decompression_bomb"))),
    "cmyk_jpeg": ("cmyk.jpg", lambda: imagegen.jpeg("CMYK", size=(26, 18)), _decoded(18, 26, "jpeg:3")),
    "png_16bit": ("deep.png", lambda: imagegen.png_16bit(GRAY16), _decoded(2, 5, "png:1")),
    "palette_transparent": ("palette.png", lambda: imagegen.png("P", size=(18, 14), transparency=True),
                            _decoded(14, 18, "png:4")),
    # Stored 40 wide, 24 high, EXIF orientation 6 (rotate 90 degrees clockwise to display):
    # passthrough keeps it as the file holds it, the other modes store it upright.
    "exif_rotated": ("rotated.jpg", lambda: imagegen.jpeg("RGB", size=(40, 24), exif_orientation=6),
                     {**_decoded(24, 40, "jpeg:3"), "tf": Record("jpeg", 40, 24, 3),
                      "reencode": Record("png", 40, 24, 3), "raw": Record("raw", 40, 24, 3)}),
    "animated_gif": ("anim.gif", lambda: imagegen.gif_animated(3, size=(16, 12)), _decoded(12, 16, "gif:3")),
    "grayscale": ("gray.jpg", lambda: imagegen.jpeg("L", size=(22, 16)), _decoded(16, 22, "jpeg:1")),
    "rgba": ("rgba.png", lambda: imagegen.png("RGBA", size=(20, 12)), _decoded(12, 20, "png:4")),
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Files of every case and the input manifest; returns (root, manifest, expected, rows)."""
    root = str(tmp_path_factory.mktemp("bad_inputs"))
    lines = ["path,label"]
    expected: list[tuple[str, dict[str, object]]] = []  # (dead-letter path or image/filename, outcome)
    for index, (name, (file_name, make, outcome)) in enumerate(CASES.items()):
        write(os.path.join(root, "imgs", file_name), make())
        lines.append(f"imgs/{file_name},{LABELS[index % 2]}")
        expected.append((f"imgs/{file_name}", outcome))
    write(os.path.join(root, "imgs", "unknown.jpg"), imagegen.jpeg("RGB", size=(11, 7)))
    write(os.path.join(root, "imgs", "dup.jpg"), imagegen.jpeg("RGB", size=(13, 9)))
    for path, label, outcome in [
        ("imgs/missing.jpg", "rose", Dead("unreadable")),
        ("imgs/unknown.jpg", "zebra", Dead("unknown_label")),
        ("", "rose", Dead("bad_manifest_row")),
        ("imgs/dup.jpg", "rose", Dead("duplicate_path")),
        ("imgs/dup.jpg", "tulip", Dead("duplicate_path")),
    ]:
        lines.append(f"{path},{label}")
        where = path or f"list.csv:{len(lines)}"  # a row without a path is named by its line
        expected.append((where, _all(outcome)))
    manifest = os.path.join(root, "list.csv")
    with open(manifest, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return root, manifest, expected, len(lines) - 1


@pytest.fixture(scope="module")
def build(dataset, tmp_path_factory) -> Callable[[str], tuple]:
    """Runs the build job once per mode, on first use; returns (root, out, expected, rows, summary)."""
    root, manifest, expected, rows = dataset
    done: dict[str, tuple] = {}

    def get(mode: str) -> tuple:
        if mode not in done:
            from beam_jobs import build_shards

            out = str(tmp_path_factory.mktemp(f"out_{mode}"))
            capture = io.StringIO()
            stdout, sys.stdout = sys.stdout, capture
            try:
                status = build_shards.run(["--input", manifest, "--output_dir", out, "--class_names",
                                           ",".join(LABELS), "--max_bad_fraction", "1", *FLAGS[mode]])
            finally:
                sys.stdout = stdout
            assert status == 0
            done[mode] = (root, out, expected, rows, capture.getvalue())
        return done[mode]

    return get


def _relative(path: str, root: str) -> str:
    assert path.startswith(root + "/"), path
    return path[len(root) + 1:]


def _records(out: str) -> dict[str, dict]:
    return {ex["image/filename"].decode(): ex for n in shard_files(out) for ex in examples(os.path.join(out, n))}


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_every_case_has_its_stated_outcome(build, mode: str) -> None:
    root, out, expected, _, _ = build(mode)
    got_dead = sorted((_relative(d["path"], root), d["reason"]) for d in dead_letters(out))
    want_dead = sorted((where, outcome[mode].reason) for where, outcome in expected
                       if isinstance(outcome[mode], Dead))
    assert got_dead == want_dead
    records = _records(out)
    want_records = {where: outcome[mode] for where, outcome in expected if isinstance(outcome[mode], Record)}
    assert sorted(records) == sorted(want_records)
    for where, want in want_records.items():
        ex = records[where]
        got = Record(ex["image/format"].decode(), ex["image/height"], ex["image/width"], ex["image/channels"])
        assert got == want, where
        source = open(os.path.join(root, where), "rb").read()
        assert ex["image/key/sha256"].decode() == hashlib.sha256(source).hexdigest()
        if mode in ("passthrough", "header") or (mode == "tf" and ex["image/source_format"] == ex["image/format"]
                                                 and where != "imgs/rotated.jpg"):
            assert ex["image/encoded"] == source, where
        elif mode == "raw":
            assert len(ex["image/encoded"]) == got.height * got.width * got.channels, where


@pytest.mark.parametrize("mode", MODES)
def test_written_plus_dead_lettered_equals_inputs(build, mode: str) -> None:
    _, out, _, rows, summary = build(mode)
    manifest = load_manifest(out)
    assert manifest["records"] + manifest["dead_letters"] == rows
    assert manifest["dead_letters"] == len(dead_letters(out))
    assert f"written + dead-lettered = {rows} inputs" in summary


def _pixels(ex: dict) -> np.ndarray:
    """The decoded pixels of a reencode (PNG) or raw record, as an H x W x 3 array."""
    if ex["image/format"] == b"raw":
        return np.frombuffer(ex["image/encoded"], np.uint8).reshape(ex["image/height"], ex["image/width"], 3)
    with Image.open(io.BytesIO(ex["image/encoded"])) as img:
        assert img.mode == "RGB"
        return np.asarray(img)


def _source(root: str, file_name: str) -> Image.Image:
    img = Image.open(os.path.join(root, "imgs", file_name))
    img.load()
    return img


@pytest.mark.parametrize("mode", ["reencode", "raw"])
def test_converted_pixels_follow_the_documented_policy(build, mode: str) -> None:
    root, out, _, _, _ = build(mode)
    records = _records(out)
    # 16-bit: scaled to 8 bits (v >> 8), not clipped at 255.
    deep = _pixels(records["imgs/deep.png"])
    assert (deep == (GRAY16 >> 8).astype(np.uint8)[:, :, None]).all()
    # Palette with a transparent index: those pixels become white, the others keep their colour.
    palette = _source(root, "palette.png")
    indexes = np.asarray(palette)
    colours = np.asarray(palette.convert("RGB"))
    got = _pixels(records["imgs/palette.png"])
    assert (got[indexes == 0] == 255).all() and (indexes == 0).any()
    assert (got[indexes != 0] == colours[indexes != 0]).all()
    # RGBA: composited over white.
    rgba = np.asarray(_source(root, "rgba.png")).astype(np.float64)
    alpha = rgba[:, :, 3:] / 255.0
    want = np.rint(rgba[:, :, :3] * alpha + 255.0 * (1 - alpha))
    assert np.abs(_pixels(records["imgs/rgba.png"]).astype(np.float64) - want).max() <= 1
    # EXIF orientation 6 applied: the stored pixels rotated 90 degrees clockwise.
    stored = np.asarray(_source(root, "rotated.jpg").convert("RGB"))
    assert (_pixels(records["imgs/rotated.jpg"]) == np.rot90(stored, k=-1)).all()
    # Animated GIF: the first frame only.
    with Image.open(os.path.join(root, "imgs", "anim.gif")) as gif:
        assert gif.n_frames == 3
        first = np.asarray(gif.convert("RGB"))
    assert (_pixels(records["imgs/anim.gif"]) == first).all()
    # CMYK and grayscale JPEG: converted to RGB as Pillow decodes them.
    for name in ("cmyk.jpg", "gray.jpg"):
        want = np.asarray(ImageOps.exif_transpose(_source(root, name)).convert("RGB"))
        assert (_pixels(records[f"imgs/{name}"]) == want).all(), name


def test_tf_mode_stores_the_first_frame_of_an_animation_as_png(build) -> None:
    root, out, _, _, _ = build("tf")
    ex = _records(out)["imgs/anim.gif"]
    assert (ex["image/format"], ex["image/source_format"]) == (b"png", b"gif")
    with Image.open(os.path.join(root, "imgs", "anim.gif")) as gif:
        first = np.asarray(gif.convert("RGB"))
    with Image.open(io.BytesIO(ex["image/encoded"])) as img:
        assert getattr(img, "n_frames", 1) == 1
        assert (np.asarray(img.convert("RGB")) == first).all()
    assert load_manifest(out)["images"]["converted"] == {"gif": 1}


def test_passthrough_keeps_every_frame_of_an_animation(build) -> None:
    _, out, _, _, _ = build("passthrough")
    ex = _records(out)["imgs/anim.gif"]
    with Image.open(io.BytesIO(ex["image/encoded"])) as img:
        assert img.n_frames == 3


_BOMB_PROBE = r"""
import json
from PIL import Image
from tests import imagegen
from transforms.images import image_codec as images
from transforms.errors import ImageError

data = imagegen.png_declaring(20000, 20000)
calls = [(f"inspect_image/{level}", lambda level=level: images.read_image_info(data, level))
         for level in images.VALIDATE_LEVELS]
calls += [("reencode_image", lambda: images.reencode_image(data)),
          ("raw_pixels", lambda: images.raw_pixels(data))]
def peak_kib():
    # VmHWM: this program's own peak RSS (ru_maxrss would include the parent's).
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))

decoders = []  # every pixel decoder Pillow makes (ImageFile.load asks Image._getdecoder for one)
make_decoder = Image._getdecoder
def counted_decoder(*args, **kwargs):
    decoders.append(args[:2])
    return make_decoder(*args, **kwargs)
Image._getdecoder = counted_decoder

before = peak_kib()
result = {}
for name, call in calls:
    del decoders[:]
    try:
        call()
        reason = None
    except ImageError as err:
        reason = err.reason
    result[name] = [reason, len(decoders)]
print(json.dumps({"calls": result, "grew_kib": peak_kib() - before, "peak_kib": peak_kib()}))
"""


def test_decompression_bomb_is_rejected_before_decoding_or_allocating_pixels() -> None:
    # A fresh process, so its peak RSS is its own: 20000 x 20000 pixels would be >= 400 MB.
    proc = subprocess.run([sys.executable, "-c", _BOMB_PROBE], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    for name, (reason, decoders) in result["calls"].items():
        assert reason == "decompression_bomb", name
        assert decoders == 0, (name, decoders)  # refused from the header: no pixel decoded
    assert result["grew_kib"] < 20 * 1024, result
    assert result["peak_kib"] < 100 * 1024, result
