"""TensorFlow reads what the build job writes, and the project reads what TensorFlow writes.

One build per image mode (each with another compression) is shared by the
module; TensorFlow reads it with ``tf.data.TFRecordDataset`` and
``tf.io.parse_single_example`` using the schema of ``transforms.example.schema``.
"""

from __future__ import annotations

import gzip
import io
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

import numpy as np
import pytest
from PIL import Image

from tests.shard_fixtures import examples, load_manifest, records, shard_files
from tests.trees import Part
from transforms.example.codec import decode_example
from transforms.tfrecord.framing import iter_records
from transforms.example.schema import IMAGE_FEATURES, schema_problems

tf = pytest.importorskip(
    "tensorflow", reason="TensorFlow is not installed (pip install -e '.[compat]'); it has no "
                         "wheel for this platform or Python version")

TF_COMPRESSION = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}
MODES = {
    "tf": ("none", []),
    "passthrough": ("none", ["--image_mode", "passthrough"]),
    "reencode": ("gzip", ["--image_mode", "reencode", "--image_format", "png", "--grayscale",
                          "--resize", "20x16"]),
    "raw": ("zlib", ["--image_mode", "raw"]),
}


def tf_features() -> dict:
    """The parsing spec of ``IMAGE_FEATURES`` for ``tf.io.parse_single_example``."""
    kinds = {"bytes": tf.string, "int64": tf.int64}
    return {name: tf.io.FixedLenFeature([], kinds[kind]) for name, kind in IMAGE_FEATURES.items()}


TREE = (Part(per_class=3),)  # JPEGs and PNGs of three classes (tests/trees.py)
BUILDS = {mode: ("--num_shards", "2", "--compression", compression, *flags)
          for mode, (compression, flags) in MODES.items()}  # each test runs on each build


def tf_read(out: str, compression: str) -> list[dict]:
    """Every record of the shard set, in manifest order, parsed by TensorFlow."""
    files = [os.path.join(out, s["file"]) for s in load_manifest(out)["splits"]["train"]["shards"]]
    dataset = tf.data.TFRecordDataset(files, compression_type=TF_COMPRESSION[compression])
    spec = tf_features()
    return [tf.io.parse_single_example(record, spec) for record in dataset]


def pillow_pixels(data: bytes, mode: str) -> np.ndarray:
    """Pillow's decoding of an image as an (height, width, channels) array."""
    pixels = np.asarray(Image.open(io.BytesIO(data)).convert(mode))
    return pixels.reshape(pixels.shape[0], pixels.shape[1], -1)


def test_tensorflow_parses_every_record_as_written(built):
    mode, out = built.name, built.out
    compression = MODES[mode][0]
    parsed = tf_read(out, compression)
    ours = [ex for name in shard_files(out) for ex in examples(os.path.join(out, name))]
    assert len(parsed) == len(ours) == load_manifest(out)["records"] == 9
    for tf_ex, ex in zip(parsed, ours):
        got = {k: v.numpy() for k, v in tf_ex.items()}
        assert got == {k: ex[k] for k in IMAGE_FEATURES}
    labels = open(os.path.join(out, "labels.txt")).read().splitlines()
    for tf_ex in parsed:
        name = tf_ex["image/filename"].numpy().decode()
        assert labels[tf_ex["image/class/label"].numpy()] == name.split("/")[0]


def test_tensorflow_decodes_the_images(built, tree):
    mode, out = built.name, built.out
    compression = MODES[mode][0]
    for ex in tf_read(out, compression):
        with open(os.path.join(tree, ex["image/filename"].numpy().decode()), "rb") as fh:
            source = fh.read()
        encoded = ex["image/encoded"]
        shape = [int(ex[f"image/{k}"].numpy()) for k in ("height", "width", "channels")]
        if mode == "raw":
            pixels = tf.reshape(tf.io.decode_raw(encoded, tf.uint8), shape).numpy()
            np.testing.assert_array_equal(pixels, pillow_pixels(source, "RGB"))
            continue
        pixels = tf.io.decode_image(encoded, expand_animations=False).numpy()
        assert list(pixels.shape) == shape
        if mode == "reencode":  # a grayscale PNG made by the job: lossless, exact
            np.testing.assert_array_equal(pixels, pillow_pixels(encoded.numpy(), "L"))
            continue
        assert encoded.numpy() == source  # passthrough and tf keep JPEG and PNG bytes
        expected = pillow_pixels(source, "RGB")
        if ex["image/format"].numpy() == b"png":
            np.testing.assert_array_equal(pixels, expected)
        else:  # TF's default JPEG DCT is the fast one; the accurate one is Pillow's
            assert np.abs(pixels.astype(int) - expected.astype(int)).max() <= 8
            exact = tf.io.decode_jpeg(encoded, channels=3, dct_method="INTEGER_ACCURATE").numpy()
            np.testing.assert_array_equal(exact, expected)


def tf_examples(count: int) -> list[bytes]:
    """Image-schema Examples serialized by TensorFlow's own protos."""
    rng = np.random.default_rng(3)
    out = []
    for i in range(count):
        pixels = rng.integers(0, 256, size=(4 + i % 3, 5, 3), dtype=np.uint8)
        label = i % 2
        values = {
            "image/encoded": pixels.tobytes(), "image/format": b"raw",
            "image/height": pixels.shape[0], "image/width": 5, "image/channels": 3,
            "image/class/label": label, "image/class/text": [b"cat", b"dog"][label],
            "image/filename": f"tf/{i}.raw".encode(),
            "image/key/sha256": f"{i:064x}".encode(),
        }
        feature = {k: tf.train.Feature(bytes_list=tf.train.BytesList(value=[v])) if isinstance(v, bytes)
                   else tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
                   for k, v in values.items()}
        out.append(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return out


@pytest.fixture(scope="module")
def tf_written(tmp_path_factory):
    """(plain file, gzip file, records): files written by ``tf.io.TFRecordWriter``."""
    folder = tmp_path_factory.mktemp("tf_written")
    datas = tf_examples(12)
    plain, packed = str(folder / "plain.tfrecord"), str(folder / "packed.tfrecord.gz")
    for path, options, part in [(plain, None, datas[:7]), (packed, "GZIP", datas[7:])]:
        with tf.io.TFRecordWriter(path, options) as writer:
            for data in part:
                writer.write(data)
    return plain, packed, datas


def test_project_framing_reads_tensorflow_written_files(tf_written):
    plain, packed, datas = tf_written
    with open(plain, "rb") as fh:
        got = [data for _, data in iter_records(fh, plain, 0, os.path.getsize(plain))]
    with gzip.open(packed, "rb") as fh:
        got += [data for _, data in iter_records(fh, packed)]
    assert got == datas
    for data in got:
        assert schema_problems(decode_example(data)) == []


def test_reshard_job_reads_tensorflow_written_files(tf_written, tmp_path, capsys):
    from beam_jobs import reshard

    plain, packed, datas = tf_written
    out = str(tmp_path / "out")
    capsys.readouterr()
    assert reshard.run(["--input", plain, "--input", packed, "--output_dir", out,
                        "--num_shards", "2", "--split", "train"]) == 0, capsys.readouterr().err
    written = [data for name in shard_files(out) for _, data in records(os.path.join(out, name))]
    assert sorted(written) == sorted(datas)  # byte for byte, reshuffled
    assert load_manifest(out)["labels"] == ["cat", "dog"]


def test_verify_job_checks_tensorflow_written_files(tf_written, tmp_path, capsys):
    from beam_jobs import verify_shards

    plain, packed, _ = tf_written
    capsys.readouterr()
    pattern = os.path.join(os.path.dirname(plain), "*.tfrecord*")
    assert verify_shards.run(["--files", pattern, "--decode_images"]) == 0, capsys.readouterr()
    damaged = bytearray(open(plain, "rb").read())
    damaged[100] ^= 0x01  # inside the first record's data: its CRC no longer matches
    with open(tmp_path / "damaged.tfrecord", "wb") as fh:
        fh.write(bytes(damaged))
    assert verify_shards.run(["--files", str(tmp_path / "damaged.tfrecord")]) == 1
