"""Beam transforms of the verify job: thin wrappers around ``transforms.verify.checks``.

Element types:
- a ``ShardFile`` per shard, read and checked in byte ranges by
  ``ReadAndCheckRecords``, which outputs a ``RangeTally`` per range;
- (``CheckRecords``, for records read elsewhere) a record read with offsets:
  ``(path, offset, data)``, and a ``RecordCheck`` per record;
- ``Problem`` objects for everything found; ``(label, PreviewSample)`` for
  the preview.

The steps are laid out for few fused stages: the manifest, the folder's
listing and the shard list are read by one step; the reader of a shard's
first range also checks the whole file (sha256, ``.idx``); the checks across
ranges share one ``GroupByKey``; the report reads what it totals as side
inputs, so that it needs no flatten and no shuffle of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

import apache_beam as beam
from apache_beam.io.iobase import Read
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider

from transforms.verify.preview import PREVIEW_PER_CLASS, preview_sample, render_preview
from transforms.progress import counters as progress
from transforms.tfrecord.compression import compression_of, open_decompressed
from transforms.tfrecord.framing import DEFAULT_MAX_RECORD_BYTES, OVERHEAD
from transforms.tfrecord.hashing_reader import HashingReader
from transforms.tfrecord.record_ranges import read_range, read_stream
from transforms.tfrecord_source import index_starts, read_index
from transforms.errors import ManifestError, RecordError
from transforms.shardset.manifest import LABELS_NAME, MANIFEST_NAME, Manifest, ShardEntry, SplitEntry
from transforms.shardset.shard_list import read_shard_list
from transforms.shardset.naming import join_path
from transforms.storage.files import open_file, open_lines, read_file
from transforms.storage.listing import list_folder
from transforms.storage.writing import write_file
from transforms.verify.checks import (Problem, Report, check_record, index_problems, labels_problems,
                                      listing_problems, sha256_problem, shard_label_problems)
from transforms.verify.ranges import RangeChecker, RangeTally, group_parts, group_problems

__all__ = ["ReadManifest", "ShardFile", "ReadAndCheckRecords", "CheckRecords", "CheckAcrossRanges",
           "WriteReport", "WritePreview", "MANIFEST", "SHARDS", "PROBLEMS", "SAMPLES"]

MANIFEST = "manifest"
SHARDS = "shards"
PROBLEMS = "problems"
SAMPLES = "samples"
_NAMESPACE = "verify_shards"


@dataclass(frozen=True)
class ShardFile:
    """A file the verify job reads.

    Attributes:
        path: Its path, as the match that found it spells it.
        size: Its size in bytes.
        split: Its split (from the manifest, or the shard name), or None when
            its name states none.
        entry: Its manifest entry, or None without a manifest.
        read_whole: Read as one range, not split into byte ranges at the
            start, so that the reader hashes the bytes it checks (one read of
            the file); set by ``ReadAndCheckRecords(split_ranges=False)``.
    """

    path: str
    size: int
    split: str | None
    entry: ShardEntry | None = None
    read_whole: bool = False


def _read_shard_set(folder: str):
    """folder -> a ``ShardFile`` per listed shard that exists; its Manifest to MANIFEST, problems to PROBLEMS.

    Reads ``manifest.json`` (format 2: without its shard list); an
    unparsable one is a ``parse_error`` problem and nothing else is read.
    Then lists the folder and its shards (``_list_shards``).
    """
    path = join_path(folder, MANIFEST_NAME)
    data = read_file(path)
    try:
        manifest = Manifest.loads(data)
    except ManifestError as err:
        yield beam.pvalue.TaggedOutput(PROBLEMS, Problem(path, None, "parse_error", str(err)))
        return
    yield beam.pvalue.TaggedOutput(MANIFEST, manifest)
    yield from _list_shards(manifest, list_folder(folder), folder)


def _read_labels(present: Mapping[str, tuple[str, int]]) -> bytes | None:
    return read_file(present[LABELS_NAME][0]) if LABELS_NAME in present else None


def _list_shards(manifest: Manifest, present: Mapping[str, tuple[str, int]], folder: str):
    """Manifest -> a ``ShardFile`` per listed shard that exists, and problems to PROBLEMS.

    A format-2 shard list is streamed (one shard's label counts at a time)
    and checked against ``manifest.json``; a missing or disagreeing list is
    one problem naming it, and the folder is then not compared with a
    partial list. Otherwise the folder's files and ``labels.txt`` are
    compared with the listed shards (file names and sizes only).
    """
    entries: dict[str, list[ShardEntry]] = {name: [] for name in manifest.splits}
    count = len(manifest.labels)
    try:
        with contextlib.ExitStack() as stack:
            if manifest.complete:
                listed = ((name, e) for name, split in sorted(manifest.splits.items()) for e in split.shards)
            else:
                name = manifest.shards_file.file
                lines = (stack.enter_context(open_lines(present[name][0])) if name in present else None)
                if lines is None:
                    raise ManifestError(f"{name} is missing; {MANIFEST_NAME} lists its shards there")
                listed = read_shard_list(manifest, lines)
            for split, entry in listed:
                if entry.file in present:
                    yield ShardFile(present[entry.file][0], present[entry.file][1], split, entry)
                if count:
                    for problem in shard_label_problems(folder, count, entry):
                        yield beam.pvalue.TaggedOutput(PROBLEMS, problem)
                entries[split].append(dataclasses.replace(entry, label_counts={}))
    except ManifestError as err:
        name = manifest.shards_file.file if manifest.shards_file else MANIFEST_NAME
        kind = "missing_file" if name not in present else "parse_error"
        yield beam.pvalue.TaggedOutput(PROBLEMS, Problem(join_path(folder, name), None, kind, str(err)))
        return
    light = dataclasses.replace(manifest, splits={
        name: SplitEntry(name, entries[name], split.to_counts()) for name, split in manifest.splits.items()})
    sizes = {name: size for name, (_, size) in present.items()}
    for problem in (listing_problems(folder, light, sizes)
                    + labels_problems(folder, light, _read_labels(present))):
        yield beam.pvalue.TaggedOutput(PROBLEMS, problem)


class ReadManifest(beam.PTransform):
    """Reads a shard set's ``manifest.json`` (and ``shards.jsonl``) and lists its folder, in the pipeline.

    The job graph holds only the folder's name, whatever the manifest's size,
    and the shard list is read line by line: no element holds every shard's
    label counts. One step reads the manifest, lists the folder and lists the
    shards, one after the other. Outputs (indexed by tag): ``MANIFEST``: the
    ``Manifest`` (none when it cannot be parsed; for format 2 without shard
    entries, with its splits' totals); ``SHARDS``: a ``ShardFile`` per listed
    shard that exists; ``PROBLEMS``: an unparsable manifest, a missing or
    disagreeing shard list, missing, extra and wrong-sized files, and
    ``labels.txt`` against the manifest.

    Args:
        folder: The shard set's folder.
    """

    def __init__(self, folder: str) -> None:
        super().__init__()
        self._folder = folder

    def expand(self, pbegin):
        return (pbegin
                | "Folder" >> beam.Create([self._folder])
                | "ListShards" >> beam.FlatMap(_read_shard_set).with_outputs(MANIFEST, PROBLEMS,
                                                                              main=SHARDS))


class _CheckRecordFn(beam.DoFn):
    """(path, offset, data) -> RecordCheck; its problems and preview samples to side outputs."""

    def __init__(self, schema: Mapping[str, str] | None, decode_images: bool, preview: bool,
                 labels: Sequence[str] | None) -> None:
        self._schema = schema
        self._decode_images = decode_images
        self._preview = preview
        self._labels = list(labels) if labels else None
        self._checked = Metrics.counter(_NAMESPACE, "records_checked")

    def process(self, item: tuple[str, int, bytes], schema: Mapping[str, str] | None = None,
                labels: Sequence[str] | None = None):
        path, offset, data = item
        schema = self._schema if schema is None else schema
        labels = self._labels if labels is None else (list(labels) or None)
        check, features = check_record(path, offset, data, schema, self._decode_images, labels)
        self._checked.inc()
        yield check
        for problem in check.problems:
            yield beam.pvalue.TaggedOutput(PROBLEMS, problem)
        if self._preview:
            sample = preview_sample(features)
            if sample is not None:
                yield beam.pvalue.TaggedOutput(SAMPLES, (sample.label, sample))


class CheckRecords(beam.PTransform):
    """Checks every record: Example parsing, optionally the schema, the labels and the image.

    Input ``(path, offset, data)``; outputs ``checks`` (``RecordCheck``),
    ``problems`` and, with ``preview``, ``samples``. With ``labels`` (the
    manifest's class names), each record's label and class text must agree
    with them. ``schema`` and ``labels`` may also be singleton side inputs
    (the manifest's, read in the pipeline).
    """

    def __init__(self, schema: Mapping[str, str] | beam.pvalue.AsSingleton | None, decode_images: bool,
                 preview: bool, labels: Sequence[str] | beam.pvalue.AsSingleton | None = None) -> None:
        super().__init__()
        side = {name: value for name, value in (("schema", schema), ("labels", labels))
                if isinstance(value, beam.pvalue.AsSingleton)}
        self._fn = _CheckRecordFn(None if "schema" in side else schema, decode_images, preview,
                                  None if "labels" in side else labels)
        self._side = side

    def expand(self, records):
        return records | "Check" >> beam.ParDo(self._fn, **self._side).with_outputs(
            PROBLEMS, SAMPLES, main="checks")


# --- Reading and checking records in byte ranges ---------------------------------------------


class _WholeFile(OffsetRange):
    """The restriction of a file read whole, front to back (compressed, or empty)."""


def _whole_file(shard: ShardFile) -> bool:
    return shard.size == 0 or compression_of(shard.path) != "none"


class _WholeFileTracker(OffsetRestrictionTracker):
    """Tracks a ``_WholeFile``: claimed once, never split."""

    def try_split(self, fraction_of_remainder):
        return None


class _ShardRanges(RestrictionProvider):
    """Byte ranges of a shard: split like the TFRecord source splits a file."""

    def initial_restriction(self, shard: ShardFile) -> OffsetRange:
        return _WholeFile(0, 1) if _whole_file(shard) else OffsetRange(0, shard.size)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        if isinstance(restriction, _WholeFile):
            return _WholeFileTracker(restriction)
        return OffsetRestrictionTracker(restriction)

    def split(self, shard: ShardFile, restriction: OffsetRange) -> Iterator[OffsetRange]:
        if isinstance(restriction, _WholeFile) or shard.read_whole:
            yield restriction
            return
        yield from restriction.split(Read.get_desired_chunk_size(shard.size))

    def restriction_size(self, shard: ShardFile, restriction: OffsetRange) -> int:
        return shard.size if isinstance(restriction, _WholeFile) else restriction.size()


class _Claims:
    """A restriction tracker as ``record_ranges.read_range`` claims positions from it."""

    def __init__(self, tracker) -> None:
        self._tracker = tracker
        self._last: int | None = None

    def start_position(self) -> int:
        return self._tracker.current_restriction().start

    def stop_position(self) -> int:
        return self._tracker.current_restriction().stop

    def try_claim(self, position: int) -> bool:
        self._last = position
        return self._tracker.try_claim(position)

    def finish(self) -> None:
        """Claims the rest of the range: the reader stopped at the end of the file or at damage."""
        stop = self.stop_position()
        if self._last is None or self._last < stop:
            self._tracker.try_claim(stop)


class _ReadAndCheckFn(beam.DoFn):
    """ShardFile -> a RangeTally per byte range read; the range at byte 0 also checks the whole file.

    The reader of the range that starts at byte 0 hashes the bytes it reads
    (``HashingReader``); when that range is the whole file, the file is read
    once. When the file was split, that reader reads on to the file's end for
    the hash alone, so those bytes are read twice. It also checks the file's
    ``.idx`` (read once, for the record starts and the check) and puts the
    shard's manifest entry on its tally, for the comparison of the shard's
    counts.
    """

    def __init__(self, schema: Mapping[str, str] | None, decode_images: bool, preview: bool,
                 labels: Sequence[str] | None, hash_files: bool,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, index_required: bool = False) -> None:
        self._schema = schema
        self._max_record_bytes = max_record_bytes
        self._decode_images = decode_images
        self._preview = preview
        self._labels = list(labels) if labels else None
        self._hash_files = hash_files
        self._index_required = index_required
        self._reread = Metrics.counter(_NAMESPACE, "bytes_read_again_for_sha256")

    def _records(self, fh, shard: ShardFile, claims: _Claims, index: tuple[str, bytes] | None):
        if _whole_file(shard):
            if not claims.try_claim(0):
                return iter(())
            return read_stream(open_decompressed(fh, compression_of(shard.path)), shard.path,
                               max_length=self._max_record_bytes)
        return read_range(fh, shard.size, claims, shard.path, index_starts(shard.path, shard.size, index),
                          self._max_record_bytes)

    def process(self, shard: ShardFile, schema: Mapping[str, str] | None = None,
                labels: Sequence[str] | None = None,
                tracker=beam.DoFn.RestrictionParam(_ShardRanges())):
        schema = self._schema if schema is None else schema
        labels = self._labels if labels is None else (list(labels) or None)
        claims = _Claims(tracker)
        # One range of each file starts at byte 0 (splitting keeps the start): it checks the whole file.
        first = claims.start_position() == 0
        checker = RangeChecker(shard.path, shard.split, schema, self._decode_images, labels,
                               self._preview)
        tally = progress.Tally(progress.RECORDS_READ)
        uncompressed = compression_of(shard.path) == "none"
        index = read_index(shard.path) if uncompressed and (first or not _whole_file(shard)) else None
        digest = None
        with open_file(shard.path) as fh:
            hashing = (HashingReader(fh) if self._hash_files and shard.entry is not None and first
                       else None)
            try:
                for offset, data in self._records(hashing or fh, shard, claims, index):
                    checker.add(offset, data)
                    tally.add(1, len(data) + OVERHEAD)
            except RecordError as err:
                Metrics.counter(_NAMESPACE, "damaged_records").inc()
                checker.damage(err)
            finally:
                tally.flush()
            if hashing is not None:
                digest = hashing.finish(shard.size)
                self._reread.inc(hashing.reread)
        claims.finish()
        result = checker.result()
        Metrics.counter(_NAMESPACE, "records_checked").inc(result.records)
        if first:
            result.entry = shard.entry
            problem = sha256_problem(shard.path, shard.entry, digest) if digest is not None else None
            if problem:
                result.problems.append(problem)
            if uncompressed:
                result.problems.extend(index_problems(shard.path, index[1] if index else None,
                                                      shard.size, self._index_required))
        yield result


class ReadAndCheckRecords(beam.PTransform):
    """Reads every record of each shard and checks it as it is read; one tally per byte range.

    Input ``ShardFile``; output ``RangeTally`` (see ``transforms.verify.ranges``):
    the records, label counts, image keys and problems of one byte range.
    Uncompressed shards are split into byte ranges (``.idx`` record starts when
    usable, else scanning), which the runner may split further while they are
    read; compressed ones are read whole. Both CRCs of every record are checked
    and the Example is read and checked as ``check_record`` checks it; a damaged
    record ends its range with a problem. The reader of each shard's range at
    byte 0 also checks the whole file: an uncompressed file's ``.idx`` against
    the file (``index_problems``), and, with ``hash_files``, the sha256 of a
    shard that has a manifest entry, from the bytes it reads; its tally holds
    those problems and the shard's entry. With ``split_ranges=False`` shards
    are not split into ranges at the start: each is read once, by one reader,
    checked and hashed (the runner may still split a range while it is read;
    the hash then reads the rest of the file again).

    Args:
        schema, labels: As for ``CheckRecords`` (values or singleton side inputs).
        decode_images: Decode every image.
        preview: Keep a few preview samples per class in each tally.
        hash_files: Check each listed shard's sha256 against its entry.
        max_record_bytes: The largest record data read; a record declaring
            more is a ``bad_length`` problem at its offset.
        split_ranges: Split shards into byte ranges at the start (for more
            readers than shards), or read each whole (each byte read once).
        index_required: A missing ``.idx`` of an uncompressed shard is a
            problem (a shard set's shards have one).
    """

    def __init__(self, schema: Mapping[str, str] | beam.pvalue.AsSingleton | None, decode_images: bool,
                 preview: bool, labels: Sequence[str] | beam.pvalue.AsSingleton | None = None,
                 hash_files: bool = True, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                 split_ranges: bool = True, index_required: bool = False) -> None:
        super().__init__()
        side = {name: value for name, value in (("schema", schema), ("labels", labels))
                if isinstance(value, beam.pvalue.AsSingleton)}
        self._fn = _ReadAndCheckFn(None if "schema" in side else schema, decode_images, preview,
                                   None if "labels" in side else labels, hash_files,
                                   max_record_bytes, index_required)
        self._side = side
        self._split_ranges = split_ranges

    def expand(self, shards):
        if not self._split_ranges:
            shards = shards | "ReadWhole" >> beam.Map(dataclasses.replace, read_whole=True)
        return shards | "ReadAndCheck" >> beam.ParDo(self._fn, **self._side)


class CheckAcrossRanges(beam.PTransform):
    """Checks what no single range shows: each listed shard's counts, and image keys seen twice.

    Input ``RangeTally``; output ``Problem``. A shard's counts are added up
    over its ranges and compared with its manifest entry (which the tally of
    its range at byte 0 holds). Every ``image/key/sha256`` seen twice, within
    a split or across splits, is a problem: the keys are dealt into
    ``ranges.KEY_BUCKETS`` buckets by a hash of the key, one element per range
    and bucket, and each bucket is searched for repeats on its own. Both
    checks share one ``GroupByKey``, keyed ``(SHARD_GROUP, path)`` and
    ``(KEY_GROUP, bucket)`` (``ranges.group_parts``), so no step holds the
    whole manifest or every key.

    Args:
        compare_counts: Compare each shard's counts with its manifest entry
            (a shard set); without, only repeated keys are looked for.
    """

    def __init__(self, compare_counts: bool = True) -> None:
        super().__init__()
        self._compare_counts = compare_counts

    def expand(self, tallies):
        return (tallies
                | "Parts" >> beam.FlatMap(group_parts, self._compare_counts)  # ((kind, group), part)
                | "Group" >> beam.GroupByKey()  # ((kind, group), [part])
                | "Check" >> beam.FlatMapTuple(group_problems))


def _records_of(tally: RangeTally) -> int:
    return tally.records


def _write_report(path: str, records: Iterable[int], sizes: Iterable[int],
                  *problems: Iterable[Problem]) -> None:
    sizes = list(sizes)
    found = [problem for group in problems for problem in group]
    Metrics.counter(_NAMESPACE, "problems").inc(len(found))
    write_file(path, Report.build(len(sizes), sum(records), sum(sizes), found).dumps())


class WriteReport(beam.PTransform):
    """Writes the JSON report once every problem is known.

    Input: a tuple ``(tallies, sizes, *problems)`` of PCollections: the
    ``RangeTally`` of every range read, the size in bytes of every shard
    file checked, and any number of PCollections of ``Problem``. One step,
    started once, reads them all as side inputs, totals them and writes the
    report: side inputs need no flatten and no shuffle, so writing the report
    adds one stage that runs once the others are done.

    Args:
        path: Where the report goes (a local path or a URL).
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def expand(self, inputs):
        tallies, sizes, *problems = inputs
        records = tallies | "RangeRecords" >> beam.Map(_records_of)
        side = [beam.pvalue.AsIter(found) for found in (records, sizes, *problems)]
        return (tallies.pipeline
                | "Once" >> beam.Create([self._path])
                | "Write" >> beam.Map(_write_report, *side))


def _sample_key(sample) -> str:
    return sample.key


def _values(item):
    return item[1]


def _write_preview(details: tuple[str, Sequence[tuple[str, str, int]], Mapping[int, int] | None],
                   samples: list, path: str) -> None:
    title, shard_sizes, class_counts = details
    write_file(path, render_preview(samples, sorted(shard_sizes), title, class_counts))


class WritePreview(beam.PTransform):
    """Draws the contact sheet from a few samples per class and writes it as PNG.

    Input: a pair ``(samples, details)`` of PCollections: ``(label,
    PreviewSample)`` per sample, and one ``(title, shard sizes, class
    counts)``: the first line of the picture, ``(split, file name, bytes)``
    per shard, and label -> records (from the manifest) or None. Nothing is
    drawn without details (an unreadable manifest).

    Args:
        path: Where the PNG goes.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def expand(self, inputs):
        samples, details = inputs
        chosen = (samples
                  | "FewPerClass" >> beam.combiners.Top.SmallestPerKey(PREVIEW_PER_CLASS, key=_sample_key)
                  | "Samples" >> beam.FlatMap(_values))
        return details | "Draw" >> beam.Map(_write_preview, beam.pvalue.AsList(chosen), self._path)
