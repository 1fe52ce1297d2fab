"""COCO annotation files (``instances_*.json``) as build inputs (pure, no file access).

Each entry of ``images`` becomes one input image without an image-level label, its ``annotations``
its objects, its ``id`` the record's ``image/source_id``; ``categories`` become one ``ObjectClasses``.
A file is read as a stream (``coco_items``), one entry of at most ``MAX_ENTRY_CHARS`` at a time; a
build groups each image with its annotations by image id (``coco_key``, ``coco_image_entries``).
"""

from __future__ import annotations

import codecs
import json
import math
import re
from typing import IO, Any, Iterable, Iterator, Mapping

from transforms.errors import ManifestError
from transforms.images.inputs import LabelRules, check_label, image_path
from transforms.images.annotations import SOURCE_ID, ObjectClasses
from transforms.images.items import SourceImage
from transforms.images.objects import BoxError, SourceBox, finite_number
from transforms.shardset.dead_letters import DeadLetter

__all__ = ["is_coco_path", "COCO_LISTS", "coco_items", "coco_key", "coco_categories", "coco_image_entries",
           "image_key_of", "image_folder", "image_path", "first_image_paths"]

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# The top-level lists of a COCO file that are read; other keys' values are read and dropped.
COCO_LISTS = ("images", "annotations", "categories")
# Characters read at a time (at least), and the most one entry of the file may hold: as a manifest line.
_CHUNK = 1 << 20
MAX_ENTRY_CHARS = 16 << 20


def is_coco_path(path: str) -> bool:
    """True if an ``--input`` names a COCO annotation file (``.json``)."""
    return path.lower().endswith(".json")


def _box(ann: dict, names: Mapping[str, str]) -> SourceBox:
    """The box of one annotation; ``names``: ``coco_categories``' names."""
    category = names.get(coco_key(ann.get("category_id")))
    if category is None:
        raise BoxError(f"annotation {ann.get('id')!r}: category_id {ann.get('category_id')!r} is not in categories")
    bbox = ann.get("bbox")
    if (not isinstance(bbox, list) or len(bbox) != 4
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bbox)):
        raise BoxError(f"annotation {ann.get('id')!r}: bbox {bbox!r} is not [x, y, width, height]")
    x, y, w, h = (float(v) for v in bbox)
    if not all(math.isfinite(v) for v in (x, y, w, h)):
        raise BoxError(f"annotation {ann.get('id')!r}: bbox {bbox!r} holds a number that is not finite")
    area, crowd = ann.get("area"), ann.get("iscrowd", 0)
    if crowd not in (0, 1) or isinstance(crowd, bool):
        raise BoxError(f"annotation {ann.get('id')!r}: iscrowd {crowd!r} is not 0 or 1")
    return SourceBox(x, y, x + w, y + h, category, is_crowd=int(crowd),
                     area=None if area is None else finite_number(area, f"annotation {ann.get('id')!r}: area"))


class _JsonStream:
    """Text of a JSON file read as it is needed, with the values at its position decoded one at a time."""

    def __init__(self, fh: IO[bytes], where: str) -> None:
        self._fh = fh
        self._where = where
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="surrogateescape")
        self._buf = ""
        self._pos = 0
        self._base = 0  # characters dropped before the buffer
        self._eof = False

    def _more(self) -> bool:
        """Reads on; False at the end of the file."""
        if self._eof:
            return False
        data = self._fh.read(max(_CHUNK, len(self._buf) - self._pos))  # doubles what an entry's decoding has
        self._eof = not data
        self._base += self._pos
        self._buf = self._buf[self._pos:] + self._decoder.decode(data, final=self._eof)
        self._pos = 0
        return True

    def error(self, what: str) -> ManifestError:
        return ManifestError(f"{self._where}: not valid JSON: {what} (character {self._base + self._pos})")

    def peek(self) -> str:
        """The next character after white space ('' at the end), not consumed."""
        while True:
            self._pos = _SPACE.match(self._buf, self._pos).end()
            if self._pos < len(self._buf) or not self._more():
                return self._buf[self._pos:self._pos + 1]

    def take(self, char: str) -> None:
        """Consumes ``char``, the next character after white space."""
        if self.peek() != char:
            raise self.error(f"expected {char!r}")
        self._pos += 1

    def value(self) -> Any:
        """Decodes the JSON value at the position (after white space)."""
        self.peek()
        while True:
            try:
                obj, end = _DECODER.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as err:
                if self._eof:
                    raise ManifestError(f"{self._where}: not valid JSON: {err.msg} "
                                        f"(character {self._base + err.pos})") from err
                if len(self._buf) - self._pos > MAX_ENTRY_CHARS:
                    raise self.error(f"an entry longer than {MAX_ENTRY_CHARS} characters") from err
                self._more()
                continue
            except RecursionError as err:
                raise self.error("nested too deeply") from err
            except ValueError as err:  # JSON that Python does not read: an integer of over 4,300 digits
                raise self.error(str(err)) from err
            if end == len(self._buf) and self._more():  # a number may go on in the next chunk
                continue
            self._pos = end
            return obj


def coco_items(fh: IO[bytes], where: str) -> Iterator[tuple[str, int, Any]]:
    """The entries of a COCO file's lists, read as a stream: ``(one of COCO_LISTS, index, entry)``.

    Raises:
        ManifestError: The file is not JSON, not an object, or ``images`` or ``categories`` is
            missing or not a list.
    """
    stream = _JsonStream(fh, where)
    if stream.peek() != "{":
        if stream.peek() == "":
            raise ManifestError(f"{where}: not valid JSON: the file is empty")
        stream.value()  # valid JSON, or the error saying where it is not
        raise ManifestError(f"{where}: not a JSON object; not a COCO annotation file")
    stream.take("{")
    seen = set()
    while stream.peek() != "}":
        if seen or stream.peek() == ",":
            stream.take(",")
        if stream.peek() != '"':
            raise stream.error("expected a key")
        key = stream.value()
        seen.add(key)
        stream.take(":")
        if key not in COCO_LISTS:
            stream.value()
            continue
        if stream.peek() != "[":
            stream.value()
            raise ManifestError(f"{where}: {key!r} is not a list; not a COCO annotation file")
        stream.take("[")
        index = 0
        while stream.peek() != "]":
            if index:
                stream.take(",")
            yield key, index, stream.value()
            index += 1
        stream.take("]")
    stream.take("}")
    if stream.peek() != "":
        raise stream.error("extra data after the object")
    for key in ("images", "categories"):
        if key not in seen:
            raise ManifestError(f"{where}: {key!r} is not a list; not a COCO annotation file")


def coco_key(value: Any) -> str:
    """An image id as a key (``1``, ``1.0`` and ``true`` are one id, as Python compares them)."""
    if isinstance(value, bool) or (isinstance(value, float) and value.is_integer()):
        value = int(value)
    return json.dumps(value, sort_keys=True)


# The largest class id image/object/class/label (int64) holds.
_INT64_MAX = (1 << 63) - 1


def coco_categories(categories: Iterable[Any], coco_ids: str, where: str) -> tuple[ObjectClasses, dict[str, str]]:
    """A file's categories: its ``ObjectClasses``, and ``coco_key(category id)`` -> name.

    Raises:
        ManifestError: A category has no name, a name or id is given twice, or a kept id is below 1
            or above int64.
    """
    classes: list[tuple[int | None, str]] = []
    names: dict[str, str] = {}
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
        if coco_ids == "keep" and class_id > _INT64_MAX:
            raise ManifestError(f"{where}: category {name!r} has id {class_id}, above {_INT64_MAX}, the largest "
                                "an int64 record holds (--coco_ids renumber numbers classes by name)")
        seen_ids[class_id] = name
        seen_names.add(name)
        names[coco_key(class_id)] = name
        classes.append((class_id if coco_ids == "keep" else None, name))
    return ObjectClasses(where, tuple(classes)), names


def coco_image_entries(images: Iterable[tuple[int, Any]], annotations: Iterable[tuple[int, Any]],
                       names: Mapping[str, str], where: str, rules: LabelRules) -> Iterator[SourceImage | DeadLetter]:
    """The inputs of the images of one image id and the annotations naming that id.

    Args:
        images: ``(index in images, entry)`` of the images with this id.
        annotations: ``(index in annotations, entry)`` of the annotations naming it.
        names: ``coco_categories``' names of the file.
        where: The file's path or URI.
        rules: Labelling rules (their split is every image's, their ``image_root`` every file name's).

    Yields:
        A ``SourceImage`` per image; a ``DeadLetter``: ``bad_box`` per image with an unusable
        annotation, ``bad_manifest_row`` per unusable image entry, per image when several share
        the id, and per annotation when no image has its id.
    """
    images, annotations = sorted(images, key=lambda i: i[0]), sorted(annotations, key=lambda a: a[0])
    if not images:
        for number, ann in annotations:
            image_id = ann.get("image_id") if isinstance(ann, dict) else None
            yield DeadLetter(f"{where}:annotations[{number}]", "bad_manifest_row",
                             f"annotation names image_id {image_id!r}, which is not in images")
        return
    folder = image_folder(where, rules.image_root)
    if len(images) > 1 and isinstance(images[0][1], dict):  # one id, several images: whose annotations?
        shown = ", ".join(f"images[{number}]" for number, _ in images[:3]) + (", ..." if len(images) > 3 else "")
        image_id = images[0][1].get("id")
        for number, _ in images:
            yield DeadLetter(f"{where}:images[{number}]", "bad_manifest_row",
                             f"image id {image_id!r} is given to {len(images)} images ({shown}); its "
                             f"{len(annotations)} annotations cannot be placed: give each image its own id")
        return
    for number, img in images:
        name = img.get("file_name") if isinstance(img, dict) else None
        if not isinstance(name, str) or not name.strip():
            yield DeadLetter(f"{where}:images[{number}]", "bad_manifest_row", "image has no file_name")
            continue
        full, relative = image_path(folder, name)
        try:
            boxes = [_box(ann, names) for _, ann in annotations]
        except BoxError as err:
            yield DeadLetter(full, "bad_box", str(err))
            continue
        source_id = img.get("id")
        yield SourceImage(path=full, relpath=relative, split=rules.unsplit(), label="",
                          labels=(), objects=tuple(boxes),
                          features=((SOURCE_ID, "bytes", ("" if source_id is None else str(source_id),)),))


def image_folder(annotations_path: str, image_root: str | None) -> str:
    """The folder a COCO file's ``file_name``s are relative to: ``--image_root``, else the file's own folder."""
    if image_root:
        return image_root.rstrip("/")
    return annotations_path.rsplit("/", 1)[0] if "/" in annotations_path else "."


def first_image_paths(items: Iterable[tuple[str, int, Any]], folder: str, count: int,
                      max_items: int) -> list[str]:
    """The full paths of the first ``count`` images among the first ``max_items`` of a COCO file's
    entries (``coco_items``)."""
    paths = []
    for read, (kind, _, entry) in enumerate(items):
        if len(paths) >= count or read >= max_items:
            break
        name = entry.get("file_name") if kind == "images" and isinstance(entry, dict) else None
        if isinstance(name, str) and name.strip():
            paths.append(image_path(folder, name)[0])
    return paths


def image_key_of(kind: str, entry: Any) -> str:
    """The ``coco_key`` an entry of ``images`` or ``annotations`` is grouped by."""
    if not isinstance(entry, dict):  # an image without file_name, or an annotation of no image
        return coco_key([kind, "not an object"])
    return coco_key(entry.get("id") if kind == "images" else entry.get("image_id"))
