"""Which split and class each input file belongs to, from names alone (pure, no file access).

Inputs are a folder of class folders (``ROOT/<class>/<image>``) or of split folders
(``ROOT/<split>/<class>/<image>``), an input manifest (``.csv`` with header ``path,label[,split]``, or
``.jsonl``), or files labelled by name (``--label_regex``). ``transforms.storage`` lists the files.
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Sequence

from transforms.errors import ManifestError, PlanError
from transforms.images.choices import COCO_IDS, LAYOUTS
from transforms.example.features import FeatureValueError, ManifestTyping
from transforms.images.annotations import row_annotations
from transforms.images.class_labels import class_label, class_labels_of
from transforms.images.objects import BBOX_FORMATS, BoxError
from transforms.images.items import SPLIT_BY_CONTENT, SourceImage
from transforms.shardset.dead_letters import DeadLetter
from transforms.shardset.naming import check_split_name, join_path

__all__ = ["KNOWN_SPLITS", "LAYOUTS", "COCO_IDS", "LabelRules", "TreeLevels", "levels_of_paths",
           "layout_of_levels", "tree_entry", "unreadable_folder_entry",
           "manifest_line_entries", "csv_header",
           "decode_line", "check_manifest_head",
           "check_label", "is_hidden", "is_manifest_path", "shown_name", "image_path"]

KNOWN_SPLITS = ("train", "validation", "val", "test")
# C0 and C1 control characters and the Unicode line and paragraph separators: each
# breaks a line of labels.txt for some reader (str.splitlines() splits on all of them).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
# Bytes that are not UTF-8, as Python keeps them in a file name or in text decoded with
# errors="surrogateescape" (U+DC80..U+DCFF); valid UTF-8 never decodes to a surrogate.
# A JSON string may also spell any lone surrogate as an escape; no UTF-8 writer takes one.
_UNDECODED = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class LabelRules:
    """How inputs get their split and class.

    Attributes:
        layout: ``auto``, ``classes`` or ``splits`` for folder inputs.
        split: Split of unsplit inputs.
        split_fractions: Split name -> fraction, to split unsplit inputs by their content (identical
            bytes share a split); empty to use ``split``.
        label_regex: Regular expression whose first group (or whole match) in the file name is the
            class; None to use folders.
        features: Declared types of extra manifest keys (``--feature``).
        multi_label: A CSV ``label`` holds several labels separated by ``;``.
        bbox_format: How JSON Lines ``objects`` give their boxes.
        coco_ids: ``--coco_ids``: ``keep`` a COCO file's category ids, or ``renumber`` its classes.
        image_root: Folder a COCO file's ``file_name``s are relative to (None: the file's folder).
        class_names: The names of integer labels, in index order; None: an integer label is named
            by its number.
    """

    layout: str = "auto"
    split: str = "train"
    split_fractions: Mapping[str, float] = field(default_factory=dict)
    label_regex: str | None = None
    features: Mapping[str, str] = field(default_factory=dict)
    multi_label: bool = False
    bbox_format: str = "xyxy_pixels"
    image_root: str | None = None
    coco_ids: str = "keep"
    class_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for what, value, names in (("COCO ids", self.coco_ids, COCO_IDS),
                                   ("bbox format", self.bbox_format, BBOX_FORMATS), ("layout", self.layout, LAYOUTS)):
            if value not in names:
                raise PlanError(f"{what} must be one of {', '.join(names)}, got {value!r}")
        check_split_name(self.split)
        if self.label_regex is not None:
            try:
                re.compile(self.label_regex)
            except re.error as err:
                raise PlanError(f"label regex {self.label_regex!r} does not compile: {err}") from err

    def unsplit(self) -> str:
        """Split of a file whose input does not say: ``split``, or ``SPLIT_BY_CONTENT``."""
        return SPLIT_BY_CONTENT if self.split_fractions else self.split


def check_label(label: str) -> str | None:
    """Why a class name is unusable (empty, or a character that breaks ``labels.txt``), or None."""
    if not label:
        return "class name is empty"
    if _CONTROL.search(label):
        return f"class name {label!r} contains a control character or line separator"
    return None


def shown_name(text: str) -> str:
    """A name as valid UTF-8 text: bytes that are not UTF-8 become backslash escapes (``caf\\xe9.png``)."""
    if not _UNDECODED.search(text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that stands for no byte (a JSON escape)
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def is_hidden(relpath: str) -> bool:
    """True if any component of the path starts with a dot (``.DS_Store``, ``.git/``)."""
    return any(part.startswith(".") for part in relpath.split("/"))


def is_manifest_path(path: str) -> bool:
    """True if an ``--input`` names an input manifest (or a COCO ``.json``) rather than a folder."""
    return path.lower().endswith((".csv", ".jsonl", ".json"))


@dataclass(frozen=True)
class TreeLevels:
    """What the top two levels of a folder input hold (hidden names not counted): enough to choose its layout.

    Attributes:
        tops: Names of the root's top folders.
        root_files: A file lies directly in the root.
        top_files: A file lies directly in a top folder.
        deeper: A top folder holds a folder.
    """

    tops: frozenset = frozenset()
    root_files: bool = False
    top_files: bool = False
    deeper: bool = False


def levels_of_paths(relpaths: Iterable[str], levels: TreeLevels = TreeLevels()) -> TreeLevels:
    """The top two levels of a folder input, from the relative paths of its files (hidden ones removed)
    and the ``levels`` its other files showed."""
    tops = set(levels.tops)
    root_files, top_files, deeper = levels.root_files, levels.top_files, levels.deeper
    for rel in relpaths:
        depth = rel.count("/")
        if depth:
            tops.add(rel.split("/", 1)[0])
        root_files |= depth == 0
        top_files |= depth == 1
        deeper |= depth >= 2
    return TreeLevels(frozenset(tops), root_files, top_files, deeper)


@dataclass(frozen=True)
class FolderTask:
    """One listing of a folder input, done by one worker (``plan_folder_listing``).

    Attributes:
        root: The folder input as given, without a trailing ``/``.
        folder: What to list: a local folder, or a store prefix ending in ``/``.
        below: Every file below ``folder`` (else only the files directly in it).
        layout: ``classes`` or ``splits``; None: the worker decides it from every path.
        part: Which of ``parts`` this task lists (``folder_parts.names_in_part``).
        parts: How many tasks list ``folder``; 1 for all but huge local folders.
    """

    root: str
    folder: str
    below: bool
    layout: str | None
    part: int = 0
    parts: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.part < self.parts:
            raise ValueError(f"part must be in [0, {self.parts}), got {self.part}")


def plan_folder_listing(root: str, layout: str, scan) -> tuple[FolderTask, ...]:
    """Decides a folder input's layout (``--layout``) from its top levels and cuts its listing into tasks.

    Only the root, the top folders (for ``auto``, until a file shows the layout is ``classes``)
    and a ``splits`` layout's split folders are scanned here. The tasks list the root's own
    files; for ``classes``, each top folder with everything below it; for ``splits``, each split
    folder's own files and each folder inside it with everything below it. A folder that cannot
    be scanned here is left to its task, which reports it.

    Args:
        scan: ``folder -> iterable of (path, is_folder)`` of one level (a store prefix given back with
            its ``/``); raises ``OSError`` when the folder cannot be listed.
    """
    prefix = root + "/"
    store = "://" in root
    where = prefix if store else (root or "/")

    def rel_of(path: str) -> str:
        return path[len(prefix):].rstrip("/") if path.startswith(prefix) else path.rstrip("/")

    tops: list[str] = []
    root_files = False
    try:
        for path, is_folder in scan(where):
            if is_folder:
                tops.append(path)
            elif not is_hidden(rel_of(path)):
                root_files = True
    except OSError:
        return (FolderTask(root, where, False, "classes" if layout == "auto" else layout),)
    if layout == "auto":
        names = frozenset(rel_of(top) for top in tops if not is_hidden(rel_of(top)))
        layout = layout_of_levels(TreeLevels(names, root_files, *_top_levels(tops, scan, rel_of, root_files)))
    tasks = [FolderTask(root, where, False, layout)]
    for top in tops:
        if layout == "classes":
            tasks.append(FolderTask(root, top, True, layout))
            continue
        tasks.append(FolderTask(root, top, False, layout))
        try:
            tasks.extend(FolderTask(root, path, True, layout) for path, is_folder in scan(top) if is_folder)
        except OSError:
            pass  # the split folder's own task reports it
    return tuple(tasks)


def _top_levels(tops: Sequence[str], scan, rel_of, root_files: bool) -> tuple[bool, bool]:
    """``(top_files, deeper)`` of ``TreeLevels``, scanning only until a file makes the layout ``classes``."""
    deeper = False
    if root_files:
        return False, False
    for top in tops:
        if is_hidden(rel_of(top)):
            continue
        try:
            for path, is_folder in scan(top):
                if is_hidden(rel_of(path)):
                    continue
                if not is_folder:
                    return True, deeper
                deeper = True
        except OSError:
            continue  # an unreadable top folder shows nothing, as in a listing
    return False, deeper


def layout_of_levels(levels: TreeLevels) -> str:
    """``splits`` if a top folder is a known split name, or if files lie only three or more levels deep
    (``<split>/<class>/<file>``); else ``classes``."""
    deep_only = levels.deeper and not levels.root_files and not levels.top_files
    return "splits" if levels.tops & set(KNOWN_SPLITS) or deep_only else "classes"


def tree_entry(root: str, rel: str, layout: str, rules: LabelRules) -> SourceImage | DeadLetter:
    """Resolves file ``rel`` (``/``-separated, not hidden) of folder input ``root`` (no trailing ``/``)."""
    path = join_path(root, rel)
    if _UNDECODED.search(path):
        return DeadLetter(shown_name(path), "bad_file_name",
                          "file or folder name is not valid UTF-8 (the bytes that are not are "
                          "shown as \\xNN); rename it")
    parts = rel.split("/")
    if layout == "splits":
        if len(parts) < 2:
            return DeadLetter(path, "no_split", "file lies directly in a folder of split folders")
        split, inner = parts[0], parts[1:]
        try:
            check_split_name(split)
        except PlanError as err:
            return DeadLetter(path, "bad_split", str(err))
    else:
        split, inner = "", parts
    if rules.label_regex is not None:
        match = re.search(rules.label_regex, posixpath.basename(rel))
        if match is None:
            return DeadLetter(path, "no_label", f"file name does not match --label_regex {rules.label_regex!r}")
        label = match.group(1) if match.groups() else match.group(0)
    elif len(inner) < 2:
        return DeadLetter(path, "no_label", "file is not inside a class folder")
    else:
        label = inner[0]
    label, why = class_label(label, rules.class_names)
    problem = why or check_label(label)
    if problem:
        return DeadLetter(path, "bad_label", problem)
    return SourceImage(path=path, relpath=rel, split=split or rules.unsplit(), label=label)


def unreadable_folder_entry(root: str, rel: str, why: str, layout: str,
                            rules: LabelRules) -> tuple[DeadLetter, str | None]:
    """Resolves folder ``rel`` of ``root`` (``""``: ``root`` itself) that a listing could not read
    (``why``): ``(dead letter, class name or None)``.

    The folder counts as one input (its files cannot be counted). A class folder's name is still a
    class, so the other classes keep their indices.
    """
    path = join_path(root, rel) if rel else root
    dead = DeadLetter(shown_name(path), "unreadable",
                      f"folder cannot be listed ({shown_name(why)}); its files are not inputs "
                      "of this run and count as this one dead letter")
    parts = (rel.split("/") if rel else [])[1 if layout == "splits" else 0:]
    label = class_label(parts[0], rules.class_names)[0] if parts and rules.label_regex is None else None
    if label is not None and (check_label(label) or _UNDECODED.search(label)):
        label = None
    return dead, label


def _csv_header_problem(fields: Sequence[str]) -> str | None:
    """Why a CSV manifest's header cannot be used, or None."""
    if any(_UNDECODED.search(name) for name in fields):
        return f"CSV header is not valid UTF-8: {shown_name(','.join(fields))!r}"
    repeated = sorted({name for name in fields if fields.count(name) > 1})
    if repeated:
        return f"CSV header names the column {repeated[0]!r} more than once: {fields}"
    if "path" not in fields or "label" not in fields:
        return (f"CSV header must name path and label columns (and optionally split), "
                f"lower case, got {fields}")
    return None


def check_manifest_head(head: bytes, manifest: str, whole: bool) -> None:
    """Checks an input manifest's header and that it has a row, from its first bytes ``head`` (a few
    KiB are enough for any header; ``whole``: the whole file).

    Raises:
        ManifestError: ``FILE:LINE: why`` for an unusable header (or first line) or no row.
    """
    text = head.decode("utf-8-sig", errors="surrogateescape")
    if not whole:  # the head may end inside a character or a line: keep whole lines only
        cut = max(text.rfind("\n"), text.rfind("\r"))
        text = text[:cut + 1] if cut >= 0 else ""
    if manifest.lower().endswith(".jsonl"):
        lines = text.split("\n")
        number, first = next(((n, line) for n, line in enumerate(lines, start=1) if line.strip()),
                             (len(lines), None))
        if first is None:
            if whole:
                raise ManifestError(f"{manifest}:{number}: manifest has no rows (one JSON object per line)")
            return
        if _UNDECODED.search(first):
            raise ManifestError(f"{manifest}:{number}: line is not valid UTF-8: {shown_name(first)[:200]!r}")
        return
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        fields = next(reader, None)
        row = next(filter(None, reader), None)  # the first row that is not blank
    except csv.Error as err:
        raise ManifestError(f"{manifest}:{reader.line_num}: CSV cannot be read: {err}") from err
    if fields is None:
        if whole:
            raise ManifestError(f"{manifest}:1: manifest is empty; it needs a header path,label[,split]")
        raise ManifestError(f"{manifest}:1: CSV header line is too long")
    problem = _csv_header_problem(fields)
    if problem:
        raise ManifestError(f"{manifest}:1: {problem}")
    if row is None and whole:
        raise ManifestError(f"{manifest}:2: manifest has a header but no rows")


def decode_line(line: bytes) -> str:
    """A manifest line's bytes as text; bytes that are not UTF-8 are kept as lone surrogates."""
    return line.decode("utf-8", errors="surrogateescape")


def csv_header(line: str | None) -> tuple[list[str], str | None]:
    """A CSV manifest's columns from line 1 (``decode_line``, no byte order mark; None: too long to
    read), and why they cannot be used (or None)."""
    if line is None:
        return [], "CSV header line is too long"
    try:
        fields = next(csv.reader([line]), [])
    except csv.Error as err:
        return [], f"CSV header cannot be read: {err}"
    return fields, _csv_header_problem(fields)


# A CSV row is one line: one that leaves a quoted field open (the start of a field with a
# line break in it) or holds an odd number of quotes (its end) is not a row of its own.
_NOT_ONE_LINE = ("row is not one complete CSV line: a quoted field opens and does not close on "
                 "it, or closes one opened on an earlier line; a line break inside a quoted field "
                 "is not supported (each row must be one line)")


def _csv_row(line: str, fields: Sequence[str]) -> tuple[Mapping | None, str] | None:
    """``(row or None, error)`` of one CSV line, or None for a blank line."""
    reader = csv.reader(iter((line, "")))  # a field still open at the line's end reads on
    try:
        values = next(reader, [])
    except csv.Error as err:  # e.g. a field over the csv module's size limit
        return None, f"row cannot be read: {err}"
    if reader.line_num > 1 or line.count('"') % 2:
        return None, _NOT_ONE_LINE
    if not values:
        return None
    if len(values) > len(fields):
        return None, "row has more columns than the header"
    row = {name: values[i] if i < len(values) else None for i, name in enumerate(fields)}
    if any(_UNDECODED.search(v) for v in values):
        shown = ",".join(shown_name(v) for v in values)
        return None, f"row is not valid UTF-8: {shown[:200]!r}"
    return row, ""


def _jsonl_row(line: str) -> tuple[Mapping | None, str] | None:
    """``(row or None, error)`` of one JSON Lines line, or None for a blank line."""
    if not line.strip():
        return None
    if _UNDECODED.search(line):
        return None, f"line is not valid UTF-8: {shown_name(line)[:200]!r}"
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as err:  # RecursionError: nesting too deep
        return None, f"not valid JSON: {err}"
    if not isinstance(row, dict):
        return None, "line is not a JSON object"
    if any(isinstance(row.get(key), str) and _UNDECODED.search(row[key])
           for key in ("path", "label", "split")):
        return None, f"line holds a lone surrogate escape: {shown_name(line)[:200]!r}"
    return row, ""


def manifest_line_entries(lines: Iterable[tuple[int, str | None]], manifest: str, rules: LabelRules,
                          fields: Sequence[str] = ()) -> Iterator[SourceImage | DeadLetter]:
    """Resolves manifest rows, each from its own line.

    Relative paths are resolved against the manifest's folder (``image_path``). Blank lines are
    skipped; a line that cannot be a row is a ``bad_manifest_row`` dead letter named ``MANIFEST:LINE``.

    Args:
        lines: ``(1-based line number, line)``: the line as text (``decode_line``, without its
            break), or None for a line too long to read; not a CSV manifest's header line.
        fields: A CSV manifest's columns (``csv_header``).
    """
    jsonl = manifest.lower().endswith(".jsonl")
    typing = ManifestTyping(rules.features)
    for number, line in lines:
        if line is None:
            yield DeadLetter(f"{manifest}:{number}", "bad_manifest_row",
                             "line is too long to be a manifest row; not read")
            continue
        parsed = _jsonl_row(line) if jsonl else _csv_row(line, fields)
        if parsed is not None:
            yield _row_entry(number, *parsed, manifest, rules, typing)


def image_path(folder: str, name: str) -> tuple[str, str]:
    """``(full path, relative path)`` of an image a manifest names (an absolute path or URI is kept)."""
    if _URI.match(name) or name.startswith("/"):
        return name, name
    relative = posixpath.normpath(name)
    return join_path(folder, relative), relative


def _row_entry(number: int, row: Mapping | None, error: str, manifest: str, rules: LabelRules,
               typing: ManifestTyping) -> SourceImage | DeadLetter:
    """The entry of one parsed manifest row (``row`` None: the dead letter for ``error``)."""
    folder = manifest.rsplit("/", 1)[0] if "/" in manifest else "."
    where = f"{manifest}:{number}"
    if row is None:
        return DeadLetter(where, "bad_manifest_row", error)
    path, label, split = row.get("path"), row.get("label"), row.get("split")
    if not isinstance(path, str) or not path.strip():
        return DeadLetter(where, "bad_manifest_row", "row has an empty or missing path")
    try:
        labels, features, objects = row_annotations(row, not manifest.lower().endswith(".jsonl"),
                                                    typing, rules.multi_label, rules.bbox_format)
    except FeatureValueError as err:
        return DeadLetter(where, "bad_feature", str(err))
    except BoxError as err:
        return DeadLetter(where, "bad_box", str(err))
    if labels is not None:
        labels, problem = class_labels_of(labels, rules.class_names)
        problem = problem or next(filter(None, map(check_label, labels)), None)
        label = labels[0] if labels else ""
    else:
        if isinstance(label, bool) or not isinstance(label, (int, str)):
            return DeadLetter(where, "bad_manifest_row", f"row has no usable label: {label!r}")
        label, problem = class_label(label, rules.class_names)
        problem = problem or check_label(label)
    if problem:
        return DeadLetter(where, "bad_label", problem)
    full, relative = image_path(folder, path)
    if split in (None, ""):
        split = rules.unsplit()
    elif not isinstance(split, str):
        return DeadLetter(where, "bad_split", f"split {split!r} is not a string")
    else:
        try:
            check_split_name(split)
        except PlanError as err:
            return DeadLetter(where, "bad_split", str(err))
    return SourceImage(path=full, relpath=relative, split=split, label=label, origin=where,
                       labels=labels, features=features, objects=objects)
