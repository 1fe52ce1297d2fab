"""COCO annotation files (``instances_*.json``) as build inputs (pure, no file access).

Each entry of ``images`` becomes one input image, its ``annotations`` its
objects (``bbox`` as ``[x, y, width, height]`` in pixels, the category's
``name`` as the object's class, ``area`` and ``iscrowd`` kept), its ``id`` the
record's ``image/source_id`` (as text, as Model Garden's detection decoder
reads it). Images carry no image-level label (``image/class/label`` is an
empty list). The file's ``categories`` are listed first, as one
``ObjectClasses``: with ``coco_ids="keep"`` each keeps its COCO ``id`` (1 or
more) as the class id records carry and ``label_map.pbtxt`` lists.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Iterator

from transforms.errors import ManifestError, PlanError
from transforms.images.inputs import LabelRules, check_label
from transforms.images.annotations import SOURCE_ID
from transforms.images.items import SourceImage
from transforms.images.object_classes import ObjectClasses
from transforms.images.objects import BoxError, SourceBox
from transforms.shardset.dead_letters import DeadLetter
from transforms.shardset.naming import check_split_name, join_path

__all__ = ["is_coco_path", "coco_entries"]

_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_coco_path(path: str) -> bool:
    """True if an ``--input`` names a COCO annotation file (``.json``)."""
    return path.lower().endswith(".json")


def _list(obj: dict, key: str, where: str) -> list:
    value = obj.get(key, [] if key == "annotations" else None)
    if not isinstance(value, list):
        raise ManifestError(f"{where}: {key!r} is not a list; not a COCO annotation file")
    return value


def _box(ann: dict, category: str) -> SourceBox:
    bbox = ann.get("bbox")
    if (not isinstance(bbox, list) or len(bbox) != 4
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bbox)):
        raise BoxError(f"annotation {ann.get('id')!r}: bbox {bbox!r} is not [x, y, width, height]")
    x, y, w, h = (float(v) for v in bbox)
    area = ann.get("area")
    crowd = ann.get("iscrowd", 0)
    if crowd not in (0, 1) or isinstance(crowd, bool):
        raise BoxError(f"annotation {ann.get('id')!r}: iscrowd {crowd!r} is not 0 or 1")
    if area is not None and (isinstance(area, bool) or not isinstance(area, (int, float))):
        raise BoxError(f"annotation {ann.get('id')!r}: area {area!r} is not a number")
    return SourceBox(x, y, x + w, y + h, category, area=None if area is None else float(area),
                     is_crowd=int(crowd))


def _categories(categories: list, coco_ids: str, where: str) -> ObjectClasses:
    """The file's categories as ``ObjectClasses``; refuses ones that cannot name a class."""
    classes: list[tuple[int | None, str]] = []
    seen_ids: dict[object, str] = {}
    seen_names: set[str] = set()
    for cat in categories:
        if not isinstance(cat, dict) or not isinstance(cat.get("name"), str):
            raise ManifestError(f"{where}: category {cat!r} has no name")
        name, class_id = cat["name"], cat.get("id")
        problem = check_label(name)
        if problem:
            raise ManifestError(f"{where}: category {class_id!r}: {problem}")
        if class_id in seen_ids:
            raise ManifestError(f"{where}: category id {class_id!r} is given twice "
                                f"({seen_ids[class_id]!r} and {name!r})")
        if name in seen_names:
            raise ManifestError(f"{where}: category name {name!r} is given twice")
        if coco_ids == "keep" and (isinstance(class_id, bool) or not isinstance(class_id, int) or class_id < 1):
            raise ManifestError(f"{where}: category {name!r} has id {class_id!r}; kept COCO ids must be "
                                "integers from 1 (--coco_ids renumber numbers classes by name)")
        seen_ids[class_id] = name
        seen_names.add(name)
        classes.append((class_id if coco_ids == "keep" else None, name))
    return ObjectClasses(where, tuple(classes))


def coco_entries(text: str, annotations_path: str, image_root: str | None,
                 rules: LabelRules, coco_ids: str = "keep") -> Iterator[SourceImage | DeadLetter | ObjectClasses]:
    """Resolves every image of a COCO annotation file.

    Args:
        text: The file's content.
        annotations_path: Its path or URI (for resolving and for errors).
        image_root: Folder the ``file_name``s are relative to; None for the
            annotation file's own folder.
        rules: Labelling rules (the split of every image).
        coco_ids: ``keep`` the categories' ids, or ``renumber`` the classes.

    Yields:
        The file's ``ObjectClasses`` (not an input); a ``SourceImage`` per
        image; a ``DeadLetter`` (``bad_box``) per image with an unusable
        annotation, ``bad_manifest_row`` per unusable image entry or
        annotation naming no known image.

    Raises:
        ManifestError: The file is not COCO JSON at all, or its categories
            cannot name classes (no name, a name or id twice, a kept id below 1).
    """
    where = annotations_path
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ManifestError(f"{where}: not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise ManifestError(f"{where}: not a JSON object; not a COCO annotation file")
    images, annotations, categories = (_list(data, k, where) for k in ("images", "annotations", "categories"))
    declared = _categories(categories, coco_ids, where)
    names = {cat.get("id"): cat["name"] for cat in categories}
    by_image: dict[object, list] = {}
    image_ids = {img.get("id") for img in images if isinstance(img, dict)}
    for number, ann in enumerate(annotations):
        image_id = ann.get("image_id") if isinstance(ann, dict) else None
        if image_id not in image_ids:
            yield DeadLetter(f"{where}:annotations[{number}]", "bad_manifest_row",
                             f"annotation names image_id {image_id!r}, which is not in images")
            continue
        by_image.setdefault(image_id, []).append(ann)
    folder = image_root.rstrip("/") if image_root else (
        annotations_path.rsplit("/", 1)[0] if "/" in annotations_path else ".")
    try:
        check_split_name(rules.split)
    except PlanError as err:
        raise ManifestError(str(err)) from err
    yield declared
    for number, img in enumerate(images):
        entry = f"{where}:images[{number}]"
        name = img.get("file_name") if isinstance(img, dict) else None
        if not isinstance(name, str) or not name.strip():
            yield DeadLetter(entry, "bad_manifest_row", "image has no file_name")
            continue
        if _URI.match(name) or name.startswith("/"):
            full, relative = name, name
        else:
            relative = posixpath.normpath(name)
            full = join_path(folder, relative)
        try:
            boxes = []
            for ann in by_image.get(img.get("id"), []):
                category = names.get(ann.get("category_id"))
                if category is None:
                    raise BoxError(f"annotation {ann.get('id')!r}: category_id "
                                   f"{ann.get('category_id')!r} is not in categories")
                boxes.append(_box(ann, category))
        except BoxError as err:
            yield DeadLetter(full, "bad_box", str(err))
            continue
        source_id = img.get("id")
        yield SourceImage(path=full, relpath=relative, split=rules.unsplit(), label="",
                          labels=(), objects=tuple(boxes),
                          features=((SOURCE_ID, "bytes", ("" if source_id is None else str(source_id),)),))
