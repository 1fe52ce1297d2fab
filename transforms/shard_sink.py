"""The shard sink: write each planned shard once, then publish them all atomically (docs/code-layout.md).

Shards are staged under unique names (only the attempt Beam commits reaches publishing);
``storage.publish`` never lets ``manifest.json`` name a missing or partial file.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import logging
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from transforms import worker_threads
from transforms.progress import counters as progress
from transforms.progress.report import plural
from transforms.shardset.dead_letters import PART_LETTERS, too_many_rejected
from transforms.shardset.manifest_extras import ManifestExtras, Sidecars, as_extras, with_files
from transforms.shardset.ownership import PublishPolicy
from transforms.shardset.resume import ShardDone
from transforms.shardset.staged import ShardResult, part_key
from transforms.storage.dead_letter_files import write_dead_letter_part
from transforms.storage.folders import PARALLEL_MOVES, RENAME_CHUNK, RENAME_THREADS, move_chunk, move_chunks
from transforms.storage.publish import (commit_publish, prepare_publish, published_already, stage_commit_record,
                                        staged_commit_record)
from transforms.packed_groups import GroupPacked
from transforms.plan_shards import LeadRecords
from transforms.storage.resume_files import adopt_shard, record_done_shard
from transforms.storage.shard_files import lead_records, write_shard, write_shard_list_part
from transforms.tfrecord.framing import framed_size
from transforms.tfrecord.run_files import FramedRecord
from transforms.worker_options import CarriesStorageOptions, StageInPartsFn

__all__ = ["WriteShards", "PublishShards", "ShardOutput", "ShardRecords", "ShardReuse", "PublishInputs", "ExtrasFrom",
           "REUSED_SHARDS", "MOVE_PROCESSES", "MOVES", "MovesDone"]

_LOG = logging.getLogger(__name__)
_NAMESPACE = "shard_sink"
# Counter of the finished shards of an interrupted run that a resumed run published as they were.
REUSED_SHARDS = "shards_reused"
# Counter of the worker processes (``counters.worker_id``) that renamed a publish's staged files.
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


@dataclasses.dataclass(frozen=True)
class ShardOutput:
    """Where a shard set is written and how its files are made.

    Attributes:
        output_dir: Final output folder (staging lives inside it).
        compression: ``none``, ``gzip`` or ``zlib``.
        file_format: ``tfrecord`` or ``array_record`` (uncompressed, no ``.idx``).
        shard_sha256: Also compute each shard's sha256 (``--shard_sha256``).
    """

    output_dir: str
    compression: str = "none"
    file_format: str = "tfrecord"
    shard_sha256: bool = False


@dataclasses.dataclass(frozen=True)
class ShardRecords:
    """How a shard's items become its records.

    Attributes:
        to_record: item -> (serialized record, a sequence of its pieces, or a ``FramedRecord``; label
            index or None). Its ``plan(items)`` and ``close()``, if any, are called before and after each shard.
        order_of: item -> sort key; the write order within a shard.
        threads: Records each worker makes at once (0: one per usable core); still written in order.
        tally_of: item -> keys it counts towards, summed per shard in ``ShardResult.tallies``.
    """

    to_record: Callable[[Any], tuple[bytes | Sequence[bytes], int | None]]
    order_of: Callable[[Any], tuple]
    threads: int = 1
    tally_of: Callable[[Any], Iterable[Any]] | None = None


@dataclasses.dataclass(frozen=True)
class ShardReuse:
    """The finished shards of interrupted runs a resumed run may publish as they are.

    Attributes:
        content_of: ``(shard key, items in order) -> content key`` (``shardset.resume.shard_content_key``).
        done_shards: Content key -> ``ShardDone`` of a finished shard, adopted instead of written.
    """

    content_of: Callable[[tuple, Sequence[Any]], str]
    done_shards: Mapping[str, ShardDone] = dataclasses.field(default_factory=dict)


class _WriteShardFn(CarriesStorageOptions, beam.DoFn):
    """(ShardKey, [item]) -> ShardResult, writing the shard's records in order."""

    def __init__(self, output: ShardOutput, records: ShardRecords, run_id: str,
                 max_bad_fraction: float | None = None, reuse: ShardReuse | None = None) -> None:
        self._output = output
        self._records_of = records
        self._run_id = run_id
        self._max_bad_fraction = max_bad_fraction
        self._reuse = reuse
        self._reused = Metrics.counter(_NAMESPACE, REUSED_SHARDS)
        self._records = Metrics.counter(_NAMESPACE, "records_written")
        self._bytes = Metrics.counter(_NAMESPACE, "bytes_written")
        self._shards = Metrics.counter(_NAMESPACE, "shards_written")

    def setup(self):
        threads = worker_threads.thread_count(self._records_of.threads)
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
        key, grouped = keyed
        leads, items = [], []
        for item in grouped:  # read once: each read of packed items decodes every one
            (leads if isinstance(item, LeadRecords) else items).append(item)
        items.sort(key=self._records_of.order_of)
        # A shard that starts with a published shard's records (appending) is not resumed.
        reuse = self._reuse
        content = reuse.content_of(key, items) if reuse is not None and not leads else None
        done = reuse.done_shards.get(content) if content is not None else None
        result = adopt_shard(done, self._output.output_dir, self._run_id) if done is not None else None
        reused = result is not None
        if reused:  # an interrupted run's finished shard, its sha256 checked again
            self._reused.inc()
            progress.note(progress.RECORDS_WRITTEN, result.stats.records, result.stats.bytes)
        else:
            result = self._write_records(key, items, leads, totals)
            if content is not None:
                record_done_shard(content, result)
        tally_of = self._records_of.tally_of
        if tally_of is not None:
            tallies = collections.Counter(key for item in items for key in tally_of(item))
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
        to_record, output = self._records_of.to_record, self._output
        plan = getattr(to_record, "plan", None)
        if plan is not None:
            plan(items)  # the records it will copy: neighbours in a run file are read together
        made = worker_threads.ordered_map(to_record, items, self._pool, self._window)
        records = _counted(made, written)  # the progress report counts the run's own records
        if leads:  # appending: the merged published shard's records come first
            split_totals = next(t for t in totals if t.split == key[0])
            records = itertools.chain(lead_records(output.output_dir, split_totals, key[1], output.compression),
                                      records)
        try:
            result = write_shard(output.output_dir, key, records, output.compression, self._run_id, planned,
                                 output.file_format, sha256=output.shard_sha256)
        finally:
            made.close()  # an error while writing: the records still being made are dropped
            close = getattr(to_record, "close", None)
            if close is not None:
                close()  # files it keeps open (run files) are not held between shards
        written.flush()
        return result


class WriteShards(beam.PTransform):
    """Writes every planned shard to staging.

    Input: ``PCollection[(ShardKey, item)]`` (from ``PlanShards``).
    Output: ``PCollection[ShardResult]``.

    Args:
        run_id: The run's id (its staging folder).
        totals: ``PCollection[SplitTotals]`` of the plan (for a disk-full message).
        inputs: ``PCollection`` with one element, the number of inputs: when those the plan leaves
            out are over ``max_bad_fraction`` (None: no limit), publishing will refuse the run, so
            no shard is written.
        reuse: The finished shards of interrupted runs this run resumes, or None.
    """

    def __init__(self, output: ShardOutput, records: ShardRecords, run_id: str, totals, *, inputs=None,
                 max_bad_fraction: float | None = None, reuse: ShardReuse | None = None) -> None:
        super().__init__()
        worker_threads.thread_count(records.threads)  # refuses a negative count here, not on a worker
        self._fn = _WriteShardFn(output, records, run_id, max_bad_fraction, reuse)
        self._totals = totals
        self._inputs = inputs

    def expand(self, assigned):
        side = {} if self._inputs is None else {"inputs": beam.pvalue.AsSingleton(self._inputs, default_value=0)}
        return (assigned
                | "GroupByShard" >> GroupPacked()  # (ShardKey, [item]), the items packed across the shuffle
                | "WriteShard" >> beam.ParDo(self._fn, beam.pvalue.AsList(self._totals), **side))


def _stage_dead_letters(letters: list, output_dir: str, run_id: str):
    """``write_dead_letter_part``, looked up on the worker when called (tests record it)."""
    return write_dead_letter_part(letters, output_dir, run_id)


def _singleton(found, default: Any) -> Any:
    """A side input of the one element of ``found``, or ``default`` itself where ``found`` is None."""
    return default if found is None else beam.pvalue.AsSingleton(found, default_value=default)


class MovesDone(NamedTuple):
    """What one bundle of ``MoveStaged`` renamed: the worker process (``counters.worker_id``) and how many files."""

    worker: str
    moves: int


@dataclasses.dataclass(frozen=True)
class PublishInputs:
    """The PCollections a publish reads, each as a side input of its one prepare step.

    Attributes:
        results: ``PCollection[ShardResult]`` (``WriteShards``).
        totals: ``PCollection[SplitTotals]`` of the plan.
        dead_letters: ``PCollection[DeadLetter]``, or a tuple of them (none: an empty tuple).
        labels, inputs, feature_spec: ``PCollection`` with one element, the class list, the number
            of inputs, feature name -> kind (None: [], 0, {}).
    """

    results: Any
    totals: Any
    dead_letters: Any = ()
    labels: Any = None
    inputs: Any = None
    feature_spec: Any = None


@dataclasses.dataclass(frozen=True)
class ExtrasFrom:
    """Manifest extras made in the publish step itself from side inputs: ``make(**views)`` (one stage fewer).

    Attributes:
        make: Picklable; given each view's value by its name, returns a ``ManifestExtras`` or a
            mapping of manifest fields.
        views: Name -> side input (``beam.pvalue.AsSingleton``, ``AsList``).
    """

    make: Callable[..., ManifestExtras | Mapping[str, Any]]
    views: Mapping[str, Any]


# The publish step's keyword side inputs of ``ExtrasFrom.views`` start with this.
_VIEW = "extras_"


class _PreparePublishFn(CarriesStorageOptions, beam.DoFn):
    """Publish up to its shard renames (``prepare_publish``): the commit record, the renames in chunks."""

    def __init__(self, output: ShardOutput, policy: PublishPolicy, manifest_fields: Mapping[str, Any],
                 max_bad_fraction: float | None, sidecars: Sidecars | None = None,
                 parallel: tuple[int, int] = (PARALLEL_MOVES, RENAME_CHUNK),
                 make_extras: Callable[..., ManifestExtras | Mapping[str, Any]] | None = None) -> None:
        self._make_extras = make_extras  # ExtrasFrom.make, given the views
        self._output = output
        self._policy = policy
        self._fields = dict(manifest_fields)
        self._max_bad_fraction = max_bad_fraction
        self._sidecars = sidecars
        self._parallel = parallel  # (renames from which the workers do them, renames a chunk)

    def process(self, _, parts, totals, labels, inputs, feature_spec, *dead_lists, **views):
        output_dir, policy = self._output.output_dir, self._policy
        dead_letters = [part for found in dead_lists for part in found]  # DeadLetterPart: a path and counts
        extras = as_extras(None if self._make_extras is None else self._make_extras(
            **{name[len(_VIEW):]: value for name, value in views.items()}))
        fields = {**self._fields, "feature_spec": feature_spec, "images": {}, "object_labels": (),
                  **extras.manifest_fields(tally for part in parts for tally in part.tallies)}  # summed per part
        commit, moves = prepare_publish(output_dir, parts, totals, dead_letters, labels, inputs,
                                        self._output.compression, fields, self._max_bad_fraction, policy,
                                        with_files(self._sidecars, extras.files), parallel_from=self._parallel[0])
        staged = stage_commit_record(output_dir, policy.run_id, commit)  # before any rename is handed out
        for moving in move_chunks(moves, self._parallel[1]):
            yield beam.pvalue.TaggedOutput(MOVES, moving)
        yield _CommitRef(output_dir, policy.run_id, staged)


class _CommitRef(NamedTuple):
    """Where the commit step finds what the prepare step decided (``stage_commit_record``)."""

    output_dir: str
    run_id: str
    record_path: str  # a pickled PublishCommit


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
        # None: run again after the run published, its staging, with the record, is gone
        manifest = published_already(ref.output_dir, ref.run_id) if staged is None else commit_publish(staged, moved)
        processes = len({d.worker for d in done})
        self._processes.inc(processes)
        self._dead.inc(manifest.dead_letters)
        _LOG.debug("published %s with %s to %s (%s renamed by %s)", plural(manifest.num_shards, "shard"),
                   plural(manifest.records, "record"), ref.output_dir, plural(moved, "file"),
                   plural(processes, "worker process"))
        yield manifest.to_dict()


class PublishShards(beam.PTransform):
    """Publishes the written shards once all are staged.

    Applied to the pipeline (``p | PublishShards(...)``); every other input is read as a side
    input. The shard list and the dead letters are staged in parts by the workers, never one
    element per shard. ``PreparePublish`` runs once and, from ``parallel_from`` shard renames
    (default ``folders.PARALLEL_MOVES``), hands them out in chunks to ``MoveStaged`` on every
    worker; ``CommitPublish`` runs once and finishes, ``manifest.json`` last.
    Output: ``PCollection[dict]`` with ``manifest.json``'s object.

    Args:
        manifest_fields: ``created_by``, ``options``, ``seed``, ``file_format``.
        sidecars: Optional picklable ``Manifest -> {name: bytes or None}`` of further files to
            publish beside the shards (None: removed if present).
    """

    def __init__(self, output: ShardOutput, policy: PublishPolicy, inputs: PublishInputs,
                 manifest_fields: Mapping[str, Any], *, max_bad_fraction: float | None = None,
                 manifest_extras: ExtrasFrom | None = None, sidecars: Sidecars | None = None,
                 parallel_from: int | None = None) -> None:
        super().__init__()
        self._prepare = _PreparePublishFn(output, policy, manifest_fields, max_bad_fraction, sidecars,
                                          (PARALLEL_MOVES if parallel_from is None else parallel_from, RENAME_CHUNK),
                                          manifest_extras.make if manifest_extras is not None else None)
        self._output_dir, self._run_id = output.output_dir, policy.run_id
        self._inputs = inputs
        views = manifest_extras.views if manifest_extras is not None else {}
        self._views = {f"{_VIEW}{name}": view for name, view in views.items()}

    def expand(self, pbegin):
        found, output_dir, run_id = self._inputs, self._output_dir, self._run_id
        AsList = beam.pvalue.AsList
        parts = (found.results
                 | "KeyByListPart" >> beam.Map(part_key)  # ((split, part), ShardResult)
                 | "GroupListParts" >> beam.GroupByKey()  # ((split, part), [ShardResult])
                 | "WriteShardListParts" >> beam.Map(write_shard_list_part, output_dir, run_id))  # ShardListPart
        dead = found.dead_letters if isinstance(found.dead_letters, (tuple, list)) else (found.dead_letters,)
        stage = functools.partial(_stage_dead_letters, output_dir=output_dir, run_id=run_id)
        dead_parts = [letters | f"StageDeadLetters{i}" >> beam.ParDo(StageInPartsFn(stage, PART_LETTERS))
                      for i, letters in enumerate(dead)]  # DeadLetterPart, in the steps that reject
        prepared = (pbegin
                    | "Once" >> beam.Create([None])
                    | "PreparePublish" >> beam.ParDo(
                        self._prepare, AsList(parts), AsList(found.totals),
                        _singleton(found.labels, []), _singleton(found.inputs, 0),
                        _singleton(found.feature_spec, {}), *[AsList(letters) for letters in dead_parts],
                        **self._views).with_outputs(MOVES, main="commit"))
        done = (prepared[MOVES]  # chunks of RENAME_CHUNK (staged, final, sha256): none for a small set
                | "SpreadMoves" >> beam.Reshuffle()
                | "MoveStaged" >> beam.ParDo(_MoveStagedFn()))  # MovesDone, one a bundle
        return prepared.commit | "CommitPublish" >> beam.ParDo(_CommitPublishFn(),
                                                                AsList(done))  # manifest.json's object
