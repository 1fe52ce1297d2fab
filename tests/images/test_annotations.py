"""Unit tests: typed features, boxes through orientation and resize, COCO files, record layouts."""

from __future__ import annotations

import dataclasses
import io
import json
from collections import Counter

import numpy as np
import pytest
from PIL import Image

from transforms.errors import ManifestError, UsageError
from transforms.example.codec import decode_example
from tests.helpers import encode_example
from transforms.example.features import (FeatureValueError, ManifestTyping, from_csv,
                                         from_json, json_type, parse_feature_flags)
from transforms.example.schema import IMAGE_FEATURES, record_problems
from transforms.example.wire import feature_entry
from transforms.images import image_codec as codec
from transforms.images.annotations import RecordLayout, merge_layouts
from transforms.images.annotations import ObjectClasses, label_map_pbtxt, object_label_map
from transforms.images.image_codec import ImageInfo
from transforms.images.inputs import LabelRules
from transforms.images.items import SourceImage
from transforms.images.objects import BoxError, SourceBox, parse_objects, place_boxes, source_geometry
from transforms.images.records import image_example_parts
from tests.helpers import image_example
from tests.helpers import coco_entries
from transforms.shardset.dead_letters import DeadLetter
from transforms.shardset.record_items import feature_spec, record_item


# --- typed features -------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (3, "int64"), (0.5, "float"), ("x", "bytes"), ([1, 2], "int64_list"), ([1, 2.5], "float_list"),
    (["a"], "bytes_list"), ([], None), (True, None), ({"a": 1}, None), ([1, "a"], None)])
def test_json_type(value, expected):
    assert json_type(value) == expected


@pytest.mark.parametrize("value, feature_type, expected", [
    (3, "int64", (3,)), (3, "float", (3.0,)), ("é", "bytes", ("é".encode(),)), ([], "int64_list", ()),
    ([1, 2], "float_list", (1.0, 2.0)), (-(1 << 63), "int64", (-(1 << 63),))])
def test_from_json_fits(value, feature_type, expected):
    assert from_json(value, feature_type) == expected


@pytest.mark.parametrize("value, feature_type, words", [
    (1.5, "int64", "not an integer"), ("1", "int64", "not a number"), (1 << 63, "int64", "int64 range"),
    (1e39, "float", "float32"), ([1], "int64", "a list"), (1, "int64_list", "not a list"),
    (True, "int64", "not a number"), (float("nan"), "float", "float32")])
def test_from_json_does_not_fit(value, feature_type, words):
    with pytest.raises(FeatureValueError, match=words):
        from_json(value, feature_type)


@pytest.mark.parametrize("text, feature_type, expected", [
    ("a;b", "bytes_list", (b"a", b"b")), ("", "int64_list", ()), (" 7 ", "int64", (7,)),
    ("1;2.5", "float_list", (1.0, 2.5)), ("", "bytes", (b"",)), ("x;y", "bytes", (b"x;y",))])
def test_from_csv(text, feature_type, expected):
    assert from_csv(text, feature_type) == expected


def test_from_csv_rejects_text_in_a_number_column():
    with pytest.raises(FeatureValueError, match="not an integer"):
        from_csv("1;x", "int64_list")


def test_first_row_fixes_a_json_keys_type_and_a_change_names_the_key():
    typing = ManifestTyping({})
    assert typing.json_row({"path": "a", "w": 1}) == (("w", "int64", (1,)),)
    with pytest.raises(FeatureValueError, match="key 'w' \\(int64\\)"):
        typing.json_row({"path": "b", "w": 0.5})
    declared = ManifestTyping({"w": "float"})
    assert declared.json_row({"w": 1}) == (("w", "float", (1.0,)),)


@pytest.mark.parametrize("flag, words", [
    ("caption", "name:type"), ("label:int64", "reserved"), ("image/x:int64", "reserved"),
    ("x:int32", "type must be")])
def test_bad_feature_flags(flag, words):
    with pytest.raises(UsageError, match=words):
        parse_feature_flags([flag])


def test_feature_entries_are_the_bytes_protobuf_writes():
    cases = [("a", "bytes", (b"x", b"")), ("n", "int64", (-1, 0, 1 << 40)), ("f", "float", (0.5, -2.0)),
             ("e", "float", ()), ("i", "int64", ()), ("b", "bytes", ())]
    for name, kind, values in cases:
        entry = feature_entry(name, kind, values)
        assert encode_example({name: list(values)}, {name: kind}) == b"\x0a" + bytes([len(entry)]) + entry
        assert decode_example(b"\x0a" + bytes([len(entry)]) + entry)[name] == (kind, list(values))


def test_record_parts_equal_the_whole_record_with_prefix_keys():
    info = ImageInfo("png", 2, 3, 3)
    extra = (("a", "bytes", (b"x",)), ("ab", "int64", (1,)), ("image/class/label", "int64", (0, 2)),
             ("image/class/labels", "int64", ()))
    head, tail = image_example_parts(len(b"IMG"), info, 0, "cat", "f.png", "a" * 64, extra)
    record = image_example(b"IMG", info, 0, "cat", "f.png", "a" * 64, extra)
    decoded = decode_example(record)  # protobuf's own serialization writes the same bytes
    assert encode_example({k: v for k, (_, v) in decoded.items()}, {k: kind for k, (kind, _) in decoded.items()}) == record
    assert head + b"IMG" + tail == record


# --- boxes ----------------------------------------------------------------------------------

def _picture(width: int, height: int, box: tuple[int, int, int, int], orientation: int) -> bytes:
    """A black PNG with a white box, its EXIF saying ``orientation``."""
    arr = np.zeros((height, width, 3), np.uint8)
    x0, y0, x1, y1 = box
    arr[y0:y1, x0:x1] = 255
    img = Image.fromarray(arr)
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    img.save(out, format="PNG", exif=exif.tobytes())
    return out.getvalue()


def _white_box(png: bytes) -> tuple[float, float, float, float]:
    arr = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    ys, xs = np.nonzero(arr > 127)
    height, width = arr.shape
    return xs.min() / width, ys.min() / height, (xs.max() + 1) / width, (ys.max() + 1) / height


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("resize", [None, (30, 45)])
def test_boxes_follow_the_pixels_through_orientation_and_resize(orientation, resize):
    box = (4, 2, 12, 8)
    data = _picture(40, 20, box, orientation)
    stored, info = codec.reencode_image(data, "png", resize=resize)
    width, height, got_orientation = source_geometry(data)
    assert (width, height, got_orientation) == (40, 20, orientation)
    [placed] = place_boxes([SourceBox(*box, label="w")], width, height, got_orientation,
                           info.width, info.height)
    tolerance = 1.5 / min(info.width, info.height)  # resampling blurs the edges by a pixel
    np.testing.assert_allclose((placed.xmin, placed.ymin, placed.xmax, placed.ymax), _white_box(stored),
                               atol=tolerance)
    assert placed.area == pytest.approx(48 * info.width * info.height / 800)


@pytest.mark.parametrize("bbox, clipped", [
    ([0, 0, 41, 10], (0, 0, 1, 0.5)), ([-1, 0, 5, 5], (0, 0, 0.125, 0.25)), ([5, 5, 5, 9], None),
    ([9, 5, 5, 9], None), ([41, 0, 50, 5], None), ([10.5, -0.5, 20, 20.5], (0.2625, 0, 0.5, 1))])
def test_boxes_outside_their_image_are_skipped_or_clipped(bbox, clipped):
    """As create_coco_tf_record: a box reaching out of its image (or with no area) is left out, the
    image kept; with "clip" it is cut to the image. Half a pixel out is rounding: clipped in both."""
    boxes = parse_objects([{"bbox": bbox, "label": "a"}, {"bbox": [1, 1, 3, 3], "label": "b"}], "xyxy_pixels")
    inside = bbox[0] >= -0.5 and bbox[1] >= -0.5 and bbox[2] <= 40.5 and bbox[3] <= 20.5
    skipped = place_boxes(boxes, 40, 20, 1, 40, 20)
    assert [b.label for b in skipped] == (["a", "b"] if inside and clipped else ["b"])
    placed = place_boxes(boxes, 40, 20, 1, 40, 20, outside="clip")
    assert [b.label for b in placed] == (["a", "b"] if clipped else ["b"])
    if clipped:
        np.testing.assert_allclose((placed[0].xmin, placed[0].ymin, placed[0].xmax, placed[0].ymax), clipped)
        assert placed[0].clipped == (not inside)  # half a pixel out is rounding, not counted
    assert not placed[-1].clipped
    with pytest.raises(ValueError, match="outside"):
        place_boxes(boxes, 40, 20, 1, 40, 20, outside="drop")


def test_box_formats_and_slack():
    boxes = parse_objects([{"bbox": [4, 2, 8, 6], "label": "a"}], "xywh_pixels")
    assert (boxes[0].xmax, boxes[0].ymax) == (12, 8)
    [placed] = place_boxes(parse_objects([{"bbox": [0.1, 0, 1.0001, 1], "label": 3}], "xyxy_normalized"),
                           40, 20, 1, 40, 20)
    assert (placed.xmin, placed.xmax, placed.label) == (pytest.approx(0.1), 1.0, "3")
    with pytest.raises(BoxError, match="not a list of 4"):
        parse_objects([{"bbox": [1, 2, 3], "label": "a"}], "xyxy_pixels")
    with pytest.raises(BoxError, match="is_crowd"):
        parse_objects([{"bbox": [1, 2, 3, 4], "label": "a", "is_crowd": 2}], "xyxy_pixels")


# --- COCO -----------------------------------------------------------------------------------

def test_coco_entries():
    coco = {"images": [{"id": 1, "file_name": "x/a.jpg"}, {"id": 2, "file_name": "b.jpg"},
                       {"id": 3, "file_name": "c.jpg"}, {"id": 4}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 5, "bbox": [1, 2, 3, 4], "area": 12,
                             "iscrowd": 0},
                            {"id": 2, "image_id": 3, "category_id": 9, "bbox": [1, 2, 3, 4]},
                            {"id": 3, "image_id": 99, "category_id": 5, "bbox": [1, 2, 3, 4]}],
            "categories": [{"id": 5, "name": "cat"}]}
    listed = list(coco_entries(json.dumps(coco), "ann/instances.json", None, LabelRules(split="val")))
    [declared] = [e for e in listed if isinstance(e, ObjectClasses)]
    assert declared.classes == ((5, "cat"),)
    entries = [e for e in listed if not isinstance(e, ObjectClasses)]
    dead = sorted((e.path, e.reason) for e in entries if isinstance(e, DeadLetter))
    assert dead == [("ann/c.jpg", "bad_box"), ("ann/instances.json:annotations[2]", "bad_manifest_row"),
                    ("ann/instances.json:images[3]", "bad_manifest_row")]
    a, b = [e for e in entries if not isinstance(e, DeadLetter)]
    assert (a.path, a.relpath, a.split, a.labels) == ("ann/x/a.jpg", "x/a.jpg", "val", ())
    assert a.objects == (SourceBox(1, 2, 4, 6, "cat", area=12.0, is_crowd=0),)
    assert b.objects == () and b.class_names() == () and a.object_names() == ("cat",)
    assert a.features == (("image/source_id", "bytes", ("1",)),)
    assert b.features == (("image/source_id", "bytes", ("2",)),)
    rooted = list(coco_entries(json.dumps(coco), "ann/instances.json", "gs://b/img", LabelRules()))
    assert [e.path for e in rooted if isinstance(e, SourceImage)] == ["gs://b/img/x/a.jpg", "gs://b/img/b.jpg"]
    renumbered = coco_entries(json.dumps(coco), "ann/instances.json", None, LabelRules(), "renumber")
    assert [e.classes for e in renumbered if isinstance(e, ObjectClasses)] == [((None, "cat"),)]
    with pytest.raises(ManifestError, match="not a COCO annotation file"):
        list(coco_entries(json.dumps({"images": 3}), "i.json", None, LabelRules()))


# --- layouts, specs and checks --------------------------------------------------------------

def test_layouts_merge_and_the_spec_checks_records():
    merged = merge_layouts([RecordLayout(features=(("w", "int64"),)),
                            RecordLayout(multi_label=True, features=(("w", "float"), ("c", "bytes"))),
                            RecordLayout(objects=True)])
    assert merged.features == (("c", "bytes"), ("w", "float")) and merged.multi_label and merged.objects
    spec = {**IMAGE_FEATURES, **merged.feature_spec()}
    info = ImageInfo("png", 2, 3, 3)
    extra = (("c", "bytes", (b"x",)), ("w", "float", (0.5,)), ("image/class/label", "int64", (0, 1)),
             ("image/class/text", "bytes", (b"a", b"b")),
             *((name, kind.replace("_list", ""), ()) for name, kind in merged.feature_spec().items()
               if name.startswith("image/object/")))
    good = decode_example(image_example(b"IMG", info, 0, "a", "f", "a" * 64, extra))
    assert record_problems(good, spec) == []
    bad = decode_example(image_example(b"IMG", info, 0, "a", "f", "a" * 64,
                                       tuple(e for e in extra if e[0] != "c") + (("w", "float", (1.0, 2.0)),)))
    assert record_problems(bad, spec) == ["missing feature c", "feature w has 2 values, expected 1"]


def test_reshard_spec_keeps_list_types():
    info = ImageInfo("png", 2, 3, 3)
    seen: Counter = Counter()
    for labels in ((0,), (0, 1)):
        record = image_example(b"I", info, 0, "a", "f", "a" * 64, (("image/class/label", "int64", labels),))
        seen.update(record_item(record, 0).features)
    assert feature_spec(2, seen)["image/class/label"] == "int64_list"
    assert feature_spec(2, seen)["image/height"] == "int64"
    assert record_item(record, 0).label == (0, 1)


def test_label_map():
    assert label_map_pbtxt([(1, 'a "b"'), (7, "c")]) == (
        b'item {\n  id: 1\n  name: "a \\"b\\""\n}\nitem {\n  id: 7\n  name: "c"\n}\n')


@pytest.mark.parametrize("coco, bad", [
    ([{"id": 1, "name": "a"}, {"id": 1, "name": "b"}], "id 1 is given twice"),
    ([{"id": 1, "name": "a"}, {"id": 2, "name": "a"}], "name 'a' is given twice"),
    ([{"id": 0, "name": "background"}], "from 1"), ([{"id": "3", "name": "a"}], "from 1"),
    ([{"id": 3}], "has no name")])
def test_coco_categories_that_cannot_name_a_class(coco, bad):
    text = json.dumps({"images": [], "categories": coco})
    with pytest.raises(ManifestError, match=bad):
        list(coco_entries(text, "i.json", None, LabelRules()))


@pytest.mark.parametrize("names, declared, offset, fixed, expected", [
    # COCO ids kept, gaps and all; an unused category stays in the map.
    ({"motorcycle", "person"}, [(4, "motorcycle"), (1, "person"), (90, "toothbrush")], 1, None,
     ((1, "person"), (4, "motorcycle"), (90, "toothbrush"))),
    # A name no file numbers comes after the largest kept id.
    ({"zebra", "person"}, [(1, "person"), (3, "car")], 1, None, ((1, "person"), (3, "car"), (4, "zebra"))),
    # Renumbered (or JSON Lines): by sorted name from the offset.
    ({"motorcycle"}, [(None, "person"), (None, "motorcycle")], 1, None, ((1, "motorcycle"), (2, "person"))),
    ({"b", "a"}, [], 0, None, ((0, "a"), (1, "b"))),
    # --class_names numbers the names it holds by their place in it; others follow.
    ({"dog", "cat", "emu"}, [], 1, ["indoor", "dog", "cat"], ((2, "dog"), (3, "cat"), (4, "emu"))),
])
def test_object_label_map(names, declared, offset, fixed, expected):
    assert object_label_map(names, declared, offset, fixed) == expected


def test_tfds_files_only_for_uncompressed_sets():
    from transforms.shardset.manifest import Manifest, ShardEntry, SplitEntry
    from transforms.shardset.tfds_metadata import tfds_files

    spec = {**IMAGE_FEATURES, "tags": "int64_list"}
    splits = {"train": SplitEntry("train", [ShardEntry("train-00000-of-00001.tfrecord", 3, 100, "0" * 64, {})])}
    images = {"stored_formats": {"jpeg": 2, "png": 1}, "channels": {"3": 3}}
    manifest = Manifest("build_shards", {}, 0, "none", spec, ["a", "b"], splits, 0, images,
                        written_splits=["train"])
    files = {name: data for name, data in tfds_files(manifest, "flowers").items() if data is not None}
    assert sorted(files) == ["dataset_info.json", "features.json", "image.class.label.labels.txt"]
    info = json.loads(files["dataset_info.json"])
    assert info["name"] == "flowers"
    assert info["splits"] == [{"name": "train", "numBytes": "100", "shardLengths": ["3"],
                               "filepathTemplate": "{SPLIT}-{SHARD_X_OF_Y}.tfrecord"}]
    assert info["supervisedKeys"] == {"tuple": {"items": [{"featureKey": "image/encoded"},
                                                          {"featureKey": "image/class/label"}]}}
    assert files["image.class.label.labels.txt"] == b"a\nb\n"
    features = json.loads(files["features.json"])["featuresDict"]["features"]
    assert sorted(features) == sorted(spec)
    assert features["image/encoded"]["image"] == {"dtype": "uint8", "shape": {"dimensions": ["-1", "-1", "3"]}}
    assert features["tags"]["tensor"]["shape"] == {"dimensions": ["-1"]}
    # A run that kept another split counted only its own images: image/encoded stays bytes.
    kept = dataclasses.replace(manifest, splits={**splits, "test": splits["train"]})
    kept_features = json.loads(tfds_files(kept)["features.json"])["featuresDict"]["features"]
    assert kept_features["image/encoded"]["tensor"]["dtype"] == "string"
    gzipped = Manifest("build_shards", {}, 0, "gzip", spec, ["a", "b"], splits, 0)
    assert set(tfds_files(gzipped).values()) == {None}


def test_tfds_files_of_an_array_record_set_name_its_format_and_shard_names():
    from transforms.shardset.manifest import Manifest, ShardEntry, SplitEntry
    from transforms.shardset.tfds_metadata import tfds_files

    splits = {"train": SplitEntry("train", [ShardEntry("train-00000-of-00002.array_record", 3, 100, "0" * 64, {}),
                                            ShardEntry("train-00001-of-00002.array_record", 2, 90, "0" * 64, {})])}
    manifest = Manifest("build_shards", {"format": "array_record"}, 0, "none", dict(IMAGE_FEATURES), ["a", "b"],
                        splits, 0, written_splits=["train"])
    info = json.loads(tfds_files(manifest, "flowers")["dataset_info.json"])
    assert info["fileFormat"] == "array_record"
    assert info["splits"] == [{"name": "train", "numBytes": "190", "shardLengths": ["3", "2"],
                               "filepathTemplate": "{SPLIT}-{SHARD_INDEX}-of-{NUM_SHARDS}.array_record"}]


@pytest.mark.parametrize("images, image", [
    # One channel count that fits every format: declared; mixed counts: each image's own.
    ({"stored_formats": {"png": 2}, "channels": {"1": 2}}, {"dimensions": ["-1", "-1", "1"]}),
    ({"stored_formats": {"png": 2}, "channels": {"1": 1, "4": 1}}, {"dimensions": ["-1", "-1", "-1"]}),
    ({"stored_formats": {"jpeg": 1, "png": 1}, "channels": {"4": 2}}, {"dimensions": ["-1", "-1", "-1"]}),
    # Not all decodable by tfds's Image (GIF, raw pixels, records TensorFlow cannot decode): bytes.
    ({"stored_formats": {"gif": 1, "png": 1}, "channels": {"3": 2}}, None),
    ({"stored_formats": {"raw": 1}, "channels": {"3": 1}}, None),
    ({"stored_formats": {"png": 1}, "channels": {"3": 1}, "tf_undecodable": {"png": 1}}, None),
    ({}, None)])
def test_tfds_image_feature(images, image):
    from transforms.shardset.manifest import Manifest, ShardEntry, SplitEntry
    from transforms.shardset.tfds_metadata import tfds_files

    splits = {"train": SplitEntry("train", [ShardEntry("train-00000-of-00001.tfrecord", 2, 100, "0" * 64, {})])}
    manifest = Manifest("build_shards", {}, 0, "none", IMAGE_FEATURES, [], splits, 0, images,
                        written_splits=["train"])
    files = tfds_files(manifest)
    feature = json.loads(files["features.json"])["featuresDict"]["features"]["image/encoded"]
    assert (feature["image"]["shape"] if "image" in feature else None) == image
    assert "supervisedKeys" not in json.loads(files["dataset_info.json"])  # no image classes
    assert files["image.class.label.labels.txt"] is None


@pytest.mark.parametrize("folder, name", [("out/flowers", "flowers"), ("gs://b/Coco-Val 2017/", "coco_val_2017"),
                                          ("out/2024", "ds_2024"), ("out/---", "tfrecord_shards"),
                                          ("/", "tfrecord_shards")])
def test_dataset_name_from_the_folder(folder, name):
    from transforms.shardset.tfds_metadata import dataset_name, dataset_name_problem

    assert dataset_name(folder) == name and dataset_name_problem(name) is None
    assert "tensorflow-datasets name" in dataset_name_problem("Coco-Val")


def test_an_empty_list_takes_its_keys_type_from_other_rows():
    typing = ManifestTyping({})
    first = typing.json_row({"tags": [], "none": []})
    second = typing.json_row({"tags": [3], "none": []})
    layouts = [RecordLayout(features=tuple((n, t) for n, t, _ in row)) for row in (first, second)]
    merged = merge_layouts(layouts)
    assert merged.feature_spec() == {"none": "bytes_list", "tags": "int64_list"}

    class Row:
        labels, objects, label = None, None, "a"
        features = first
    from transforms.images.annotations import record_extras
    assert record_extras(Row, merged, {"a": 0}, ()) == (("none", "bytes", ()), ("tags", "int64", ()))


def test_label_problem_checks_every_label_of_a_multi_label_record():
    from transforms.verify.checks import label_problem

    info = ImageInfo("png", 2, 3, 3)

    def decoded(labels, texts):
        return decode_example(image_example(b"I", info, 0, "a", "f", "a" * 64, (
            ("image/class/label", "int64", labels), ("image/class/text", "bytes", texts))))

    assert label_problem(decoded((0, 1), (b"a", b"b")), ["a", "b"]) is None
    assert label_problem(decoded((), ()), ["a", "b"]) is None
    assert "label 1 is 'b'" in label_problem(decoded((0, 1), (b"a", b"c")), ["a", "b"])
    assert "outside 0..1" in label_problem(decoded((0, 2), (b"a", b"c")), ["a", "b"])


# --- features that may be missing -----------------------------------------------------------

def test_a_declared_optional_feature_is_a_list_of_at_most_one_value():
    assert parse_feature_flags(["caption:bytes?", "tags:int64_list?"]) == {"caption": "bytes?", "tags": "int64_list?"}
    typing = ManifestTyping(parse_feature_flags(["caption:bytes?", "w:float?"]))
    assert typing.json_row({"caption": "a cat", "w": 1}) == (("caption", "bytes_list", (b"a cat",)),
                                                             ("w", "float_list", (1.0,)))
    assert typing.json_row({"label": "x"}) == ()
    with pytest.raises(FeatureValueError, match="a list where the feature is a single bytes"):
        typing.json_row({"caption": ["a", "b"]})
    # CSV: an empty cell of an optional column is missing; of another, a value.
    csv = ManifestTyping(parse_feature_flags(["n:int64?", "t:bytes"]))
    assert csv.csv_row({"n": " ", "t": ""}) == (("t", "bytes", (b"",)),)
    assert csv.csv_row({"n": "4", "t": "x"}) == (("n", "int64_list", (4,)), ("t", "bytes", (b"x",)))


def test_a_declared_list_takes_a_single_json_value_as_a_list_of_one():
    typing = ManifestTyping({"caption": "bytes_list"})
    assert typing.json_row({"caption": "a cat"}) == (("caption", "bytes_list", (b"a cat",)),)
    assert typing.json_row({"caption": ["a", "b"]}) == (("caption", "bytes_list", (b"a", b"b")),)
    undeclared = ManifestTyping({})
    undeclared.json_row({"tags": [1]})
    with pytest.raises(FeatureValueError, match="not a list"):  # an inferred list stays strict
        undeclared.json_row({"tags": 1})


def test_a_key_some_inputs_lack_is_optional_in_the_layout():
    from transforms.images.listing_facts import ListingTally

    def source(name: str, **features) -> SourceImage:
        return SourceImage(name, name, "train", "cat", features=tuple(
            (key, t, v) for key, (t, v) in sorted(features.items())))

    halves = [ListingTally(), ListingTally()]
    halves[0].add(source("a", caption=("bytes", (b"x",)), n=("int64", (1,)), tags=("int64_list", (1,))))
    halves[0].add(DeadLetter("bad", "unreadable", "x"))  # not an input whose keys count
    halves[1].add(source("b", n=("int64", (2,)), image_source=("bytes", (b"s",))))
    facts = ListingTally.merged(halves).facts()
    assert dict(facts.layout.features) == {"caption": "bytes_list", "n": "int64", "tags": "int64_list",
                                           "image_source": "bytes_list"}
    everywhere = ListingTally()
    everywhere.add(source("a", n=("int64", (1,))))
    assert dict(everywhere.facts().layout.features) == {"n": "int64"}
    # A declared type is kept (a single value declared stays required); one declared optional is in
    # every record even when no input gives it.
    declared = ListingTally.merged(halves).facts(declared={"caption": "bytes", "note": "bytes?"})
    assert dict(declared.layout.features) == {"caption": "bytes", "n": "int64", "tags": "int64_list",
                                              "image_source": "bytes_list", "note": "bytes_list"}
