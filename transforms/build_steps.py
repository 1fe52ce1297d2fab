"""Beam steps of the build job: list the inputs, read and check each image once, reject duplicates."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Iterator, Mapping

import apache_beam as beam
import crc32c
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from transforms import worker_threads
from transforms.errors import ImageError, ShardsError
from transforms.example.features import FeatureValueError
from transforms.images.annotations import RecordLayout, layout_of, merge_layouts, record_extras
from transforms.images.objects import BoxError, place_boxes, source_geometry
from transforms.shardset.coco import coco_entries, is_coco_path
from transforms.file_access import (file_size, list_local_tree, naming_s3_errors, open_for_read,
                                    peek_local, read_at_most, read_bytes)
from transforms.progress import counters as progress
from transforms.tfrecord.framing import framed_size
from transforms.images.codec import HEAD_BYTES, could_be_image, has_image_magic
from transforms.images.items import SPLIT_BY_CONTENT, ImageMeta, SourceImage
from transforms.shardset.dead_letters import DeadLetter
from transforms.images.records import EncodeSettings, encode_image, image_example_parts
from transforms.images.inputs import (LabelRules, decode_manifest, is_hidden, is_manifest_path,
                                      manifest_entries, tree_entries, unreadable_folder_entries)
from transforms.shardset.planning import MIB, order_key, split_by_content, split_rank

__all__ = ["DEAD_LETTERS", "CLASSES", "DEFAULT_MAX_IMAGE_BYTES", "DiscoverImages", "InspectImages",
           "ImageRecordMaker", "image_order", "read_source", "RejectDuplicatePaths",
           "RejectDuplicateImages", "CollectRecordLayout"]

# The tag of every build step's rejected inputs (DeadLetter); main outputs are "main".
DEAD_LETTERS = "dead_letters"
# The tag of class names known from listing alone (an unreadable class folder's name).
CLASSES = "classes"
# Largest input file read (--max_image_mb); larger ones are ``too_large`` dead letters.
DEFAULT_MAX_IMAGE_BYTES = 256 * MIB
# How many other inputs a duplicate_path dead letter names before it only counts them.
_NAMED_DUPLICATES = 3


class _ListInputFn(beam.DoFn):
    """input path -> SourceImage per file (main), DeadLetter (DEAD_LETTERS), class name (CLASSES)."""

    def __init__(self, rules: LabelRules) -> None:
        self._rules = rules
        self._listed = Metrics.counter("build", "inputs_listed")
        self._hidden = Metrics.counter("build", "hidden_files_skipped")

    def process(self, root: str):
        if is_coco_path(root):
            entries = coco_entries(decode_manifest(read_bytes(root)), root, self._rules.image_root,
                                   self._rules)
            yield from self._emit(entries)
            return
        if is_manifest_path(root):
            entries = manifest_entries(decode_manifest(read_bytes(root)), root, self._rules)
            yield from self._emit(entries)
            return
        prefix = root.rstrip("/") + "/"
        if "://" in root:
            paths = [meta.path for meta in FileSystems.match([prefix + "**"])[0].metadata_list]
            unreadable = ()
        else:  # Beam's local listing would skip a folder it may not read without a word
            listing = list_local_tree(root.rstrip("/") or "/")
            paths, unreadable = listing.files, listing.unreadable
        relpaths = []
        for path in paths:
            rel = path[len(prefix):] if path.startswith(prefix) else path
            if is_hidden(rel):
                self._hidden.inc()
                continue
            relpaths.append(rel)
        folders = []
        for folder, err in unreadable:
            rel = folder[len(prefix):] if folder.startswith(prefix) else ""
            if is_hidden(rel):
                continue
            folders.append((rel.rstrip("/"), f"{type(err).__name__}: {err.strerror or err}"))
        for dead, label in unreadable_folder_entries(root.rstrip("/"), folders, relpaths, self._rules):
            if label is not None:
                yield beam.pvalue.TaggedOutput(CLASSES, label)
            yield from self._emit([dead])
        yield from self._emit(tree_entries(root.rstrip("/"), relpaths, self._rules))

    def _emit(self, entries):
        listed = progress.Tally(progress.INPUTS_LISTED, every=1000)
        for entry in entries:
            self._listed.inc()
            listed.add()
            if isinstance(entry, DeadLetter):
                yield beam.pvalue.TaggedOutput(DEAD_LETTERS, entry)
            else:
                yield entry
        listed.flush()


class DiscoverImages(beam.PTransform):
    """Lists every input file or manifest row.

    Input: ``PCollection[str]`` of ``--input`` values (folders or ``.csv``/``.jsonl``).
    Output: a ``DoOutputsTuple`` with ``SourceImage`` (main), ``DeadLetter``
    (``DEAD_LETTERS``; an unreadable folder is one) and class names of
    unreadable class folders (``CLASSES``), which stay in the class list.
    """

    def __init__(self, rules: LabelRules) -> None:
        super().__init__()
        self._rules = rules

    def expand(self, roots):
        return (roots
                | "ListInputs" >> beam.ParDo(_ListInputFn(self._rules)).with_outputs(
                    DEAD_LETTERS, CLASSES, main="main"))


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


class _InspectImageFn(beam.DoFn):
    """SourceImage -> ImageMeta (main) or DeadLetter (DEAD_LETTERS).

    An image whose split is ``SPLIT_BY_CONTENT`` gets its split here, from its
    sha256 and the split fractions.

    Inputs are inspected on a pool of ``threads`` threads (``worker_threads``;
    0: one per usable core), at most ``window_for(threads)`` at a time; the
    outputs, counters and progress follow in input order, each output in its
    own input's window, and ``finish_bundle`` emits what is still in flight.
    """

    def __init__(self, settings: EncodeSettings, seed: int,
                 split_fractions: Mapping[str, float] | None = None,
                 max_bytes: int = DEFAULT_MAX_IMAGE_BYTES, threads: int = 1) -> None:
        self._settings = settings
        self._seed = seed
        self._fractions = dict(split_fractions or {})
        self._max_bytes = max_bytes
        self._threads = threads
        self._read = Metrics.counter("build", "images_read")
        self._read_bytes = Metrics.counter("build", "image_bytes_read")
        self._rejected = Metrics.counter("build", "images_rejected")

    def setup(self):
        threads = worker_threads.thread_count(self._threads)
        self._pool = worker_threads.new_pool(threads, "inspect-image")
        self._window = worker_threads.window_for(threads)
        self._work = None

    def start_bundle(self):
        if self._work is not None:  # a bundle that failed: its calls are dropped
            self._work.close()
        self._work = worker_threads.OrderedWork(self._pool, self._window)

    def process(self, source: SourceImage, window=beam.DoFn.WindowParam,
                timestamp=beam.DoFn.TimestampParam, *, labels: list[str],
                layout: RecordLayout | None = None):
        for inspected, (at, when) in self._work.submit(
                self._inspect_one, source, self._index_of(labels), layout, (window, timestamp)):
            yield from self._emit(inspected, at, when)

    def finish_bundle(self):
        for inspected, (at, when) in self._work.drain():
            yield from self._emit(inspected, at, when)
        progress.flush()

    def teardown(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

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
        output = WindowedValue(inspected.output, timestamp, (window,))
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
        except (OSError, beam.io.filesystem.BeamIOError) as err:
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
            order_key=order_key(self._seed, digest), source_crc32c=crc32c.crc32c(data),
            payload=None if stored is data else stored, extra=extra), len(data))

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
    """

    def __init__(self, settings: EncodeSettings, seed: int, labels,
                 split_fractions: Mapping[str, float] | None = None,
                 max_bytes: int = DEFAULT_MAX_IMAGE_BYTES, layout=None, threads: int = 1) -> None:
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

    def expand(self, sources):
        extra = {} if self._layout is None else {"layout": self._layout}
        return sources | "InspectImage" >> beam.ParDo(
            _InspectImageFn(self._settings, self._seed, self._fractions, self._max_bytes, self._threads),
            labels=self._labels, **extra).with_outputs(
                DEAD_LETTERS, main="main")


class _MergeLayoutsFn(beam.CombineFn):
    """RecordLayout per input -> the build's RecordLayout (``annotations.merge_layouts``)."""

    def create_accumulator(self):
        return RecordLayout()

    def add_input(self, acc, layout):
        return acc if layout == acc else merge_layouts((acc, layout))

    def merge_accumulators(self, accs):
        return merge_layouts(accs)

    def extract_output(self, acc):
        return acc


class CollectRecordLayout(beam.PTransform):
    """``PCollection[SourceImage]`` -> one element: the ``RecordLayout`` every record follows.

    Args:
        multi_label: Lists of class labels even if every input has one (``--multi_label``).
        label_offset: Added to object class indices (``--label_offset``).
    """

    def __init__(self, multi_label: bool = False, label_offset: int = 0) -> None:
        super().__init__()
        self._multi_label = multi_label
        self._label_offset = label_offset

    def expand(self, sources):
        multi_label, offset = self._multi_label, self._label_offset
        return (sources
                | "LayoutOfEach" >> beam.Map(layout_of)
                | "MergeLayouts" >> beam.CombineGlobally(_MergeLayoutsFn())
                | "AddFlags" >> beam.Map(lambda layout: layout.with_flags(multi_label, offset)))


def image_order(meta: ImageMeta) -> tuple[int, str]:
    """Shuffle order of an image: its order key, ties broken by relative path."""
    return (meta.order_key, meta.source.relpath)


class ImageRecordMaker:
    """ImageMeta -> (the serialized Example's pieces, label index), as the shard writer needs.

    The pieces are the bytes before the image, the image, and the bytes after
    it (``image_example_parts``): the writer writes them without joining them.
    Re-reads the source unless the stored image travelled with the metadata,
    and refuses a source whose bytes changed since it was inspected: their
    CRC32C must be the one inspection saw (a hardware CRC costs a tenth of
    hashing the file again with sha256; what it guards against is a file
    rewritten or truncated while the job runs, not a forgery).
    """

    def __init__(self, settings: EncodeSettings, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> None:
        self._settings = settings
        self._max_bytes = max_bytes

    def __call__(self, meta: ImageMeta) -> tuple[tuple[bytes, bytes, bytes], int]:
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
        labels = next((values for name, _, values in meta.extra if name == "image/class/label"), None)
        return (head, stored, tail), meta.label_index if labels is None else labels



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


def _keep_one_copy(keyed):
    """sha256, [ImageMeta] -> the copy kept (``_copy_rank``); the rest are dead letters."""
    _, metas = keyed
    metas = sorted(metas, key=_copy_rank)
    kept = metas[0]
    yield kept
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
    ``cross_split_duplicate`` ones naming both splits. ``image/key/sha256``
    is then unique in the whole shard set, so no image is in two splits.
    Input: ``PCollection[ImageMeta]``. Output: outputs ``main`` (ImageMeta)
    and ``DEAD_LETTERS`` (DeadLetter).
    """

    def expand(self, metas):
        return (metas
                | "KeyByContent" >> beam.Map(lambda m: (m.sha256, m))
                | "GroupByContent" >> beam.GroupByKey()  # (sha256, [ImageMeta])
                | "KeepOneCopy" >> beam.FlatMap(_keep_one_copy).with_outputs(
                    DEAD_LETTERS, main="main"))
