"""Parquet rows' labels: integer indices named by ClassLabel names, which must name each class once."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.archives.parquet_rows import class_names_of, open_parquet, row_group_entries
from transforms.errors import ManifestError
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
