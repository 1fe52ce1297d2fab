"""Object classes: the ids ``image/object/class/label`` holds and ``label_map.pbtxt`` lists (pure).

Object classes are a space of their own, apart from the image classes of ``labels.txt``. Ids come
from a COCO file's ``categories`` (``--coco_ids keep``); else from the index in
``--class_names``/``--labels_file``, or in sorted names, plus ``--label_offset``. A name none of
these numbers gets the next ids after the largest one, by sorted name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = ["ObjectClasses", "object_label_map", "label_map_pbtxt", "DEFAULT_OBJECT_OFFSET"]

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
