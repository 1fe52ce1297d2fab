"""The shard sink: write each planned shard once, then publish them all atomically.

``WriteShards`` groups records by shard and writes every shard with one worker
to a unique staging name (a retried or speculative bundle writes its own copy;
only the attempt Beam commits reaches the publish step). ``PublishShards`` runs
once, after every shard is written, and makes the result visible in an order
that never lets ``manifest.json`` name a missing or partial file:

0. check that the folder's lock still holds this run, and that the splits of
   the previous manifest this run does not write (kept splits) are still as
   listed; refuse otherwise, having changed nothing;
1. write ``dead_letters.jsonl``; refuse to publish if too many inputs were bad;
2. write the journal (``.publishing.json``: every file the tool owns in the
   folder, old and new), then delete the old ``manifest.json`` (from here on,
   no manifest is present, and the journal says which files are the tool's);
3. rename staged shards and ``.idx`` files to their final names (in
   parallel: a pool of ``RENAME_THREADS`` threads over chunks of files);
4. delete the files of earlier runs that the new set does not have: only
   files the previous manifest (or journal) lists, and, with
   ``--overwrite_unlisted_shards``, other shard-named files;
5. write ``labels.txt`` and the shard list ``shards.jsonl`` (streamed: the
   parts the workers wrote, ``WriteShardListParts``, joined in order, and the
   kept splits' lines), check the lock again, write ``manifest.json`` (new
   splits and kept ones; it names ``shards.jsonl`` with its sha256), delete
   the journal and clear the staging folder.

Nothing the publish step holds grows with shards x labels: it iterates the
written shards lazily (``AsIter``, without their label counts), keeps one
small entry per shard and the splits' label totals, and copies the shard
list from the staged parts line by line.

Every file is written under a temporary name in the run's staging folder
(``.staging/<run id>/``) and then renamed into place, so a crash leaves no
temporary file beside the shards. Running out of space while writing fails
with one line naming the folder and the space the run's shards need.

A crash anywhere leaves either no manifest or a complete one; rerunning the
job into the same folder converges on the same bytes.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import hashlib
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms import beam_compat, worker_threads
from transforms.errors import ManifestError, PublishError, UsageError
from transforms.file_access import naming_s3_errors
from transforms.output_folder import (STAGING_DIR, check_lock, check_own_folders, delete_tree,
                                      folder_state, free_bytes, open_lines, staging_folder)
from transforms.progress import counters as progress
from transforms.tfrecord.framing import framed_size
from transforms.shardset.dead_letters import DeadLetter, too_many_rejected
from transforms.shardset.manifest import (DEAD_LETTERS_NAME, LABELS_NAME, MANIFEST_NAME, SHARDS_NAME,
                                          Manifest, ShardEntry, ShardsFile, SplitCounts, SplitEntry)
from transforms.shardset.shard_list import LineDigest, read_shard_list, shard_line
from transforms.shardset.ownership import (JOURNAL_NAME, Journal, PublishPolicy, files_to_remove,
                                           kept_split_problem, kept_splits, merge_labels)
from transforms.shardset.replacing import input_values, kept_built_from, replace_problem
from transforms.plan_shards import ShardKey
from transforms.shardset.planning import MIB, SplitTotals
from transforms.shardset.naming import join_path, shard_file_name
from transforms.tfrecord.run_files import FramedRecord
from transforms.tfrecord.shard_writer import ShardStats, ShardWriter
from transforms.tfrecord.record_index import INDEX_DIR, index_name, index_names

__all__ = ["WriteShards", "PublishShards", "ShardResult", "ShardListPart", "STAGING_DIR", "publish_shards",
           "write_shard_list_part", "rejection_details"]

_LOG = logging.getLogger(__name__)
# Metrics of the sink, the same for every job that writes shards (build, reshard).
_NAMESPACE = "shard_sink"
# Kept splits are hashed again (sha256 against the manifest) when their shards add up to at
# most this many bytes; larger ones are checked by size only (verify_shards reads them all).
KEPT_SHA256_BUDGET = 1 << 30
# Shards per staged part of the shard list (a part holds their label counts in one worker).
PART_SHARDS = 1000
# Threads renaming staged files at once, and files per rename call (gs:// and s3:// copy and
# delete each object; a call renames its files one batch request at a time).
RENAME_THREADS = 16
RENAME_CHUNK = 100


@dataclass(frozen=True)
class ShardResult:
    """A shard written to its staging name, waiting to be published."""

    split: str
    index: int
    count: int
    file: str
    staged: str
    staged_index: str | None
    stats: ShardStats
    tallies: tuple[tuple[Any, int], ...] = ()  # (key, items) of WriteShards' tally_of, sorted


@dataclass(frozen=True)
class ShardListPart:
    """Lines of the shard list for up to ``PART_SHARDS`` shards of a split, staged by a worker.

    Attributes:
        split: The split.
        part: Its shards ``part * PART_SHARDS`` up to the next part's first.
        path: The staged file: one line per written shard, in index order.
        indexes: The shard indexes it has lines for, ascending.
        label_counts: Label -> records over those shards.
    """

    split: str
    part: int
    path: str
    indexes: tuple[int, ...]
    label_counts: Mapping[str, int]


def no_space_message(output_dir: str, path: str, needed: int | None) -> str:
    """One line for a write that ran out of space: the folder, what the run needs, what is free."""
    free = free_bytes(output_dir)
    need = f"this run's shards need about {needed / MIB:.1f} MiB" if needed else "free some space"
    have = f"; {free / MIB:.1f} MiB were free when writing failed" if free is not None else ""
    return (f"no space left in {output_dir} writing {path}: {need}{have}; the run's staged files "
            "were removed")


def write_shard(output_dir: str, key: ShardKey,
                records: Iterable[tuple[bytes | Sequence[bytes], int | None]],
                compression: str, run_id: str, planned_bytes: int | None = None) -> ShardResult:
    """Writes one shard's records, in order, to a unique name in the run's staging folder.

    A record is its bytes, a sequence of pieces whose concatenation is its bytes,
    or a ``FramedRecord`` (its bytes already framed, copied as they are).

    Raises:
        PublishError: The disk is full (the message names the folder and the
            space the run's shards need, ``planned_bytes``).
    """
    split, index, count = key
    name = shard_file_name(split, index, count, compression)
    attempt = uuid.uuid4().hex
    staging = staging_folder(output_dir, run_id)
    staged = join_path(staging, f"{name}.{attempt}.tmp")
    staged_index = join_path(staging, f"{name}.idx.{attempt}.tmp") if compression == "none" else None
    try:
        with naming_s3_errors(staged):
            fh = FileSystems.create(staged, compression_type="uncompressed")
            index_fh = FileSystems.create(staged_index, compression_type="uncompressed") if staged_index else None
            try:
                writer = ShardWriter(fh, compression, index_fh)
                for record, label in records:
                    if isinstance(record, FramedRecord):  # copied from a run file as it is
                        writer.write_framed(record.data, label)
                    elif isinstance(record, bytes):
                        writer.write(record, label)
                    else:  # the pieces a record is made of, written without joining them
                        writer.write_parts(record, label)
                stats = writer.close()
            finally:
                beam_compat.close_written_file(fh)
                if index_fh is not None:
                    beam_compat.close_written_file(index_fh)
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise PublishError(no_space_message(output_dir, staged, planned_bytes)) from err
        raise
    return ShardResult(split, index, count, name, staged, staged_index, stats)


def _counted(records: Iterable[tuple[bytes | Sequence[bytes], int | None]],
             tally: progress.Tally) -> Iterator[tuple[bytes | Sequence[bytes], int | None]]:
    """Passes the records on, counting each one and its framed size in ``tally``."""
    for record, label in records:
        if isinstance(record, FramedRecord):
            tally.add(1, len(record.data))
        else:
            tally.add(1, framed_size(len(record) if isinstance(record, bytes) else sum(len(p) for p in record)))
        yield record, label


class _WriteShardFn(beam.DoFn):
    """(ShardKey, [item]) -> ShardResult, writing the shard's records in order."""

    def __init__(self, output_dir: str, compression: str,
                 to_record: Callable[[Any], tuple[bytes | Sequence[bytes], int | None]],
                 order_of: Callable[[Any], tuple], run_id: str, threads: int = 1,
                 tally_of: Callable[[Any], Iterable[Any]] | None = None,
                 max_bad_fraction: float | None = None) -> None:
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
        items = sorted(items, key=self._order_of)
        planned = sum(t.total_bytes for t in totals)
        written = progress.Tally(progress.RECORDS_WRITTEN, every=16)
        made = worker_threads.ordered_map(self._to_record, items, self._pool, self._window)
        try:
            result = write_shard(self._output_dir, key, _counted(made, written),
                                 self._compression, self._run_id, planned)
        finally:
            made.close()  # an error while writing: the records still being made are dropped
            close = getattr(self._to_record, "close", None)
            if close is not None:
                close()  # files it keeps open (run files) are not held between shards
        if self._tally_of is not None:
            tallies = collections.Counter(key for item in items for key in self._tally_of(item))
            result = dataclasses.replace(result, tallies=tuple(sorted(tallies.items())))
        written.flush()
        self._records.inc(result.stats.records)
        self._bytes.inc(result.stats.bytes)
        self._shards.inc()
        _LOG.info("wrote shard %s: %d records, %.1f MiB", result.file, result.stats.records,
                  result.stats.bytes / 2**20)
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
            once no record of it is being made (files it keeps open are closed).
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
            (``build_steps.ImageRecordMaker``); records are still written in
            order, at most ``2 * threads`` of them made ahead.
        tally_of: item -> keys it counts towards; each ``ShardResult`` then
            carries its shard's ``(key, items)`` in ``tallies`` (the build's
            image format counts), so no separate count step is needed.
    """

    def __init__(self, output_dir: str, compression: str,
                 to_record: Callable[[Any], tuple[bytes | Sequence[bytes], int | None]],
                 order_of: Callable[[Any], tuple], run_id: str, totals, threads: int = 1,
                 tally_of: Callable[[Any], Iterable[Any]] | None = None, inputs=None,
                 max_bad_fraction: float | None = None) -> None:
        super().__init__()
        worker_threads.thread_count(threads)  # refuses a negative count here, not on a worker
        self._args = (output_dir, compression, to_record, order_of, run_id, threads, tally_of, max_bad_fraction)
        self._totals = totals
        self._inputs = inputs

    def expand(self, assigned):
        side = {} if self._inputs is None else {"inputs": beam.pvalue.AsSingleton(self._inputs,
                                                                                    default_value=0)}
        return (assigned
                | "GroupByShard" >> beam.GroupByKey()  # (ShardKey, [item])
                | "WriteShard" >> beam.ParDo(_WriteShardFn(*self._args),
                                             beam.pvalue.AsList(self._totals), **side))


def _write_atomic(path: str, data: bytes | Iterable[bytes], staging: str) -> None:
    """Writes ``path`` through a temporary file in ``staging`` and a rename.

    ``data`` is the bytes, or pieces written one after the other (never
    joined). A crash before the rename leaves the temporary file in the
    staging folder, which the next publish clears, not beside the shards.
    """
    temp = join_path(staging, f"{path.rsplit('/', 1)[-1]}.{uuid.uuid4().hex}.tmp")
    try:
        with naming_s3_errors(temp):
            fh = FileSystems.create(temp, compression_type="uncompressed")
            try:
                for piece in [data] if isinstance(data, bytes) else data:
                    fh.write(piece)
            finally:
                beam_compat.close_written_file(fh)
    except OSError as err:
        if err.errno == errno.ENOSPC:
            size = len(data) if isinstance(data, bytes) else None
            raise PublishError(no_space_message(path.rsplit("/", 1)[0], temp, size)) from err
        raise
    FileSystems.rename([temp], [path])


def _sha256_of(path: str) -> str:
    sha = hashlib.sha256()
    with FileSystems.open(path, compression_type="uncompressed") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _rename(pairs: Sequence[tuple[str, str]]) -> None:
    FileSystems.rename([staged for staged, _ in pairs], [final for _, final in pairs])


def _move_all(staging: str, moves: Sequence[tuple[str, str, str | None]]) -> None:
    """Renames staged files to their final names, ``RENAME_THREADS`` chunks at a time.

    Returns once every rename is done (or raises the first failure after
    the others ended). On a retried publish, a staged file may already have
    been moved: then its final name must hold it (checked by sha256 where known).

    Args:
        staging: The staging folder (listed once to see what is still there).
        moves: ``(staged path, final path, sha256 or None)`` per file.
    """
    present = {m.path.rsplit("/", 1)[-1] for m in FileSystems.match([staging + "/**"])[0].metadata_list}
    pending = [(staged, final) for staged, final, _ in moves if staged.rsplit("/", 1)[-1] in present]
    chunks = [pending[i:i + RENAME_CHUNK] for i in range(0, len(pending), RENAME_CHUNK)]
    if len(chunks) == 1:
        _rename(chunks[0])
    elif chunks:
        with ThreadPoolExecutor(max_workers=min(RENAME_THREADS, len(chunks))) as pool:
            for done in [pool.submit(_rename, chunk) for chunk in chunks]:
                done.result()
    for staged, final, sha256 in moves:
        if staged.rsplit("/", 1)[-1] in present:
            continue
        if not FileSystems.exists(final) or (sha256 is not None and _sha256_of(final) != sha256):
            raise PublishError(f"staged file {staged} is gone and {final} does not hold it")


def _delete_if_exists(paths: Sequence[str]) -> None:
    present = [p for p in paths if FileSystems.exists(p)]
    if present:
        FileSystems.delete(present)


def _check_kept(output_dir: str, kept: Mapping[str, SplitEntry], state, compression: str,
                feature_spec: Mapping[str, str]) -> str | None:
    """Why the kept splits cannot be listed again (one line), or None.

    Sizes are checked always; sha256 too when the kept shards add up to at
    most ``KEPT_SHA256_BUDGET`` bytes (reading more would cost as much as the run).
    """
    for split in sorted(kept.values(), key=lambda s: s.name):
        problem = kept_split_problem(split, state.present, state.manifest, compression, feature_spec)
        if problem:
            return problem
    if sum(split.bytes for split in kept.values()) > KEPT_SHA256_BUDGET:
        _LOG.info("kept splits %s checked by size only; verify_shards checks their bytes",
                  ", ".join(sorted(kept)))
        return None
    for split in sorted(kept.values(), key=lambda s: s.name):
        for shard in split.shards:
            if _sha256_of(join_path(output_dir, shard.file)) != shard.sha256:
                return (f"split {split.name!r}: {shard.file} no longer has the sha256 manifest.json "
                        f"lists: rebuild split {split.name!r} too, or pass --drop_other_splits "
                        "to remove it")
    return None


def rejection_details(dead_letters: Sequence[DeadLetter], examples: int = 3) -> list[str]:
    """Lines saying why inputs were rejected: the count per reason, then a few examples.

    The examples are the first dead letter (by path) of each of the most
    frequent reasons, then further ones, up to ``examples`` lines.
    """
    counts = collections.Counter(d.reason for d in dead_letters)
    ranked = sorted(counts, key=lambda r: (-counts[r], r))
    lines = ["  rejected by reason: " + ", ".join(f"{r} {counts[r]}" for r in ranked)]
    ordered = sorted(dead_letters, key=lambda d: d.path)
    firsts = [next(d for d in ordered if d.reason == r) for r in ranked]
    chosen = (firsts + [d for d in ordered if d not in firsts])[:examples]
    lines += [f"  e.g. {d.path}: {d.reason}: {d.error}" for d in chosen]
    return lines


def write_shard_list_part(item: tuple[tuple[str, int], Iterable[ShardResult]], output_dir: str,
                          run_id: str) -> ShardListPart:
    """Stages the shard-list lines of one part's written shards, in index order.

    Args:
        item: ``((split, part), [ShardResult])``.
        output_dir: Output folder (the part goes to the run's staging folder).
        run_id: The run's id.
    """
    (split, part), results = item
    results = sorted(results, key=lambda r: r.index)
    path = join_path(staging_folder(output_dir, run_id), f"{SHARDS_NAME}.{split}.{part}.{uuid.uuid4().hex}.tmp")
    totals: dict[str, int] = {}
    for result in results:
        for label, count in result.stats.label_counts.items():
            totals[label] = totals.get(label, 0) + count
    lines = (shard_line(split, r.index, ShardEntry(r.file, r.stats.records, r.stats.bytes, r.stats.sha256,
                                                   r.stats.label_counts)) for r in results)
    _write_to(path, lines, output_dir)
    return ShardListPart(split, part, path, tuple(r.index for r in results), totals)


def _write_to(path: str, pieces: Iterable[bytes], output_dir: str) -> None:
    try:
        with naming_s3_errors(path):
            fh = FileSystems.create(path, compression_type="uncompressed")
            try:
                for piece in pieces:
                    fh.write(piece)
            finally:
                beam_compat.close_written_file(fh)
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise PublishError(no_space_message(output_dir, path, None)) from err
        raise


def _part_key(result: ShardResult) -> tuple[tuple[str, int], ShardResult]:
    return (result.split, result.index // PART_SHARDS), result


def _without_label_counts(result: ShardResult) -> ShardResult:
    return dataclasses.replace(result, stats=dataclasses.replace(result.stats, label_counts={}))


@dataclass(frozen=True)
class _Staged:
    """What publishing needs of a written shard (no label counts)."""

    file: str
    staged: str
    staged_index: str | None
    records: int
    bytes: int
    sha256: str

    @classmethod
    def of(cls, result: ShardResult) -> "_Staged":
        return cls(result.file, result.staged, result.staged_index, result.stats.records,
                   result.stats.bytes, result.stats.sha256)


def _part_problem(parts: Sequence[ShardListPart], staged: Mapping[tuple[str, int], _Staged]) -> str | None:
    """Why the staged shard-list parts do not cover exactly the written shards, or None."""
    covered = [(p.split, i) for p in parts for i in p.indexes]
    if len(covered) != len(set(covered)) or set(covered) != set(staged):
        return (f"the shard-list parts cover {len(set(covered))} shards but {len(staged)} were written; "
                "refusing to publish an inconsistent set")
    return None


def _kept_lines(output_dir: str, old: Manifest, split: str) -> Iterator[bytes]:
    """The shard-list lines of a kept split, from the previous manifest (or its shard list)."""
    if old.shards_file is None:  # a version-1 manifest: its shards are in memory
        for index, entry in enumerate(old.splits[split].shards):
            yield shard_line(split, index, entry)
        return
    path = join_path(output_dir, old.shards_file.file)
    with open_lines(path) as lines:
        if lines is None:
            raise PublishError(f"{path}, the shard list of the kept split {split!r}, is gone")
        index = 0
        try:
            for name, entry in read_shard_list(old, lines):  # read to the end: checked as a whole
                if name == split:
                    yield shard_line(split, index, entry)
                    index += 1
        except ManifestError as err:
            raise PublishError(f"cannot keep split {split!r}: {err}") from err


def _part_lines(split: str, count: int, parts: Mapping[tuple[str, int], ShardListPart],
                empty: Mapping[tuple[str, int], ShardEntry]) -> Iterator[bytes]:
    """A written split's lines: each part's staged lines, with the lines of empty shards put in place."""
    for part in range(-(-count // PART_SHARDS)):
        staged = parts.get((split, part))
        have = set(staged.indexes) if staged else set()
        with open_lines(staged.path) if staged else contextlib.nullcontext() as lines:
            if staged and lines is None:
                raise PublishError(f"staged shard-list part {staged.path} is gone")
            for index in range(part * PART_SHARDS, min(count, (part + 1) * PART_SHARDS)):
                if index not in have:
                    yield shard_line(split, index, empty[(split, index)])
                    continue
                line = next(lines, b"")
                if not line.endswith(b"\n"):
                    raise PublishError(f"staged shard-list part {staged.path} ends before shard {index}")
                yield line


def _write_shard_list(output_dir: str, staging: str, splits: Mapping[str, SplitEntry],
                      kept: Mapping[str, SplitEntry], old: Manifest | None,
                      parts: Mapping[tuple[str, int], ShardListPart],
                      empty: Mapping[tuple[str, int], ShardEntry]) -> ShardsFile:
    """Writes ``shards.jsonl`` line by line while hashing it; returns what ``manifest.json`` says of it."""
    digest = LineDigest(SHARDS_NAME)

    def _published_before(name: str) -> bool:
        """A retried publish whose first attempt finished: its parts are gone, its list is in place."""
        if all(FileSystems.exists(p.path) for p in parts.values() if p.split == name):
            return False
        listed = old.splits.get(name) if old is not None else None
        same = listed is not None and [(e.file, e.records, e.bytes, e.sha256) for e in listed.shards] == [
            (e.file, e.records, e.bytes, e.sha256) for e in splits[name].shards]
        if not same:
            raise PublishError(f"the staged shard list of split {name!r} is gone and {SHARDS_NAME} "
                               "does not list the same shards")
        return True

    def lines() -> Iterator[bytes]:
        for name in sorted(splits):
            pieces = (_kept_lines(output_dir, old, name) if name in kept or _published_before(name)
                      else _part_lines(name, splits[name].num_shards, parts, empty))
            for line in pieces:
                yield digest.add(line)

    _write_atomic(join_path(output_dir, SHARDS_NAME), lines(), staging)
    return digest.summary()


def publish_shards(output_dir: str, results: Iterable[ShardResult], parts: Sequence[ShardListPart],
                   totals: Sequence[SplitTotals], dead_letters: Sequence[DeadLetter],
                   labels: Sequence[str], inputs: int, compression: str,
                   manifest_fields: Mapping[str, Any], max_bad_fraction: float | None,
                   policy: PublishPolicy,
                   sidecar_files: Callable[[Manifest], Mapping[str, bytes]] | None = None) -> Manifest:
    """Publishes staged shards; see the module docstring for the order of steps.

    Args:
        output_dir: Output folder.
        results: One ``ShardResult`` per written shard, iterated once (their
            label counts are not used: ``parts`` carry them).
        parts: The staged parts of the shard list (``write_shard_list_part``)
            covering every written shard.
        totals: The plan of every split (for shard counts; empty shards are created).
        dead_letters: Every rejected input.
        labels: Class names in index order.
        inputs: Number of inputs (records written + dead letters must equal it).
        compression: Shard compression.
        manifest_fields: ``created_by``, ``options``, ``seed``, ``feature_spec``
            and, for builds, ``images``.
        max_bad_fraction: Refuse to publish when more inputs than this fraction
            were rejected; None for no limit.
        policy: The run's id and how it treats what the folder already holds.
        sidecar_files: Gives further files to write beside the shards (name ->
            bytes) from the manifest about to be written; they are written
            just before it. A name mapped to None is a file of an earlier run
            this run does not have: it is removed if present.

    Returns:
        The published manifest (its shard entries without label counts).

    Raises:
        PublishError: The lock is not this run's, a link stands where its own folders go, a kept split changed or does
            not fit, too many bad inputs, no inputs, or counts that disagree.
        UsageError: The run writes a published split that other inputs built
            (``manifest_fields["options"]["input"]`` against what the manifest
            records) and ``policy.replace`` is not set.
    """
    staging = staging_folder(output_dir, policy.run_id)
    check_lock(output_dir, policy.run_id)
    linked = check_own_folders(output_dir)  # checked at the start too; a link made since is refused
    if linked:
        raise PublishError(linked)
    state = folder_state(output_dir)
    written_splits = {t.split for t in totals}
    kept = kept_splits(state.manifest, written_splits, policy)
    inputs_given = input_values(manifest_fields["options"])
    replacing = None if policy.replace else replace_problem(output_dir, state.manifest, written_splits,
                                                            inputs_given)
    if replacing is not None:  # a split other inputs built: a flag says whether to replace it
        delete_tree(staging)
        raise UsageError(replacing)
    labels = list(labels)
    refusal = _check_kept(output_dir, kept, state, compression, manifest_fields["feature_spec"])
    if refusal is None and kept:
        merged = merge_labels(state.manifest.labels, labels)
        if merged is None:
            refusal = (f"the classes of this run ({', '.join(labels) or 'none'}) and those of the "
                       f"kept splits {', '.join(sorted(kept))} ({', '.join(state.manifest.labels)}) "
                       "give some index two meanings; fix the class list (--class_names), rebuild "
                       "those splits too, or pass --drop_other_splits")
        else:
            labels = merged
    if refusal is not None:
        delete_tree(staging)
        raise PublishError(refusal)

    staged: dict[tuple[str, int], _Staged] = {}
    for result in results:  # one pass; only shards x small is kept
        staged[(result.split, result.index)] = _Staged.of(result)
    dead = sorted(dead_letters, key=lambda d: (d.path, d.reason, d.error))
    dead_path = join_path(output_dir, DEAD_LETTERS_NAME)
    _write_atomic(dead_path, "".join(d.to_json() + "\n" for d in dead).encode("utf-8"), staging)
    written = sum(s.records for s in staged.values())
    if inputs == 0:
        refusal = "no input files or rows were found; check --input"
    elif len(dead) >= inputs:
        refusal = (f"no record could be written: all {inputs} inputs were rejected; nothing was "
                   f"published; every rejected input is in {dead_path}")
    elif too_many_rejected(len(dead), inputs, max_bad_fraction):  # shards may not have been written
        refusal = "\n".join([
            f"{len(dead)} of {inputs} inputs ({100.0 * len(dead) / inputs:.1f}%) were "
            f"rejected, more than --max_bad_fraction {max_bad_fraction:g}; nothing was "
            f"published; every rejected input is in {dead_path}",
            *rejection_details(dead)])
    elif written + len(dead) != inputs:
        refusal = (f"{inputs} inputs but {written} records written and {len(dead)} "
                   "dead letters; refusing to publish an incomplete set")
    else:
        refusal = _part_problem(parts, staged)
    if refusal is not None:
        delete_tree(staging)
        raise PublishError(refusal)

    splits: dict[str, SplitEntry] = {name: SplitEntry(name, split.shards, split.to_counts())
                                     for name, split in kept.items()}
    keep: set[str] = set()
    for split in kept.values():
        for shard in split.shards:
            keep.update((shard.file, *index_names(shard.file)) if compression == "none" else (shard.file,))
    moves: list[tuple[str, str, str | None]] = []
    empty: dict[tuple[str, int], ShardEntry] = {}
    for plan in sorted(totals, key=lambda t: t.split):
        entries = []
        for index in range(plan.num_shards):
            result = staged.get((plan.split, index))
            if result is None:  # a shard the plan left empty: write it so the set is complete
                result = _Staged.of(write_shard(output_dir, (plan.split, index, plan.num_shards), [],
                                                compression, policy.run_id))
                empty[(plan.split, index)] = ShardEntry(result.file, result.records, result.bytes,
                                                        result.sha256, {})
            final = join_path(output_dir, result.file)
            moves.append((result.staged, final, result.sha256))
            if result.staged_index:
                moves.append((result.staged_index, index_name(final), None))
                keep.add(index_name(result.file))
            keep.add(result.file)
            entries.append(ShardEntry(result.file, result.records, result.bytes, result.sha256, {}))
        label_counts: dict[str, int] = {}
        for part in parts:
            if part.split == plan.split:
                for label, count in part.label_counts.items():
                    label_counts[label] = label_counts.get(label, 0) + count
        splits[plan.split] = SplitEntry(plan.split, entries, SplitCounts(
            sum(e.records for e in entries), sum(e.bytes for e in entries), len(entries), label_counts))
    owned = state.owned()
    stale = files_to_remove(state.present, owned, keep, policy.overwrite_unlisted)
    journal = Journal(policy.run_id, tuple(sorted(owned | keep | set(stale))))
    _write_atomic(join_path(output_dir, JOURNAL_NAME), journal.dumps(), staging)

    _delete_if_exists([join_path(output_dir, MANIFEST_NAME)])
    index_dir = join_path(output_dir, INDEX_DIR)
    keep_index = any(final.startswith(index_dir + "/") for _, final, _ in moves) or any(
        name.startswith(INDEX_DIR + "/") for name in keep if name in state.present)
    if keep_index and not FileSystems.exists(index_dir):
        FileSystems.mkdirs(index_dir)  # a no-op on object stores, which have no folders
    _move_all(staging, moves)
    if stale:
        _delete_if_exists([join_path(output_dir, name) for name in stale])
    if not keep_index and FileSystems.exists(index_dir) and not FileSystems.match(
            [join_path(index_dir, "*")])[0].metadata_list:
        FileSystems.delete([index_dir])  # the empty index folder of an earlier uncompressed run

    _write_atomic(join_path(output_dir, LABELS_NAME), "".join(f"{l}\n" for l in labels).encode("utf-8"),
                  staging)
    shards_file = _write_shard_list(output_dir, staging, splits, kept, state.manifest,
                                    {(p.split, p.part): p for p in parts}, empty)
    manifest = Manifest(
        created_by=manifest_fields["created_by"], options=manifest_fields["options"],
        seed=manifest_fields["seed"], compression=compression,
        feature_spec=manifest_fields["feature_spec"], labels=list(labels), splits=splits,
        dead_letters=len(dead), images=manifest_fields.get("images") or {}, shards_file=shards_file,
        built_from={**kept_built_from(state.manifest, kept),
                    **({name: inputs_given for name in written_splits} if inputs_given else {})},
        written_splits=sorted(written_splits))
    sidecars = sidecar_files(manifest) if sidecar_files else {}
    _delete_if_exists([join_path(output_dir, name) for name, data in sorted(sidecars.items()) if data is None])
    for name, data in sorted(sidecars.items()):
        if data is not None:
            _write_atomic(join_path(output_dir, name), data, staging)
    check_lock(output_dir, policy.run_id)
    _write_atomic(join_path(output_dir, MANIFEST_NAME), manifest.dumps(), staging)
    _delete_if_exists([join_path(output_dir, JOURNAL_NAME)])
    delete_tree(join_path(output_dir, STAGING_DIR))  # the lock is this run's: all of it
    if kept:
        _LOG.info("kept splits %s of the earlier set", ", ".join(sorted(kept)))
    return manifest


class _PublishFn(beam.DoFn):
    def __init__(self, output_dir: str, compression: str, manifest_fields: Mapping[str, Any],
                 max_bad_fraction: float | None, policy: PublishPolicy, sidecar_files=None,
                 image_counts=None) -> None:
        self._args = (output_dir, compression, manifest_fields, max_bad_fraction, policy)
        self._sidecar_files = sidecar_files
        self._image_counts = image_counts
        self._dead = Metrics.counter(_NAMESPACE, "dead_letters")

    def process(self, _, results, parts, totals, labels, inputs, feature_spec, *dead_lists):
        output_dir, compression, fields, max_bad, policy = self._args
        dead_letters = [dead for found in dead_lists for dead in found]
        images = {} if self._image_counts is None else self._image_counts(
            tally for result in results for tally in result.tallies)  # AsIter: read again below
        fields = {**fields, "feature_spec": feature_spec, "images": images}
        self._dead.inc(len(dead_letters))
        manifest = publish_shards(output_dir, results, parts, totals, dead_letters, labels, inputs,
                                  compression, fields, max_bad, policy, self._sidecar_files)
        _LOG.info("published %d shards with %d records to %s", manifest.num_shards,
                  manifest.records, output_dir)
        yield manifest.to_dict()


class PublishShards(beam.PTransform):
    """Publishes the written shards once all are staged.

    Applied to the pipeline (``p | PublishShards(...)``); every other input is
    a PCollection given to the constructor and read as a side input. The
    shard list's lines are staged in parts by the workers first
    (``WriteShardListParts``); the publish step then sees the written shards
    without their label counts, one at a time (``AsIter``).
    Output: ``PCollection[dict]`` with ``manifest.json``'s object.

    Args:
        output_dir: Output folder.
        compression: Shard compression.
        manifest_fields: ``created_by``, ``options``, ``seed``.
        max_bad_fraction: Bad-input limit, or None.
        policy: The run's id and how it treats what the folder already holds.
        results: ``PCollection[ShardResult]``.
        totals: ``PCollection[SplitTotals]``.
        dead_letters: ``PCollection[DeadLetter]``, or a tuple of them (each
            read as a side input of its own, so they need no flatten step).
        labels: ``PCollection`` with one element, the class list (none: []).
        inputs: ``PCollection`` with one element, the number of inputs (none: 0).
        feature_spec: ``PCollection`` with one element, feature name -> kind
            (none: {}).
        image_counts: Picklable ``iterable of (key, items) -> the manifest's
            images object`` (``records.image_counts``), given the ``tallies`` of
            every ``ShardResult``; None for no image counts.
        sidecar_files: Optional picklable ``Manifest -> {name: bytes}`` of
            further files to publish beside the shards (``publish_shards``).
    """

    def __init__(self, output_dir: str, compression: str, manifest_fields: Mapping[str, Any],
                 max_bad_fraction: float | None, policy: PublishPolicy, *, results, totals,
                 dead_letters, labels, inputs, feature_spec, image_counts=None,
                 sidecar_files=None) -> None:
        super().__init__()
        self._args = (output_dir, compression, manifest_fields, max_bad_fraction, policy, sidecar_files,
                      image_counts)
        self._inputs = (results, totals, dead_letters, labels, inputs, feature_spec)

    def expand(self, pbegin):
        results, totals, dead, labels, inputs, spec = self._inputs
        output_dir, run_id = self._args[0], self._args[4].run_id
        AsIter, AsList, AsSingleton = beam.pvalue.AsIter, beam.pvalue.AsList, beam.pvalue.AsSingleton
        parts = (results
                 | "KeyByListPart" >> beam.Map(_part_key)  # ((split, part), ShardResult)
                 | "GroupListParts" >> beam.GroupByKey()  # ((split, part), [ShardResult])
                 | "WriteShardListParts" >> beam.Map(write_shard_list_part, output_dir, run_id))
        light = results | "DropLabelCounts" >> beam.Map(_without_label_counts)  # ShardResult
        dead = dead if isinstance(dead, (tuple, list)) else (dead,)  # each its own side input: no flatten step
        return (pbegin
                | "Once" >> beam.Create([None])
                | "Publish" >> beam.ParDo(_PublishFn(*self._args), AsIter(light), AsList(parts),
                                          AsList(totals), AsSingleton(labels, default_value=[]),
                                          AsSingleton(inputs, default_value=0),
                                          AsSingleton(spec, default_value={}),
                                          *[AsList(found) for found in dead]))
