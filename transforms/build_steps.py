"""Beam steps of the build job: list the inputs, read and check each image once, reject duplicates."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from typing import Iterator, Mapping, NamedTuple, Sequence

import apache_beam as beam
import crc32c
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from transforms import worker_threads
from transforms.errors import ImageError, ShardsError
from transforms.example.features import FeatureValueError
from transforms.images.annotations import RecordLayout, layout_of, merge_layouts, record_extras
from transforms.images.objects import BoxError, place_boxes, source_geometry
from transforms.shardset.coco import coco_entries, is_coco_path
from transforms.storage.clients import naming_s3_errors
from transforms.storage.files import STORAGE_ERRORS, file_size, open_for_read, peek_local, read_at_most, read_bytes
from transforms.storage.listing import (LEVEL_SCHEMES, exact_file, list_below, list_store_below, list_store_level,
                                        scan_local_folder, scan_store, walk_local_tree)
from transforms.storage.paths import path_problem
from transforms.progress import counters as progress
from transforms.tfrecord.framing import framed_size
from transforms.images.codec import HEAD_BYTES, could_be_image, has_image_magic
from transforms.images.items import SPLIT_BY_CONTENT, ImageMeta, SourceImage
from transforms.shardset.dead_letters import DeadLetter
from transforms.images.records import EncodeSettings, encode_image, image_example_parts
from transforms.images.inputs import (FolderTask, LabelRules, csv_header, decode_line, decode_manifest,
                                      is_hidden, is_manifest_path, layout_of_levels, levels_of_paths,
                                      manifest_line_entries, plan_folder_listing, shown_name, tree_entry,
                                      unreadable_folder_entry)
from transforms.images.manifest_lines import (MANIFEST_RANGE_BYTES, breaks_at_cr, byte_ranges, count_line_starts,
                                              first_line_numbers, lines_in_range)
from transforms.storage.runs import BundleRunFile, RecordCopier
from transforms.shardset.planning import MIB, order_key, split_by_content, split_rank
from transforms.shardset.published_keys import record_keys
from transforms.tfrecord.compression import open_decompressed
from transforms.tfrecord.run_files import FramedRecord

__all__ = ["DEAD_LETTERS", "DEFAULT_MAX_IMAGE_BYTES", "DiscoverImages", "InspectImages",
           "ImageRecordMaker", "folder_tasks", "image_order", "read_source", "RejectDuplicatePaths",
           "RejectDuplicateImages", "ReadPublishedKeys", "PublishedCopy", "ListingFacts", "CollectListingFacts", "CollectSplitNames"]

_LOG = logging.getLogger(__name__)
# The tag of every build step's rejected inputs (DeadLetter); main outputs are "main".
DEAD_LETTERS = "dead_letters"
# Largest input file read (--max_image_mb); larger ones are ``too_large`` dead letters.
DEFAULT_MAX_IMAGE_BYTES = 256 * MIB
# How many other inputs a duplicate_path dead letter names before it only counts them.
_NAMED_DUPLICATES = 3


# The tag of input manifests' ranges inside DiscoverImages (_ManifestRange), resolved by _ResolveInputFn
# with listed files ("file", root, relpath, layout) and unreadable folders ("unreadable", root,
# relative folder, why, layout).
_RANGES = "ranges"


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


def _why(err: OSError) -> str:
    return f"{type(err).__name__}: {err.strerror or err}"


class _StartInputFn(beam.DoFn):
    """Manifest input -> its byte ranges (_RANGES), or its entries (main) when it is COCO.

    A COCO ``.json`` is read whole here. A ``.csv``/``.jsonl`` manifest is cut
    into byte ranges; a CSV's header line is read once here and travels with
    each range (a header that cannot work is one dead letter, line 1).
    """

    def __init__(self, rules: LabelRules, range_bytes: int) -> None:
        self._rules = rules
        self._range_bytes = range_bytes

    def process(self, root: str):
        if is_coco_path(root):
            yield from coco_entries(decode_manifest(read_bytes(root)), root, self._rules.image_root,
                                    self._rules)
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


class _ListFolderFn(beam.DoFn):
    """FolderTask -> ("file", root, relpath, layout) per file, ("unreadable", root, relative folder,
    why, layout) per folder it cannot list.

    Folders met by a task that lists one level are tasks of their own
    (``inputs.plan_folder_listing``). Hidden files are counted and dropped
    here. A task without a layout lists its whole input and decides the
    layout from every path: the one task of a store other than gs:// and s3://,
    or of a run that must not touch storage before it starts.
    """

    def __init__(self, layout: str) -> None:
        self._layout = layout
        self._hidden = Metrics.counter("build", "hidden_files_skipped")
        self._folders = Metrics.counter("build", "folders_listed")

    def process(self, task: FolderTask):
        key, prefix = _tree_prefix(task.root)
        self._folders.inc()
        if task.layout is None or ("://" in key and not key.startswith(LEVEL_SCHEMES)):
            yield from self._list_whole(key, prefix, task.layout)
            return
        if not task.below:
            listing = self._level(task.folder, "://" not in key)
        elif "://" in key:
            listing = ((path, False) for path in list_store_below(task.folder))
        else:
            listing = ((path, False if found is None else found) for path, found in walk_local_tree(task.folder))
        for path, found in listing:
            rel = path[len(prefix):] if path.startswith(prefix) else ""
            if isinstance(found, OSError):
                if not is_hidden(rel):
                    yield ("unreadable", key, _wire(rel.rstrip("/")), _wire(_why(found)), task.layout)
            elif found:
                continue  # a folder: listed by a task of its own
            elif is_hidden(rel):
                self._hidden.inc()
            else:
                yield ("file", key, _wire(rel), task.layout)

    @staticmethod
    def _level(where: str, local: bool):
        """(path, True) per folder, (path, False) per file, (folder, OSError) if unreadable."""
        if not local:
            yield from list_store_level(where)
            return
        try:
            yield from scan_local_folder(where)
        except OSError as err:  # Beam's local listing would skip it without a word
            yield where, err

    def _list_whole(self, key: str, prefix: str, layout: str | None):
        """Every file of the input at once, and the layout they show when none is given."""
        rels = []
        for path in list_below(key):
            rel = path[len(prefix):] if path.startswith(prefix) else path
            if is_hidden(rel):
                self._hidden.inc()
                continue
            rels.append(rel)
        if layout is None:
            layout = self._layout if self._layout != "auto" else layout_of_levels(levels_of_paths(rels))
        for rel in rels:
            yield ("file", key, _wire(rel), layout)


class _ResolveInputFn(beam.DoFn):
    """Listed file, unreadable folder or manifest range -> SourceImage, DeadLetter or class name.

    Everything goes to the one output: a class name (a ``str``) is that of an
    unreadable class folder, which stays in the class list. Entries resolved
    earlier (COCO) pass through. Side input ``first_lines``: (manifest, range
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
            for entry in self._read_range(element, first_lines[(element.manifest, element.index)]):
                yield self._emit(entry)
            return
        if isinstance(element, (SourceImage, DeadLetter)):
            yield self._emit(element)
            return
        kind, key, rel, layout = element[0], element[1], _unwire(element[2]), element[-1]
        if kind == "file":
            yield self._emit(tree_entry(key, rel, layout, self._rules))
            return
        dead, label = unreadable_folder_entry(key, rel, _unwire(element[3]), layout, self._rules)
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


def folder_tasks(path: str, layout: str, offline: bool = False) -> tuple[FolderTask, ...]:
    """The listing tasks of a folder input (``inputs.plan_folder_listing``), found before the job runs.

    Offline (a Dataflow dry run) or on a store listed only whole, the one task
    lists the whole input on a worker.

    Args:
        path: The folder input.
        layout: ``--layout``.
        offline: Touch no storage.
    """
    root = path.rstrip("/")
    if offline or ("://" in root and not root.startswith(LEVEL_SCHEMES)):
        return (FolderTask(root, root + "/", True, None if layout == "auto" else layout),)
    return plan_folder_listing(root, layout, scan_store if "://" in root else scan_local_folder)


class DiscoverImages(beam.PTransform):
    """Lists every input file or manifest row, spread over many elements.

    A folder input comes as ``FolderTask``s (``inputs.plan_folder_listing``,
    run before the job: its layout is known and each task lists one part of
    it), spread over workers. An input manifest (``.csv``, ``.jsonl``) is read
    in byte ranges of ``range_bytes``, one element each, one row per line
    (``manifest_lines``). A COCO ``.json`` is read whole.

    Applied to the pipeline. Output: ``PCollection`` of ``SourceImage``,
    ``DeadLetter`` (an unreadable folder is one) and ``str`` (the class name of
    an unreadable class folder, which stays in the class list): one output, so
    that the steps that count them and the steps that read them share a stage.

    Args:
        rules: How labels and splits are read.
        folder_tasks: The listing tasks of every folder input.
        manifests: The manifest inputs (``.csv``, ``.jsonl``, COCO ``.json``).
        range_bytes: Bytes of an input manifest read as one element.
    """

    def __init__(self, rules: LabelRules, folder_tasks: Sequence[FolderTask] = (),
                 manifests: Sequence[str] = (), range_bytes: int = MANIFEST_RANGE_BYTES) -> None:
        super().__init__()
        if range_bytes < 1:
            raise ValueError(f"range_bytes must be >= 1, got {range_bytes}")
        self._rules = rules
        self._tasks = list(folder_tasks)
        self._manifests = list(manifests)
        self._range_bytes = range_bytes

    @classmethod
    def of_inputs(cls, inputs: Sequence[str], rules: LabelRules, offline: bool = False,
                  range_bytes: int = MANIFEST_RANGE_BYTES) -> "DiscoverImages":
        """The step for these ``--input`` values; their folders' tasks are found now (``folder_tasks``)."""
        tasks = tuple(task for path in inputs if not is_manifest_path(path)
                      for task in folder_tasks(path, rules.layout, offline))
        return cls(rules, tasks, [path for path in inputs if is_manifest_path(path)], range_bytes)

    def expand(self, pbegin):
        listed, side = [], {}
        if self._tasks:  # more than one task: Create spreads them over workers
            listed.append(pbegin
                          | "CreateFolderTasks" >> beam.Create(self._tasks)
                          | "ListFolders" >> beam.ParDo(_ListFolderFn(self._rules.layout)))
        if self._manifests:
            started = (pbegin
                       | "CreateManifestInputs" >> beam.Create(self._manifests)
                       | "StartManifests" >> beam.ParDo(_StartInputFn(self._rules, self._range_bytes)).with_outputs(
                           _RANGES, main="entries"))  # COCO entries, a bad header's dead letter
            ranges = started[_RANGES] | "SpreadRanges" >> beam.Reshuffle()  # _ManifestRange
            first_lines = (ranges
                           | "CountLines" >> beam.Map(_count_range_lines)  # (manifest, (index, lines))
                           | "GroupRanges" >> beam.GroupByKey()
                           | "NumberRanges" >> beam.FlatMap(_number_ranges))  # ((manifest, index), first line)
            listed += [started.entries, ranges]
            side["first_lines"] = beam.pvalue.AsDict(first_lines)
        if not listed:
            return pbegin | "ListNothing" >> beam.Create([])
        elements = listed[0] if len(listed) == 1 else listed | "AllListed" >> beam.Flatten()
        return elements | "ResolveInputs" >> beam.ParDo(_ResolveInputFn(self._rules), **side)


def read_source(path: str, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> bytes:
    """Reads an input file that may be an image, through Beam's file systems (local, gs://, s3://).

    Only a regular file is opened (``open_for_read``). A file over ``max_bytes``
    is refused from its size, or after ``max_bytes`` bytes when the store cannot
    tell it; a file longer than ``HEAD_BYTES`` is read whole only if its first
    bytes could start an image (``could_be_image``), so a video or an archive
    costs one small read. One open per file; a local image with a magic number
    (JPEG, PNG, ...) costs one 16-byte ``pread`` more than reading it whole.

    Raises:
        OSError: As ``open_for_read``, or while reading.
        ImageError: ``too_large`` or ``not_an_image``.
    """
    with open_for_read(path) as fh, naming_s3_errors(path):
        size = file_size(fh)
        if size is not None and size > max_bytes:
            raise ImageError("too_large", f"file has {size} bytes, over --max_image_mb "
                                          f"({max_bytes / MIB:g} MiB); not read")
        if size is not None and size <= HEAD_BYTES:
            return fh.read()
        if size is not None:
            prefix = peek_local(fh, 16)
            if prefix is not None and has_image_magic(prefix):
                return fh.read()
        head = read_at_most(fh, HEAD_BYTES)
        if len(head) == HEAD_BYTES and not could_be_image(head):
            shown = f"{size} bytes" if size is not None else f"over {HEAD_BYTES} bytes"
            raise ImageError("not_an_image", f"not a recognised image format ({shown}; "
                                             f"judged from the first {HEAD_BYTES} bytes)")
        if size is not None:
            return head + fh.read(size - len(head)) if len(head) == HEAD_BYTES else head
        data = head + read_at_most(fh, max_bytes + 1 - len(head))
        if len(data) > max_bytes:
            raise ImageError("too_large", f"file has over {max_bytes} bytes, over --max_image_mb "
                                          f"({max_bytes / MIB:g} MiB); read no further")
        return data


@dataclasses.dataclass(frozen=True)
class _Inspected:
    """What inspecting one input gave: its ImageMeta or DeadLetter, and the bytes read (None: unread)."""

    output: ImageMeta | DeadLetter
    bytes_read: int | None
    parts: tuple[bytes, bytes, bytes] | None = None  # the record's pieces, for the run file


class _InspectImageFn(beam.DoFn):
    """SourceImage -> ImageMeta (main) or DeadLetter (DEAD_LETTERS).

    An image whose split is ``SPLIT_BY_CONTENT`` gets its split here, from its
    sha256 and the split fractions.

    With ``staging`` (the output folder and the run's id), each accepted
    image's framed record is appended to the bundle's run file in the run's
    staging folder (``tfrecord.run_files``), on the bundle's thread in
    input order, and its ``ImageMeta`` says where (``run``): the image is read
    once per build, and its bytes never travel with the metadata. The run
    file is closed before the bundle ends, so no output names a record that is
    not on storage; a failed bundle's run file is named by no output that
    survives it, and goes with the staging folder.

    Inputs are inspected on a pool of ``threads`` threads (``worker_threads``;
    0: one per usable core), at most ``window_for(threads)`` at a time; the
    outputs, counters and progress follow in input order, each output in its
    own input's window, and ``finish_bundle`` emits what is still in flight.
    """

    def __init__(self, settings: EncodeSettings, seed: int,
                 split_fractions: Mapping[str, float] | None = None,
                 max_bytes: int = DEFAULT_MAX_IMAGE_BYTES, threads: int = 1,
                 staging: tuple[str, str] | None = None) -> None:
        self._settings = settings
        self._seed = seed
        self._fractions = dict(split_fractions or {})
        self._max_bytes = max_bytes
        self._threads = threads
        self._staging = tuple(staging) if staging else None
        self._read = Metrics.counter("build", "images_read")
        self._read_bytes = Metrics.counter("build", "image_bytes_read")
        self._rejected = Metrics.counter("build", "images_rejected")

    def setup(self):
        threads = worker_threads.thread_count(self._threads)
        self._pool = worker_threads.new_pool(threads, "inspect-image")
        self._window = worker_threads.window_for(threads)
        self._work = None
        self._run = BundleRunFile(*self._staging) if self._staging else None

    def start_bundle(self):
        if self._work is not None:  # a bundle that failed: its calls are dropped
            self._work.close()
        self._work = worker_threads.OrderedWork(self._pool, self._window)
        if self._run is not None:
            self._run.close()  # a failed bundle's run file: no surviving output names it

    def process(self, source: SourceImage, window=beam.DoFn.WindowParam,
                timestamp=beam.DoFn.TimestampParam, *, labels: list[str],
                layout: RecordLayout | None = None):
        for inspected, (at, when) in self._work.submit(
                self._inspect_one, source, self._index_of(labels), layout, (window, timestamp)):
            yield from self._emit(inspected, at, when)

    def finish_bundle(self):
        for inspected, (at, when) in self._work.drain():
            yield from self._emit(inspected, at, when)
        if self._run is not None:
            self._run.close()  # before the bundle ends: every output names a whole record
        progress.flush()

    def teardown(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if getattr(self, "_run", None) is not None:
            self._run.close()

    def _inspect_one(self, source: SourceImage, index_of: dict[str, int], layout: RecordLayout | None,
                     where: tuple) -> tuple[_Inspected, tuple]:
        """Runs on a pool thread: the inspection of ``source``, and ``where`` it is emitted."""
        return self._inspect(source, index_of, layout), where

    def _emit(self, inspected: _Inspected, window, timestamp) -> Iterator:
        """Counts one input and yields its output; on the bundle's thread, in input order."""
        if inspected.bytes_read is None:
            progress.note(progress.IMAGES_READ)
        else:
            self._read.inc()
            self._read_bytes.inc(inspected.bytes_read)
            progress.note(progress.IMAGES_READ, 1, inspected.bytes_read)
        value = inspected.output
        if self._run is not None and inspected.parts is not None:  # the record goes to the run file
            value = dataclasses.replace(value, run=self._run.append(inspected.parts), payload=None)
        output = WindowedValue(value, timestamp, (window,))
        if isinstance(inspected.output, DeadLetter):
            self._rejected.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, output)
        else:
            progress.note(progress.IMAGES_ACCEPTED)
            yield output

    def _inspect(self, source: SourceImage, index_of: dict[str, int],
                 layout: RecordLayout | None) -> _Inspected:
        """Reads and inspects one input; no Beam calls, so that it may run on any thread."""
        unknown = [name for name in source.class_names() if name not in index_of]
        if unknown:
            return _Inspected(DeadLetter(source.path, "unknown_label",
                                         f"class {unknown[0]!r} is not in the label list"), None)
        index = index_of.get(source.label, 0)  # an image with no label of its own: see extras
        try:
            data = read_source(source.path, self._max_bytes)
        except STORAGE_ERRORS as err:
            return _Inspected(DeadLetter(source.path, "unreadable", f"{type(err).__name__}: {err}"), None)
        except ImageError as err:
            return _Inspected(DeadLetter(source.path, err.reason, err.detail), None)
        try:
            stored, info = encode_image(data, self._settings)
        except ImageError as err:
            return _Inspected(DeadLetter(source.path, err.reason, err.detail), len(data))
        extra = ()
        if layout is not None and not layout.plain:
            try:
                boxes = ()
                if layout.objects and source.objects:
                    if self._settings.resize and self._settings.resize_mode == "crop" \
                            and self._settings.mode in ("reencode", "raw"):
                        raise BoxError("object boxes do not follow --resize_mode crop yet; "
                                       "use stretch or fit")
                    width, height, orientation = source_geometry(data)
                    if self._settings.mode not in ("reencode", "raw"):  # the stored pixels are as in the file
                        orientation = 1
                    boxes = place_boxes(source.objects, width, height, orientation, info.width, info.height)
                extra = record_extras(source, layout, index_of, boxes)
            except BoxError as err:
                return _Inspected(DeadLetter(source.path, "bad_box", str(err)), len(data))
            except FeatureValueError as err:
                return _Inspected(DeadLetter(source.path, "bad_feature", str(err)), len(data))
        digest = hashlib.sha256(data).digest()
        if source.split == SPLIT_BY_CONTENT:
            source = dataclasses.replace(source, split=split_by_content(digest.hex(), self._fractions))
        head, tail = image_example_parts(stored, info, index, source.label, source.relpath,
                                         digest.hex(), extra)
        return _Inspected(ImageMeta(
            source=source, label_index=index, sha256=digest.hex(), info=info,
            record_size=framed_size(len(head) + len(stored) + len(tail)),
            order_key=order_key(self._seed, digest),
            source_crc32c=0 if self._staging else crc32c.crc32c(data),  # only a re-read checks it
            payload=None if stored is data or self._staging else stored, extra=extra), len(data),
            (head, stored, tail) if self._staging else None)

    def _index_of(self, labels: list[str]) -> dict[str, int]:
        """Class name -> index; the table is built once per side input."""
        cached = getattr(self, "_index_cache", None)
        if cached is None or cached[0] is not labels:
            cached = (labels, {name: i for i, name in enumerate(labels)})
            self._index_cache = cached
        return cached[1]


class InspectImages(beam.PTransform):
    """Reads, validates and measures every image.

    Input: ``PCollection[SourceImage]``. Output: outputs ``main`` (ImageMeta)
    and ``DEAD_LETTERS`` (DeadLetter with the reason). The outputs do not
    depend on ``threads``.

    Args:
        settings: Image options of the build.
        seed: Shuffle seed for the order key.
        labels: Singleton side input with the class names in index order.
        split_fractions: Split name -> fraction (``--split_fractions``): the
            split of each image whose input names none, chosen from its sha256.
        max_bytes: Largest input read; larger ones are ``too_large`` dead letters.
        layout: Singleton side input with the build's ``RecordLayout``, or
            None for plain image records.
        threads: Images inspected at once by each worker; 0 for one per core
            the worker may use. Threads pay when Pillow decodes or encodes each
            image (it releases the GIL) or reads wait on a network; the
            ``structure`` and ``header`` checks hold the GIL.
        staging: ``(output folder, run id)``: each accepted image's record is
            written to a run file in the run's staging folder and its metadata
            says where (``ImageMeta.run``), so the writer copies it instead of
            reading the image again. None: the writer makes it again.
    """

    def __init__(self, settings: EncodeSettings, seed: int, labels,
                 split_fractions: Mapping[str, float] | None = None,
                 max_bytes: int = DEFAULT_MAX_IMAGE_BYTES, layout=None, threads: int = 1,
                 staging: tuple[str, str] | None = None) -> None:
        super().__init__()
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        worker_threads.thread_count(threads)  # refuses a negative count here, not on a worker
        self._settings = settings
        self._seed = seed
        self._labels = labels
        self._fractions = dict(split_fractions or {})
        self._max_bytes = max_bytes
        self._layout = layout
        self._threads = threads
        self._staging = tuple(staging) if staging else None

    def expand(self, sources):
        extra = {} if self._layout is None else {"layout": self._layout}
        return sources | "InspectImage" >> beam.ParDo(
            _InspectImageFn(self._settings, self._seed, self._fractions, self._max_bytes, self._threads,
                            self._staging),
            labels=self._labels, **extra).with_outputs(
                DEAD_LETTERS, main="main")


@dataclasses.dataclass(frozen=True)
class ListingFacts:
    """What the whole listing says, known before any image is read.

    Attributes:
        inputs: Inputs listed: files and manifest rows, and the listing's dead
            letters (an unreadable folder is one input).
        classes: Class names in index order (sorted): those of the listed
            inputs and of unreadable class folders.
        layout: The ``RecordLayout`` every record follows.
    """

    inputs: int
    classes: tuple[str, ...]
    layout: RecordLayout


class _ListingFactsFn(beam.CombineFn):
    """SourceImage, DeadLetter or class name -> ``ListingFacts``; accumulator ``[count, names, layout]``."""

    def __init__(self, multi_label: bool, label_offset: int) -> None:
        self._multi_label = multi_label
        self._label_offset = label_offset

    def create_accumulator(self):
        return [0, set(), RecordLayout()]

    def add_input(self, acc, item):
        if isinstance(item, str):  # the class of an unreadable class folder: not an input
            acc[1].add(item)
            return acc
        acc[0] += 1
        if isinstance(item, SourceImage):
            acc[1].update(item.class_names())
            layout = layout_of(item)
            if layout != acc[2]:
                acc[2] = merge_layouts((acc[2], layout))
        return acc

    def merge_accumulators(self, accs):
        accs = list(accs)
        return [sum(a[0] for a in accs), set().union(*(a[1] for a in accs)),
                merge_layouts(a[2] for a in accs)]

    def extract_output(self, acc):
        return ListingFacts(acc[0], tuple(sorted(acc[1])),
                            acc[2].with_flags(self._multi_label, self._label_offset))


class CollectListingFacts(beam.PTransform):
    """Everything listed (``SourceImage``, ``DeadLetter``, class names) -> one ``ListingFacts``.

    One combine gives the input count, the class list and the record layout
    together, so the build has one global step before reading images where
    it had three. Nothing listed gives no element (readers of it as a side
    input give their defaults).

    Args:
        multi_label: Lists of class labels even if every input has one (``--multi_label``).
        label_offset: Added to object class indices (``--label_offset``).
    """

    def __init__(self, multi_label: bool = False, label_offset: int = 0) -> None:
        super().__init__()
        self._fn = _ListingFactsFn(multi_label, label_offset)

    def expand(self, listed):
        # Without a default for an empty listing (a step of its own): nothing listed, no element;
        # its readers give their own defaults.
        return listed | "CombineFacts" >> beam.CombineGlobally(self._fn).without_defaults()


def image_order(meta: ImageMeta) -> tuple[int, str]:
    """Shuffle order of an image: its order key, ties broken by relative path."""
    return (meta.order_key, meta.source.relpath)


class ImageRecordMaker:
    """ImageMeta -> (the record, label index), as the shard writer needs.

    A record written to a run file when its image was read (``meta.run``) is
    copied from there as it is (a ``FramedRecord``, its CRCs checked), so the
    image is not read again. Otherwise the record is made again: the pieces
    are the bytes before the image, the image, and the bytes after it
    (``image_example_parts``), written without joining them. It then re-reads
    the source unless the stored image travelled with the metadata, and
    refuses a source whose bytes changed since it was inspected: their CRC32C
    must be the one inspection saw.
    """

    def __init__(self, settings: EncodeSettings, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> None:
        self._settings = settings
        self._max_bytes = max_bytes
        self._runs = RecordCopier()

    def close(self) -> None:
        """Closes the run files kept open."""
        self._runs.close()

    def __call__(self, meta: ImageMeta) -> tuple[tuple[bytes, bytes, bytes] | FramedRecord, int]:
        labels = next((values for name, _, values in meta.extra if name == "image/class/label"), None)
        label = meta.label_index if labels is None else labels
        if meta.run is not None:
            framed = self._runs.copy(meta.run, meta.source.path)
            if len(framed.data) != meta.record_size:
                raise ShardsError(f"{meta.source.path}: record is {len(framed.data)} bytes, "
                                  f"planned {meta.record_size}")
            return framed, label
        if meta.payload is not None:
            stored = meta.payload
        else:
            try:
                data = read_source(meta.source.path, self._max_bytes)
            except ImageError as err:
                raise ShardsError(f"{meta.source.path} changed while the job ran: {err.detail}") from err
            checksum = crc32c.crc32c(data)
            if checksum != meta.source_crc32c:
                raise ShardsError(f"{meta.source.path} changed while the job ran (CRC32C "
                                  f"{meta.source_crc32c:08x} when inspected, {checksum:08x} "
                                  "when written)")
            # In passthrough and tf modes, a record without a payload stores the source's bytes.
            keeps = self._settings.mode in ("passthrough", "tf")
            stored = data if keeps else encode_image(data, self._settings)[0]
        head, tail = image_example_parts(stored, meta.info, meta.label_index, meta.source.label,
                                         meta.source.relpath, meta.sha256, meta.extra)
        size = framed_size(len(head) + len(stored) + len(tail))
        if size != meta.record_size:
            raise ShardsError(f"{meta.source.path}: record is {size} bytes, "
                              f"planned {meta.record_size}; image encoding is not deterministic")
        return (head, stored, tail), label



def _split_named(split: str) -> str:
    return "chosen by content" if split == SPLIT_BY_CONTENT else repr(split)


def _where(source: SourceImage) -> str:
    """Where an input came from: its manifest row, or its path for a listed file."""
    return source.origin or source.path


def _input_order(source: SourceImage) -> tuple[str, str, int]:
    """Sort key of inputs: path, then manifest and row number (``list.csv:9`` before ``:10``)."""
    manifest, _, line = source.origin.rpartition(":")
    return (source.path, manifest, int(line) if line.isdigit() else 0)


def _reject_same_path(keyed):
    """(split, relpath), [SourceImage] -> the image, or dead letters for all of them.

    Each dead letter names its own manifest row, at most ``_NAMED_DUPLICATES``
    of the others and how many there are, so k inputs with one path cost O(k)
    bytes of dead letters, not O(k^2).
    """
    _, sources = keyed
    sources = list(sources)
    if len(sources) == 1:
        yield sources[0]
        return
    sources.sort(key=_input_order)
    named = sources[:_NAMED_DUPLICATES + 1]
    for source in sources:
        others = [_where(s) for s in named if s is not source][:_NAMED_DUPLICATES]
        more = len(sources) - 1 - len(others)
        listed = ", ".join(others) + (f" and {more} more" if more else "")
        row = f" (row {source.origin})" if source.origin else ""
        yield beam.pvalue.TaggedOutput(DEAD_LETTERS, DeadLetter(
            source.path, "duplicate_path",
            f"relative path {source.relpath!r} in split {_split_named(source.split)}{row} also "
            f"comes from {len(sources) - 1} other input{'s' if len(sources) > 2 else ''}: {listed}"))


def _copy_rank(meta: ImageMeta) -> tuple:
    """Which copy of an image is kept: the one in the winning split, then the smallest path."""
    return (split_rank(meta.source.split), meta.source.relpath, meta.source.path)


class PublishedCopy(NamedTuple):
    """An image already published in a split of the output folder, keyed by its sha256."""

    split: str


def _shard_keys(item: tuple[str, str], compression: str) -> Iterator[tuple[str, PublishedCopy]]:
    """(split, published shard) -> (sha256, PublishedCopy) of each of its records.

    A shard that is missing or damaged gives the keys read before the damage:
    whether it matters is publishing's to say (a kept split that changed
    stops the run there, naming the shard; a split this run writes is
    replaced).
    """
    split, path = item
    try:
        with open_for_read(path) as raw, naming_s3_errors(path):
            for key in record_keys(open_decompressed(raw, compression), path):
                yield key, PublishedCopy(split)
    except (*STORAGE_ERRORS, ShardsError) as err:
        _LOG.warning("published shard %s cannot be read to its end (%s); publishing checks it "
                     "if its split is kept", path, err)


class ReadPublishedKeys(beam.PTransform):
    """The keys of the images already published in the output folder's splits.

    Input: the pipeline (``PBegin``). Output: ``(sha256, PublishedCopy)`` per
    record of the given shards, one element per shard read (spread over workers).

    Args:
        shards: ``(split, shard path)`` (``storage.output_folder.published_shards``).
        compression: The shards' compression.
    """

    def __init__(self, shards: Sequence[tuple[str, str]], compression: str) -> None:
        super().__init__()
        self._shards = list(shards)
        self._compression = compression

    def expand(self, pbegin):
        return (pbegin
                | "ListPublishedShards" >> beam.Create(self._shards)  # (split, path)
                | "SpreadPublishedShards" >> beam.Reshuffle()
                | "ReadKeys" >> beam.FlatMap(_shard_keys, self._compression))  # (sha256, PublishedCopy)


def _keep_one_copy(keyed, written: Sequence[str] | None = None):
    """sha256, [ImageMeta or PublishedCopy] -> the copy kept (``_copy_rank``); the rest are dead letters.

    A copy published in a split this run does not write (``written``: the
    splits this run has images in), which publishing keeps, wins over every
    copy of this run: they are ``cross_split_duplicate`` dead letters.
    """
    _, values = keyed
    metas, published = [], set()
    for value in values:
        if isinstance(value, PublishedCopy):
            published.add(value.split)
        else:
            metas.append(value)
    if not metas:
        return
    kept_splits = sorted(published - set(written or ()))
    if kept_splits:
        progress.note(progress.IMAGES_DUPLICATE, len(metas))
        for meta in metas:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, DeadLetter(
                meta.source.path, "cross_split_duplicate",
                f"same bytes (sha256 {meta.sha256[:16]}...) as an image already published in split "
                f"{kept_splits[0]!r} of the output folder, which this run keeps; this copy is in split "
                f"{meta.source.split!r}, and an image belongs to one split only (rebuild both splits "
                "together, or pass --drop_other_splits)"))
        return
    metas.sort(key=_copy_rank)
    kept = metas[0]
    yield kept
    if len(metas) > 1:
        progress.note(progress.IMAGES_DUPLICATE, len(metas) - 1)  # flushed as the bundle ends
    for meta in metas[1:]:
        same = f"same bytes (sha256 {meta.sha256[:16]}...) as {kept.source.relpath!r}"
        if meta.source.split == kept.source.split:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, DeadLetter(
                meta.source.path, "duplicate_image", f"{same} in split {meta.source.split!r}"))
        else:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, DeadLetter(
                meta.source.path, "cross_split_duplicate",
                f"{same}: this copy is in split {meta.source.split!r}, that one in split "
                f"{kept.source.split!r}; an image belongs to one split only, and "
                f"{kept.source.split!r} keeps it (test, validation, val, other splits, train)"))


class _SplitNamesFn(beam.CombineFn):
    """Split names -> the sorted list of the distinct ones."""

    def create_accumulator(self) -> set:
        return set()

    def add_input(self, acc: set, split: str) -> set:
        acc.add(split)
        return acc

    def merge_accumulators(self, accs) -> set:
        return set().union(*accs)

    def extract_output(self, acc: set) -> list[str]:
        return sorted(acc)


class CollectSplitNames(beam.PTransform):
    """Items -> one sorted list of the splits they are in (no item: no element), in one combine.

    Args:
        split_of: item -> split name.
    """

    def __init__(self, split_of) -> None:
        super().__init__()
        self._split_of = split_of

    def expand(self, items):
        return (items
                | "SplitOfEach" >> beam.Map(self._split_of)
                | "Combine" >> beam.CombineGlobally(_SplitNamesFn()).without_defaults())


class RejectDuplicatePaths(beam.PTransform):
    """Two inputs with one relative path in one split: both become dead letters.

    Input: ``PCollection[SourceImage]``. Output: outputs ``main`` (SourceImage)
    and ``DEAD_LETTERS`` (DeadLetter).
    """

    def expand(self, sources):
        return (sources
                | "KeyByPath" >> beam.Map(lambda s: ((s.split, s.relpath), s))
                | "GroupByPath" >> beam.GroupByKey()  # ((split, relpath), [SourceImage])
                | "RejectSamePath" >> beam.FlatMap(_reject_same_path).with_outputs(
                    DEAD_LETTERS, main="main"))


class RejectDuplicateImages(beam.PTransform):
    """Identical image bytes twice, in one split or in several: one copy is kept.

    The copy kept is in the split that ranks first (``planning.split_rank``:
    test, validation, val, other splits by name, train), and within it the
    one with the smallest relative path. Copies in that split become
    ``duplicate_image`` dead letters, copies in other splits
    ``cross_split_duplicate`` ones naming both splits. An image already
    published in a split of the output folder that this run keeps (one it
    writes no image to) keeps its place: every copy of this run is a
    ``cross_split_duplicate``. ``image/key/sha256`` is then unique in the
    whole shard set, so no image is in two splits.
    Input: ``PCollection[ImageMeta]``. Output: outputs ``main`` (ImageMeta)
    and ``DEAD_LETTERS`` (DeadLetter).

    Args:
        published: ``(sha256, PublishedCopy)`` of the output folder's published
            images (``ReadPublishedKeys``), or None.
        written: With ``published``: singleton side input, the splits this run
            has images in.
    """

    def __init__(self, published=None, written=None) -> None:
        super().__init__()
        self._published = published
        self._written = written

    def expand(self, metas):
        keyed = metas | "KeyByContent" >> beam.Map(lambda m: (m.sha256, m))
        side = {}
        if self._published is not None:
            keyed = (keyed, self._published) | "AddPublishedKeys" >> beam.Flatten()
            side = {"written": self._written}
        return (keyed
                | "GroupByContent" >> beam.GroupByKey()  # (sha256, [ImageMeta or PublishedCopy])
                | "KeepOneCopy" >> beam.ParDo(_KeepOneCopyFn(), **side).with_outputs(
                    DEAD_LETTERS, main="main"))


class _KeepOneCopyFn(beam.DoFn):
    """``_keep_one_copy`` over every group; the copies it counts reach the progress report."""

    def process(self, keyed, written=None):
        yield from _keep_one_copy(keyed, written)

    def finish_bundle(self):
        progress.flush()  # a worker process may note nothing more after its last bundle here
