"""Golden shards: the build and reshard jobs write the same bytes as when the digests were recorded.

A guard for changes to how records are encoded (``transforms/example/wire.py``):
a small, varied set of builds (``tf``, ``passthrough``, ``reencode`` and ``raw``
modes, ``--exif_orientation keep``, typed extras from ``--feature``,
multi-label, boxes from JSON Lines, COCO, and a reshard) runs the real jobs on
committed input files (``tests/golden/encoder_inputs/``), and every shard's
sha256 must be the one in ``tests/golden/encoder_shards.json``.

The inputs are fixed bytes, so a build that stores them as they are depends on
this project only. Builds that encode images (``reencode``, ``raw``, the EXIF
rotation and format conversion of ``tf`` mode) also depend on Pillow's
encoders: the golden file names the Pillow version the digests were recorded
with, and a mismatch there is reported with it. To record the digests anew
after an intended change of the output: ``GOLDEN_RECORD=1 pytest
tests/e2e/test_encoder_golden.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import PIL
import pytest

from tests.shard_fixtures import run_build, shard_files, write

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUTS = os.path.join(HERE, "golden", "encoder_inputs")
GOLDEN = os.path.join(HERE, "golden", "encoder_shards.json")

# Name -> (input kind, build flags). Input kinds: "images" (a class-per-folder tree),
# "csv", "jsonl", "coco" (annotation files written below over the annotated images).
BUILDS = {
    "tf": ("images", ()),
    "tf_keep_orientation": ("images", ("--exif_orientation", "keep")),
    "passthrough": ("images", ("--image_mode", "passthrough")),
    "reencode_jpeg": ("images", ("--image_mode", "reencode", "--image_format", "jpeg", "--resize", "8x6",
                                 "--resize_mode", "crop")),
    "reencode_png_gray": ("images", ("--image_mode", "reencode", "--image_format", "png", "--grayscale")),
    "raw": ("images", ("--image_mode", "raw", "--resize", "4x4")),
    "two_splits": ("images", ("--split_fractions", "train=0.5,validation=0.5", "--num_shards", "2")),
    "csv_features_multi_label": ("csv", ("--multi_label", "--feature", "caption:bytes", "--feature", "weight:float",
                                         "--feature", "tags:int64_list", "--feature", "scores:float_list")),
    "jsonl_extras_boxes": ("jsonl", ("--feature", "note:bytes_list")),
    "coco": ("coco", ()),
}
# Encoded by Pillow (their digests also depend on its encoders' version).
ENCODED_BY_PILLOW = {"tf", "tf_keep_orientation", "reencode_jpeg", "reencode_png_gray", "raw", "two_splits"}

CSV = ("path,label,caption,weight,tags,scores\n"
       "a.png,cat;dog,hello,0.5,1;2;-3,0.25\n"
       "b.png,dog,,2,,\n"
       "c.png,bird,\u00e9\u00e9n,-1.75,9223372036854775807,1.5;2.5\n").encode()
JSONL_ROWS = [
    {"path": "a.png", "label": ["cat", "dog"], "caption": "two pets", "weight": 0.5, "count": 3,
     "tags": [1, 2, 3], "scores": [0.25, 1.5], "note": ["x", "y"],
     "objects": [{"bbox": [2, 4, 10, 12], "label": "cat"}, {"bbox": [0, 0, 20, 16], "label": "dog"}]},
    {"path": "b.png", "label": "dog", "caption": "\u00e9\u00e9n hond", "weight": 2.0, "count": -7,
     "tags": [], "scores": [3.0], "note": [], "objects": []},
    {"path": "c.png", "label": ["bird"], "caption": "", "weight": 1.25, "count": 0, "tags": [9],
     "scores": [], "note": ["z"], "objects": [{"bbox": [5, 0, 15, 8], "label": "bird"}]},
]
COCO = {
    "images": [{"id": 101, "file_name": "a.png", "width": 20, "height": 16},
               {"id": 102, "file_name": "b.png", "width": 24, "height": 12}],
    "annotations": [
        {"id": 10, "image_id": 101, "category_id": 4, "bbox": [2, 4, 8, 8], "area": 50.0, "iscrowd": 0},
        {"id": 11, "image_id": 101, "category_id": 1, "bbox": [0, 0, 20, 16], "area": 300.0, "iscrowd": 1},
    ],
    "categories": [{"id": 1, "name": "person"}, {"id": 4, "name": "motorcycle"}],
}


def _input(kind: str, root: str) -> list[str]:
    """Copies the inputs of ``kind`` below ``root``; returns the build's input flags."""
    if kind == "images":
        shutil.copytree(os.path.join(INPUTS, "images"), os.path.join(root, "images"))
        return ["--input", os.path.join(root, "images")]
    shutil.copytree(os.path.join(INPUTS, "annotated"), os.path.join(root, "annotated"))
    if kind == "csv":
        return ["--input", write(os.path.join(root, "annotated", "in.csv"), CSV)]
    if kind == "jsonl":
        lines = "\n".join(json.dumps(row, ensure_ascii=False) for row in JSONL_ROWS).encode()
        return ["--input", write(os.path.join(root, "annotated", "in.jsonl"), lines)]
    return ["--input", write(os.path.join(root, "ann", "instances.json"), json.dumps(COCO).encode()),
            "--image_root", os.path.join(root, "annotated")]


def _digests(folder: str) -> dict[str, str]:
    out = {}
    for name in shard_files(folder):
        with open(os.path.join(folder, name), "rb") as fh:
            out[name] = hashlib.sha256(fh.read()).hexdigest()
    return out


def _build_all(tmp_path, capsys) -> dict[str, dict[str, str]]:
    from beam_jobs import reshard

    got = {}
    for name, (kind, flags) in BUILDS.items():
        root = str(tmp_path / name)
        out = os.path.join(root, "out")
        status, _, err = run_build(capsys, *_input(kind, root), "--output_dir", out, *flags)
        assert status == 0, (name, err)
        got[name] = _digests(out)
    again = str(tmp_path / "reshard")
    capsys.readouterr()
    status = reshard.run(["--input", os.path.join(str(tmp_path / "jsonl_extras_boxes" / "out"), "train*"),
                          "--output_dir", again, "--split", "train", "--num_shards", "2"])
    assert status == 0, capsys.readouterr()
    got["reshard_jsonl"] = _digests(again)
    return got


@pytest.mark.slow
def test_every_shard_is_byte_identical_to_the_golden_digests(tmp_path, capsys):
    got = _build_all(tmp_path, capsys)
    if os.environ.get("GOLDEN_RECORD"):
        with open(GOLDEN, "w", encoding="utf-8") as fh:
            json.dump({"pillow": PIL.__version__, "shards": got}, fh, indent=1, sort_keys=True)
            fh.write("\n")
    with open(GOLDEN, encoding="utf-8") as fh:
        golden = json.load(fh)
    assert sorted(got) == sorted(golden["shards"])
    for name, digests in got.items():
        pillow = (f" (encoded by Pillow {PIL.__version__}; recorded with {golden['pillow']})"
                  if name in ENCODED_BY_PILLOW else "")
        assert digests == golden["shards"][name], f"build {name!r}: shards differ from the golden digests{pillow}"
    assert sum(len(d) for d in got.values()) >= len(BUILDS) + 2  # two_splits and the reshard: 2 shards each
