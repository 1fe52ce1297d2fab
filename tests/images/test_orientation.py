"""Records decode upright in TensorFlow: EXIF orientation 2-8 applied by ``--image_mode tf``.

``tf.io.decode_image`` ignores EXIF orientation, so a phone photo with
orientation 6 decoded lying on its side. Phone-style files are made with
Pillow (a crop of a real photo, EXIF with the camera's make and the
orientation; JPEG for 1-8, and PNG ``eXIf``, WebP ``EXIF`` and a TIFF tag),
stored by the real build job and decoded with real TensorFlow: the pixels
must be Pillow's ``ImageOps.exif_transpose`` of the source, exactly where the
tool stores PNG, within a small tolerance for re-encoded JPEG.
``--exif_orientation keep`` and ``passthrough`` keep every byte.
"""

from __future__ import annotations

import io
import json
import os
import pickle

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

import numpy as np
import pytest
from PIL import Image, ImageOps

from tests.shard_fixtures import build_records, examples, load_manifest, run_build, shard_files, write
from transforms.images.image_codec import ImageInfo, read_image_info
from transforms.images.items import ImageMeta, SourceImage
from transforms.images.orientation import ORIENTATION_TAG, exif_orientation, turned_upright
from transforms.images.records import EncodeSettings, encode_image

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[compat]')")

_MAKE = 0x010F  # EXIF Make: kept in a re-encoded JPEG


def _photo(width: int, height: int) -> Image.Image:
    """A crop of a real photo (scikit-image's cat), so JPEG behaves as on a phone's pictures."""
    import skimage.data

    return Image.fromarray(skimage.data.chelsea()[40:40 + height, 120:120 + width])


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[_MAKE] = "Phone"
    exif[ORIENTATION_TAG] = orientation
    return exif.tobytes()


def _saved(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **params)
    return out.getvalue()


def phone_jpeg(orientation: int, size=(64, 48), subsampling: int = 2) -> bytes:
    """A camera-like JPEG (4:2:0 by default, whole MCUs) whose EXIF says ``orientation``."""
    return _saved(_photo(*size), "JPEG", quality=88, subsampling=subsampling, exif=_exif(orientation))


# Relative path -> bytes: JPEG with every orientation, then other formats that carry one.
_INPUTS = {
    **{f"jpeg/o{o}.jpg": phone_jpeg(o) for o in range(1, 9)},
    "jpeg/odd_o6.jpg": phone_jpeg(6, size=(45, 30)),  # the block grid moves: finer tables
    "jpeg/422_o8.jpg": phone_jpeg(8, subsampling=1),
    "other/o6.png": _saved(_photo(30, 20), "PNG", exif=_exif(6)),
    "other/o8.webp": _saved(_photo(30, 20), "WEBP", lossless=True, exif=_exif(8)),
    "other/o3.tiff": _saved(_photo(30, 20), "TIFF", exif=_exif(3)),
}
_TURNED = sorted(name for name in _INPUTS if not name.endswith("o1.jpg"))


def _named(name: str) -> int:
    """The orientation a file's name gives (``.../o6.png`` -> 6)."""
    return int(name.rsplit("o", 1)[1][0])


def _upright(data: bytes) -> np.ndarray:
    """What a photo viewer shows: Pillow's decode, EXIF orientation applied, as RGB."""
    return np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"), dtype=np.int16)


def _tf_pixels(data: bytes) -> np.ndarray:
    return tf.io.decode_image(data, channels=3, expand_animations=False).numpy().astype(np.int16)


def _differs(stored: bytes, source: bytes) -> tuple[float, int]:
    """Mean and largest absolute difference between TensorFlow's decode of ``stored`` and the upright source.

    The source as a viewer shows it: for a JPEG, TensorFlow's own decode of
    the source turned as ``exif_transpose`` turns it (TensorFlow's and
    Pillow's JPEG decoders differ by about 1 on average even for the same
    bytes); for others, Pillow's ``exif_transpose`` itself.
    """
    got = _tf_pixels(stored)
    if Image.open(io.BytesIO(source)).format == "JPEG":
        turned = turned_upright(Image.fromarray(_tf_pixels(source).astype(np.uint8)), _orientation_of(source))
        want = np.asarray(turned, dtype=np.int16)
        assert np.abs(got - _upright(source)).mean() < 2.5  # and near Pillow's exif_transpose
    else:
        want = _upright(source)
    assert got.shape == want.shape
    diff = np.abs(got - want)
    return float(diff.mean()), int(diff.max())


def _orientation_of(data: bytes) -> int:
    return exif_orientation(Image.open(io.BytesIO(data)))


def test_tensorflow_ignores_the_orientation_of_the_sources():
    # The defect: the sideways image, 48 high where a viewer shows 64.
    for orientation in range(5, 9):
        data = _INPUTS[f"jpeg/o{orientation}.jpg"]
        assert _tf_pixels(data).shape == (48, 64, 3)
        assert _upright(data).shape == (64, 48, 3)
    for name in _TURNED:
        assert exif_orientation(Image.open(io.BytesIO(_INPUTS[name]))) == _named(name)


@pytest.mark.parametrize("name", _TURNED)
def test_default_mode_stores_the_image_upright(name):
    source = _INPUTS[name]
    stored, info = encode_image(source, EncodeSettings())
    height, width = _upright(source).shape[:2]
    assert (info.height, info.width) == (height, width)
    assert tuple(tf.io.decode_image(stored, channels=0, expand_animations=False).shape) == \
        (height, width, info.channels)
    assert info.orientation == _named(name)
    assert exif_orientation(Image.open(io.BytesIO(stored))) == 1  # a viewer does not turn it again
    mean, largest = _differs(stored, source)
    if name.startswith("jpeg/"):
        assert (info.format, info.upright) == ("jpeg", "jpeg_reencoded")
        assert Image.open(io.BytesIO(stored)).getexif()[_MAKE] == "Phone"  # other EXIF kept
        assert mean < 1.5 and largest <= 16, (mean, largest)
    else:
        assert (info.format, info.upright) == ("png", "lossless")
        assert (mean, largest) == (0, 0)


@pytest.mark.parametrize("name", ["jpeg/o2.jpg", "jpeg/o5.jpg", "jpeg/o6.jpg", "jpeg/o8.jpg"])
def test_jpeg_with_whole_blocks_is_re_encoded_with_its_own_tables_nearly_losslessly(name):
    source = _INPUTS[name]
    stored, _ = encode_image(source, EncodeSettings())
    tables = Image.open(io.BytesIO(source)).quantization
    turned = Image.open(io.BytesIO(stored)).quantization
    transposed = name in ("jpeg/o5.jpg", "jpeg/o6.jpg", "jpeg/o8.jpg")
    for slot, table in tables.items():
        want = np.array(table).reshape(8, 8)
        assert (np.array(turned[slot]).reshape(8, 8) == (want.T if transposed else want)).all()
    assert len(stored) < 1.1 * len(source)
    # Pillow's own decode of both: only the rounding of a second decode-encode differs.
    got = np.asarray(Image.open(io.BytesIO(stored)), dtype=np.int16)
    assert np.abs(got - _upright(source)).mean() < 0.5


def test_orientation_one_and_no_exif_keep_their_bytes():
    plain = _saved(_photo(64, 48), "JPEG", quality=88)
    for data in (_INPUTS["jpeg/o1.jpg"], plain):
        stored, info = encode_image(data, EncodeSettings())
        assert stored is data and info.upright == "" and info.orientation == 1


def test_keep_stores_the_bytes_and_the_orientation():
    for name in _TURNED:
        source = _INPUTS[name]
        stored, info = encode_image(source, EncodeSettings(exif_orientation="keep"))
        assert info.orientation == _named(name)
        if name.endswith(".tiff"):  # Pillow's TIFF decoder applies the orientation itself
            assert info.upright == "lossless"
            assert (_tf_pixels(stored) == _upright(source)).all()
        elif not name.endswith(".jpg"):  # the file's own pixels
            assert info.upright == ""
            assert (_tf_pixels(stored) == np.asarray(Image.open(io.BytesIO(source)).convert("RGB"))).all()
        if name.endswith((".jpg", ".png")):
            assert stored == source
    with pytest.raises(ValueError, match="always applies"):
        EncodeSettings(mode="reencode", exif_orientation="keep")


def test_malformed_exif_counts_as_no_orientation():
    broken = _INPUTS["jpeg/o6.jpg"].replace(b"Exif\x00\x00MM", b"Exif\x00\x00XX", 1).replace(
        b"Exif\x00\x00II", b"Exif\x00\x00XX", 1)
    stored, info = encode_image(broken, EncodeSettings())
    assert stored is broken and info.orientation == 1


def test_image_meta_keeps_orientation_through_pickling():
    info = ImageInfo("jpeg", 64, 48, 3, "jpeg", orientation=6, upright="jpeg_reencoded")
    meta = ImageMeta(SourceImage("/a.jpg", "a.jpg", "train", "x"), 0, "0" * 64, info, 100, 1)
    assert pickle.loads(pickle.dumps(meta)).info == info


# --- the build job -------------------------------------------------------------------------


def _build(tmp_path, capsys, *flags: str, inputs=_INPUTS) -> tuple[str, str, dict[str, dict]]:
    return build_records(tmp_path, capsys, inputs, *flags)


@pytest.mark.slow
def test_default_build_decodes_upright_in_tensorflow(tmp_path, capsys):
    out, stdout, records = _build(tmp_path, capsys)
    for name, ex in records.items():
        source = _INPUTS[name]
        height, width = _upright(source).shape[:2]
        assert (ex["image/height"], ex["image/width"]) == (height, width), name
        decoded = tf.io.decode_image(ex["image/encoded"], channels=0, expand_animations=False)
        assert tuple(decoded.shape) == (height, width, ex["image/channels"]), name
        mean, largest = _differs(ex["image/encoded"], source)
        assert mean < 1.5 and largest <= 16, name
        assert "image/orientation" not in ex
    assert records["jpeg/o1.jpg"]["image/encoded"] == _INPUTS["jpeg/o1.jpg"]
    manifest = load_manifest(out)
    assert manifest["images"]["exif_oriented"] == {"jpeg_reencoded": 9, "lossless": 3}
    assert manifest["images"]["exif_orientation_kept"] == {}
    assert "image/orientation" not in manifest["feature_spec"]
    assert manifest["options"]["exif_orientation"] == "apply"
    assert ("  turned upright for their EXIF orientation: 12 records (JPEG re-encoded with the source's "
            "quantization tables: 9; lossless, as PNG: 3)\n") in stdout
    from beam_jobs import verify_shards

    assert verify_shards.run(["--output_dir", out, "--decode_images"]) == 0


@pytest.mark.slow
def test_keep_build_writes_image_orientation(tmp_path, capsys):
    out, stdout, records = _build(tmp_path, capsys, "--exif_orientation", "keep")
    for name, ex in records.items():  # what the stored pixels need: the TIFF is decoded upright
        assert ex["image/orientation"] == (1 if name.endswith(".tiff") else _named(name))
        if name.endswith((".jpg", ".png")):
            assert ex["image/encoded"] == _INPUTS[name]
    parsed = tf.io.parse_single_example(_serialized(out, "jpeg/o6.jpg"),  # as a reader parses it
                                        {"image/orientation": tf.io.FixedLenFeature([], tf.int64)})
    assert int(parsed["image/orientation"]) == 6
    manifest = load_manifest(out)
    assert manifest["feature_spec"]["image/orientation"] == "int64"
    assert manifest["images"]["exif_oriented"] == {"lossless": 1}  # the TIFF
    assert manifest["images"]["exif_orientation_kept"] == {"2": 1, "3": 1, "4": 1, "5": 1, "6": 3,
                                                           "7": 1, "8": 3}
    assert ("  stored as the file holds them, not upright: 11 records with an EXIF orientation "
            "(orientation 2 1, 3 1, 4 1, 5 1, 6 3, 7 1, 8 3); image/orientation holds it\n") in stdout
    from beam_jobs import verify_shards

    assert verify_shards.run(["--output_dir", out, "--decode_images"]) == 0


def _serialized(out: str, filename: str) -> bytes:
    from tests.shard_fixtures import records as shard_records
    from transforms.example.codec import decode_example

    for name in shard_files(out):
        for _, data in shard_records(os.path.join(out, name)):
            if decode_example(data)["image/filename"][1][0] == filename.encode():
                return data
    raise AssertionError(filename)


def test_passthrough_keeps_every_byte_and_counts_what_is_not_upright(tmp_path, capsys):
    jpegs = {name: data for name, data in _INPUTS.items() if name.startswith("jpeg/")}
    out, stdout, records = _build(tmp_path, capsys, "--image_mode", "passthrough", inputs=jpegs)
    assert all(ex["image/encoded"] == jpegs[name] for name, ex in records.items())
    assert load_manifest(out)["images"]["exif_orientation_kept"] == {"2": 1, "3": 1, "4": 1, "5": 1, "6": 2,
                                                                     "7": 1, "8": 2}
    assert "; --image_mode tf turns them upright\n" in stdout


@pytest.mark.slow
def test_boxes_turn_with_the_pixels(tmp_path, capsys):
    root = tmp_path / "in"
    write(str(root / "o6.jpg"), _INPUTS["jpeg/o6.jpg"])
    rows = [{"path": "o6.jpg", "label": "cat", "objects": [{"bbox": [0, 0, 16, 8], "label": "ear"}]}]
    write(str(root / "in.jsonl"), "\n".join(json.dumps(r) for r in rows).encode())
    boxes = {}
    for mode in ("tf", "reencode"):
        out = str(tmp_path / mode)
        status, _, stderr = run_build(capsys, "--input", str(root / "in.jsonl"), "--output_dir", out,
                                      "--image_mode", mode)
        assert status == 0, stderr
        [ex] = [ex for name in shard_files(out) for ex in examples(os.path.join(out, name))]
        boxes[mode] = [ex[f"image/object/bbox/{k}"] for k in ("xmin", "ymin", "xmax", "ymax")]
    # Orientation 6 turns the top-left 16x8 box of the 64x48 file to the top-right 8x16 of 48x64.
    assert boxes["tf"] == boxes["reencode"]
    np.testing.assert_allclose(boxes["tf"], [1 - 8 / 48, 0, 1, 16 / 64])


def test_keep_needs_tf_or_passthrough(tmp_path, capsys):
    write(str(tmp_path / "in" / "a.jpg"), _INPUTS["jpeg/o6.jpg"])
    status, _, stderr = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(tmp_path / "out"),
                                  "--image_mode", "reencode", "--exif_orientation", "keep")
    assert status == 2
    assert stderr.strip().splitlines()[-1].endswith(
        "--exif_orientation keep is for --image_mode tf or passthrough; reencode always applies the orientation")


def test_inspect_reads_the_orientation_from_the_header_only():
    info = read_image_info(_INPUTS["other/o6.png"], "header")
    assert info.orientation == 6 and (info.height, info.width) == (20, 30)


@pytest.mark.slow
def test_plan_with_keep_gives_the_records_the_build_writes(tmp_path, capsys):
    from beam_jobs import plan_build

    root = tmp_path / "in"
    jpegs = {name: data for name, data in _INPUTS.items() if name.endswith((".jpg", ".png"))}
    for name, data in jpegs.items():
        write(str(root / name), data)
    common = ["--input", str(root), "--validate", "header", "--exif_orientation", "keep", "--num_shards", "1"]
    plan_json = str(tmp_path / "plan.json")
    capsys.readouterr()
    assert plan_build.run([*common, "--output_dir", str(tmp_path / "out"), "--plan_json", plan_json]) == 0
    status, _, stderr = run_build(capsys, *common, "--output_dir", str(tmp_path / "out"))
    assert status == 0, stderr
    plan = json.loads(open(plan_json, encoding="utf-8").read())
    manifest = load_manifest(str(tmp_path / "out"))
    assert manifest["feature_spec"]["image/orientation"] == "int64"
    assert plan["record_sizes_estimated"] == 0  # every record's size exact, image/orientation included
    assert (plan["splits"]["train"]["records"], plan["splits"]["train"]["record_bytes"]) == \
        (manifest["splits"]["train"]["records"], manifest["splits"]["train"]["bytes"])
