"""End to end: typed extra features, multi-label and boxes from JSON Lines, CSV and COCO inputs.

Each build runs the real job on a handful of tiny images and reads the shards
back with TensorFlow's own parser (``VarLenFeature``), then runs verify.
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest

from tests import imagegen
from tests.shard_fixtures import dead_letters, load_manifest, run_build, write

tf = pytest.importorskip("tensorflow")

ROWS = [
    {"path": "a.png", "label": ["cat", "dog"], "caption": "two pets", "weight": 0.5, "count": 3,
     "tags": [1, 2, 3], "scores": [0.25, 1.5],
     "objects": [{"bbox": [2, 4, 10, 12], "label": "cat"}, {"bbox": [0, 0, 20, 16], "label": "dog"}]},
    {"path": "b.png", "label": "dog", "caption": "één hond", "weight": 2.0, "count": -7,
     "tags": [], "scores": [3.0], "objects": []},
    {"path": "c.png", "label": ["bird"], "caption": "", "weight": 1.25, "count": 0,
     "tags": [9], "scores": [],
     "objects": [{"bbox": [5, 0, 15, 8], "label": "bird"}]},
]
SIZES = {"a.png": (20, 16), "b.png": (24, 12), "c.png": (20, 16)}


def _images(folder: str, names) -> None:
    for salt, name in enumerate(names):
        width, height = SIZES.get(name, (16, 16))
        write(os.path.join(folder, name), imagegen.encode(imagegen.image("RGB", width, height, salt=salt), "PNG"))


def _parse_all(out: str, split: str = "train") -> dict[str, dict]:
    """filename -> features, every key parsed with VarLenFeature by TensorFlow."""
    manifest = load_manifest(out)
    kinds = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    spec = {name: tf.io.VarLenFeature(kinds[kind.replace("_list", "")])
            for name, kind in manifest["feature_spec"].items()}
    files = sorted(glob.glob(os.path.join(out, f"{split}-*")))
    parsed = {}
    for record in tf.data.TFRecordDataset(files):
        ex = tf.io.parse_single_example(record, spec)
        values = {name: tf.sparse.to_dense(value).numpy().tolist() for name, value in ex.items()}
        parsed[values["image/filename"][0].decode()] = values
    return parsed


def _verify(out: str, capsys) -> None:
    from beam_jobs import verify_shards

    capsys.readouterr()
    status = verify_shards.run(["--output_dir", out])
    assert status == 0, capsys.readouterr()


@pytest.mark.slow
def test_jsonl_extras_multi_label_and_boxes_parse_exactly(tmp_path, capsys):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    _images(src, SIZES)
    write(os.path.join(src, "in.jsonl"), "\n".join(json.dumps(r) for r in ROWS).encode())
    status, _, err = run_build(capsys, "--input", os.path.join(src, "in.jsonl"), "--output_dir", out)
    assert status == 0, err

    manifest = load_manifest(out)
    assert manifest["labels"] == ["bird", "cat", "dog"]
    spec = manifest["feature_spec"]
    assert spec["caption"] == "bytes" and spec["weight"] == "float" and spec["count"] == "int64"
    assert spec["tags"] == "int64_list" and spec["scores"] == "float_list"
    assert spec["image/class/label"] == "int64_list" and spec["image/object/bbox/xmin"] == "float_list"
    assert manifest["splits"]["train"]["label_counts"] == {"0": 1, "1": 1, "2": 2}

    parsed = _parse_all(out)
    a, b, c = parsed["a.png"], parsed["b.png"], parsed["c.png"]
    assert a["caption"] == [b"two pets"] and b["caption"] == ["één hond".encode()] and c["caption"] == [b""]
    assert [a["weight"], b["weight"], c["weight"]] == [[0.5], [2.0], [1.25]]
    assert [a["count"], b["count"], c["count"]] == [[3], [-7], [0]]
    assert [a["tags"], b["tags"], c["tags"]] == [[1, 2, 3], [], [9]]
    assert [a["scores"], b["scores"], c["scores"]] == [[0.25, 1.5], [3.0], []]
    assert a["image/class/label"] == [1, 2] and a["image/class/text"] == [b"cat", b"dog"]
    assert b["image/class/label"] == [2] and c["image/class/label"] == [0]
    # Boxes normalized by the image's size (20x16 for a.png).
    assert a["image/object/bbox/xmin"] == [0.1, 0.0] or np.allclose(a["image/object/bbox/xmin"], [0.1, 0.0])
    np.testing.assert_allclose(a["image/object/bbox/ymin"], [0.25, 0.0])
    np.testing.assert_allclose(a["image/object/bbox/xmax"], [0.5, 1.0])
    np.testing.assert_allclose(a["image/object/bbox/ymax"], [0.75, 1.0])
    # Object classes are numbered apart from image classes, from 1 by default (bird 1, cat 2, dog 3).
    assert a["image/object/class/label"] == [2, 3] and a["image/object/class/text"] == [b"cat", b"dog"]
    assert manifest["object_labels"] == [{"id": 1, "name": "bird"}, {"id": 2, "name": "cat"},
                                         {"id": 3, "name": "dog"}]
    np.testing.assert_allclose(a["image/object/area"], [64.0, 320.0])
    assert a["image/object/is_crowd"] == [0, 0]
    assert b["image/object/bbox/xmin"] == [] and b["image/object/class/label"] == []
    np.testing.assert_allclose(c["image/object/bbox/xmin"], [0.25])
    with open(os.path.join(out, "label_map.pbtxt"), encoding="utf-8") as fh:
        assert fh.read().startswith('item {\n  id: 1\n  name: "bird"\n}\n')
    _verify(out, capsys)


@pytest.mark.slow
def test_bad_feature_is_a_dead_letter_and_boxes_outside_are_skipped_and_counted(tmp_path, capsys):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    names = ["a.png", "b.png", "c.png", "d.png", "e.png"]
    _images(src, names)
    rows = [{"path": "a.png", "label": "x", "weight": 1.5},
            {"path": "b.png", "label": "x", "weight": "heavy"},
            {"path": "c.png", "label": "x", "weight": 2.5,
             "objects": [{"bbox": [0, 0, 40, 8], "label": "x"}]},
            {"path": "d.png", "label": "x", "weight": 0.5,
             "objects": [{"bbox": [8, 0, 4, 8], "label": "x"}]},
            {"path": "e.png", "label": "x", "weight": 0.25}]
    write(os.path.join(src, "in.jsonl"), "\n".join(json.dumps(r) for r in rows).encode())
    status, summary, err = run_build(capsys, "--input", os.path.join(src, "in.jsonl"), "--output_dir", out,
                                     "--max_bad_fraction", "1")
    assert status == 0, err
    dead = {d["path"].rsplit("/", 1)[-1]: d for d in dead_letters(out)}
    assert dead["in.jsonl:2"]["reason"] == "bad_feature" and "'weight'" in dead["in.jsonl:2"]["error"]
    assert sorted(dead) == ["in.jsonl:2"]  # the images with a box outside are kept, less the box
    manifest = load_manifest(out)
    assert manifest["records"] == 4 and manifest["images"]["boxes"] == {"skipped": 2}
    assert "boxes not inside their image: 2 boxes, 2 skipped (--boxes_outside skip)" in summary + err
    parsed = _parse_all(out)
    assert parsed["c.png"]["image/object/class/label"] == [] and parsed["d.png"]["image/object/bbox/xmin"] == []


@pytest.mark.slow
def test_csv_declared_features_and_multi_label(tmp_path, capsys):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    _images(src, ["a.png", "b.png"])
    write(os.path.join(src, "in.csv"),
          b"path,label,caption,weight,tags\na.png,cat;dog,hello,0.5,1;2\nb.png,dog,,2,\n")
    status, _, err = run_build(capsys, "--input", os.path.join(src, "in.csv"), "--output_dir", out,
                               "--multi_label", "--feature", "caption:bytes", "--feature", "weight:float",
                               "--feature", "tags:int64_list")
    assert status == 0, err
    parsed = _parse_all(out)
    assert parsed["a.png"]["image/class/label"] == [0, 1] and parsed["b.png"]["image/class/label"] == [1]
    assert parsed["a.png"]["tags"] == [1, 2] and parsed["b.png"]["tags"] == []
    assert parsed["b.png"]["weight"] == [2.0] and parsed["b.png"]["caption"] == [b""]
    _verify(out, capsys)


def test_undeclared_csv_column_fails_at_once(tmp_path, capsys):
    src = str(tmp_path / "src")
    _images(src, ["a.png"])
    write(os.path.join(src, "in.csv"), b"path,label,caption\na.png,cat,hello\n")
    status, _, err = run_build(capsys, "--input", os.path.join(src, "in.csv"),
                               "--output_dir", str(tmp_path / "out"))
    assert status == 2
    assert "caption" in err and "--feature caption:TYPE" in err
    assert not os.path.exists(tmp_path / "out" / "manifest.json")


@pytest.mark.slow
def test_shard_globs_match_only_shards(tmp_path, capsys):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    _images(src, ["a.png", "b.png"])
    write(os.path.join(src, "in.csv"), b"path,label,split\na.png,cat,train\nb.png,dog,trainval\n")
    status, _, err = run_build(capsys, "--input", os.path.join(src, "in.csv"), "--output_dir", out)
    assert status == 0, err
    shards = {e["file"] for s in load_manifest(out)["splits"].values() for e in s["shards"]}
    for pattern in ("train*", "train-*", "trainval*", "*-of-*"):
        matched = {os.path.basename(p) for p in glob.glob(os.path.join(out, pattern))}
        assert matched and matched <= shards, (pattern, matched)
    assert sorted(os.listdir(os.path.join(out, "index"))) == sorted(f"{s}{suffix}" for s in shards
                                                                    for suffix in (".idx", ".keys"))
    for split in ("train", "trainval"):
        files = glob.glob(os.path.join(out, f"{split}*"))
        assert sum(1 for _ in tf.data.TFRecordDataset(files)) == (2 if split == "train" else 1)


@pytest.mark.slow
def test_reshard_carries_extras_labels_and_boxes(tmp_path, capsys):
    from beam_jobs import reshard

    tfds = pytest.importorskip("tensorflow_datasets")
    src, out, again = str(tmp_path / "src"), str(tmp_path / "out"), str(tmp_path / "again")
    _images(src, SIZES)
    write(os.path.join(src, "in.jsonl"), "\n".join(json.dumps(r) for r in ROWS).encode())
    assert run_build(capsys, "--input", os.path.join(src, "in.jsonl"), "--output_dir", out)[0] == 0
    capsys.readouterr()
    assert reshard.run(["--input", os.path.join(out, "train*"), "--output_dir", again, "--split", "train",
                        "--num_shards", "2"]) == 0, capsys.readouterr()
    before, after = load_manifest(out), load_manifest(again)
    assert after["labels"] == before["labels"]
    assert after["splits"]["train"]["label_counts"] == before["splits"]["train"]["label_counts"]
    for name, kind in before["feature_spec"].items():
        assert after["feature_spec"][name].replace("_list", "") == kind.replace("_list", ""), name
    assert after["feature_spec"]["image/class/label"] == "int64_list"
    assert _parse_all(again) == _parse_all(out)
    _verify(again, capsys)
    builder = tfds.builder_from_directory(again)
    assert builder.info.splits["train"].num_examples == 3 and builder.info.name == "again"
    assert builder.info.features["image/class/label"].feature.names == ["bird", "cat", "dog"]


@pytest.mark.slow
def test_sets_with_indexes_beside_the_shards_still_read_and_a_rebuild_moves_them(tmp_path, capsys):
    import shutil

    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    _images(src, ["a.png", "b.png", "c.png"])
    write(os.path.join(src, "in.csv"), b"path,label\na.png,cat\nb.png,dog\nc.png,dog\n")
    args = ("--input", os.path.join(src, "in.csv"), "--output_dir", out, "--num_shards", "2")
    assert run_build(capsys, *args)[0] == 0
    before = {name: open(os.path.join(out, "index", name), "rb").read()
              for name in os.listdir(os.path.join(out, "index")) if name.endswith(".idx")}
    for name in before:  # the layout of sets written before index/ (the keys files stay in index/)
        shutil.move(os.path.join(out, "index", name), os.path.join(out, name))
    _verify(out, capsys)
    assert run_build(capsys, *args)[0] == 0
    assert not [n for n in os.listdir(out) if n.endswith(".idx")]
    assert {n: open(os.path.join(out, "index", n), "rb").read() for n in before} == before


COCO_FILE = {"images": [{"id": 1, "file_name": "a.png"}, {"id": 2, "file_name": "b.png"}],
             "annotations": [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4]}],
             "categories": [{"id": 1, "name": "cat"}]}


@pytest.mark.slow
def test_coco_images_beside_the_file_need_no_image_root_and_elsewhere_the_error_names_it(tmp_path, capsys):
    folder = tmp_path / "coco"
    write(str(folder / "annotations" / "instances.json"), json.dumps(COCO_FILE).encode())
    _images(str(folder / "annotations"), ["a.png", "b.png"])
    status, _, err = run_build(capsys, "--input", str(folder / "annotations" / "instances.json"),
                               "--output_dir", str(tmp_path / "beside"))
    assert status == 0, err
    assert load_manifest(str(tmp_path / "beside"))["records"] == 2
    # COCO's own layout: annotations/ and val2017/ side by side. Without --image_root nothing is found:
    # the build stops before it starts, naming where it looked and the flag.
    for name in ("a.png", "b.png"):
        os.replace(folder / "annotations" / name, tmp_path / name)
    status, _, err = run_build(capsys, "--input", str(folder / "annotations" / "instances.json"),
                               "--output_dir", str(tmp_path / "elsewhere"))
    assert status == 2, err
    assert "--image_root" in err and f"{folder / 'annotations' / 'a.png'}" in err, err
    assert not os.path.exists(tmp_path / "elsewhere" / "manifest.json")
