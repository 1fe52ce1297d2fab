"""Beam transforms of the reshard job: records in, planning facts out."""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.errors import RecordError, ShardsError, UsageError
from transforms.images.annotations import LABEL_MAP_NAME
from transforms.progress import counters as progress
from transforms.images.near_duplicates import NEAR_DUPLICATES_NAME
from transforms.shardset.manifest import DEAD_LETTERS_NAME, LABELS_NAME, MANIFEST_NAME, SHARDS_NAME
from transforms.arrayrecord.shard_file import read_records
from transforms.shardset.naming import FILE_SUFFIXES, join_path
from transforms.shardset.tfds_metadata import is_tfds_file
from transforms.storage.files import local_copy
from transforms.storage.listing import FileMetadata, is_folder, match_files
from transforms.storage.runs import BundleRunFile, RecordCopier
from transforms.tfrecord.record_index import indexed_shards
from transforms.shardset.dead_letters import DeadLetter
from transforms.shardset.record_items import RecordItem, RecordTally, input_split, record_item
from transforms.tfrecord.run_files import FramedRecord
from transforms.tfrecord_source import ERRORS, RECORDS, keeps_errors
from transforms.worker_options import CarriesStorageOptions

__all__ = ["input_files", "MatchInputFiles", "is_array_record", "ReadAllFromArrayRecords", "ToRecordItems",
           "CollectRecordFacts", "damaged_span", "RecordCopy"]

_SIDECARS = (MANIFEST_NAME, SHARDS_NAME, LABELS_NAME, DEAD_LETTERS_NAME, LABEL_MAP_NAME, NEAR_DUPLICATES_NAME)


def input_files(patterns: Sequence[str]) -> tuple[FileMetadata, ...]:
    """Expands the --input patterns to TFRecord files, matching each once.

    A path that names a file is that file (even with ``[``, ``*`` or ``?`` in its name). A shard
    set's own companions that a pattern such as ``old/*`` also matches are left out: ``.idx``
    sidecars of matched files, ``_SIDECARS`` and tfds's files.

    Raises:
        UsageError: A pattern names a folder or matches nothing, or nothing
            left is a TFRecord file.
    """
    for pattern in patterns:
        if is_folder(pattern):
            raise UsageError(f"--input {pattern} is a folder; give its files as a pattern, "
                             f"e.g. --input '{join_path(pattern.rstrip('/'), '*')}'")
    found: dict[str, FileMetadata] = {}
    for pattern, metas in zip(patterns, match_files(list(patterns))):
        if not metas:
            raise UsageError(f"--input {pattern} matches no file")
        for meta in metas:
            found.setdefault(meta.path, meta)
    files = [meta for path, meta in sorted(found.items())
             if not any(shard in found for shard in indexed_shards(path))
             and path.rsplit("/", 1)[-1] not in _SIDECARS and not is_tfds_file(path.rsplit("/", 1)[-1])]
    if not files:
        raise UsageError(f"--input {' '.join(patterns)} matches no TFRecord file")
    return tuple(files)


class _MatchFn(CarriesStorageOptions, beam.DoFn):
    """The files of the patterns (``input_files``), matched with the launcher's file system options
    (a bare worker has none: its S3 file system would find no credentials)."""

    def process(self, patterns: Sequence[str]):
        yield from input_files(patterns)


class MatchInputFiles(beam.PTransform):
    """The TFRecord files of the --input patterns (``input_files``), matched inside the pipeline, so
    that the job graph holds the patterns only. Output: ``PCollection[FileMetadata]``, spread over workers."""

    def __init__(self, patterns: Sequence[str]) -> None:
        super().__init__()
        self._patterns = tuple(patterns)

    def expand(self, pbegin):
        return (pbegin
                | "Patterns" >> beam.Create([self._patterns])
                | "Match" >> beam.ParDo(_MatchFn())  # FileMetadata
                | "Spread" >> beam.Reshuffle())


def is_array_record(path: str) -> bool:
    """True for an ArrayRecord file (by its suffix, ``.array_record``); the others are read as TFRecord files."""
    return path.endswith(FILE_SUFFIXES["array_record"])


class _ReadArrayRecordFileFn(CarriesStorageOptions, beam.DoFn):
    """FileMetadata of an ArrayRecord file -> ``(path, record number, record)`` of each of its records, in order;
    a record that cannot be read ends the file's reading: raised, or with ``keep_errors`` its
    ``RecordError`` (naming the file and the record's number) is output to ``ERRORS``."""

    def __init__(self, keep_errors: bool) -> None:
        self._keep_errors = keep_errors
        self._records = Metrics.counter("reshard", "array_records_read")

    def process(self, meta: FileMetadata):
        tally = progress.Tally(progress.RECORDS_READ)
        with local_copy(meta.path) as local:  # ArrayRecord's reader opens local paths only
            try:
                for number, record in read_records(local):
                    self._records.inc()
                    tally.add(1, len(record))
                    yield meta.path, number, record
            except RecordError as err:
                named = RecordError(meta.path, err.offset, err.kind, err.detail)  # not the local copy's path
                if not self._keep_errors:
                    raise named from err
                yield beam.pvalue.TaggedOutput(ERRORS, named)
            finally:
                tally.flush()


class ReadAllFromArrayRecords(beam.PTransform):
    """Reads the records of ArrayRecord files, each file whole, by record number.

    Input: ``PCollection[FileMetadata]``. Output: ``(path, record number, record)``; with
    ``errors="output"``, the records under ``RECORDS`` (main) and the ``RecordError`` of a
    file whose reading stopped under ``ERRORS``, as ``ReadAllFromTFRecords`` gives them.
    """

    def __init__(self, errors: str = "raise") -> None:
        super().__init__()
        self._keep_errors = keeps_errors(errors)

    def expand(self, files):
        read = beam.ParDo(_ReadArrayRecordFileFn(self._keep_errors))
        return files | "ReadFiles" >> (read.with_outputs(ERRORS, main=RECORDS) if self._keep_errors else read)


class RecordCopy:
    """What the shard writer writes for an item: its record, copied from the run file
    ``ToRecordItems`` wrote it to, and its label."""

    def __init__(self) -> None:
        self._copier = RecordCopier()

    def close(self) -> None:
        """Closes the run files kept open."""
        self._copier.close()

    def plan(self, items: Sequence[RecordItem]) -> None:
        """The shard's items about to be copied: those in run files are read in batches (``RecordCopier.plan``)."""
        self._copier.plan(item.run for item in items if item.run is not None)

    def __call__(self, item: RecordItem) -> tuple[FramedRecord, int | None]:
        if item.run is None:
            raise ShardsError(f"a record of {item.split or 'the input'} is in no run file")
        return self._copier.copy(item.run, f"a record of {item.split or 'the input'}"), item.label


def damaged_span(error: RecordError) -> DeadLetter:
    """A damaged stretch of an input file, as a dead letter."""
    where = f"at record {error.offset}" if is_array_record(error.path) else f"at byte {error.offset}"
    return DeadLetter(error.path, error.kind, f"{where}: {error.detail}; reading of this stretch stopped there")


class _ToItemFn(CarriesStorageOptions, beam.DoFn):
    """(path, offset, record) -> RecordItem of the path's split, carrying where the record lies in the
    bundle's run file in ``staging`` instead of its bytes (``storage.runs``)."""

    def __init__(self, seed: int, split: str | None, staging: tuple[str, str]) -> None:
        self._seed = seed
        self._split = split
        self._staging = staging
        self._records = Metrics.counter("reshard", "records_read")
        self._bytes = Metrics.counter("reshard", "record_bytes_read")

    def setup(self):
        self._run = BundleRunFile(*self._staging)

    def start_bundle(self):
        self._run.close()  # a failed bundle's run file: no surviving output names it

    def process(self, record: tuple[str, int, bytes]):
        path, _, data = record
        self._records.inc()
        self._bytes.inc(len(data))
        item = record_item(data, self._seed, input_split(path, self._split))
        yield item.in_run_file(self._run.append((data,)))

    def finish_bundle(self):
        self._run.close()  # before the bundle ends: every item names a whole record

    def teardown(self):
        if getattr(self, "_run", None) is not None:
            self._run.close()


class ToRecordItems(beam.PTransform):
    """``PCollection[(path, offset, bytes)]`` -> ``PCollection[RecordItem]`` (order key, label, split).

    ``split`` puts every record in one split (None: each file's, ``input_split``). Records go to run
    files in the staging folder of ``(output folder, run id)`` and items carry where (written with
    ``RecordCopy``), so no record's bytes are grouped or shuffled.
    """

    def __init__(self, seed: int, split: str | None = None, *, staging: tuple[str, str]) -> None:
        super().__init__()
        self._seed = seed
        self._split = split
        self._staging = tuple(staging)

    def expand(self, records):
        return records | "ToItem" >> beam.ParDo(_ToItemFn(self._seed, self._split, self._staging))


class _RecordFactsFn(CarriesStorageOptions, beam.CombineFn):
    """RecordItem -> ``RecordFacts``; the accumulator is a ``RecordTally``."""

    def create_accumulator(self):
        return RecordTally()

    def add_input(self, acc, item):
        return acc.add(item)

    def merge_accumulators(self, accs):
        return functools.reduce(RecordTally.merge, accs, RecordTally())

    def extract_output(self, acc):
        return acc.facts()


class CollectRecordFacts(beam.PTransform):
    """``PCollection[RecordItem]`` -> one ``RecordFacts``: records read, class names, feature spec.

    Without ``dead_letters``, no records give no element (readers of it as a side input give their
    defaults); with them (``PCollection[DeadLetter]``, the inputs' damaged stretches, read as a side
    input), there is always one element, counting them too (every input may be damaged).
    """

    def __init__(self, dead_letters: beam.PCollection | None = None) -> None:
        super().__init__()
        self._dead_letters = dead_letters

    def expand(self, items):
        if self._dead_letters is None:
            return items | "CombineFacts" >> beam.CombineGlobally(_RecordFactsFn()).without_defaults()
        return (items
                | "CombineFacts" >> beam.CombineGlobally(_RecordFactsFn())  # RecordFacts, even of nothing
                | "CountDeadLetters" >> beam.Map(lambda facts, dead: dataclasses.replace(
                    facts, dead_letters=sum(1 for _ in dead)), beam.pvalue.AsIter(self._dead_letters)))
