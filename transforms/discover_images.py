"""Beam steps of the build job that list its inputs (folders, input manifests, COCO files) and what they say."""

from __future__ import annotations

import itertools
from typing import Any, Mapping, NamedTuple, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.archives.members import ContainerRules
from transforms.discover_archives import ListArchives
from transforms.images.folder_parts import NAMES_PER_PART, names_in_part, spread_large_folders
from transforms.images.inputs import (FolderTask, LabelRules, csv_header, decode_line,
                                      is_hidden, layout_of_levels, levels_of_paths,
                                      manifest_line_entries, plan_folder_listing, shown_name, tree_entry,
                                      unreadable_folder_entry)
from transforms.images.items import SourceImage
from transforms.images.key_ranges import KeyRange, split_keys_after
from transforms.images.listing_facts import ListingTally
from transforms.images.annotations import ObjectClasses
from transforms.images.manifest_lines import (MANIFEST_RANGE_BYTES, breaks_at_cr, byte_ranges, count_line_starts,
                                              first_line_numbers, lines_in_range)
from transforms.progress import counters as progress
from transforms.images.coco import coco_categories, coco_image_entries, coco_items, image_key_of, is_coco_path
from transforms.shardset.dead_letters import DeadLetter
from transforms.filesystems import naming_s3_errors
from transforms.storage.files import file_size, open_for_read
from transforms.storage.listing import (count_local_files, exact_file, first_store_key_after,
                                        list_below, list_store, list_store_range,
                                        scan_local_folder, scan_store, walk_local_tree)
from transforms.storage.paths import STORES, path_problem
from transforms.worker_options import CarriesStorageOptions

__all__ = ["DiscoverImages", "folder_tasks", "CollectListingFacts"]


# The tag of input manifests' ranges inside DiscoverImages (_ManifestRange).
_RANGES = "ranges"
# The tags of a COCO file's entries inside DiscoverImages: ((file, image key), (list name, index,
# entry)) of its images and annotations, grouped by image; (file, category names), one per file.
_COCO = "coco"
_COCO_NAMES = "coco_names"
# The tag of a store prefix's key ranges inside DiscoverImages (_KeyRangeTask), listed after a shuffle.
_KEY_RANGES = "key_ranges"
# Keys of a store prefix one task lists before it cuts the rest into key ranges (with --list_key_ranges).
FIRST_KEYS = 1000


class _KeyRangeTask(NamedTuple):
    """The keys of one store prefix (a FolderTask's ``folder``) in one ``KeyRange``, listed by one worker."""

    root: str
    folder: str
    keys: KeyRange
    layout: str


class _ManifestRange(NamedTuple):
    """One byte range of an input manifest, read as one element (``manifest_lines``)."""

    manifest: str
    index: int
    start: int
    end: int
    size: int
    fields: tuple[str, ...]  # a CSV manifest's columns; () for JSON Lines


def _tree_prefix(root: str) -> tuple[str, str]:
    """A folder input's key (as given, without a trailing ``/``) and the prefix of its files' paths."""
    key = root.rstrip("/")
    return key, key + "/"


def _wire(text: str) -> str | bytes:
    """A listed name as Beam's coders can carry it: names that are not UTF-8 travel as bytes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: the bytes of a name that is not UTF-8
        return text.encode("utf-8", "surrogateescape")
    return text


def _unwire(value: str | bytes) -> str:
    """The name ``_wire`` made ready for Beam's coders, as listed."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


class _StartInputFn(CarriesStorageOptions, beam.DoFn):
    """Manifest input -> its byte ranges (_RANGES), or its entries (_COCO, _COCO_NAMES) when it is COCO.

    A COCO ``.json`` is read as a stream: its images and annotations go out keyed by image id, its
    categories' names as one element at the end. A CSV's header line is read once here and travels
    with each range (a header that cannot work is one dead letter, line 1, on the main output).
    """

    def __init__(self, rules: LabelRules, range_bytes: int) -> None:
        self._rules = rules
        self._range_bytes = range_bytes

    def process(self, root: str):
        if is_coco_path(root):
            categories = []
            with open_for_read(root) as fh, naming_s3_errors(root):
                for kind, index, entry in coco_items(fh, root):
                    if kind == "categories":
                        categories.append(entry)
                    else:
                        yield beam.pvalue.TaggedOutput(_COCO, ((root, image_key_of(kind, entry)), (kind, index, entry)))
            declared, names = coco_categories(categories, self._rules.coco_ids, root)
            yield declared  # the file's object classes, listed with the inputs (not one)
            yield beam.pvalue.TaggedOutput(_COCO_NAMES, (root, names))
            return
        with open_for_read(root) as fh, naming_s3_errors(root):
            size = file_size(fh)
            if size is None:
                size = exact_file(root).size_in_bytes
            fields: tuple[str, ...] = ()
            if not root.lower().endswith(".jsonl"):
                first = next(lines_in_range(fh, 0, 1, size, True, root), b"")
                columns, problem = csv_header(None if first is None else decode_line(first))
                if problem:
                    yield DeadLetter(f"{root}:1", "bad_manifest_row", problem)
                    return
                fields = tuple(columns)
        for index, (start, end) in enumerate(byte_ranges(size, self._range_bytes)):
            yield beam.pvalue.TaggedOutput(_RANGES, _ManifestRange(root, index, start, end, size, fields))


def _count_range_lines(rng: _ManifestRange) -> tuple[str, tuple[int, int]]:
    """_ManifestRange -> (manifest, (range index, lines starting in it))."""
    with open_for_read(rng.manifest) as fh, naming_s3_errors(rng.manifest):
        count = count_line_starts(fh, rng.start, rng.end, rng.size, breaks_at_cr(rng.manifest), rng.manifest)
    return rng.manifest, (rng.index, count)


def _number_ranges(keyed):
    """(manifest, [(range index, lines)]) -> ((manifest, range index), number of its first line)."""
    manifest, counts = keyed
    counts = sorted(counts)
    for (index, _), first in zip(counts, first_line_numbers([count for _, count in counts])):
        yield (manifest, index), first


def _coco_image_group(keyed, rules: LabelRules, names):
    """((file, image key), [(list name, index, entry)]) -> the SourceImage or DeadLetter of each entry."""
    (root, _), items = keyed
    images, naming = [], []
    for kind, index, entry in items:
        (images if kind == "images" else naming).append((index, entry))
    yield from coco_image_entries(images, naming, names[root], root, rules)


class _ListFolderFn(CarriesStorageOptions, beam.DoFn):
    """FolderTask -> ("file", root, relpath, layout) per file, ("unreadable", root, relative folder,
    why, layout) per folder it cannot list; with ``key_ranges``, also ``_KeyRangeTask``s (_KEY_RANGES).

    Folders met by a task that lists one level are tasks of their own; hidden files are counted and
    dropped. A task without a layout (``--layout auto``) lists its whole input and decides the layout.
    """

    def __init__(self, key_ranges: int = 0, first_keys: int = FIRST_KEYS) -> None:
        self._ranges = key_ranges
        self._first = first_keys
        self._hidden = Metrics.counter("build", "hidden_files_skipped")
        self._folders = Metrics.counter("build", "folders_listed")
        self._cut = Metrics.counter("build", "key_ranges_cut")

    def process(self, task: FolderTask):
        key, prefix = _tree_prefix(task.root)
        if task.part == 0:
            self._folders.inc()
        if task.layout is None or ("://" in key and not key.startswith(STORES)):
            yield from self._list_whole(key, prefix, task.layout)
            return
        if "://" in key and task.below and self._ranges:
            yield from self._list_store_below(task)
            return
        if "://" in key:
            listing = list_store(task.folder, by_level=not task.below)
        elif not task.below:
            listing = self._local_level(task.folder)
        else:  # None per file, an OSError per folder it cannot list
            listing = walk_local_tree(task.folder, None if task.parts == 1 else names_in_part(task.part, task.parts))
        for path, found in listing:
            rel = path[len(prefix):] if path.startswith(prefix) else ""
            if isinstance(found, OSError):
                if not is_hidden(rel):
                    why = f"{type(found).__name__}: {found.strerror or found}"
                    yield ("unreadable", key, _wire(rel.rstrip("/")), _wire(why), task.layout)
            elif found:
                continue  # a folder: listed by a task of its own
            elif is_hidden(rel):
                self._hidden.inc()
            else:
                yield ("file", key, _wire(rel), task.layout)

    def _list_store_below(self, task: FolderTask):
        """The first keys below the task's prefix as files; if there are more, the rest cut into ``_KeyRangeTask``s."""
        with naming_s3_errors(task.folder):
            paths = list_store_range(task.folder)
            first = list(itertools.islice(paths, self._first))
            more = next(paths, None) is not None
            yield from self._files(task.root, first, task.layout)
            if not more:  # listed to the end
                return
            ranges = split_keys_after(first[-1][len(task.folder):],
                                      lambda name: first_store_key_after(task.folder, name), self._ranges)
        self._cut.inc(len(ranges))
        for keys in ranges:
            yield beam.pvalue.TaggedOutput(_KEY_RANGES, _KeyRangeTask(task.root, task.folder, keys, task.layout))

    def _files(self, root: str, paths, layout: str):
        """("file", root, relpath, layout) of each path that is not hidden."""
        key, prefix = _tree_prefix(root)
        for rel in self._visible(prefix, paths):
            yield ("file", key, _wire(rel), layout)

    def _visible(self, prefix: str, paths):
        """The paths below ``prefix`` relative to it, hidden ones counted and left out."""
        for path in paths:
            rel = path[len(prefix):] if path.startswith(prefix) else path
            if is_hidden(rel):
                self._hidden.inc()
            else:
                yield rel

    @staticmethod
    def _local_level(where: str):
        """(path, True) per folder, (path, False) per file, (folder, OSError) if unreadable."""
        try:
            yield from scan_local_folder(where)
        except OSError as err:  # Beam's local listing would skip it without a word
            yield where, err

    def _list_whole(self, key: str, prefix: str, layout: str | None):
        """Every file of the input at once, and the layout they show when none is given."""
        rels = list(self._visible(prefix, list_below(key)))
        if layout is None:
            layout = layout_of_levels(levels_of_paths(rels))
        for rel in rels:
            yield ("file", key, _wire(rel), layout)


class _ListKeyRangeFn(_ListFolderFn):
    """``_KeyRangeTask`` -> ("file", root, relpath, layout) per key in its range."""

    def process(self, task: _KeyRangeTask):
        with naming_s3_errors(task.folder):
            yield from self._files(task.root, list_store_range(task.folder, task.keys.after, task.keys.until),
                                   task.layout)


class _ResolveInputFn(CarriesStorageOptions, beam.DoFn):
    """Listed file, unreadable folder or manifest range -> SourceImage, DeadLetter or class name.

    A class name (a ``str``) is that of an unreadable class folder, which stays in the class list.
    Entries resolved earlier (COCO) pass through. Side input ``first_lines``: (manifest, range
    index) -> number of the range's first line.
    """

    def __init__(self, rules: LabelRules) -> None:
        self._rules = rules
        self._listed = Metrics.counter("build", "inputs_listed")
        self._ranges = Metrics.counter("build", "manifest_ranges_read")

    def start_bundle(self):
        self._tally = progress.Tally(progress.INPUTS_LISTED, every=1000)

    def process(self, element, first_lines=None):
        if isinstance(element, _ManifestRange):
            self._ranges.inc()
            yield from map(self._emit, self._read_range(element, first_lines[(element.manifest, element.index)]))
        elif isinstance(element, (SourceImage, DeadLetter)):
            yield self._emit(element)
        elif isinstance(element, ObjectClasses):  # a COCO file's categories: not an input
            yield element
        elif element[0] == "file":  # ("file", root, relpath, layout)
            yield self._emit(tree_entry(element[1], _unwire(element[2]), element[3], self._rules))
        else:  # ("unreadable", root, relative folder, why, layout)
            _, root, rel, why, layout = element
            dead, label = unreadable_folder_entry(root, _unwire(rel), _unwire(why), layout, self._rules)
            if label is not None:
                yield label
            yield self._emit(dead)

    def _read_range(self, rng: _ManifestRange, first: int):
        cr = breaks_at_cr(rng.manifest)
        with open_for_read(rng.manifest) as fh, naming_s3_errors(rng.manifest):
            lines = enumerate(lines_in_range(fh, rng.start, rng.end, rng.size, cr, rng.manifest), start=first)
            if rng.start == 0 and rng.fields:
                next(lines, None)  # the CSV header, read once by _StartInputFn
            numbered = ((number, None if line is None else decode_line(line)) for number, line in lines)
            yield from manifest_line_entries(numbered, rng.manifest, self._rules, rng.fields)

    def _emit(self, entry):
        self._listed.inc()
        self._tally.add()
        if isinstance(entry, SourceImage):
            problem = path_problem(entry.path)
            if problem:  # a row naming a path no file system opens is that row's dead letter
                entry = (DeadLetter(entry.origin, "bad_manifest_row", f"{shown_name(entry.path)!r}: {problem}")
                         if entry.origin else DeadLetter(shown_name(entry.path), "unreadable", problem))
        return entry

    def finish_bundle(self):
        self._tally.flush()


def folder_tasks(path: str, layout: str, offline: bool = False,
                 names_per_part: int = NAMES_PER_PART) -> tuple[FolderTask, ...]:
    """The listing tasks of a folder input (``inputs.plan_folder_listing``), found before the job runs.

    Offline (a Dataflow dry run) or on a store listed only whole, the one task lists the whole
    input on a worker; a local folder of more than ``names_per_part`` files is listed in parts.
    """
    root = path.rstrip("/")
    if offline or ("://" in root and not root.startswith(STORES)):
        return (FolderTask(root, root + "/", True, None if layout == "auto" else layout),)
    if "://" in root:
        return plan_folder_listing(root, layout, scan_store)
    return spread_large_folders(plan_folder_listing(root, layout, scan_local_folder), count_local_files, names_per_part)


class DiscoverImages(beam.PTransform):
    """Lists every input file or manifest row, spread over many elements.

    Applied to the pipeline. Output: one ``PCollection`` of ``SourceImage``, ``DeadLetter`` and
    ``str`` (the class name of an unreadable class folder), so that the steps that count them and
    the steps that read them share a stage.

    Args:
        folder_tasks: The listing tasks of every folder input, spread over workers.
        manifests: The manifest inputs (``.csv``, ``.jsonl``; a COCO ``.json`` is read as a stream).
        range_bytes: Bytes of an input manifest read as one element.
        archives: The container inputs (``ListArchives``).
        key_ranges: Key ranges a large gs:// or s3:// class folder is cut into, listed by other
            workers after its first ``first_keys`` keys (0: none; one fused stage more).
    """

    def __init__(self, rules: LabelRules, folder_tasks: Sequence[FolderTask] = (),
                 manifests: Sequence[str] = (), range_bytes: int = MANIFEST_RANGE_BYTES,
                 archives: Sequence[str] = (), containers: ContainerRules = ContainerRules(),
                 key_ranges: int = 0, first_keys: int = FIRST_KEYS) -> None:
        super().__init__()
        if range_bytes < 1:
            raise ValueError(f"range_bytes must be >= 1, got {range_bytes}")
        if key_ranges < 0 or first_keys < 1:
            raise ValueError(f"key_ranges must be >= 0 and first_keys >= 1, got {key_ranges}, {first_keys}")
        self._key_ranges = key_ranges
        self._first_keys = first_keys
        self._rules = rules
        self._tasks = list(folder_tasks)
        self._manifests = list(manifests)
        self._range_bytes = range_bytes
        self._archives = list(archives)
        self._containers = containers

    def expand(self, pbegin):
        listed, side = [], {}
        if self._tasks:  # more than one task: Create spreads them over workers
            tasks = pbegin | "CreateFolderTasks" >> beam.Create(self._tasks)
            lister = _ListFolderFn(self._key_ranges, self._first_keys)
            if self._key_ranges and any(task.below and task.folder.startswith(STORES) for task in self._tasks):
                found = tasks | "ListFolders" >> beam.ParDo(lister).with_outputs(_KEY_RANGES, main="files")
                listed += [found.files,  # files, unreadable folders
                           found[_KEY_RANGES]
                           | "SpreadKeyRanges" >> beam.Reshuffle()  # _KeyRangeTask
                           | "ListKeyRanges" >> beam.ParDo(_ListKeyRangeFn())]  # files
            else:
                listed.append(tasks | "ListFolders" >> beam.ParDo(lister))  # files, unreadable folders
        if self._manifests:
            started = (pbegin
                       | "CreateManifestInputs" >> beam.Create(self._manifests)
                       | "StartManifests" >> beam.ParDo(_StartInputFn(self._rules, self._range_bytes)).with_outputs(
                           _RANGES, _COCO, _COCO_NAMES, main="entries"))  # a bad header's dead letter
            ranges = started[_RANGES] | "SpreadRanges" >> beam.Reshuffle()  # _ManifestRange
            first_lines = (ranges
                           | "CountLines" >> beam.Map(_count_range_lines)  # (manifest, (index, lines))
                           | "GroupRanges" >> beam.GroupByKey()
                           | "NumberRanges" >> beam.FlatMap(_number_ranges))  # ((manifest, index), first line)
            listed += [started.entries, ranges]
            if any(is_coco_path(path) for path in self._manifests):
                listed.append(started[_COCO]
                              | "GroupCocoImages" >> beam.GroupByKey()  # ((file, image key), [(list, index, entry)])
                              | "ResolveCocoImages" >> beam.FlatMap(
                                  _coco_image_group, self._rules,
                                  beam.pvalue.AsDict(started[_COCO_NAMES])))  # SourceImage or DeadLetter
            side["first_lines"] = beam.pvalue.AsDict(first_lines)
        if self._archives:
            listed.append(pbegin | "ListArchives" >> ListArchives(self._archives, self._rules, self._containers))
        if not listed:
            return pbegin | "ListNothing" >> beam.Create([])
        elements = listed[0] if len(listed) == 1 else listed | "AllListed" >> beam.Flatten()
        # Declared: Beam's inference from process's code finds Any too, for 0.05 CPU s at every build.
        return elements | "ResolveInputs" >> beam.ParDo(_ResolveInputFn(self._rules), **side).with_output_types(Any)


class _ListingFactsFn(CarriesStorageOptions, beam.CombineFn):
    """SourceImage, DeadLetter, class name or ObjectClasses -> ``ListingFacts`` (a ``ListingTally``)."""

    def __init__(self, *facts_args: Any) -> None:
        self._facts_args = facts_args  # ListingTally.facts's arguments

    def create_accumulator(self):
        return ListingTally()

    def add_input(self, acc, item):
        return acc.add(item)

    def merge_accumulators(self, accs):
        return ListingTally.merged(accs)

    def extract_output(self, acc):
        return acc.facts(*self._facts_args)


class CollectListingFacts(beam.PTransform):
    """Everything listed (``SourceImage``, ``DeadLetter``, class names, ``ObjectClasses``) -> one ``ListingFacts``.

    One combine; nothing listed gives no element (readers of it as a side input give their defaults).

    Args:
        multi_label: Lists of class labels even if every input has one (``--multi_label``).
        label_offset: Added to numbered object classes' indices (``--label_offset``;
            None: ``annotations.DEFAULT_OBJECT_OFFSET``).
        fixed: ``--class_names``/``--labels_file``, or None.
        boxes_outside: What a box outside its image becomes (``--boxes_outside``).
        declared: ``--feature`` name -> type: declared keys keep their type, optional
            ones (``name:type?``) are in every record.
    """

    def __init__(self, multi_label: bool = False, label_offset: int | None = None,
                 fixed: Sequence[str] | None = None, boxes_outside: str = "skip",
                 declared: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._fn = _ListingFactsFn(multi_label, label_offset, None if fixed is None else tuple(fixed), boxes_outside,
                                   dict(declared or {}))

    def expand(self, listed):
        return listed | "CombineFacts" >> beam.CombineGlobally(self._fn).without_defaults()
