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


def _read_labels(out: str) -> dict[str, int]:
    """image/filename -> image/class/label of every record, as tf.data reads them."""
    spec = {"image/class/label": tf.io.FixedLenFeature([], tf.int64),
            "image/filename": tf.io.FixedLenFeature([], tf.string)}
    files = [os.path.join(out, name) for name in shard_files(out)]
    return {ex["image/filename"].numpy().decode(): int(ex["image/class/label"].numpy())
            for ex in (tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(
                files, compression_type="GZIP" if files[0].endswith(".gz") else ""))}


@pytest.mark.slow
def test_an_append_and_a_plan_read_integer_labels_as_the_build_does(tmp_path, capsys) -> None:
    from beam_jobs import plan_build

    _images(str(tmp_path / "in"))
    first = write(str(tmp_path / "in" / "a.csv"), b"path,label\nimg0.png,0\nimg1.png,2\n")
    later = write(str(tmp_path / "in" / "b.csv"), b"path,label\nimg2.png,9\nimg3.png,11\n")
    out = str(tmp_path / "out")
    assert run_build(capsys, "--input", first, "--output_dir", out)[0] == 0
    plan = str(tmp_path / "plan.json")
    capsys.readouterr()
    status = plan_build.run(["--input", later, "--output_dir", out, "--append", "--plan_json", plan])
    assert status == 0, capsys.readouterr()
    with open(plan) as fh:
        assert json.load(fh)["splits"]["train"]["classes"] == {"9": 1, "11": 1}
    status, _, err = run_build(capsys, "--input", later, "--output_dir", out, "--append")
    assert status == 0, err
    with open(os.path.join(out, "labels.txt")) as fh:
        assert fh.read().split() == [str(i) for i in range(12)]
    assert _read_labels(out) == {"img0.png": 0, "img1.png": 2, "img2.png": 9, "img3.png": 11}
    mixed = write(str(tmp_path / "in" / "c.csv"), b"path,label\nimg4.png,9\nimg5.png,cat\n")
    capsys.readouterr()
    assert plan_build.run(["--input", mixed, "--output_dir", str(tmp_path / "other")]) == 2
    assert "labels mix class indices and class names (e.g. 9 and 'cat')" in capsys.readouterr().err


def test_class_names_that_are_integers_out_of_index_order_are_refused(tmp_path, capsys) -> None:
    manifest = write(str(tmp_path / "m.csv"), b"path,label\na.png,1\n")
    status, _, err = run_build(capsys, "--input", manifest, "--output_dir", str(tmp_path / "out"),
                               "--class_names", "1,2,3")
    assert status == 2
    assert "--class_names/--labels_file: class '1' is at index 0: an integer label is a class index" in err
