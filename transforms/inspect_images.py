"""Beam steps of the build job that read images: each input read and checked once, records made again.

``InspectImages`` reads, validates and measures every image (``read_source``)
and writes its record to a run file at once; ``ImageRecordMaker`` gives the
shard writer each record, copied from its run file.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Iterator, Mapping, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from transforms import worker_threads
from transforms.errors import ImageError, ShardsError
from transforms.images.choices import DEFAULT_MAX_IMAGE_BYTES
from transforms.images.annotations import RecordLayout
from transforms.images.image_codec import HEAD_BYTES, could_be_image, has_image_magic
from transforms.images.inspection import Inspected, inspect_image, unknown_label
from transforms.images.items import ImageMeta, SourceImage
from transforms.images.records import EncodeSettings
from transforms.progress import counters as progress
from transforms.shardset.dead_letters import DEAD_LETTERS, DeadLetter
from transforms.shardset.planning import MIB
from transforms.storage.files import (STORAGE_ERRORS, open_local, read_descriptor,
                                      read_prefix, read_range)
from transforms.storage.paths import is_local
from transforms.storage.member_reads import forget_cached, read_member
from transforms.storage.resume_files import input_stamp, read_done_inputs, stamp_of, write_done_list
from transforms.storage.runs import BundleRunFile, RecordCopier
from transforms.shardset.resume import (DoneInput, DoneLines, context_key, done_list_header, done_list_line,
                                        source_key)
from transforms.tfrecord.run_files import FramedRecord
from transforms.worker_options import CarriesStorageOptions

__all__ = ["ImageRules", "RecordStaging",
           "DEFAULT_MAX_IMAGE_BYTES", "InspectImages", "ImageRecordMaker", "image_order", "read_source",
           "read_input", "REUSED_INPUTS", "REUSED_INPUT_BYTES"]

# Counters (namespace ``build``) of the inputs whose records a resumed run took from an
# interrupted run's run files, and of their bytes.
REUSED_INPUTS = "images_reused"
REUSED_INPUT_BYTES = "image_bytes_reused"
# A bundle that keeps done lists closes its run file and writes its done list at this many
# records or bytes, so that a run stopped mid-bundle leaves the inputs it finished to a rerun.
DONE_LIST_RECORDS = 256
DONE_LIST_BYTES = 64 * MIB
# The first bytes of an input on a store asked for in one request: a smaller file is read whole with it.
FIRST_READ_BYTES = 1 << 20


def read_source(path: str, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> bytes:
    """Reads an input file that may be an image, through Beam's file systems (local, gs://, s3://).

    A file over ``max_bytes`` is refused from its size, or after ``max_bytes``
    bytes when the store cannot tell it; a file longer than ``HEAD_BYTES`` is
    read whole only if its first bytes could start an image (``could_be_image``),
    so a video or an archive costs one small read.

    Raises:
        ImageError: ``too_large`` or ``not_an_image`` (an ``OSError`` of the store is passed on).
    """
    if not is_local(path):
        return _read_stored_source(path, max_bytes)
    fd, found = open_local(path)  # a descriptor, no file object: 5 system calls an input at most, not 12
    try:
        return _read_opened(fd, found.st_size, max_bytes)
    finally:
        os.close(fd)


def _read_opened(fd: int, size: int, max_bytes: int) -> bytes:
    """``read_source`` of a local input opened as ``fd``, ``size`` bytes when opened."""
    if size > max_bytes:
        raise _too_large(f"{size}", max_bytes, "not read")
    if size <= HEAD_BYTES or has_image_magic(os.pread(fd, 16, 0)):  # bounded: the file may still grow
        # One read of the size stated (a byte more shows growth): a read of up to the limit would
        # allocate and free that much for every input.
        data = os.read(fd, size + 1)  # size <= max_bytes here
        if len(data) < size:  # a short read (a network file system), or it shrank: on to its end
            data += read_descriptor(fd, size + 1 - len(data))
        if len(data) > size:  # grown since its size was read
            data += read_descriptor(fd, max_bytes + 1 - len(data))
        return _at_most(data, max_bytes)
    head = read_descriptor(fd, HEAD_BYTES)
    if len(head) == HEAD_BYTES and not could_be_image(head):
        raise _not_an_image(size, HEAD_BYTES)
    return head + read_descriptor(fd, size - len(head)) if len(head) == HEAD_BYTES else head


def _opened_local(source: SourceImage) -> tuple[int, os.stat_result] | None:
    """A local input file opened (``open_local``), or None: on a store, in a container, or not opened (its read
    then fails as ``read_input``'s does)."""
    if source.member is not None or not is_local(source.path):
        return None
    try:
        return open_local(source.path)
    except STORAGE_ERRORS:
        return None


def _too_large(size: str, max_bytes: int, what: str) -> ImageError:
    return ImageError("too_large", f"file has {size} bytes, over --max_image_mb ({max_bytes / MIB:g} MiB); {what}")


def _at_most(data: bytes, max_bytes: int) -> bytes:
    """``data``, or ``too_large`` when it holds more than ``max_bytes``."""
    if len(data) > max_bytes:
        raise _too_large(f"over {max_bytes}", max_bytes, "read no further")
    return data


def _not_an_image(size: int | None, read: int) -> ImageError:
    shown = f"{size} bytes" if size is not None else f"over {read} bytes"
    return ImageError("not_an_image", f"not a recognised image format ({shown}; "
                                      f"judged from the first {HEAD_BYTES} bytes)")


def _read_stored_source(path: str, max_bytes: int) -> bytes:
    """An input on a store: its first ``FIRST_READ_BYTES`` in one bounded request, the rest (if its
    first ``HEAD_BYTES`` could start an image) in one more."""
    first, size = read_prefix(path, min(FIRST_READ_BYTES, max_bytes + 1))
    if size is not None and size > max_bytes:
        raise _too_large(f"{size}", max_bytes, "read no further")
    _at_most(first, max_bytes)
    if len(first) < FIRST_READ_BYTES or (size is not None and size == len(first)):
        return first
    if not could_be_image(first[:HEAD_BYTES]):
        raise _not_an_image(size, len(first))
    rest = read_range(path, len(first), (size if size is not None else max_bytes + 1) - len(first))
    return _at_most(first + rest, max_bytes)


def read_input(source: SourceImage, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> bytes:
    """The bytes of an input: its file (``read_source``), or its member of an archive or Parquet file
    (``ImageError`` ``unreadable`` for a damaged one)."""
    if source.member is None:
        return read_source(source.path, max_bytes)
    return read_member(source.member, max_bytes)


class OrderedImageFn(CarriesStorageOptions, beam.DoFn):
    """Base of the DoFns that read each input image on a pool of threads, outputs in input order.

    ``SourceImage`` -> what ``_emit`` yields for ``_work_on``'s result, on the bundle's thread, in its
    input's window. ``threads`` threads (0: one per usable core) take ``window_for(threads)`` at a time.

    Subclasses set ``_threads`` and ``THREAD_NAME`` and define ``_work_on``
    (runs on any thread, no Beam calls) and ``_emit``.
    """

    def setup(self):
        threads = worker_threads.thread_count(self._threads)
        self._pool = worker_threads.new_pool(threads, self.THREAD_NAME)
        self._window = worker_threads.window_for(threads)
        self._work = None
        self._index_cache: tuple = (None, {})  # (labels, class name -> index)

    def start_bundle(self):
        if self._work is not None:  # a bundle that failed: its calls are dropped
            self._work.close()
        self._work = worker_threads.OrderedWork(self._pool, self._window,
                                                weigh=lambda result: self._held_bytes(result[0]))
        forget_cached(streams=False)  # Parquet row groups kept by an earlier bundle may be stale
        self._bundle_ends(False)
        # The progress counts, passed on a batch at a time (``progress.Tally``).
        self._images_read = progress.Tally(progress.IMAGES_READ, every=worker_threads.INLINE_BATCH)
        self._images_accepted = progress.Tally(progress.IMAGES_ACCEPTED, every=worker_threads.INLINE_BATCH)

    def process(self, source: SourceImage, window=beam.DoFn.WindowParam,
                timestamp=beam.DoFn.TimestampParam, *, labels: list[str],
                layout: RecordLayout | None = None):
        for result, (at, when) in self._work.submit(
                self._one, source, self._index_of(labels), layout, (window, timestamp)):
            yield from self._emit(result, at, when)

    def finish_bundle(self):
        for result, (at, when) in self._work.drain():
            yield from self._emit(result, at, when)
        self._bundle_ends(True)
        self._images_read.flush()
        self._images_accepted.flush()

    def teardown(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        forget_cached()
        self._bundle_ends(False)

    def _bundle_ends(self, finished: bool) -> None:
        """Runs when a bundle ends (``finished``) or a failed one is dropped (at the next, or teardown); no-op here."""

    def _held_bytes(self, worked) -> int:
        """The bytes ``_work_on``'s result holds until it is emitted (work done inline is emitted a few at a time)."""
        return 0

    def _output(self, value: ImageMeta | DeadLetter, window, timestamp) -> Iterator:
        """An input's ImageMeta (main), or its DeadLetter (DEAD_LETTERS) counted by the subclass's ``_rejected``."""
        output = WindowedValue(value, timestamp, (window,))
        if isinstance(value, DeadLetter):
            self._rejected.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, output)
        else:
            self._images_accepted.add(1)
            yield output

    def _one(self, source: SourceImage, index_of: dict[str, int], layout: RecordLayout | None,
             where: tuple) -> tuple:  # on a pool thread
        return self._work_on(source, index_of, layout), where

    def _index_of(self, labels: list[str]) -> dict[str, int]:
        """Class name -> index; the table is built once per side input."""
        if self._index_cache[0] is not labels:
            self._index_cache = (labels, {name: i for i, name in enumerate(labels)})
        return self._index_cache[1]


@dataclasses.dataclass(frozen=True)
class ImageRules:
    """What decides an image's outcome beside how it is encoded.

    Attributes:
        split_fractions: Split name -> fraction (``--split_fractions``).
        max_bytes: Largest input read; larger ones are ``too_large`` dead letters.
        hashed: Each ``ImageMeta`` carries the perceptual hash of its pixels (``ImageMeta.phash``).
    """

    split_fractions: Mapping[str, float] = dataclasses.field(default_factory=dict)
    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    hashed: bool = False


@dataclasses.dataclass(frozen=True)
class RecordStaging:
    """Where a build's accepted records go when their image is read, and what a rerun may reuse.

    Attributes:
        output_dir: The output folder (the run's staging folder is inside it).
        staging_dir: ``--staging_dir``, or None (the run's staging folder).
        resume: The done lists of the interrupted runs this run resumes
            (``storage.resume_files.AdoptedWork.done_lists``).
    """

    output_dir: str
    run_id: str
    staging_dir: str | None = None
    done_lists: bool = False
    resume: tuple[tuple[str, str, int | None], ...] = ()


class _InspectImageFn(OrderedImageFn):
    """SourceImage -> ImageMeta (main) or DeadLetter (DEAD_LETTERS).

    Each accepted image's framed record is appended to the bundle's run file (``tfrecord.run_files``),
    and its ``ImageMeta`` says where (``run``). The run file is closed before the bundle ends, so no
    output names a record that is not on storage.

    With ``done_lists``, each closed run file gets its done list (``shardset.resume``). ``resume``, the
    done lists of interrupted runs, gives the record of an input whose path, listing, stamp and context
    match, without reading it.
    """

    def __init__(self, settings: EncodeSettings, seed: int, rules: ImageRules | None = None, threads: int = 1,
                 *, staging: RecordStaging) -> None:
        self._settings = settings
        self._seed = seed
        self._rules = rules or ImageRules()
        self._threads = threads
        self._staging = staging
        self._read = Metrics.counter("build", "images_read")
        self._read_bytes = Metrics.counter("build", "image_bytes_read")
        self._rejected = Metrics.counter("build", "images_rejected")
        self._reused = Metrics.counter("build", REUSED_INPUTS)
        self._reused_bytes = Metrics.counter("build", REUSED_INPUT_BYTES)

    THREAD_NAME = "inspect-image"

    def setup(self):
        super().setup()
        self._run = BundleRunFile(self._staging.output_dir, self._staging.run_id, self._staging.staging_dir)
        self._done = DoneLines()  # the bundle's done-list lines, compressed: never its ImageMetas
        self._resume: dict[str, list[DoneInput]] | None = None
        self._context = ("", None)  # (context key, the labels it was computed for)

    def process(self, source: SourceImage, window=beam.DoFn.WindowParam,
                timestamp=beam.DoFn.TimestampParam, *, labels: list[str],
                layout: RecordLayout | None = None):
        if self._staging.done_lists and self._context[1] is not labels:
            self._context = (context_key(labels, layout), labels)
        if self._resume is None:  # before any thread reads it
            self._resume = {}
            for done in self._staging.resume:
                for path, entry in read_done_inputs(done):
                    self._resume.setdefault(path, []).append(entry)
        yield from super().process(source, window, timestamp, labels=labels, layout=layout)

    def _held_bytes(self, worked: tuple[Inspected, tuple | None]) -> int:
        parts = worked[0].parts
        return 0 if parts is None else sum(map(len, parts))

    def _bundle_ends(self, finished: bool) -> None:
        if getattr(self, "_run", None) is not None:  # a failed bundle's run file gets no done list
            self._close_run_file(finished)

    def _close_run_file(self, done_list: bool) -> None:
        """Closes the run file; with ``done_list``, writes its done list (every record in it is whole)."""
        closed = self._run.close()
        done, self._done = self._done, DoneLines()
        if done_list and closed is not None and done.count:
            path, size = closed
            header = done_list_header(path.rsplit("/", 1)[-1], size, self._context[0])
            write_done_list(path, itertools.chain([header], done.pieces()))  # never joined

    def _emit(self, worked: tuple[Inspected, tuple | None], window, timestamp) -> Iterator:
        """Counts one input and yields its output; on the bundle's thread, in input order."""
        inspected, done = worked  # done: (source key, stamp, reused) when the input may be resumed
        self._images_read.add(1, inspected.bytes_read or 0)
        if done is not None and done[2]:
            self._reused.inc()
            self._reused_bytes.inc(done[1][0])
        elif inspected.bytes_read is not None:
            self._read.inc()
            self._read_bytes.inc(inspected.bytes_read)
        value = inspected.output
        if inspected.parts is not None:  # the record goes to the run file
            value = value.written_to(self._run.append(inspected.parts))
            if done is not None:
                self._done.append(done_list_line(done[0], done[1], value))
                if self._done.count >= DONE_LIST_RECORDS or self._run.size >= DONE_LIST_BYTES:
                    self._close_run_file(True)  # the outputs before name a closed file
        yield from self._output(value, window, timestamp)

    def _work_on(self, source: SourceImage, index_of: dict[str, int],
                 layout: RecordLayout | None) -> tuple[Inspected, tuple | None]:
        """Reads and inspects one input, or takes its record from an interrupted run; no Beam calls.
        Returns the inspection and, where the input may be resumed later, ``(source key, stamp, reused)``."""
        dead = unknown_label(source, index_of)
        if dead is not None:
            return Inspected(dead, None), None
        done, opened = None, None  # opened: a local input's descriptor and fstat, its stamp and its read
        try:
            if self._staging.done_lists:
                # Taken before reading (a change while reading shows next time); a local file's from the fstat
                # of its opening, which its read then uses (one stat less an input).
                opened = _opened_local(source)
                stamp = input_stamp(source.path) if opened is None else stamp_of(opened[1])
                if stamp is not None:
                    key, context = source_key(source), self._context[0]
                    for entry in self._resume.get(source.path, ()):
                        if entry.matches(source, stamp, context, key):
                            return Inspected(entry.for_source(source), None), (key, stamp, True)
                    done = (key, stamp, False)
            try:
                data = (read_input(source, self._rules.max_bytes) if opened is None
                        else _read_opened(opened[0], opened[1].st_size, self._rules.max_bytes))
            except STORAGE_ERRORS as err:
                return Inspected(DeadLetter(source.path, "unreadable", f"{type(err).__name__}: {err}"), None), None
            except ImageError as err:
                return Inspected(DeadLetter(source.path, err.reason, err.detail), None), None
        finally:
            if opened is not None:
                os.close(opened[0])
        return inspect_image(source, data, index_of, layout, self._settings, self._seed, self._rules.split_fractions,
                             self._rules.hashed), done


class InspectImages(beam.PTransform):
    """Reads, validates and measures every image: ``PCollection[SourceImage]`` -> outputs ``main``
    (ImageMeta) and ``DEAD_LETTERS`` (DeadLetter).

    Args:
        seed: Shuffle seed for the order key.
        labels: Singleton side input with the class names in index order.
        layout: Singleton side input with the build's ``RecordLayout``, or
            None for plain image records.
        threads: Images inspected at once by each worker; 0 for one per core
            the worker may use.
    """

    def __init__(self, settings: EncodeSettings, seed: int, labels, rules: ImageRules | None = None,
                 layout=None, threads: int = 1, *, staging: RecordStaging) -> None:
        super().__init__()
        worker_threads.thread_count(threads)  # refuses a negative count here, not on a worker
        self._fn = _InspectImageFn(settings, seed, rules, threads, staging=staging)
        self._labels = labels
        self._layout = layout

    def expand(self, sources):
        return sources | "InspectImage" >> beam.ParDo(self._fn, labels=self._labels, layout=self._layout).with_outputs(
            DEAD_LETTERS, main="main")


def image_order(meta: ImageMeta) -> tuple[int, str]:
    """Shuffle order of an image: its order key, ties broken by relative path."""
    return (meta.order_key, meta.source.relpath)


class ImageRecordMaker:
    """ImageMeta -> (the record, label index), as the shard writer needs: the ``FramedRecord``
    copied from its run file (``meta.run``), its CRCs checked, its key the image's sha256."""

    def __init__(self) -> None:
        self._runs = RecordCopier()

    def close(self) -> None:
        self._runs.close()

    def plan(self, metas: Sequence[ImageMeta]) -> None:
        """The shard's records about to be made (``RecordCopier.plan``)."""
        self._runs.plan(meta.run for meta in metas if meta.run is not None)

    def __call__(self, meta: ImageMeta) -> tuple[FramedRecord, int]:
        labels = next((values for name, _, values in meta.extra if name == "image/class/label"), None)
        label = meta.label_index if labels is None else labels
        if meta.run is None:
            raise ShardsError(f"{meta.source.path}: no run file holds its record")
        framed = self._runs.copy(meta.run, meta.source.path)
        if len(framed.data) != meta.record_size:
            raise ShardsError(f"{meta.source.path}: record is {len(framed.data)} bytes, "
                              f"planned {meta.record_size}")
        return FramedRecord(framed.data, meta.sha256), label  # its key: the shard's keys file reads no record
