"""End to end: what tensorflow-datasets and detection decoders get from a build.

Each build runs the real job on a few tiny images. tfds reads the folder with
``tfds.builder_from_directory`` (the real tensorflow-datasets); detection
records are parsed with the exact ``keys_to_features`` of Model Garden's
``official/vision/dataloaders/tf_example_decoder.py`` and the label map is
checked as the Object Detection API's ``label_map_util`` checks it.
"""

from __future__ import annotations

import collections
import glob
import json
import os

import numpy as np
import pytest

from tests import imagegen
from tests.shard_fixtures import load_manifest, run_build, write

tf = pytest.importorskip("tensorflow")
tfds = pytest.importorskip("tensorflow_datasets")


def _records(out: str, split: str = "train") -> dict[str, dict]:
    """filename -> the record's image bytes and label, parsed by TensorFlow."""
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/filename": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.VarLenFeature(tf.int64)}
    got = {}
    for record in tf.data.TFRecordDataset(sorted(glob.glob(os.path.join(out, f"{split}-*")))):
        ex = tf.io.parse_single_example(record, spec)
        got[ex["image/filename"].numpy().decode()] = {
            "encoded": ex["image/encoded"], "label": tf.sparse.to_dense(ex["image/class/label"]).numpy().tolist()}
    return got


# --- tensorflow-datasets -----------------------------------------------------------------------

def test_tfds_as_supervised_decodes_each_image_as_tensorflow_does(tmp_path, capsys):
    """Mixed channels (grey and RGBA PNGs, RGB JPEGs): tfds decodes each to its own channel count."""
    src, out = tmp_path / "src", str(tmp_path / "My-Flowers 2")
    files = {"daisy/a.jpg": imagegen.encode(imagegen.image("RGB", 20, 12, 1), "JPEG"),
             "daisy/b.png": imagegen.encode(imagegen.image("L", 16, 10, 2), "PNG"),
             "rose/c.png": imagegen.encode(imagegen.image("RGBA", 12, 14, 3), "PNG"),
             "rose/d.png": imagegen.encode(imagegen.image("RGB", 10, 8, 4), "PNG"),
             "tulip/e.jpg": imagegen.encode(imagegen.image("L", 18, 6, 5), "JPEG")}
    for name, data in files.items():
        write(str(src / name), data)
    status, _, err = run_build(capsys, "--input", str(src), "--output_dir", out, "--num_shards", "2")
    assert status == 0, err
    assert load_manifest(out)["images"]["channels"] == {"1": 2, "3": 2, "4": 1}

    builder = tfds.builder_from_directory(out)
    assert builder.info.name == "my_flowers_2"
    image = builder.info.features["image/encoded"]
    assert isinstance(image, tfds.features.Image) and image.shape == (None, None, None)
    assert builder.info.features["image/class/label"].names == ["daisy", "rose", "tulip"]
    assert builder.info.supervised_keys == ("image/encoded", "image/class/label")
    assert builder.info.splits["train"].num_examples == 5
    assert sum(builder.info.splits["train"].shard_lengths) == 5
    records = _records(out)
    expected = {}
    for ex in tfds.as_numpy(builder.as_dataset(split="train")):
        record = records[ex["image/filename"].decode()]
        decoded = tf.io.decode_image(record["encoded"]).numpy()
        np.testing.assert_array_equal(ex["image/encoded"], decoded)
        assert ex["image/class/label"] == record["label"][0]
        expected[decoded.tobytes()] = int(ex["image/class/label"])
    pairs = list(tfds.as_numpy(builder.as_dataset(split="train", as_supervised=True)))
    assert len(pairs) == 5
    assert {image.tobytes(): int(label) for image, label in pairs} == expected
    assert sorted(len(image.shape) == 3 and image.dtype == np.uint8 for image, _ in pairs) == [True] * 5


@pytest.mark.slow
def test_tfds_declares_the_channels_every_image_has_and_takes_the_name_given(tmp_path, capsys):
    src, out = tmp_path / "src", str(tmp_path / "out")
    for i, cls in enumerate(["cat", "dog", "dog"]):
        write(str(src / cls / f"{i}.jpg"), imagegen.encode(imagegen.image("RGB", 12 + i, 10, i), "JPEG"))
    status, _, err = run_build(capsys, "--input", str(src), "--output_dir", out, "--image_mode", "reencode",
                               "--image_format", "png", "--grayscale", "--name", "pets_v2")
    assert status == 0, err
    builder = tfds.builder_from_directory(out)
    assert builder.info.name == "pets_v2"
    image = builder.info.features["image/encoded"]
    assert image.shape == (None, None, 1) and image.encoding_format == "png"
    labels = sorted(int(label) for image, label in tfds.as_numpy(builder.as_dataset(split="train",
                                                                                     as_supervised=True)))
    assert labels == [0, 1, 1]
    status, _, err = run_build(capsys, "--input", str(src), "--output_dir", str(tmp_path / "x"),
                               "--name", "Pets-2")
    assert status == 2 and "'Pets-2' is not a tensorflow-datasets name" in err and len(err.strip().splitlines()) == 1


def test_compressed_sets_say_tfds_cannot_read_them(tmp_path, capsys):
    src, out = tmp_path / "src", str(tmp_path / "out")
    write(str(src / "cat" / "a.png"), imagegen.encode(imagegen.image("RGB", 8, 8), "PNG"))
    status, summary, err = run_build(capsys, "--input", str(src), "--output_dir", out, "--compression", "gzip")
    assert status == 0, err
    assert ("tensorflow-datasets cannot read gzip shards (its reader opens TFRecords uncompressed): "
            "no tfds files written; --compression none for tfds") in summary + err
    assert not os.path.exists(os.path.join(out, "dataset_info.json"))
    assert not os.path.exists(os.path.join(out, "features.json"))


@pytest.mark.slow
def test_tfds_loads_multi_label_extras_and_boxes(tmp_path, capsys):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    names = [f"{i:02d}.png" for i in range(10)]
    for salt, name in enumerate(names):
        write(os.path.join(src, name), imagegen.encode(imagegen.image("RGB", 16, 16, salt=salt), "PNG"))
    rows = [{"path": name, "label": ["cat", "dog"][: 1 + i % 2], "caption": f"image {i}", "weight": i / 4,
             "tags": list(range(i % 3)),
             "objects": [{"bbox": [0, 0, 8, 8], "label": "cat"}] * (i % 2)} for i, name in enumerate(names)]
    write(os.path.join(src, "in.jsonl"), "\n".join(json.dumps(r) for r in rows).encode())
    # The first row's empty tags list takes its type from the rows after it.
    status, _, err = run_build(capsys, "--input", os.path.join(src, "in.jsonl"), "--output_dir", out,
                               "--num_shards", "3")
    assert status == 0, err

    builder = tfds.builder_from_directory(out)
    assert builder.info.features["image/class/label"].feature.names == ["cat", "dog"]
    assert builder.info.splits["train"].num_examples == 10
    got = {ex["image/filename"].decode(): ex for ex in tfds.as_numpy(builder.as_dataset(split="train"))}
    assert sorted(got) == names
    for i, name in enumerate(names):
        ex = got[name]
        assert ex["caption"] == f"image {i}".encode() and ex["weight"] == pytest.approx(i / 4)
        assert ex["tags"].tolist() == list(range(i % 3)) and ex["tags"].dtype == np.int64
        assert ex["image/class/label"].tolist() == [0, 1][: 1 + i % 2]
        assert ex["image/object/bbox/xmax"].tolist() == [0.5] * (i % 2)
        assert ex["image/object/class/label"].tolist() == [1] * (i % 2)  # object ids from 1: plain int64
        assert ex["image/height"] == 16 and ex["image/encoded"].shape == (16, 16, 3)
    supervised = list(tfds.as_numpy(builder.as_dataset(split="train", as_supervised=True)))
    assert sorted(len(labels) for _, labels in supervised) == [1] * 5 + [2] * 5
    first = list(tfds.as_numpy(builder.as_dataset(split="train[:10%]")))
    assert len(first) == 1
    halves = [[ex["image/filename"].decode() for ex in tfds.as_numpy(builder.as_dataset(split=part))]
              for part in ("train[:50%]", "train[50%:]")]
    assert sorted(halves[0] + halves[1]) == names and len(halves[0]) == 5


# The README's schema, and each extra key as tf.data reads a list.
README_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/format": tf.io.FixedLenFeature([], tf.string),
    "image/height": tf.io.FixedLenFeature([], tf.int64),
    "image/width": tf.io.FixedLenFeature([], tf.int64),
    "image/channels": tf.io.FixedLenFeature([], tf.int64),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    "image/class/text": tf.io.FixedLenFeature([], tf.string),
    "image/filename": tf.io.FixedLenFeature([], tf.string),
    "image/key/sha256": tf.io.FixedLenFeature([], tf.string),
}


def _webdataset_with_varying_keys(path: str) -> dict[str, dict]:
    """A shard of 10 samples whose .json keys vary: a caption in 2, a score in 5, tags in 3, a count in all."""
    import io
    import tarfile

    rows = {}
    with tarfile.open(path, "w") as archive:
        for i in range(10):
            row = {"label": "cat" if i % 2 else "dog", "count": i}
            if i in (3, 7):
                row["caption"] = f"image {i}"
            if i % 2:
                row["score"] = i / 4
            if i % 3 == 0:
                row["tags"] = [i, i + 1]
            rows[f"s{i}.png"] = row
            for name, data in ((f"s{i}.png", imagegen.encode(imagegen.image("RGB", 16, 16, salt=i), "PNG")),
                               (f"s{i}.json", json.dumps(row).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("flags", [(), ("--feature", "caption:bytes?", "--feature", "score:float?"),
                                   ("--feature", "caption:bytes_list", "--feature", "score:float_list")],
                         ids=["inferred", "declared", "declared_lists"])
def test_keys_missing_from_some_samples_are_optional_lists_tf_and_tfds_read(flags, tmp_path, capsys):
    shard, out = str(tmp_path / "data.tar"), str(tmp_path / "out")
    rows = _webdataset_with_varying_keys(shard)
    status, summary, err = run_build(capsys, "--input", shard, "--output_dir", out, *flags)
    assert status == 0, err
    assert "written + dead-lettered = 10 inputs" in summary  # none rejected for a key it lacks
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    spec = manifest["feature_spec"]
    # A key some samples lack holds 0 or 1 values: a list; a key every sample has stays single.
    assert (spec["caption"], spec["score"], spec["tags"], spec["count"]) == (
        "bytes_list", "float_list", "int64_list", "int64")

    features = {**README_FEATURES, "caption": tf.io.VarLenFeature(tf.string),
                "score": tf.io.VarLenFeature(tf.float32), "tags": tf.io.VarLenFeature(tf.int64),
                "count": tf.io.FixedLenFeature([], tf.int64)}
    parsed = {}
    for record in tf.data.TFRecordDataset(sorted(glob.glob(os.path.join(out, "train-*.tfrecord")))):
        ex = tf.io.parse_single_example(record, features)
        parsed[ex["image/filename"].numpy().decode().split("!")[1]] = {
            key: tf.sparse.to_dense(value).numpy().tolist() if isinstance(value, tf.SparseTensor)
            else value.numpy() for key, value in ex.items()}
    assert sorted(parsed) == sorted(rows)
    for name, row in rows.items():
        got = parsed[name]
        assert got["caption"] == ([row["caption"].encode()] if "caption" in row else [])
        assert got["score"] == pytest.approx([row["score"]] if "score" in row else [])
        assert got["tags"] == row.get("tags", []) and got["count"] == row["count"]

    from beam_jobs import verify_shards

    capsys.readouterr()
    assert verify_shards.run(["--output_dir", out]) == 0, capsys.readouterr()  # every record fits the spec
    builder = tfds.builder_from_directory(out)
    assert builder.info.splits["train"].num_examples == 10
    read = {ex["image/filename"].decode().split("!")[1]: ex for ex in tfds.as_numpy(builder.as_dataset(split="train"))}
    for name, row in rows.items():
        assert read[name]["caption"].tolist() == ([row["caption"].encode()] if "caption" in row else [])
        assert read[name]["score"].tolist() == pytest.approx([row["score"]] if "score" in row else [])
        assert read[name]["count"] == row["count"]


# --- detection: COCO -----------------------------------------------------------------------------

# Model Garden's TfExampleDecoder (official/vision/dataloaders/tf_example_decoder.py, with
# regenerate_source_id=False), its keys_to_features exactly.
MODEL_GARDEN_KEYS = {
    "image/encoded": tf.io.FixedLenFeature((), tf.string),
    "image/height": tf.io.FixedLenFeature((), tf.int64, -1),
    "image/width": tf.io.FixedLenFeature((), tf.int64, -1),
    "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/area": tf.io.VarLenFeature(tf.float32),
    "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
    "image/source_id": tf.io.FixedLenFeature((), tf.string),
}

COCO = {
    "images": [{"id": 101, "file_name": "a.png", "width": 20, "height": 16},
               {"id": 102, "file_name": "b.png", "width": 24, "height": 12}],
    "annotations": [
        {"id": 10, "image_id": 101, "category_id": 4, "bbox": [2, 4, 8, 8], "area": 50.0, "iscrowd": 0},
        {"id": 11, "image_id": 101, "category_id": 1, "bbox": [0, 0, 20, 16], "area": 300.0, "iscrowd": 1},
        # Reaches 5 pixels past the right edge: create_coco_tf_record skips it.
        {"id": 12, "image_id": 101, "category_id": 1, "bbox": [15, 8, 10, 4], "area": 40.0, "iscrowd": 0},
    ],
    # Not sorted by name: renumbering would make motorcycle 1 and person 2.
    "categories": [{"id": 1, "name": "person"}, {"id": 4, "name": "motorcycle"}, {"id": 90, "name": "toothbrush"}],
}


def _coco_build(tmp_path, capsys, *flags: str) -> tuple[str, str]:
    images_dir, out = str(tmp_path / "images"), str(tmp_path / "out")
    for salt, (name, size) in enumerate({"a.png": (20, 16), "b.png": (24, 12)}.items()):
        write(os.path.join(images_dir, name), imagegen.encode(imagegen.image("RGB", *size, salt=salt), "PNG"))
    write(str(tmp_path / "ann" / "instances.json"), json.dumps(COCO).encode())
    status, summary, err = run_build(capsys, "--input", str(tmp_path / "ann" / "instances.json"),
                                     "--image_root", images_dir, "--output_dir", out, *flags)
    assert status == 0, err
    return out, summary + err


def _model_garden(out: str) -> dict[str, dict]:
    """source_id -> the decoder's parsed tensors (sparse ones made dense, as it does)."""
    got = {}
    for record in tf.data.TFRecordDataset(sorted(glob.glob(os.path.join(out, "train-*")))):
        parsed = tf.io.parse_single_example(record, MODEL_GARDEN_KEYS)
        values = {key: (tf.sparse.to_dense(value) if isinstance(value, tf.SparseTensor) else value).numpy()
                  for key, value in parsed.items()}
        got[values["image/source_id"].decode()] = values
    return got


def _od_api_label_map(path: str) -> dict[int, str]:
    """label_map.pbtxt parsed as the OD API's StringIntLabelMap and checked as label_map_util does."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="string_int_label_map.proto", package="object_detection.protos")
    item = fdp.message_type.add(name="StringIntLabelMapItem")
    item.field.add(name="name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    item.field.add(name="id", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    item.field.add(name="display_name", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    whole = fdp.message_type.add(name="StringIntLabelMap")
    whole.field.add(name="item", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                    type_name=".object_detection.protos.StringIntLabelMapItem")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("object_detection.protos.StringIntLabelMap"))
    with open(path, encoding="utf-8") as fh:
        label_map = text_format.Parse(fh.read(), cls())
    for entry in label_map.item:  # label_map_util._validate_label_map
        assert entry.id >= 0, entry
        assert entry.id != 0 or "background" in (entry.name, entry.display_name), entry
    return {entry.id: entry.name for entry in label_map.item}


@pytest.mark.slow
def test_coco_build_keeps_category_ids_and_reads_in_model_garden(tmp_path, capsys):
    out, summary = _coco_build(tmp_path, capsys)
    got = _model_garden(out)
    assert sorted(got) == ["101", "102"]
    a, b = got["101"], got["102"]
    assert a["image/object/class/label"].tolist() == [4, 1]  # motorcycle, person: COCO's ids
    np.testing.assert_allclose(a["image/object/bbox/xmin"], [0.1, 0.0])
    np.testing.assert_allclose(a["image/object/bbox/ymax"], [0.75, 1.0])
    np.testing.assert_allclose(a["image/object/area"], [50.0, 300.0])
    assert a["image/object/is_crowd"].tolist() == [0, 1] and (a["image/height"], a["image/width"]) == (16, 20)
    assert b["image/object/class/label"].tolist() == [] and b["image/object/bbox/xmin"].tolist() == []
    assert _od_api_label_map(os.path.join(out, "label_map.pbtxt")) == {1: "person", 4: "motorcycle",
                                                                     90: "toothbrush"}
    manifest = load_manifest(out)
    assert manifest["labels"] == []  # no image classes: object classes do not fill labels.txt
    assert manifest["object_labels"] == [{"id": 1, "name": "person"}, {"id": 4, "name": "motorcycle"},
                                         {"id": 90, "name": "toothbrush"}]
    assert manifest["images"]["boxes"] == {"skipped": 1} and manifest["dead_letters"] == 0
    assert "boxes not inside their image: 1 box, 1 skipped (--boxes_outside skip)" in summary
    assert "object classes: 3, ids 1-90; label_map.pbtxt" in summary
    builder = tfds.builder_from_directory(out)  # loads; no image classes, so no supervised keys
    assert builder.info.supervised_keys is None and builder.info.splits["train"].num_examples == 2
    with open(os.path.join(out, "labels.txt"), encoding="utf-8") as fh:
        assert fh.read() == ""
    from beam_jobs import verify_shards

    capsys.readouterr()
    assert verify_shards.run(["--output_dir", out]) == 0, capsys.readouterr()


@pytest.mark.slow
def test_coco_build_renumbered_and_clipped(tmp_path, capsys):
    out, summary = _coco_build(tmp_path, capsys, "--coco_ids", "renumber", "--boxes_outside", "clip")
    a = _model_garden(out)["101"]
    assert a["image/object/class/label"].tolist() == [1, 2, 2]  # motorcycle 1, person 2, by name
    np.testing.assert_allclose(a["image/object/bbox/xmin"], [0.1, 0.0, 0.75])
    np.testing.assert_allclose(a["image/object/bbox/xmax"], [0.5, 1.0, 1.0])  # the last one clipped
    assert _od_api_label_map(os.path.join(out, "label_map.pbtxt")) == {1: "motorcycle", 2: "person",
                                                                     3: "toothbrush"}
    assert load_manifest(out)["images"]["boxes"] == {"clipped": 1}
    assert "boxes not inside their image: 1 box, 1 clipped (--boxes_outside clip)" in summary


@pytest.mark.slow
def test_label_offset_0_is_refused_for_coco_and_writes_no_label_map_elsewhere(tmp_path, capsys):
    write(str(tmp_path / "ann.json"), json.dumps(COCO).encode())
    status, _, err = run_build(capsys, "--input", str(tmp_path / "ann.json"), "--output_dir",
                               str(tmp_path / "out"), "--label_offset", "0")
    assert status == 2 and "--label_offset 0 would give a COCO class id 0" in err
    assert len(err.strip().splitlines()) == 1
    src, out = str(tmp_path / "src"), str(tmp_path / "jsonl")
    write(os.path.join(src, "a.png"), imagegen.encode(imagegen.image("RGB", 10, 10), "PNG"))
    write(os.path.join(src, "in.jsonl"), json.dumps(
        {"path": "a.png", "objects": [{"bbox": [1, 1, 5, 5], "label": "cat"}]}).encode())
    status, summary, err = run_build(capsys, "--input", os.path.join(src, "in.jsonl"), "--output_dir", out,
                                     "--label_offset", "0")
    assert status == 0, err
    assert not os.path.exists(os.path.join(out, "label_map.pbtxt"))
    assert "object classes: 1, ids 0-0; no label_map.pbtxt: object class id 0 is below 1" in summary + err
    assert load_manifest(out)["object_labels"] == [{"id": 0, "name": "cat"}]
    builder = tfds.builder_from_directory(out)  # ids 0..n-1: a ClassLabel in tfds
    assert builder.info.features["image/object/class/label"].feature.names == ["cat"]


@pytest.mark.slow
def test_readme_tfds_snippet_runs_as_written(tmp_path, capsys, monkeypatch):
    """The README's tensorflow-datasets block, run on a build of out/flowers with a caption."""
    readme = open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "README.md"),
                  encoding="utf-8").read()
    block = readme.split("**tensorflow-datasets.**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    rows = []
    for i in range(10):
        write(f"src/{i}.png", imagegen.encode(imagegen.image("RGB", 8, 6, i), "PNG"))
        rows.append({"path": f"{i}.png", "label": ["daisy", "rose"][i % 2], "caption": f"flower {i}"})
    write("src/in.jsonl", "\n".join(json.dumps(r) for r in rows).encode())
    status, _, err = run_build(capsys, "--input", "src/in.jsonl", "--output_dir", "out/flowers")
    assert status == 0, err
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 - the README's own code
    assert scope["builder"].info.name == "flowers"
    image, label = next(iter(tfds.as_numpy(scope["ds"])))
    assert image.shape == (6, 8, 3) and int(label) in (0, 1)
    assert scope["ex"]["caption"].numpy().startswith(b"flower ")


@pytest.mark.slow
def test_tfds_decodes_every_record_of_the_messy_corpus_as_tensorflow_does(tmp_path, capsys):
    """Pillow's Tests/images and scikit-image's data, default build: tfds's Image feature decodes each
    record (grey, grey+alpha, RGB, RGBA, 16-bit PNGs, JPEGs) exactly as tf.io.decode_image does."""
    from tests.messy_corpus import make_corpus

    corpus, out = str(tmp_path / "corpus"), str(tmp_path / "messy")
    make_corpus(corpus)
    status, _, err = run_build(capsys, "--input", corpus, "--output_dir", out, "--num_shards", "2",
                               "--max_bad_fraction", "1")
    assert status == 0, err
    channels = load_manifest(out)["images"]["channels"]
    assert {"1", "3", "4"} <= set(channels)
    builder = tfds.builder_from_directory(out)
    assert builder.info.features["image/encoded"].shape == (None, None, None)
    records = _records(out)
    seen = 0
    for ex in tfds.as_numpy(builder.as_dataset(split="train")):
        record = records[ex["image/filename"].decode()]
        np.testing.assert_array_equal(ex["image/encoded"], tf.io.decode_image(record["encoded"]).numpy())
        seen += 1
    assert seen == len(records) == sum(channels.values()) > 500
    supervised = tfds.as_numpy(builder.as_dataset(split="train", as_supervised=True))
    assert sorted(collections.Counter(int(label) for _, label in supervised)) == [0, 1]
