"""Unit tests of ``transforms/archives/parquet_rows.py``: labels (integer indices named by ClassLabel names,
which must name each class once) and a row group's image column, bounded and measured."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.archives.parquet_rows import (class_names_of, group_problem, image_at, image_column, open_images,
                                               open_parquet, row_group_entries)
from transforms.errors import ImageError, ManifestError
from transforms.images.inputs import LabelRules
from transforms.images.items import SourceImage


def _schema(names) -> pa.Schema:
    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": names}}
    return pa.schema([("image", pa.binary()), ("label", pa.int64())],
                     metadata={"huggingface": json.dumps({"info": {"features": features}})})


def test_class_label_names_are_read() -> None:
    assert class_names_of(_schema(["cat", "dog"]), "label") == ("cat", "dog")


def test_a_class_label_name_given_twice_is_refused_naming_it() -> None:
    with pytest.raises(ManifestError) as err:
        class_names_of(_schema(["cat", "cat", "dog"]), "label")
    assert "'cat' twice (at 0 and 1)" in str(err.value) and "\n" not in str(err.value)


def _rows(labels, kind) -> list:
    buf = io.BytesIO()
    pq.write_table(pa.table({"image": pa.array([b"x"] * len(labels), pa.binary()),
                             "label": pa.array(labels, kind)}), buf)
    buf.seek(0)
    return list(row_group_entries("f.parquet", open_parquet(buf), 0, 0, "image", "label", LabelRules(), None))


def test_integers_and_integer_text_are_the_same_index() -> None:
    assert [e.label for e in _rows([9, 11, 2], pa.int64())] == ["9", "11", "2"]
    assert [e.label for e in _rows(["9", " 11 ", "cat"], pa.string())] == ["9", "11", "cat"]
    assert all(isinstance(e, SourceImage) for e in _rows(["9"], pa.string()))


def _file(tmp_path, images: pa.Array, row_group_size: int = 4):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"image": images, "label": list(range(len(images)))}), path,
                   row_group_size=row_group_size)
    return open(path, "rb")


@pytest.mark.parametrize("images", [
    pa.array([b"a" * 10, b"bb", b"a" * 10], pa.binary()),
    pa.array([{"bytes": b"a" * 10, "path": "x.jpg"}, {"bytes": b"bb", "path": None},
              {"bytes": b"a" * 10, "path": "y.jpg"}]),
], ids=["binary", "hugging_face"])
def test_image_bytes_are_kept_as_a_dictionary_and_measured_before_they_are_copied(images, tmp_path):
    with _file(tmp_path, images) as fh:
        values, nbytes = image_column(open_images(fh, "image"), 0, "image")
    leaf = values.type.field("bytes").type if pa.types.is_struct(values.type) else values.type
    assert pa.types.is_dictionary(leaf)
    assert [image_at(values, row, 10) for row in range(3)] == [b"a" * 10, b"bb", b"a" * 10]
    with pytest.raises(ImageError, match="row's image has 10 bytes, over --max_image_mb") as caught:
        image_at(values, 0, 9)
    assert caught.value.reason == "too_large"
    with pytest.raises(ImageError, match="row group has 3 rows, not 4"):
        image_at(values, 3, 10)


def test_a_row_without_image_bytes_says_so(tmp_path):
    images = pa.array([{"bytes": None, "path": "x.jpg"}, None], pa.struct([("bytes", pa.binary()),
                                                                            ("path", pa.string())]))
    with _file(tmp_path, images) as fh:
        values, _ = image_column(open_images(fh, "image"), 0, "image")
    with pytest.raises(ImageError, match="no image bytes \\(only a path: 'x.jpg'\\)"):
        image_at(values, 0, 100)
    with pytest.raises(ImageError, match="no image bytes$"):
        image_at(values, 1, 100)


def test_a_row_group_is_bounded_by_its_footer_before_it_is_read(tmp_path):
    images = pa.array([bytes([i]) * 1000 for i in range(6)], pa.binary())
    with _file(tmp_path, images, row_group_size=3) as fh:
        parquet = open_images(fh, "image")
        assert group_problem(parquet, 1, "image", 10_000) is None
        why = group_problem(parquet, 1, "image", 1000)
    assert why.startswith("row group 1's column 'image' holds ") and "none of its 3 rows is read" in why, why
