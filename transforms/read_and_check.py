"""Beam: the verify job's reading of shards, each split into byte ranges and checked as it is read."""

from __future__ import annotations

import dataclasses
from typing import Iterator, Mapping, Sequence

import apache_beam as beam
from apache_beam.io.iobase import Read
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider

from transforms.errors import RecordError
from transforms.progress import counters as progress
from transforms.arrayrecord.shard_file import read_records
from transforms.filesystems import naming_s3_errors
from transforms.shardset.key_files import keys_name
from transforms.shardset.naming import FILE_SUFFIXES
from transforms.storage.files import file_hash, local_copy, open_file, read_if_present
from transforms.storage.paths import is_local
from transforms.tfrecord.compression import compression_of, open_decompressed
from transforms.tfrecord.file_hash import FileHash, HashingReader
from transforms.tfrecord.framing import DEFAULT_MAX_RECORD_BYTES, OVERHEAD
from transforms.tfrecord.record_index import read_index
from transforms.tfrecord.record_ranges import read_range, read_stream
from transforms.tfrecord_source import usable_starts
from transforms.verify.checks import hash_problems, index_hash_problem, index_problems, keys_file_problems
from transforms.verify.ranges import RangeChecker, ShardFile
from transforms.worker_options import CarriesStorageOptions

__all__ = ["ReadAndCheckRecords", "RecordChecks"]

_NAMESPACE = "verify_shards"


class _WholeFile(OffsetRange):
    """The restriction of a file read whole, front to back (compressed, or empty)."""


class _RecordRange(OffsetRange):
    """The restriction of an ArrayRecord shard: record numbers ``start..stop-1`` (its records read by number)."""


def _is_array_record(shard: ShardFile) -> bool:
    return shard.path.endswith(FILE_SUFFIXES["array_record"])


def _by_record(shard: ShardFile) -> bool:
    """True for a local ArrayRecord shard whose record count its entry gives: read in ranges of record
    numbers (a shard on a store is read whole, from one local copy)."""
    return (_is_array_record(shard) and shard.entry is not None and shard.entry.records > 0 and is_local(shard.path))


def _whole_file(shard: ShardFile) -> bool:
    return shard.size == 0 or (_is_array_record(shard) and not _by_record(shard)) or \
        compression_of(shard.path) != "none"


class _WholeFileTracker(OffsetRestrictionTracker):
    """Tracks a ``_WholeFile``: claimed once, never split."""

    def try_split(self, fraction_of_remainder):
        return None


class _ShardRanges(CarriesStorageOptions, RestrictionProvider):
    """Byte ranges of a shard: split like the TFRecord source splits a file."""

    def initial_restriction(self, shard: ShardFile) -> OffsetRange:
        if _by_record(shard):
            return _RecordRange(0, shard.entry.records)
        return _WholeFile(0, 1) if _whole_file(shard) else OffsetRange(0, shard.size)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        if isinstance(restriction, _WholeFile):
            return _WholeFileTracker(restriction)
        return OffsetRestrictionTracker(restriction)

    def split(self, shard: ShardFile, restriction: OffsetRange) -> Iterator[OffsetRange]:
        if isinstance(restriction, _WholeFile) or shard.read_whole:
            yield restriction
            return
        if isinstance(restriction, _RecordRange):  # as many records a range as the file's bytes would give
            per_range = max(1, shard.entry.records * Read.get_desired_chunk_size(shard.size) // max(1, shard.size))
            for start in range(restriction.start, restriction.stop, per_range):
                yield _RecordRange(start, min(start + per_range, restriction.stop))
            return
        yield from restriction.split(Read.get_desired_chunk_size(shard.size))

    def restriction_size(self, shard: ShardFile, restriction: OffsetRange) -> int:
        if isinstance(restriction, _RecordRange):  # the range's share of the file's bytes
            return shard.size * restriction.size() // max(1, shard.entry.records)
        return shard.size if isinstance(restriction, _WholeFile) else restriction.size()


class _Claims:
    """A restriction tracker as ``record_ranges.read_range`` claims positions from it."""

    def __init__(self, tracker) -> None:
        self._tracker = tracker
        self._last: int | None = None

    def start_position(self) -> int:
        return self._tracker.current_restriction().start

    def current(self) -> OffsetRange:
        return self._tracker.current_restriction()

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


@dataclasses.dataclass(frozen=True)
class RecordChecks:
    """What ``ReadAndCheckRecords`` checks of each record and shard beside its framing.

    Attributes:
        preview: Keep a few preview samples per class in each tally.
        hash_files: Check each listed shard's hashes (CRC32C, sha256) against its entry.
        max_record_bytes: The largest record data read; a record declaring more is a ``bad_length`` problem.
        index_required: A missing ``.idx`` of an uncompressed shard is a problem.
        decode_with: Decoders that must decode every image to its record's size (``verify.decoders``).
    """

    decode_images: bool = False
    preview: bool = False
    hash_files: bool = True
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    index_required: bool = False
    decode_with: tuple[str, ...] = ()


class _ReadAndCheckFn(CarriesStorageOptions, beam.DoFn):
    """ShardFile -> a RangeTally per byte range read; the range at byte 0 also checks the whole file.

    That reader hashes the bytes it reads (``HashingReader``); when the file was split, it reads on
    to the file's end for the hash alone. Its tally holds the shard's manifest entry.
    """

    def __init__(self, checks: RecordChecks) -> None:
        self._checks = checks
        self._reread = Metrics.counter(_NAMESPACE, "bytes_read_again_for_hash")

    def _records(self, fh, shard: ShardFile, claims: _Claims, index: tuple[str, bytes] | None):
        if _whole_file(shard):
            if not claims.try_claim(0):
                return iter(())
            return read_stream(open_decompressed(fh, compression_of(shard.path)), shard.path,
                               max_length=self._checks.max_record_bytes)
        starts = usable_starts(shard.path, shard.size, index)
        return read_range(fh, shard.size, claims, shard.path, starts, self._checks.max_record_bytes)

    def process(self, shard: ShardFile, schema: Mapping[str, str] | None = None,
                labels: Sequence[str] | None = None,
                tracker=beam.DoFn.RestrictionParam(_ShardRanges())):
        labels = list(labels) if labels else None
        claims = _Claims(tracker)
        # One range of each file starts at byte 0 (splitting keeps the start): it checks the whole file.
        first = claims.start_position() == 0
        checks = self._checks
        checker = RangeChecker(shard.path, shard.split, schema, checks.decode_images, labels, checks.preview,
                               tuple(checks.decode_with))
        tally = progress.Tally(progress.RECORDS_READ)
        if _is_array_record(shard):
            yield self._check_array_record(shard, claims, checker, tally)
            return
        uncompressed = compression_of(shard.path) == "none"
        index = read_index(shard.path, read_if_present) if uncompressed and (first or not _whole_file(shard)) else None
        digest = None
        with open_file(shard.path) as fh:
            hashing = (HashingReader(fh, sha256=shard.entry.sha256 is not None)
                       if checks.hash_files and shard.entry is not None and first else None)
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
        result = _range_result(shard, claims, checker, first, digest, _whole_file(shard), index)
        if first and uncompressed:
            result.problems.extend(index_problems(shard.path, index[1] if index else None,
                                                  shard.size, checks.index_required))
        yield result

    def _check_array_record(self, shard: ShardFile, claims: _Claims, checker: RangeChecker, tally):
        """The tally of an ArrayRecord shard's records, by number (a problem's offset is a record's number).

        The range that starts at record 0 also hashes the file.
        """
        digest = None
        first = claims.start_position() == 0
        by_record = not isinstance(claims.current(), _WholeFile)
        if by_record or claims.try_claim(0):
            with local_copy(shard.path) as local:
                read, stop = 0, claims.stop_position() if by_record else None
                try:
                    for number, data in read_records(local, claims.start_position() if by_record else 0, stop):
                        if by_record and not claims.try_claim(number):
                            break
                        checker.add(number, data)
                        tally.add(1, len(data))
                        read += len(data)
                except RecordError as err:
                    Metrics.counter(_NAMESPACE, "damaged_records").inc()
                    checker.damage(err)
                finally:  # the file's bytes, or the range's share of them: progress ends at the file's size
                    share = _ShardRanges().restriction_size(shard, claims.current()) if by_record else shard.size
                    tally.add(0, max(0, share - read))
                    tally.flush()
                if first and self._checks.hash_files and shard.entry is not None:
                    digest = file_hash(local, shard.entry.sha256 is not None)
        return _range_result(shard, claims, checker, first, digest, not by_record)


def _range_result(shard: ShardFile, claims: _Claims, checker: RangeChecker, first: bool,
                  digest: FileHash | None, whole: bool, index: tuple[str, bytes] | None = None):
    """The range's tally once read; the first range's holds the shard's entry and its files' hash problems."""
    claims.finish()
    result = checker.result()
    Metrics.counter(_NAMESPACE, "records_checked").inc(result.records)
    if first:
        result.entry = shard.entry
        if digest is not None:
            result.problems.extend(hash_problems(shard.path, shard.entry, digest))
            problem = index_hash_problem(shard.path, shard.entry, index)
            if problem:
                result.problems.append(problem)
            result.problems.extend(_keys_problems(shard, result, whole))
    return result


def _keys_problems(shard: ShardFile, result, whole: bool) -> list:
    """The problems of the shard's keys file, if its entry states one (``checks.keys_file_problems``);
    its keys are compared with the records' when the range read is the whole shard."""
    if shard.entry is None or shard.entry.keys_crc32c is None:
        return []
    path = keys_name(shard.path)
    with naming_s3_errors(path):
        data = read_if_present(path)
    return keys_file_problems(shard.path, shard.entry, (path, data),
                              [key for key, _ in result.keys] if whole and not result.damaged else None)


class ReadAndCheckRecords(beam.PTransform):
    """Reads every record of each shard and checks it as it is read; one tally per byte range.

    Input ``ShardFile``; output ``RangeTally`` (``transforms.verify.ranges``). Uncompressed shards
    are split into byte ranges, which the runner may split further; compressed ones are read whole.
    A damaged record ends its range with a problem. The range at byte 0 also checks the whole file:
    its ``.idx`` and, with ``hash_files``, the hashes its entry states.

    Args:
        schema, labels: The manifest's feature spec and class names (values or singleton side
            inputs), as ``transforms.verify.checks.check_record`` takes them.
        split_ranges: Split shards into byte ranges at the start (for more readers than shards), or
            read each whole (each byte read once).
    """

    def __init__(self, schema: Mapping[str, str] | beam.pvalue.AsSingleton | None,
                 labels: Sequence[str] | beam.pvalue.AsSingleton | None = None,
                 checks: RecordChecks | None = None, split_ranges: bool = True) -> None:
        super().__init__()
        self._fn = _ReadAndCheckFn(checks or RecordChecks())
        self._side = {"schema": schema, "labels": labels}  # values or side inputs
        self._split_ranges = split_ranges

    def expand(self, shards):
        if not self._split_ranges:
            shards = shards | "ReadWhole" >> beam.Map(dataclasses.replace, read_whole=True)
        return shards | "ReadAndCheck" >> beam.ParDo(self._fn, **self._side)
