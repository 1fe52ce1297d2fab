"""COCO files read as a stream: the same entries as the whole file, in memory independent of its size."""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest

from transforms.errors import ManifestError
from transforms.images.inputs import LabelRules
from transforms.images.items import SourceImage
from transforms.images.annotations import ObjectClasses
from transforms.images import coco as coco
from transforms.images.coco import coco_items, coco_key
from tests.helpers import coco_entries
from transforms.shardset.dead_letters import DeadLetter

_DOC = {
    "info": {"description": "x", "nested": [1, {"a": [2.5, -3e10, None, True]}]},
    "images": [{"id": 1, "file_name": "a.jpg"}, {"id": 2.0, "file_name": "b \u00fc\U0001f600.jpg"}, 7],
    "licenses": [],
    "annotations": [{"id": 10, "image_id": 1, "category_id": 12345678901, "bbox": [0.5, 1, 2, 3e-3]}],
    "categories": [{"id": 12345678901, "name": "cat"}],
}


def _items(doc_bytes: bytes, chunk: int, monkeypatch) -> list:
    monkeypatch.setattr(coco, "_CHUNK", chunk)
    return list(coco_items(io.BytesIO(doc_bytes), "f.json"))


def _expected(doc: dict) -> list:
    return [(key, i, entry) for key in sorted(doc, key=list(doc).index) if key in coco.COCO_LISTS
            for i, entry in enumerate(doc[key])]


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
@pytest.mark.parametrize("indent", [None, 2])
def test_the_stream_gives_every_entry_whatever_the_chunks(monkeypatch, chunk, indent) -> None:
    text = json.dumps(_DOC, indent=indent, ensure_ascii=False)
    for data in (text.encode("utf-8"), b"\xef\xbb\xbf" + text.encode("utf-8")):  # with a BOM too
        assert _items(data, chunk, monkeypatch) == _expected(_DOC)


def test_no_annotations_list_is_an_empty_one_and_empty_lists_give_nothing(monkeypatch) -> None:
    data = b'{"images": [], "categories": [ ] }  \n'
    assert _items(data, 3, monkeypatch) == []


@pytest.mark.parametrize("data, message", [
    (b"", "not valid JSON: the file is empty"),
    (b"[1, 2]", "not a JSON object; not a COCO annotation file"),
    (b'{"images": 3, "categories": []}', "'images' is not a list; not a COCO annotation file"),
    (b'{"images": []}', "'categories' is not a list; not a COCO annotation file"),
    (b'{"images": [{"id": 1}, ], "categories": []}', "not valid JSON"),
    (b'{"images": [{"id": 1} {"id": 2}], "categories": []}', "not valid JSON: expected ','"),
    (b'{"images": [], "categories": []} extra', "not valid JSON: extra data after the object"),
    (b'{"images": [{"id": 1, "file_name": "a.jpg"', "not valid JSON"),
    (b'{"images": [], "categories": [], 5: 1}', "not valid JSON: expected a key"),
])
def test_a_file_that_is_not_coco_is_one_error(monkeypatch, data, message) -> None:
    with pytest.raises(ManifestError, match=message):
        _items(data, 4, monkeypatch)


def test_ids_that_python_takes_as_equal_are_one_key() -> None:
    assert coco_key(1) == coco_key(1.0) == coco_key(True)
    assert coco_key("1") != coco_key(1) and coco_key(None) != coco_key("null")


def test_entries_are_those_of_the_whole_file() -> None:
    doc = {"images": [{"id": 1, "file_name": "x/a.jpg"}, {"id": 2.0, "file_name": "b.jpg"}, {"id": 3}, 4],
           "annotations": [{"id": 1, "image_id": 1, "category_id": 5, "bbox": [1, 2, 3, 4]},
                           {"id": 2, "image_id": 2, "category_id": 5, "bbox": [0, 0, 1, 1]},
                           {"id": 3, "image_id": 9, "category_id": 5, "bbox": [1, 2, 3, 4]}, "x"],
           "categories": [{"id": 5, "name": "cat"}]}
    first, *entries = coco_entries(json.dumps(doc), "ann/i.json", None, LabelRules())
    assert isinstance(first, ObjectClasses) and first.classes == ((5, "cat"),)  # the categories come first
    dead = sorted((e.path, e.error) for e in entries if isinstance(e, DeadLetter))
    assert dead == [("ann/i.json:annotations[2]", "annotation names image_id 9, which is not in images"),
                    ("ann/i.json:annotations[3]", "annotation names image_id None, which is not in images"),
                    ("ann/i.json:images[2]", "image has no file_name"),
                    ("ann/i.json:images[3]", "image has no file_name")]
    kept = {e.path: len(e.objects) for e in entries if not isinstance(e, DeadLetter)}
    assert kept == {"ann/x/a.jpg": 1, "ann/b.jpg": 1}  # id 2.0 is the annotations' image_id 2


@pytest.mark.slow
def test_memory_does_not_grow_with_the_file(monkeypatch, tmp_path) -> None:
    """A 6 MB file is read holding well under 1 MB: one entry and a read buffer."""
    monkeypatch.setattr(coco, "_CHUNK", 64 << 10)
    path = tmp_path / "big.json"
    with open(path, "w") as fh:
        fh.write('{"info": {}, "images": [')
        fh.write(",".join(json.dumps({"id": i, "file_name": f"images/{i:08d}.jpg", "width": 640, "height": 480})
                          for i in range(20_000)))
        fh.write('], "annotations": [')
        fh.write(",".join(json.dumps({"id": i, "image_id": i // 2, "category_id": 1, "iscrowd": 0,
                                      "bbox": [1.5, 2.5, 30.25, 40.75], "area": 1234.5}) for i in range(40_000)))
        fh.write('], "categories": [{"id": 1, "name": "cat"}]}')
    size = path.stat().st_size
    assert size > 6_000_000
    tracemalloc.start()
    try:
        counted = 0
        with open(path, "rb") as fh:
            for _ in coco_items(fh, str(path)):
                counted += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert counted == 60_001
    assert peak < 1_000_000, peak


def test_images_sharing_an_id_are_each_a_dead_letter_and_take_no_annotations() -> None:
    doc = {"images": [{"id": 7, "file_name": "a.jpg"}, {"id": 8, "file_name": "b.jpg"},
                      {"id": 7, "file_name": "c.jpg"}],
           "annotations": [{"id": 1, "image_id": 7, "category_id": 1, "bbox": [0, 0, 2, 2]},
                           {"id": 2, "image_id": 8, "category_id": 1, "bbox": [0, 0, 2, 2]}],
           "categories": [{"id": 1, "name": "cat"}]}
    _, *entries = coco_entries(json.dumps(doc), "ann/i.json", None, LabelRules())
    images = [e for e in entries if isinstance(e, SourceImage)]
    dead = sorted((d.path, d.reason) for d in entries if isinstance(d, DeadLetter))
    assert [e.path for e in images] == ["ann/b.jpg"] and len(images[0].objects) == 1
    assert dead == [("ann/i.json:images[0]", "bad_manifest_row"), ("ann/i.json:images[2]", "bad_manifest_row")]
    assert all("image id 7 is given to 2 images (images[0], images[2])" in d.error
               for d in entries if isinstance(d, DeadLetter))


@pytest.mark.parametrize("class_id", [10 ** 20, 1 << 63])
def test_a_kept_category_id_outside_int64_refuses_the_file(class_id) -> None:
    doc = {"images": [], "categories": [{"id": class_id, "name": "cat"}]}
    with pytest.raises(ManifestError, match=f"category 'cat' has id {class_id}, above 9223372036854775807"):
        list(coco_entries(json.dumps(doc), "i.json", None, LabelRules()))
    largest = {"images": [], "categories": [{"id": (1 << 63) - 1, "name": "cat"}]}
    assert next(coco_entries(json.dumps(largest), "i.json", None, LabelRules())).classes == (((1 << 63) - 1, "cat"),)


def test_the_first_image_paths_resolve_against_the_root_and_stop_after_max_items():
    from transforms.images.coco import first_image_paths, image_folder

    items = [("annotations", 0, {"image_id": 1}), ("images", 0, {"file_name": "a.jpg"}),
             ("images", 1, {"id": 2}), ("images", 2, {"file_name": "/abs/b.jpg"}),
             ("images", 3, {"file_name": "c.jpg"})]
    folder = image_folder("gs://b/coco/annotations/instances.json", None)
    assert folder == "gs://b/coco/annotations"
    assert image_folder("instances.json", None) == "." and image_folder("x/i.json", "gs://b/val/") == "gs://b/val"
    assert first_image_paths(items, folder, 2, 100) == ["gs://b/coco/annotations/a.jpg", "/abs/b.jpg"]
    assert first_image_paths(items, folder, 8, 2) == ["gs://b/coco/annotations/a.jpg"]  # 2 entries read
