"""Labels built through every input kind, read back with tf.data and compared with what went in.

The same images, labelled by the integers 0, 2, 9 and 11, as a CSV manifest, a
JSON Lines manifest, a WebDataset shard and a Parquet file: TensorFlow reads
``image/class/label`` back as the integer each image was given (not ``9`` as
11, which sorting ``0 1 10 11 2 ...`` as text made it), and ``labels.txt``
lists ``0`` to ``11``.
"""

from __future__ import annotations

import json
import os
import random
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.archive_fixtures import add_bytes
from tests.shard_fixtures import image_bytes, load_manifest, run_build, shard_files, write

tf = pytest.importorskip("tensorflow")

LABELS = {f"img{i}.png": label for i, label in enumerate((0, 2, 9, 11, 9, 2))}


def _images(folder: str) -> dict[str, bytes]:
    rng = random.Random(5)
    data = {name: image_bytes(str(label), "PNG", rng) for name, label in LABELS.items()}
    for name, payload in data.items():
        write(os.path.join(folder, name), payload)
    return data


def _inputs(kind: str, folder: str, data: dict[str, bytes]) -> tuple[str, dict[str, str]]:
    """The input of ``kind`` holding the images, and each image's ``image/filename`` -> its name in LABELS."""
    if kind == "csv":
        path = write(os.path.join(folder, "m.csv"),
                     ("path,label\n" + "".join(f"{n},{label}\n" for n, label in LABELS.items())).encode())
        return path, {n: n for n in LABELS}
    if kind == "jsonl":
        path = write(os.path.join(folder, "m.jsonl"), "".join(
            json.dumps({"path": n, "label": label}) + "\n" for n, label in LABELS.items()).encode())
        return path, {n: n for n in LABELS}
    if kind == "webdataset":
        path = os.path.join(folder, "shard.tar")
        with tarfile.open(path, "w") as archive:
            for i, (n, label) in enumerate(LABELS.items()):
                add_bytes(archive, f"{i:04d}.png", data[n])
                add_bytes(archive, f"{i:04d}.cls", str(label).encode())
        return path, {f"shard.tar!{i:04d}.png": n for i, n in enumerate(LABELS)}
    path = os.path.join(folder, "rows.parquet")
    pq.write_table(pa.table({"image": pa.array([data[n] for n in LABELS], pa.binary()),
                             "label": pa.array(list(LABELS.values()), pa.int64())}), path)
    return path, {f"rows.parquet!{i}": n for i, n in enumerate(LABELS)}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["csv", "jsonl", "webdataset", "parquet"])
def test_integer_labels_read_back_by_tensorflow_as_they_went_in(kind, tmp_path, capsys) -> None:
    data = _images(str(tmp_path / "in"))
    path, names = _inputs(kind, str(tmp_path / "in"), data)
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", path, "--output_dir", out)
    assert status == 0, err
    with open(os.path.join(out, "labels.txt")) as fh:
        assert fh.read().split() == [str(i) for i in range(12)]
    assert load_manifest(out)["records"] == len(LABELS)
    spec = {"image/class/label": tf.io.FixedLenFeature([], tf.int64),
            "image/class/text": tf.io.FixedLenFeature([], tf.string),
            "image/filename": tf.io.FixedLenFeature([], tf.string)}
    files = [os.path.join(out, name) for name in shard_files(out)]
    got = {}
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP" if files[0].endswith(".gz") else ""):
        ex = tf.io.parse_single_example(record, spec)
        got[names[ex["image/filename"].numpy().decode()]] = (int(ex["image/class/label"].numpy()),
                                                             ex["image/class/text"].numpy().decode())
    assert got == {n: (label, str(label)) for n, label in LABELS.items()}
