"""What an image record carries beyond one class label: extra features, labels, boxes (pure).

Every record of a build has one ``RecordLayout`` (TensorFlow and tfds need one schema), merged
from every input's own: one image with several labels makes ``image/class/label`` a list for all.

Object classes are a space of their own, apart from the image classes of ``labels.txt``. Ids come
from a COCO file's ``categories`` (``--coco_ids keep``); else from the index in
``--class_names``/``--labels_file``, or in sorted names, plus ``--label_offset``. A name none of
these numbers gets the next ids after the largest one, by sorted name (``object_label_map``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from transforms.example.features import (EMPTY_LIST, LIST_SEPARATOR, OPTIONAL, FeatureValueError,
                                         ManifestTyping, base_kind, is_list_type, optional_type)
from transforms.images.objects import BoxError, PlacedBox, SourceBox, parse_objects, place_boxes, source_geometry
from transforms.shardset.tfds_metadata import tfds_files

__all__ = ["OBJECT_FEATURES", "MULTI_LABEL_FEATURES", "SOURCE_ID", "RecordLayout", "row_annotations", "layout_of",
           "merge_layouts", "with_optional_features", "record_extras", "image_extras", "PlacedExtras", "LABEL_MAP_NAME", "build_sidecars",
           "object_ids_problem", "ObjectClasses", "object_label_map", "label_map_pbtxt", "DEFAULT_OBJECT_OFFSET"]

LABEL_MAP_NAME = "label_map.pbtxt"

OBJECT_FEATURES: dict[str, str] = {
    "image/object/bbox/xmin": "float_list",
    "image/object/bbox/ymin": "float_list",
    "image/object/bbox/xmax": "float_list",
    "image/object/bbox/ymax": "float_list",
    "image/object/class/label": "int64_list",
    "image/object/class/text": "bytes_list",
    "image/object/area": "float_list",
    "image/object/is_crowd": "int64_list",
}
# The image's id in its COCO file, as bytes: Model Garden's detection decoder reads it.
SOURCE_ID = "image/source_id"
MULTI_LABEL_FEATURES: dict[str, str] = {
    "image/class/label": "int64_list",
    "image/class/text": "bytes_list",
}


@dataclass(frozen=True)
class RecordLayout:
    """The keys every record of a build carries besides the fixed image keys.

    Attributes:
        multi_label: ``image/class/label`` and ``image/class/text`` are lists.
        objects: Records carry the object-detection keys (``OBJECT_FEATURES``).
        features: ``(name, type)`` of the extra features, sorted by name.
        label_offset: Added to numbered object classes' indices (``--label_offset``).
        object_labels: ``(id, name)`` of every object class, sorted by id
            (``object_label_map``).
        boxes_outside: What a box outside its image becomes (``objects.BOX_POLICIES``).
    """

    multi_label: bool = False
    objects: bool = False
    features: tuple[tuple[str, str], ...] = ()
    label_offset: int = 0
    object_labels: tuple[tuple[int, str], ...] = ()
    boxes_outside: str = "skip"

    @property
    def plain(self) -> bool:
        """True when records are the plain image schema."""
        return not (self.multi_label or self.objects or self.features)

    def feature_spec(self) -> dict[str, str]:
        """Name -> type of the keys this layout adds or changes (see ``features.FEATURE_TYPES``)."""
        spec = {name: "bytes_list" if t == EMPTY_LIST else t for name, t in self.features}
        if self.multi_label:
            spec.update(MULTI_LABEL_FEATURES)
        if self.objects:
            spec.update(OBJECT_FEATURES)
        return spec


def row_annotations(row: Mapping, is_csv: bool, typing: ManifestTyping, multi_label: bool,
                    bbox_format: str) -> tuple[tuple[str, ...] | None, tuple, tuple[SourceBox, ...] | None]:
    """``(labels, features, objects)`` of one input-manifest row; ``labels`` is None for a row with a
    single label (left to the caller).

    Raises:
        FeatureValueError: An extra value does not fit its type.
        BoxError: ``objects`` is malformed.
    """
    label = row.get("label")
    objects = None
    if not is_csv and row.get("objects") is not None:
        objects = parse_objects(row["objects"], bbox_format)
    labels = None
    if isinstance(label, list):
        if not all(isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in label):
            raise FeatureValueError(f"label {label!r} is not a list of strings or integers")
        labels = tuple(dict.fromkeys(str(v) for v in label))
    elif is_csv and multi_label and isinstance(label, str):
        labels = tuple(dict.fromkeys(v.strip() for v in label.split(LIST_SEPARATOR) if v.strip()))
    elif label is None and objects is not None:
        labels = ()
    features = typing.csv_row(row) if is_csv else typing.json_row(row)
    return labels, features, objects


def layout_of(source) -> RecordLayout:
    """The layout one ``SourceImage`` asks for."""
    return RecordLayout(multi_label=source.labels is not None, objects=source.objects is not None,
                        features=tuple((name, feature_type) for name, feature_type, _ in source.features))


def merge_layouts(layouts: Iterable[RecordLayout]) -> RecordLayout:
    """One layout for every record: the union of all.

    A feature given two types by different inputs takes the first in sorted order; images whose
    values have the other type then become ``bad_feature`` dead letters.
    """
    layouts = list(layouts)
    types: dict[str, set[str]] = {}
    for layout in layouts:
        for name, feature_type in layout.features:
            types.setdefault(name, set()).add(feature_type)
    chosen = tuple((name, min(given - {EMPTY_LIST}, default=EMPTY_LIST)) for name, given in sorted(types.items()))
    return RecordLayout(any(layout.multi_label for layout in layouts),
                        any(layout.objects for layout in layouts), chosen)


def with_optional_features(layout: RecordLayout, present: Mapping[str, int], inputs: int,
                           declared: Mapping[str, str] | None = None) -> RecordLayout:
    """The layout with each undeclared single-valued feature that some inputs lack made a list
    (``optional_type``), and every feature declared optional (``name:type?``) in it.

    A key missing from some inputs would otherwise have no value to write there. A key declared
    with ``--feature`` (``declared``, ``features.parse_feature_flags``) keeps its declared type;
    ``SOURCE_ID`` stays single (an image without one gets ""). ``present``: feature name -> inputs
    (of ``inputs`` ``SourceImage``s) that give it.
    """
    declared = declared or {}
    types = {name: optional_type(t) if (present.get(name, 0) < inputs and name != SOURCE_ID
                                        and name not in declared) else t
             for name, t in layout.features}
    for name, feature_type in declared.items():
        if feature_type.endswith(OPTIONAL):  # in every record, whether or not an input gives it
            types[name] = optional_type(feature_type.removesuffix(OPTIONAL))
    features = tuple(sorted(types.items()))
    return layout if features == layout.features else replace(layout, features=features)


def record_extras(source, layout: RecordLayout, index_of: Mapping[str, int],
                  boxes: Sequence[PlacedBox]) -> tuple[tuple[str, str, tuple], ...]:
    """``(name, kind, values)`` of the keys a record carries beyond the plain image schema.

    Args:
        layout: The build's layout (its ``object_labels`` name every object's class).
        index_of: Image class name -> index (every image class of the source is in it).

    Raises:
        FeatureValueError: An extra feature is missing or has another type than the layout's.
    """
    out = []
    given = {name: (feature_type, values) for name, feature_type, values in source.features}
    for name, feature_type in layout.features:
        if feature_type == EMPTY_LIST:
            feature_type = "bytes_list"
        got_type, values = given.get(name, (feature_type, ("",) if name == SOURCE_ID else ()))
        if got_type == EMPTY_LIST and is_list_type(feature_type):
            got_type = feature_type
        if got_type != feature_type and not (base_kind(got_type) == base_kind(feature_type)
                                             and is_list_type(feature_type)):
            raise FeatureValueError(f"key {name!r} is {got_type} here, {feature_type} in other rows")
        if name not in given and not is_list_type(feature_type) and name != SOURCE_ID:
            raise FeatureValueError(f"key {name!r} ({feature_type}) has no value")
        out.append((name, base_kind(feature_type), tuple(values)))
    if layout.multi_label:
        names = source.class_names()
        out.append(("image/class/label", "int64", tuple(index_of[n] for n in names)))
        out.append(("image/class/text", "bytes", tuple(n.encode("utf-8") for n in names)))
    if layout.objects:
        object_id = {name: class_id for class_id, name in layout.object_labels}
        rows = [(b.xmin, b.ymin, b.xmax, b.ymax, object_id[b.label], b.label.encode("utf-8"), b.area, b.is_crowd)
                for b in boxes]  # a value per key of OBJECT_FEATURES, in its order
        columns = zip(*rows) if rows else [()] * len(OBJECT_FEATURES)
        out.extend((name, base_kind(feature_type), tuple(values))
                   for (name, feature_type), values in zip(OBJECT_FEATURES.items(), columns))
    return tuple(sorted(out))


class PlacedExtras(tuple):
    """A record's extra keys (``record_extras``) that also know how many of its boxes were clipped
    (tallied for the manifest by ``build_manifest``; not a record key)."""

    clipped: int = 0


def image_extras(source, layout: RecordLayout | None, index_of: Mapping[str, int], data: bytes,
                 stored_width: int, stored_height: int, pixels_transformed: bool,
                 cropped: bool = False, more: tuple = ()) -> PlacedExtras:
    """One image's record's extra keys (``record_extras`` and ``more``, sorted), its boxes placed on the stored image.

    Args:
        layout: The build's layout, or None for plain image records.
        data: The source file's bytes (its header gives the size boxes refer to).
        pixels_transformed: The stored pixels are decoded ones, EXIF orientation applied.
        cropped: The stored image is a centre crop, which boxes cannot follow yet.

    Returns:
        ``PlacedExtras``, boxes not inside the image skipped or clipped (``layout.boxes_outside``).

    Raises:
        BoxError: Boxes cannot follow a crop.
        FeatureValueError: As ``record_extras``.
    """
    if layout is None or layout.plain:
        return PlacedExtras(sorted(more))
    boxes: tuple[PlacedBox, ...] = ()
    if layout.objects and source.objects:
        if cropped and pixels_transformed:
            raise BoxError("object boxes do not follow --resize_mode crop yet; use stretch or fit")
        width, height, orientation = source_geometry(data)
        if not pixels_transformed:  # the stored pixels are as in the file
            orientation = 1
        boxes = place_boxes(source.objects, width, height, orientation, stored_width, stored_height,
                            layout.boxes_outside)
    extras = PlacedExtras(sorted(record_extras(source, layout, index_of, boxes) + tuple(more)))
    extras.clipped = sum(box.clipped for box in boxes)
    return extras


def object_ids_problem(object_labels: Sequence[tuple[int, str]]) -> str | None:
    """Why ``label_map.pbtxt`` cannot list these object classes (an id below 1), or None."""
    low = [class_id for class_id, _ in object_labels if class_id < 1]
    if low:
        return (f"object class id {min(low)} is below 1, which the Object Detection API refuses "
                "(--label_offset 1 numbers classes from 1)")
    return None


def build_sidecars(manifest, name: str | None = None) -> dict[str, bytes | None]:
    """Files a build publishes beside ``labels.txt`` with ``manifest``: tfds metadata (``name``: the
    dataset's, ``tfds_metadata.tfds_files``) and, when records carry boxes and every id is 1 or more,
    ``label_map.pbtxt``; None for a file this set does not have."""
    files = {**tfds_files(manifest, name), LABEL_MAP_NAME: None}
    classes = manifest.object_labels
    if "image/object/class/label" in manifest.feature_spec and not object_ids_problem(classes):
        files[LABEL_MAP_NAME] = label_map_pbtxt(classes)
    return files


# The first id of numbered object classes unless --label_offset says otherwise.
DEFAULT_OBJECT_OFFSET = 1


@dataclass(frozen=True)
class ObjectClasses:
    """The object classes one input (``source``) declares, a COCO file's ``categories``: ``(id, name)``
    per class, in the file's order; ``id`` is None where the build numbers them (``--coco_ids renumber``)."""

    source: str
    classes: tuple[tuple[int | None, str], ...]


def object_label_map(names: Iterable[str], declared: Iterable[tuple[int | None, str]], offset: int,
                     fixed: Sequence[str] | None = None) -> tuple[tuple[int, str], ...]:
    """``(id, name)`` of every object class of a build (``names``: those its objects use), sorted by id.

    Args:
        declared: ``(id or None, name)`` of the classes its COCO files declare; a class declared
            with an id keeps it (the smallest, if files disagree).
        offset: Added to the index of a numbered class (``--label_offset``).
        fixed: ``--class_names``/``--labels_file``; None to number by sorted name.
    """
    kept: dict[str, int] = {}
    numbered = set(names)
    for class_id, name in declared:
        if class_id is None:
            numbered.add(name)
        elif name not in kept or class_id < kept[name]:
            kept[name] = class_id
    numbered -= set(kept)
    ids = dict(kept)
    if not kept:
        order = list(fixed) if fixed is not None else sorted(numbered)
        ids.update((name, index + offset) for index, name in enumerate(order) if name in numbered)
        numbered -= set(ids)
    start = max(ids.values(), default=offset - 1) + 1
    ids.update((name, start + index) for index, name in enumerate(sorted(numbered)))
    return tuple(sorted((class_id, name) for name, class_id in ids.items()))


def label_map_pbtxt(classes: Sequence[tuple[int, str]]) -> bytes:
    """The Object Detection API's ``label_map.pbtxt``: one ``item`` per ``(id, name)``."""
    items = []
    for class_id, name in classes:
        quoted = name.replace("\\", "\\\\").replace('"', '\\"')
        items.append(f'item {{\n  id: {class_id}\n  name: "{quoted}"\n}}\n')
    return "".join(items).encode("utf-8")
