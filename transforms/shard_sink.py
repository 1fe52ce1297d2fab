"""The shard sink: write each planned shard once, then publish them all atomically.

``WriteShards`` groups records by shard and writes every shard with one worker
to a unique staging name (``storage.shard_files.write_shard``; a retried or
speculative bundle writes its own copy; only the attempt Beam commits reaches
the publish step). ``PublishShards`` has the workers stage the shard list in
parts (``WriteShardListParts``), then, once every shard is written, makes the
result visible in an order that never lets ``manifest.json`` name a missing or
partial file (``storage.publish``, where the steps are listed; one protocol
for builds, reshards and appends): one step prepares (checks, the new set's
files staged, the journal written) and hands out the shard renames in chunks,
the workers rename them (``MoveStaged``), and one step commits (the rest of
the journal, ``manifest.json`` last).

No side input of the publish step grows with shards: it is given the staged
parts of the shard list (``WriteShardListParts``: a path, counts, label and
tally totals per part of up to ``PART_SHARDS`` shards, with a staged file of
the part's shards' staged names), reads the shards' rows from those files,
keeps one small entry per shard and the splits' label totals, and copies the
shard list from the staged parts line by line. The workers
that reject inputs stage their dead letters in sorted parts
(``StageDeadLetters``, fused into the rejecting step: no shuffle); the
publish step gets the parts with their counts and merges them into
``dead_letters.jsonl``.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from transforms import worker_threads
from transforms.images.near_duplicates import NEAR_DUPLICATES_NAME, near_duplicates_lines, near_duplicates_summary
from transforms.progress import counters as progress
from transforms.progress.report import plural
from transforms.shardset.dead_letters import PART_LETTERS, too_many_rejected
from transforms.shardset.ownership import PublishPolicy
from transforms.shardset.resume import ShardDone
from transforms.shardset.staged import ShardResult, part_key
from transforms.storage.dead_letter_files import write_dead_letter_part
from transforms.storage.folders import PARALLEL_MOVES, RENAME_CHUNK, RENAME_THREADS, move_chunk, move_chunks
from transforms.storage.publish import (commit_publish, prepare_publish, published_already, stage_commit_record,
                                        staged_commit_record)
from transforms.packed_groups import GroupPacked
from transforms.plan_shards import LeadRecords
from transforms.storage.resume import adopt_shard, record_done_shard
from transforms.storage.shard_files import lead_records, write_shard, write_shard_list_part
from transforms.tfrecord.framing import framed_size
from transforms.tfrecord.run_files import FramedRecord
from transforms.worker_options import CarriesStorageOptions

__all__ = ["WriteShards", "PublishShards", "REUSED_SHARDS", "MOVE_PROCESSES", "MOVES", "MovesDone",
           "NearDuplicateReport"]

_LOG = logging.getLogger(__name__)
# Metrics of the sink, the same for every job that writes shards (build, reshard).
_NAMESPACE = "shard_sink"
# Counter of the finished shards of an interrupted run that a resumed run published as they were.
REUSED_SHARDS = "shards_reused"
# Counter of the worker processes that renamed a publish's staged files (0: the publish step did),
# told apart by their random ``counters.worker_id`` (pids repeat across machines).
MOVE_PROCESSES = "move_processes"
# The tag of the publish's renames, handed out in chunks by the step that prepares it.
MOVES = "moves"


def _counted(records: Iterable[tuple[bytes | Sequence[bytes], int | None]],
             tally: progress.Tally) -> Iterator[tuple[bytes | Sequence[bytes], int | None]]:
    """Passes the records on, counting each one and its framed size in ``tally``."""
    for record, label in records:
        if isinstance(record, FramedRecord):
            tally.add(1, len(record.data))
        else:
            tally.add(1, framed_size(len(record) if isinstance(record, bytes) else sum(len(p) for p in record)))
        yield record, label


class _WriteShardFn(CarriesStorageOptions, beam.DoFn):
    """(ShardKey, [item]) -> ShardResult, writing the shard's records in order."""

    def __init__(self, output_dir: str, compression: str,
                 to_record: Callable[[Any], tuple[bytes | Sequence[bytes], int | None]],
                 order_of: Callable[[Any], tuple], run_id: str, threads: int = 1,
                 tally_of: Callable[[Any], Iterable[Any]] | None = None,
                 max_bad_fraction: float | None = None,
                 content_of: Callable[[tuple, Sequence[Any]], str] | None = None,
                 done_shards: Mapping[str, ShardDone] | None = None, file_format: str = "tfrecord",
                 shard_sha256: bool = False) -> None:
        self._file_format = file_format
        self._shard_sha256 = shard_sha256
        self._content_of = content_of
        self._done_shards = dict(done_shards or {})
        self._reused = Metrics.counter(_NAMESPACE, REUSED_SHARDS)
        self._output_dir = output_dir
        self._compression = compression
        self._to_record = to_record
        self._order_of = order_of
        self._run_id = run_id
        self._threads = threads
        self._tally_of = tally_of
        self._max_bad_fraction = max_bad_fraction
        self._records = Metrics.counter(_NAMESPACE, "records_written")
        self._bytes = Metrics.counter(_NAMESPACE, "bytes_written")
        self._shards = Metrics.counter(_NAMESPACE, "shards_written")

    def setup(self):
        threads = worker_threads.thread_count(self._threads)
        self._pool = worker_threads.new_pool(threads, "make-record")
        self._window = worker_threads.window_for(threads)

    def teardown(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def process(self, keyed, totals, inputs=None):
        if inputs is None or not too_many_rejected(inputs - sum(t.records for t in totals), inputs,
                                                   self._max_bad_fraction):
            yield self._write(keyed, totals)
        # else publishing refuses the run: no shard is read, made or written

    def _write(self, keyed, totals) -> ShardResult:
        key, items = keyed
        leads = [item for item in items if isinstance(item, LeadRecords)]
        items = sorted((item for item in items if not isinstance(item, LeadRecords)), key=self._order_of)
        # A shard that starts with a published shard's records (appending) is not resumed.
        content = self._content_of(key, items) if self._content_of is not None and not leads else None
        done = self._done_shards.get(content) if content is not None else None
        result = adopt_shard(done, self._output_dir, self._run_id) if done is not None else None
        reused = result is not None
        if reused:  # an interrupted run's finished shard, its sha256 checked again
            self._reused.inc()
            progress.note(progress.RECORDS_WRITTEN, result.stats.records, result.stats.bytes)
        else:
            result = self._write_records(key, items, leads, totals)
            if content is not None:
                record_done_shard(content, result)
        if self._tally_of is not None:
            tallies = collections.Counter(key for item in items for key in self._tally_of(item))
            result = dataclasses.replace(result, tallies=tuple(sorted(tallies.items())))
        self._records.inc(result.stats.records)
        self._bytes.inc(result.stats.bytes)
        self._shards.inc()
        _LOG.info("%s shard %s: %d records, %.1f MiB", "reused" if reused else "wrote", result.file,
                  result.stats.records, result.stats.bytes / 2**20)
        return result

    def _write_records(self, key, items, leads, totals) -> ShardResult:
        planned = sum(t.total_bytes for t in totals)
        written = progress.Tally(progress.RECORDS_WRITTEN, every=16)
        plan = getattr(self._to_record, "plan", None)
        if plan is not None:
            plan(items)  # the records it will copy: neighbours in a run file are read together
        made = worker_threads.ordered_map(self._to_record, items, self._pool, self._window)
        records = _counted(made, written)  # the progress report counts the run's own records
        if leads:  # appending: the merged published shard's records come first
            split_totals = next(t for t in totals if t.split == key[0])
            records = itertools.chain(lead_records(self._output_dir, split_totals, key[1], self._compression),
                                      records)
        try:
            result = write_shard(self._output_dir, key, records,
                                 self._compression, self._run_id, planned, self._file_format,
                                 sha256=self._shard_sha256)
        finally:
            made.close()  # an error while writing: the records still being made are dropped
            close = getattr(self._to_record, "close", None)
            if close is not None:
                close()  # files it keeps open (run files) are not held between shards
        written.flush()
        return result


class WriteShards(beam.PTransform):
    """Writes every planned shard to staging.

    Input: ``PCollection[(ShardKey, item)]`` (from ``PlanShards``).
    Output: ``PCollection[ShardResult]``.

    Args:
        output_dir: Final output folder (staging lives inside it).
        compression: ``none``, ``gzip`` or ``zlib``.
        to_record: item -> (serialized record, or a sequence of pieces whose
            concatenation is the record, or a ``FramedRecord``; label index or
            None). If it has a ``close()``, that is called after each shard,
            once no record of it is being made (files it keeps open are closed);
            if it has a ``plan(items)``, that is called with each shard's items,
            in order, before the first is made.
        order_of: item -> sort key; the write order within a shard.
        run_id: The run's id (its staging folder).
        totals: ``PCollection[SplitTotals]`` of the plan (the space the run needs,
            for a disk-full message).
        inputs: ``PCollection`` with one element, the number of inputs, with
            ``max_bad_fraction``: when the inputs the plan leaves out (rejected
            ones: inputs less planned records) are over that share, publishing
            will refuse the run, and no shard is read, made or written.
        max_bad_fraction: ``--max_bad_fraction``, or None for no limit.
        threads: Records each worker makes at once with ``to_record`` (0: one
            per usable core), for a ``to_record`` that reads or encodes images
            (``inspect_images.ImageRecordMaker``); records are still written in
            order, at most ``2 * threads`` of them made ahead.
        tally_of: item -> keys it counts towards; each ``ShardResult`` then
            carries its shard's ``(key, items)`` in ``tallies`` (the build's
            image format counts), so no separate count step is needed.
        content_of: ``(shard key, items in order) -> content key``
            (``shardset.resume.shard_content_key``): each written shard gets
            a done record, so that a rerun after an interruption may reuse it.
        done_shards: Content key -> ``ShardDone`` of the finished shards of
            interrupted runs this run resumes: a shard whose items have that
            key is moved into this run's staging once its CRC32C checks,
            instead of being written.
        file_format: ``tfrecord`` or ``array_record`` (the same records in an
            ArrayRecord file, uncompressed, no ``.idx``).
        shard_sha256: Also compute each shard's sha256 (``--shard_sha256``);
            its CRC32C always is.
    """

    def __init__(self, output_dir: str, compression: str,
                 to_record: Callable[[Any], tuple[bytes | Sequence[bytes], int | None]],
                 order_of: Callable[[Any], tuple], run_id: str, totals, threads: int = 1,
                 tally_of: Callable[[Any], Iterable[Any]] | None = None, inputs=None,
                 max_bad_fraction: float | None = None,
                 content_of: Callable[[tuple, Sequence[Any]], str] | None = None,
                 done_shards: Mapping[str, ShardDone] | None = None, file_format: str = "tfrecord",
                 shard_sha256: bool = False) -> None:
        super().__init__()
        worker_threads.thread_count(threads)  # refuses a negative count here, not on a worker
        self._args = (output_dir, compression, to_record, order_of, run_id, threads, tally_of, max_bad_fraction,
                      content_of, done_shards, file_format, shard_sha256)
        self._totals = totals
        self._inputs = inputs

    def expand(self, assigned):
        side = {} if self._inputs is None else {"inputs": beam.pvalue.AsSingleton(self._inputs,
                                                                                    default_value=0)}
        return (assigned
                | "GroupByShard" >> GroupPacked()  # (ShardKey, [item]), the items packed across the shuffle
                | "WriteShard" >> beam.ParDo(_WriteShardFn(*self._args),
                                             beam.pvalue.AsList(self._totals), **side))


class _StageDeadLettersFn(CarriesStorageOptions, beam.DoFn):
    """DeadLetter -> DeadLetterPart: each bundle's dead letters, staged in sorted parts of at most ``PART_LETTERS``."""

    def __init__(self, output_dir: str, run_id: str) -> None:
        self._output_dir = output_dir
        self._run_id = run_id

    def start_bundle(self):
        self._letters = []

    def process(self, letter):
        self._letters.append(letter)
        if len(self._letters) >= PART_LETTERS:
            yield self._stage()

    def finish_bundle(self):
        if self._letters:
            yield GlobalWindows.windowed_value(self._stage())

    def _stage(self):
        letters, self._letters = self._letters, []
        return write_dead_letter_part(letters, self._output_dir, self._run_id)


class NearDuplicateReport(NamedTuple):
    """What a build that looks for near-duplicates across splits publishes of them.

    ``mode`` is ``off`` (the set has no ``near_duplicates.jsonl``: one an
    earlier run published is removed), ``report`` or ``reject``; the
    PCollections are None with ``off``. With ``report``, a check that found
    no pair and compared every image publishes as ``off`` does.
    """

    mode: str
    distance: int = 0
    pairs: Any = None  # PCollection[NearPair]: the pairs of the copies kept (RejectDuplicateImages)
    over_cap: Any = None  # PCollection[(members, cap)] of the buckets over their cap
    unhashed: Any = None  # PCollection[str]: the images whose pixels were not hashed


def _with_near_duplicates(sidecar_files, mode: str, lines: bytes | None):
    """``sidecar_files`` plus ``near_duplicates.jsonl`` (None with ``--near_duplicates off``: removed)."""
    def files(manifest) -> dict[str, bytes | None]:
        found = dict(sidecar_files(manifest)) if sidecar_files else {}
        found[NEAR_DUPLICATES_NAME] = lines if mode != "off" else None
        return found
    return files


class MovesDone(NamedTuple):
    """What one bundle of ``MoveStaged`` renamed: the worker process (its random id) and how many files."""

    worker: str
    moves: int


class _PreparePublishFn(CarriesStorageOptions, beam.DoFn):
    """Publish up to its shard renames (``prepare_publish``): the commit record, the renames in chunks."""

    def __init__(self, output_dir: str, compression: str, manifest_fields: Mapping[str, Any],
                 max_bad_fraction: float | None, policy: PublishPolicy, sidecar_files=None,
                 image_counts=None, near: tuple[str, int] | None = None, parallel_from: int = PARALLEL_MOVES,
                 chunk: int = RENAME_CHUNK) -> None:
        self._args = (output_dir, compression, manifest_fields, max_bad_fraction, policy)
        self._sidecar_files = sidecar_files
        self._image_counts = image_counts
        self._near = near
        self._parallel = (parallel_from, chunk)

    def process(self, _, parts, totals, labels, inputs, feature_spec, *dead_lists, object_labels=(),
                near_pairs=(), over_cap=(), unhashed=()):
        output_dir, compression, fields, max_bad, policy = self._args
        dead_letters = [part for found in dead_lists for part in found]  # DeadLetterPart: a path and counts
        images = {} if self._image_counts is None else self._image_counts(
            tally for part in parts for tally in part.tallies)  # summed over each part's shards
        fields = {**fields, "feature_spec": feature_spec, "images": images,
                  "object_labels": tuple(tuple(pair) for pair in object_labels)}
        near = None  # (mode, near_duplicates.jsonl's bytes or None): its sidecar
        if self._near is not None:
            mode, distance = self._near
            lines = None
            # With report (the default), a check that found nothing and missed nothing leaves the set
            # as a build without it would (no summary, no file), but for the options it records.
            if mode == "reject" or (mode == "report" and (near_pairs or over_cap or unhashed)):
                fields["near_duplicates"] = near_duplicates_summary(mode, distance, near_pairs, over_cap,
                                                                    len(unhashed))
                lines = near_duplicates_lines(near_pairs, mode == "reject")
            near = (mode, lines)
        parallel_from, chunk = self._parallel
        args = (output_dir, parts, totals, dead_letters, labels, inputs, compression, fields, max_bad, policy)
        commit, moves = prepare_publish(*args, _sidecars(self._sidecar_files, near), parallel_from=parallel_from)
        staged = stage_commit_record(output_dir, policy.run_id, commit)  # before any rename is handed out
        for moving in move_chunks(moves, chunk):
            yield beam.pvalue.TaggedOutput(MOVES, moving)
        yield _CommitRef(output_dir, policy.run_id, staged)


class _CommitRef(NamedTuple):
    """Where the commit step finds what the prepare step decided (``stage_commit_record``): a few
    hundred bytes, however many shards the set has."""

    output_dir: str
    run_id: str
    record_path: str  # a pickled PublishCommit


def _sidecars(sidecar_files, near: tuple[str, bytes | None] | None):
    """``sidecar_files`` with ``near_duplicates.jsonl`` when the build looks for near-duplicates."""
    return sidecar_files if near is None else _with_near_duplicates(sidecar_files, *near)


class _MoveStagedFn(CarriesStorageOptions, beam.DoFn):
    """Renames chunks of staged files to their final names (``folders.move_chunk``), ``RENAME_THREADS``
    chunks at a time; a ``MovesDone`` a bundle."""

    def setup(self):
        self._pool = worker_threads.new_pool(RENAME_THREADS, "MoveStaged")

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def start_bundle(self):
        self._moved = 0
        self._work = worker_threads.OrderedWork(self._pool, worker_threads.window_for(RENAME_THREADS))

    def process(self, moves):
        self._moved += sum(self._work.submit(move_chunk, moves))
        return ()

    def finish_bundle(self):
        try:
            self._moved += sum(self._work.drain())
        finally:
            self._work.close()
        if self._moved:
            yield GlobalWindows.windowed_value(MovesDone(progress.worker_id(), self._moved))


class _CommitPublishFn(CarriesStorageOptions, beam.DoFn):
    """The rest of publish once every handed-out rename is done: ``manifest.json`` last."""

    def __init__(self) -> None:
        self._dead = Metrics.counter(_NAMESPACE, "dead_letters")
        self._processes = Metrics.counter(_NAMESPACE, MOVE_PROCESSES)

    def process(self, ref: _CommitRef, done):
        moved = sum(d.moves for d in done)
        staged = staged_commit_record(ref.record_path)
        if staged is None:  # run again after the run published: its staging, with the record, is gone
            manifest = published_already(ref.output_dir, ref.run_id)
        else:
            manifest = commit_publish(staged, moved)
        self._processes.inc(len({d.worker for d in done}))
        self._dead.inc(manifest.dead_letters)
        # The job's summary says as much, read back from the manifest: here only for --log_level DEBUG.
        _LOG.debug("published %s with %s to %s (%s renamed by %s)", plural(manifest.num_shards, "shard"),
                   plural(manifest.records, "record"), ref.output_dir, plural(moved, "file"),
                   plural(len({d.worker for d in done}), "worker process"))
        yield manifest.to_dict()


class PublishShards(beam.PTransform):
    """Publishes the written shards once all are staged.

    Applied to the pipeline (``p | PublishShards(...)``); every other input is
    a PCollection given to the constructor and read as a side input. The
    shard list's lines are staged in parts by the workers first
    (``WriteShardListParts``), and the dead letters in sorted parts
    (``StageDeadLetters``); the publish step's side inputs are those parts
    (paths and counts, one per ``PART_SHARDS`` shards) and counts, never
    one element per shard.

    Three steps: ``PreparePublish`` runs once (checks, the new set's files
    staged, the journal written) and, for a set with ``parallel_from`` or
    more shard renames, deletes the old manifest and hands them out in
    chunks of ``RENAME_CHUNK``; ``MoveStaged`` renames them on every worker
    (after ``SpreadMoves``); ``CommitPublish`` runs once, given the commit
    record and how many files each bundle renamed, checks that all were,
    and carries out the rest of the journal, ``manifest.json`` last. A set
    with fewer shard renames has them all done by ``CommitPublish`` (the
    graph is the same).
    Output: ``PCollection[dict]`` with ``manifest.json``'s object.

    Args:
        output_dir: Output folder.
        compression: Shard compression.
        manifest_fields: ``created_by``, ``options``, ``seed``.
        max_bad_fraction: Bad-input limit, or None.
        policy: The run's id and how it treats what the folder already holds.
        results: ``PCollection[ShardResult]``.
        totals: ``PCollection[SplitTotals]``.
        dead_letters: ``PCollection[DeadLetter]``, or a tuple of them (none:
            an empty tuple).
        labels: ``PCollection`` with one element, the class list (none: []).
        inputs: ``PCollection`` with one element, the number of inputs (none: 0).
        feature_spec: ``PCollection`` with one element, feature name -> kind
            (none: {}).
        image_counts: Picklable ``iterable of (key, items) -> the manifest's
            images object`` (``records.image_counts``), given the ``tallies`` of
            every ``ShardResult`` summed per shard-list part; None for no image counts.
        sidecar_files: Optional picklable ``Manifest -> {name: bytes}`` of
            further files to publish beside the shards (``publish_shards``).
        object_labels: Optional ``PCollection`` with one element, the
            ``(id, name)`` of the object classes (the manifest's ``object_labels``).
        near_duplicates: Optional ``NearDuplicateReport``: the manifest's
            ``near_duplicates`` counts and ``near_duplicates.jsonl``, one line
            per pair (``near_duplicates.near_duplicates_lines``).
        parallel_from: Shard renames from which the workers do them (default
            ``folders.PARALLEL_MOVES``); fewer are done by the commit step.
    """

    def __init__(self, output_dir: str, compression: str, manifest_fields: Mapping[str, Any],
                 max_bad_fraction: float | None, policy: PublishPolicy, *, results, totals,
                 dead_letters, labels, inputs, feature_spec, image_counts=None,
                 sidecar_files=None, object_labels=None,
                 near_duplicates: NearDuplicateReport | None = None,
                 parallel_from: int | None = None) -> None:
        super().__init__()
        self._parallel = (PARALLEL_MOVES if parallel_from is None else parallel_from, RENAME_CHUNK)
        near = None if near_duplicates is None else (near_duplicates.mode, near_duplicates.distance)
        self._args = (output_dir, compression, manifest_fields, max_bad_fraction, policy, sidecar_files,
                      image_counts, near)
        self._inputs = (results, totals, dead_letters, labels, inputs, feature_spec)
        self._object_labels = object_labels
        self._near = near_duplicates

    def expand(self, pbegin):
        results, totals, dead, labels, inputs, spec = self._inputs
        output_dir, run_id = self._args[0], self._args[4].run_id
        AsList, AsSingleton = beam.pvalue.AsList, beam.pvalue.AsSingleton
        parts = (results
                 | "KeyByListPart" >> beam.Map(part_key)  # ((split, part), ShardResult)
                 | "GroupListParts" >> beam.GroupByKey()  # ((split, part), [ShardResult])
                 | "WriteShardListParts" >> beam.Map(write_shard_list_part, output_dir, run_id))  # ShardListPart
        dead = dead if isinstance(dead, (tuple, list)) else (dead,)
        dead_parts = [found | f"StageDeadLetters{i}" >> beam.ParDo(_StageDeadLettersFn(output_dir, run_id))
                      for i, found in enumerate(dead)]  # DeadLetterPart, in the steps that reject
        side = {} if self._object_labels is None else {
            "object_labels": AsSingleton(self._object_labels, default_value=())}
        if self._near is not None and self._near.mode != "off":
            side.update(near_pairs=AsList(self._near.pairs), over_cap=AsList(self._near.over_cap),
                        unhashed=AsList(self._near.unhashed))
        prepared = (pbegin
                    | "Once" >> beam.Create([None])
                    | "PreparePublish" >> beam.ParDo(
                        _PreparePublishFn(*self._args, *self._parallel),
                        AsList(parts), AsList(totals), AsSingleton(labels, default_value=[]),
                        AsSingleton(inputs, default_value=0), AsSingleton(spec, default_value={}),
                        *[AsList(found) for found in dead_parts], **side).with_outputs(MOVES, main="commit"))
        done = (prepared[MOVES]  # chunks of RENAME_CHUNK (staged, final, sha256): none for a small set
                | "SpreadMoves" >> beam.Reshuffle()
                | "MoveStaged" >> beam.ParDo(_MoveStagedFn()))  # MovesDone, one a bundle
        return prepared.commit | "CommitPublish" >> beam.ParDo(_CommitPublishFn(),
                                                                AsList(done))  # manifest.json's object
