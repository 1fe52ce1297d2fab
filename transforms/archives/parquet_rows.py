"""Parquet files of images (Hugging Face exports and the like): columns, class names, rows.

A row is one input: its image is a column of image bytes, or a struct with ``bytes`` and ``path``
as Hugging Face's ``Image`` feature writes it; its label a column of class indices (named by the
``ClassLabel`` names Hugging Face keeps in the schema's metadata) or of class names. A row group's
columns are read only if the footer bounds their bytes (``group_problem``), keeping their
dictionaries (a value many rows share is held once), and each image is measured before it is copied.
"""

from __future__ import annotations

import json
import posixpath
from typing import BinaryIO, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.archives.members import PARQUET, MemberRef, member_name
from transforms.errors import ImageError, ManifestError
from transforms.images.class_labels import class_label
from transforms.images.inputs import LabelRules, check_label
from transforms.images.items import SourceImage
from transforms.shardset.dead_letters import DeadLetter

__all__ = ["DEFAULT_IMAGE_COLUMN", "DEFAULT_LABEL_COLUMN", "MAX_LABEL_CHARS", "LISTED_GROUP_BYTES", "open_parquet",
           "columns_problem", "class_names_of", "open_rows", "row_group_entries", "open_images", "group_problem",
           "image_column", "image_at"]

DEFAULT_IMAGE_COLUMN = "image"
DEFAULT_LABEL_COLUMN = "label"
# A row's label (class name or index) and image path are at most this many characters; longer is bad_label.
MAX_LABEL_CHARS = 4096
# A row group's label and image-path columns are listed only if the footer says they hold at most this
# many bytes uncompressed (a dictionary page counts once, however many rows share its values).
LISTED_GROUP_BYTES = 256 << 20


def open_parquet(fh: BinaryIO, **options) -> pq.ParquetFile:
    """The Parquet file read from the seekable ``fh`` (only its footer is read here).

    Raises:
        ImageError: ``unreadable``, the file is not Parquet or its footer is damaged.
    """
    try:
        return pq.ParquetFile(fh, **options)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise ImageError("unreadable", f"Parquet file cannot be read: {type(err).__name__}: {err}") from err


def _read_group(parquet: pq.ParquetFile, group: int, columns: list[str]) -> pa.Table:
    try:
        return parquet.read_row_group(group, columns=columns)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise ImageError("unreadable", f"row group {group} cannot be read: {type(err).__name__}: {err}") from err


def _image_path_leaf(schema: pa.Schema, image_column: str) -> str | None:
    """``COLUMN.path`` where the image column is a struct with the image file's path, else None."""
    image = _field_type(schema, image_column)
    if image is not None and pa.types.is_struct(image) and image.get_field_index("path") >= 0:
        return f"{image_column}.path"
    return None


def _field_type(schema: pa.Schema, name: str) -> pa.DataType | None:
    index = schema.get_field_index(name)
    return None if index < 0 else schema.field(index).type


def columns_problem(schema: pa.Schema, image_column: str, label_column: str) -> str | None:
    """Why a Parquet file's schema cannot give images and labels with these columns, or None."""
    names = ", ".join(schema.names)
    image = _field_type(schema, image_column)
    if image is None:
        return f"has no column {image_column!r} (--image_column); its columns: {names}"
    binary = (pa.types.is_binary(image) or pa.types.is_large_binary(image)) or (
        pa.types.is_struct(image) and image.get_field_index("bytes") >= 0)
    if not binary:
        return (f"column {image_column!r} is {image}, not image bytes (binary, or a struct with "
                "bytes and path as Hugging Face writes images)")
    label = _field_type(schema, label_column)
    if label is None:
        return f"has no column {label_column!r} (--label_column); its columns: {names}"
    if pa.types.is_dictionary(label):
        label = label.value_type
    if not (pa.types.is_integer(label) or pa.types.is_string(label) or pa.types.is_large_string(label)):
        return f"column {label_column!r} is {label}, not class indices (integers) or class names (strings)"
    return None


def class_names_of(schema: pa.Schema, label_column: str) -> tuple[str, ...] | None:
    """The ``ClassLabel`` names Hugging Face wrote for the label column in the schema's metadata, or None.

    Raises:
        ManifestError: They name a class twice.
    """
    meta = (schema.metadata or {}).get(b"huggingface")
    if not meta:
        return None
    try:
        features = json.loads(meta).get("info", {}).get("features", {})
    except (ValueError, AttributeError):
        return None
    label = features.get(label_column) if isinstance(features, dict) else None
    names = label.get("names") if isinstance(label, dict) and label.get("_type") == "ClassLabel" else None
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
        if twice is not None:
            raise ManifestError(f"the ClassLabel names of column {label_column!r} give {twice!r} twice (at "
                                f"{names.index(twice)} and {names.index(twice, names.index(twice) + 1)}): every "
                                "later index would shift; give --class_names")
        return tuple(names)
    return None


def open_rows(fh: BinaryIO, image_column: str, label_column: str) -> pq.ParquetFile:
    """The Parquet file read from the seekable ``fh`` to list its rows (``row_group_entries``): its
    label column and its images' paths are read as dictionary arrays (each distinct value once)."""
    parquet = open_parquet(fh)
    label = _field_type(parquet.schema_arrow, label_column)
    leaves = [label_column] if label is not None and not pa.types.is_integer(label) else []
    leaves += filter(None, [_image_path_leaf(parquet.schema_arrow, image_column)])
    return open_parquet(fh, metadata=parquet.metadata, read_dictionary=leaves) if leaves else parquet


def _values(column: pa.ChunkedArray | pa.Array) -> Iterator[object]:
    """Each row's value of a column, a dictionary's values decoded once and shared by the rows that
    use them; a text value over ``MAX_LABEL_CHARS`` is given as its length (an ``int`` wrapped in a
    ``_TooLong``), never decoded."""
    for chunk in column.chunks if isinstance(column, pa.ChunkedArray) else (column,):
        if pa.types.is_dictionary(chunk.type):
            values, indices = _bounded(chunk.dictionary), chunk.indices.to_pylist()
            yield from (None if index is None else values[index] for index in indices)
        else:
            yield from _bounded(chunk)


class _TooLong(int):
    """The length of a text value too long to read (``_values``)."""


def _bounded(array: pa.Array) -> list:
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return array.to_pylist()
    import pyarrow.compute as pc  # here: importing it costs a build without Parquet inputs ~0.1 s

    lengths = pc.binary_length(array).to_pylist()
    return [None if n is None else _TooLong(n) if n > MAX_LABEL_CHARS else array[i].as_py()
            for i, n in enumerate(lengths)]


def row_group_entries(path: str, parquet: pq.ParquetFile, group: int, first_row: int, image_column: str,
                      label_column: str, rules: LabelRules,
                      class_names: Sequence[str] | None) -> Iterator[SourceImage | DeadLetter]:
    """The input of each row of one row group, read from its label column only.

    Memory is bounded whatever the file claims: over ``LISTED_GROUP_BYTES`` each row is a
    ``too_large`` dead letter, unread; a label or path over ``MAX_LABEL_CHARS`` is never decoded.
    A row is named ``FILE!ROW``; its ``image/filename`` is ``BASENAME!ROW``, or ``BASENAME!ROW!PATH``
    where the image struct keeps the image file's ``path``.

    Args:
        path: The Parquet file (path or URI), opened as ``parquet`` (``open_rows``).
        first_row: Row number in the file of the first row of row ``group``.
        class_names: Names of integer labels, in index order (``--class_names`` or the file's
            ``ClassLabel`` names); None: an index is named by its number.
    """
    path_leaf = _image_path_leaf(parquet.schema_arrow, image_column)
    listed = [label_column] + ([path_leaf] if path_leaf else [])
    problem = next(filter(None, (group_problem(parquet, group, column, LISTED_GROUP_BYTES) for column in listed)), None)
    if problem:
        for row in range(parquet.metadata.row_group(group).num_rows):
            yield DeadLetter(member_name(path, str(first_row + row)), "too_large", problem)
        return
    table = _read_group(parquet, group, listed)
    try:
        labels = _values(table.column(0))
        paths = _values(table.column(1).combine_chunks().field("path")) if path_leaf else iter(())
    except (pa.ArrowException, OSError, ValueError) as err:
        raise ImageError("unreadable", f"row group {group} cannot be read: {type(err).__name__}: {err}") from err
    base = posixpath.basename(path)
    for row, value in enumerate(labels):
        number = first_row + row
        image_path = next(paths, None)
        filename = f"{base}!{number}" + (f"!{image_path}" if isinstance(image_path, str) and image_path else "")
        name = member_name(path, str(number))
        if isinstance(value, _TooLong):
            label, why = None, f"row's {label_column!r} has {int(value)} characters, over {MAX_LABEL_CHARS}"
        elif value is None:
            label, why = None, f"row's {label_column!r} is None, not a class"
        else:
            label, why = class_label(value, class_names)
        if label is None:
            yield DeadLetter(name, "no_label" if value is None else "bad_label", why)
            continue
        if problem := check_label(label):
            yield DeadLetter(name, "bad_label", problem)
            continue
        yield SourceImage(path=name, relpath=filename, split=rules.unsplit(), label=label,
                          member=MemberRef(path, PARQUET, group, row, -1, column=image_column))


def open_images(fh: BinaryIO, column: str) -> pq.ParquetFile:
    """The Parquet file read from the seekable ``fh`` to read its image ``column``: its image bytes
    are read as a dictionary array (each distinct image once), as the file stores them."""
    parquet = open_parquet(fh)
    image = _field_type(parquet.schema_arrow, column)
    if image is None:
        return parquet
    leaf = f"{column}.bytes" if pa.types.is_struct(image) else column
    return open_parquet(fh, metadata=parquet.metadata, read_dictionary=[leaf])


def group_problem(parquet: pq.ParquetFile, group: int, column: str, limit: int) -> str | None:
    """Why a row group's image ``column`` is not read, from the footer alone: it holds more than
    ``limit`` bytes uncompressed; or None."""
    meta = parquet.metadata.row_group(group)
    size = sum(meta.column(i).total_uncompressed_size for i in range(meta.num_columns)
               if meta.column(i).path_in_schema == column or meta.column(i).path_in_schema.startswith(column + "."))
    if size <= limit:
        return None
    return (f"row group {group}'s column {column!r} holds {size} bytes uncompressed (the file's footer says), "
            f"over the {limit} read at once; none of its {meta.num_rows} rows is read (a file written with "
            "smaller row groups is)")


def image_column(parquet: pq.ParquetFile, group: int, column: str) -> tuple[pa.ChunkedArray, int]:
    """One row group's image values (``image_at`` gives each row's image) and the bytes they hold."""
    table = _read_group(parquet, group, [column])
    return table.column(0), table.nbytes


def image_at(values: pa.ChunkedArray, row: int, max_bytes: int) -> bytes:
    """The image bytes of one row of ``image_column``'s values (bytes, or a ``{bytes, path}`` struct),
    measured before they are copied out.

    Raises:
        ImageError: ``unreadable``, the row holds no image bytes; ``too_large``,
            its image is over ``max_bytes``.
    """
    if row >= len(values):
        raise ImageError("unreadable", f"row group has {len(values)} rows, not {row + 1}")
    value = values[row]
    if isinstance(value, pa.StructScalar):
        data = value["bytes"] if value.is_valid else None
        if data is None or not data.is_valid:
            path = value["path"].as_py() if value.is_valid and "path" in value.keys() else None
            shown = f" (only a path: {path!r})" if path else ""
            raise ImageError("unreadable", f"row holds no image bytes{shown}")
        value = data
    if isinstance(value, pa.DictionaryScalar):
        value = value.value if value.is_valid else None
    if value is None or not value.is_valid:
        raise ImageError("unreadable", "row holds no image bytes")
    if not isinstance(value, (pa.BinaryScalar, pa.LargeBinaryScalar)):
        raise ImageError("unreadable", f"row's image is {value.type}, not bytes")
    buffer = value.as_buffer()
    if buffer.size > max_bytes:
        raise ImageError("too_large", f"row's image has {buffer.size} bytes, over --max_image_mb "
                                      f"({max_bytes / (1 << 20):g} MiB); not read")
    return buffer.to_pybytes()
