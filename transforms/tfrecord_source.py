"""Beam transforms that read TFRecord files, splitting inside files by byte range (docs/reading.md).

A range owns the records that start inside it; record starts come from the file's ``.idx`` when it
is usable, else from scanning (``transforms.tfrecord.record_ranges``). gzip and zlib files are read whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence, Union

import apache_beam as beam
from apache_beam import coders
from apache_beam.io import iobase
from apache_beam.io.concat_source import ConcatSource
from apache_beam.io.range_trackers import OffsetRangeTracker, UnsplittableRangeTracker
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.metrics import Metrics

from transforms.tfrecord.compression import compression_of, open_decompressed
from transforms.errors import RecordError
from transforms.progress import counters as progress
from transforms.storage.files import open_file, read_if_present
from transforms.storage.listing import FileMetadata, match_files
from transforms.tfrecord.framing import DEFAULT_MAX_RECORD_BYTES, OVERHEAD
from transforms.tfrecord.record_index import index_starts, read_index
from transforms.tfrecord.record_ranges import read_range, read_stream
from transforms.worker_options import CarriesStorageOptions

__all__ = ["ReadFromTFRecords", "ReadAllFromTFRecords", "RECORDS", "ERRORS", "usable_starts"]

RECORDS = "records"
ERRORS = "errors"
_NAMESPACE = "tfrecord_source"


@dataclass(frozen=True)
class _ReadSettings:
    """How files are read; shared by every source of one transform."""

    compression: str = "auto"
    with_offsets: bool = False
    use_index: bool = True
    keep_errors: bool = False
    min_bundle_size: int = 0
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES

    def __post_init__(self) -> None:
        compression_of("", self.compression)  # refuses a name not in READ_COMPRESSIONS
        if self.min_bundle_size < 0:
            raise ValueError(f"min_bundle_size must be >= 0, got {self.min_bundle_size}")
        if self.max_record_bytes < 1:
            raise ValueError(f"max_record_bytes must be >= 1, got {self.max_record_bytes}")

    def output_coder(self) -> coders.Coder:
        if self.keep_errors:  # records and RecordError objects, split apart downstream
            return coders.FastPrimitivesCoder()
        if self.with_offsets:
            return coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder(), coders.BytesCoder()])
        return coders.BytesCoder()


def usable_starts(path: str, size: int, index: tuple[str, bytes] | None) -> tuple[int, ...] | None:
    """The record starts of ``path``'s ``.idx`` (``read_index``'s, None: absent) if it fits the file; an
    unusable one is counted."""
    starts = index_starts(path, size, index)
    if index is not None and starts is None:
        Metrics.counter(_NAMESPACE, "unusable_indexes").inc()
    return starts


class _TFRecordFileSource(CarriesStorageOptions, iobase.BoundedSource):
    """The records of one file that start in ``[start, stop)``."""

    def __init__(self, path: str, size: int, start: int, stop: int | float,
                 settings: _ReadSettings) -> None:
        self._path = path
        self._size = size
        self._start = start
        self._stop = stop
        self._settings = settings
        self._compression = compression_of(path, settings.compression)

    @property
    def splittable(self) -> bool:
        return self._compression == "none"

    def estimate_size(self) -> int:
        return int(min(self._stop, self._size) - self._start)

    def split(self, desired_bundle_size: int, start_position: int | None = None,
              stop_position: int | None = None) -> Iterator[iobase.SourceBundle]:
        start = self._start if start_position is None else start_position
        stop = self._stop if stop_position is None else stop_position
        if not self.splittable:
            yield iobase.SourceBundle(self._size, self, start, OffsetRangeTracker.OFFSET_INFINITY)
            return
        for part in OffsetRange(start, stop).split(desired_bundle_size,
                                                   self._settings.min_bundle_size):
            yield iobase.SourceBundle(
                part.stop - part.start,
                _TFRecordFileSource(self._path, self._size, part.start, part.stop, self._settings),
                part.start, part.stop)

    def get_range_tracker(self, start_position: int | None,
                          stop_position: int | None) -> iobase.RangeTracker:
        start = self._start if start_position is None else start_position
        if not self.splittable:
            return UnsplittableRangeTracker(OffsetRangeTracker(start, OffsetRangeTracker.OFFSET_INFINITY))
        return OffsetRangeTracker(start, self._stop if stop_position is None else stop_position)

    def _records(self, fh, range_tracker) -> Iterator[tuple[int, bytes]]:
        if self.splittable:
            index = read_index(self._path, read_if_present) if self._settings.use_index else None
            starts = usable_starts(self._path, self._size, index)
            return read_range(fh, self._size, range_tracker, self._path, starts, self._settings.max_record_bytes)
        return read_stream(open_decompressed(fh, self._compression), self._path, range_tracker,
                           self._settings.max_record_bytes)

    def read(self, range_tracker: iobase.RangeTracker) -> Iterator:
        records = Metrics.counter(_NAMESPACE, "records_read")
        record_bytes = Metrics.counter(_NAMESPACE, "record_bytes_read")
        with_offsets = self._settings.with_offsets or self._settings.keep_errors
        tally = progress.Tally(progress.RECORDS_READ)
        stop = range_tracker.stop_position() if self.splittable else None
        until = stop if stop is not None and stop < self._size else None  # s3://: fetch the range, not the shard
        with open_file(self._path, size=self._size if self.splittable else None, until=until) as fh:
            try:
                for offset, data in self._records(fh, range_tracker):
                    records.inc()
                    record_bytes.inc(len(data) + OVERHEAD)
                    tally.add(1, len(data) + OVERHEAD)
                    yield (self._path, offset, data) if with_offsets else data
            except RecordError as err:
                Metrics.counter(_NAMESPACE, "damaged_records").inc()
                if not self._settings.keep_errors:
                    raise
                yield err
            finally:
                tally.flush()

    def default_output_coder(self) -> coders.Coder:
        return self._settings.output_coder()


Files = Union[str, FileMetadata]  # a path or pattern, or a file already matched


class _TFRecordSource(CarriesStorageOptions, iobase.BoundedSource):
    """Every file named by a list of patterns or matched files, each split by byte range."""

    def __init__(self, files: tuple[Files, ...], settings: _ReadSettings) -> None:
        self._patterns = files
        self._settings = settings
        self._concat: ConcatSource | None = None

    def _files(self) -> ConcatSource:
        if self._concat is None:
            sizes: dict[str, int] = {}
            for meta in (meta for found in match_files(self._patterns) for meta in found):
                if meta.size_in_bytes > 0:  # an empty file holds no records
                    sizes.setdefault(meta.path, meta.size_in_bytes)
            self._concat = ConcatSource([
                _TFRecordFileSource(path, size, 0, size, self._settings)
                for path, size in sorted(sizes.items())])
        return self._concat

    def estimate_size(self) -> int:
        return self._files().estimate_size()

    def split(self, desired_bundle_size: int, start_position=None,
              stop_position=None) -> Iterator[iobase.SourceBundle]:
        return self._files().split(desired_bundle_size)

    def get_range_tracker(self, start_position, stop_position) -> iobase.RangeTracker:
        return self._files().get_range_tracker(start_position, stop_position)

    def read(self, range_tracker: iobase.RangeTracker) -> Iterator:
        return self._files().read(range_tracker)

    def default_output_coder(self) -> coders.Coder:
        return self._settings.output_coder()


def keeps_errors(errors: str) -> bool:
    """True for ``errors="output"``, False for ``"raise"``; any other value is refused."""
    if errors not in ("raise", "output"):
        raise ValueError(f"errors must be 'raise' or 'output', got {errors!r}")
    return errors == "output"


def _separate_errors(item, with_offsets: bool):
    """Sends ``RecordError`` items to the ``errors`` output, records to the main one."""
    if isinstance(item, RecordError):
        yield beam.pvalue.TaggedOutput(ERRORS, item)
    else:
        yield item if with_offsets else item[2]


def _separate(read: beam.PCollection, settings: _ReadSettings):
    if not settings.keep_errors:
        return read
    return read | "SeparateErrors" >> beam.FlatMap(_separate_errors, settings.with_offsets).with_outputs(
        ERRORS, main=RECORDS)


class ReadFromTFRecords(beam.PTransform):
    """Reads the records of every file matching a pattern (or a list of patterns).

    Outputs each record's bytes, or ``(file, offset, record)`` with ``with_offsets=True`` (``offset``
    is the byte offset of the record's header; in the decompressed stream for gzip/zlib files). With
    ``errors="output"`` the result has two outputs, ``records`` and ``errors`` (``RecordError``
    objects), e.g.::

        read = p | ReadFromTFRecords("out/*.tfrecord", errors="output")
        read.records, read.errors

    Args:
        file_pattern: A file pattern or path, a ``FileMetadata`` of a file already matched (read as
            it is, with its size), or a list of them; files are de-duplicated and empty files skipped.
        compression: ``auto`` (by suffix: ``.gz`` gzip; ``.zz`` and ``.deflate`` zlib; else none),
            ``none``, ``gzip`` or ``zlib``.
        use_index: Use ``{file}.idx`` sidecars for record starts when present and consistent with the file.
        errors: ``raise`` to fail on a damaged record, ``output`` to emit it.
        validate: Fail at construction if a pattern matches no file.
        min_bundle_size: Smallest byte range a file is split into initially.
        max_record_bytes: The largest record data read; a record declaring more is damaged
            (``bad_length`` at its offset), found before its bytes are read or inflated.
    """

    def __init__(self, file_pattern: Files | Sequence[Files], with_offsets: bool = False,
                 compression: str = "auto", use_index: bool = True, errors: str = "raise",
                 validate: bool = True, min_bundle_size: int = 0,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> None:
        super().__init__()
        patterns = (file_pattern,) if isinstance(file_pattern, (str, FileMetadata)) else tuple(file_pattern)
        if not patterns or not all((isinstance(p, str) and p) or isinstance(p, FileMetadata)
                                   for p in patterns):
            raise ValueError(f"file_pattern must be a non-empty path or list of paths, got {file_pattern!r}")
        self._settings = _ReadSettings(compression, with_offsets, use_index,
                                       keeps_errors(errors), min_bundle_size, max_record_bytes)
        if validate:
            strings = [p for p in patterns if isinstance(p, str)]
            for pattern, found in zip(strings, match_files(strings) if strings else []):
                if not found:
                    raise OSError(f"no files match {pattern}")
        self._source = _TFRecordSource(patterns, self._settings)

    def expand(self, pbegin):
        read = pbegin.pipeline | "Read" >> beam.io.Read(self._source)
        return _separate(read, self._settings)


class ReadAllFromTFRecords(beam.PTransform):
    """Reads the records of every file matching each pattern in a PCollection.

    Elements are patterns or paths, or ``FileMetadata`` of files already matched (e.g. by
    ``fileio.MatchFiles``). Outputs and arguments are those of ``ReadFromTFRecords``; a pattern that
    matches nothing yields nothing.
    """

    def __init__(self, with_offsets: bool = False, compression: str = "auto",
                 use_index: bool = True, errors: str = "raise", min_bundle_size: int = 0,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> None:
        super().__init__()
        self._settings = _ReadSettings(compression, with_offsets, use_index,
                                       keeps_errors(errors), min_bundle_size, max_record_bytes)

    def _source_of(self, pattern: Files) -> iobase.BoundedSource:
        return _TFRecordSource((pattern,), self._settings)

    def expand(self, patterns):
        read = (patterns
                | "MakeSources" >> beam.Map(self._source_of).with_output_types(iobase.BoundedSource)
                | "ReadSources" >> iobase.SDFBoundedSourceReader())
        return _separate(read, self._settings)
