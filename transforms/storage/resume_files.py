"""Resuming an interrupted build on storage: staging kept or cleared, done lists and done shards.

The I/O around ``transforms.shardset.resume`` (formats and rules are there).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

from transforms.errors import ManifestError
from transforms.shardset.naming import join_path
from transforms.shardset.resume import DONE_SUFFIX, RESUME_NAME, DoneInput, RunMarker, ShardDone, Stamp, \
    parse_done_list
from transforms.shardset.staged import ShardResult, StagedShard
from transforms.storage.files import STORAGE_ERRORS, error_reason, exists, hashes_match, open_lines, read_if_present
from transforms.storage.folders import copy_files, delete_files, rename_files
from transforms.storage.listing import list_folder
from transforms.storage.output_folder import resumable_runs, run_files_of, staging_folder
from transforms.storage.paths import is_local
from transforms.shardset.key_files import keys_name
from transforms.tfrecord.record_index import index_name
from transforms.storage.writing import write_atomic
from transforms.tfrecord.shard_writer import ShardStats

__all__ = ["resumable_bytes", "AdoptedWork", "adopted_work", "input_stamp", "stamp_of", "write_done_list",
           "read_done_inputs", "record_done_shard", "adopt_shard"]

_LOG = logging.getLogger(__name__)


def resumable_bytes(output_dir: str, fingerprint: str) -> int:
    """Bytes of the run files an interrupted run with ``fingerprint`` left in ``output_dir`` (read before
    the run takes the lock, for the choice of local workers)."""
    try:
        total = 0
        for run in resumable_runs(output_dir):
            marker = RunMarker.loads(read_if_present(join_path(staging_folder(output_dir, run), RESUME_NAME)) or b"")
            if marker.fingerprint == fingerprint:
                total += sum(size for name, (_, size) in list_folder(
                    run_files_of(output_dir, run)).items() if name.endswith(".run"))
        return total
    except (ManifestError, *STORAGE_ERRORS):
        return 0


@dataclass(frozen=True)
class AdoptedWork:
    """What the staging folders of interrupted runs hold for this run: their ids, their done lists as
    ``(path, runs folder, size of its run file or None)``, and content key -> a finished staged shard."""

    runs: tuple[str, ...] = ()
    done_lists: tuple[tuple[str, str, int | None], ...] = ()
    shards: Mapping[str, ShardDone] = field(default_factory=dict)


def adopted_work(output_dir: str, run_id: str) -> AdoptedWork:
    """Lists the done lists and finished shards in the staging folders of runs other than ``run_id``
    (those ``prepare_output`` kept)."""
    runs = [run for run in resumable_runs(output_dir) if run != run_id]
    done_lists, shards = [], {}
    published = None  # the folder's files, listed once if a finished shard is no longer staged
    for run in runs:
        folder = staging_folder(output_dir, run)
        try:
            runs_folder = run_files_of(output_dir, run)  # in its staging folder, or in --staging_dir
            run_files = list_folder(runs_folder)
            staged = list_folder(folder)
        except STORAGE_ERRORS as err:
            _LOG.warning("not resuming from %s: %s", folder, error_reason(err))
            continue
        for name, (path, _) in sorted(run_files.items()):
            if name.endswith(DONE_SUFFIX):
                run_file = run_files.get(name[:-len(DONE_SUFFIX)])
                done_lists.append((path, runs_folder, run_file[1] if run_file else None))
        for name, (path, _) in sorted(staged.items()):
            if not name.endswith(DONE_SUFFIX):
                continue
            try:
                done = ShardDone.loads(read_if_present(path) or b"", folder)
            except ManifestError as err:
                _LOG.warning("ignoring %s: %s", path, err)
                continue
            present = staged.get(done.staged.rsplit("/", 1)[-1])
            if present is None:  # its run's publish journal may have renamed it into the folder
                if published is None:
                    published = _listed(output_dir)
                present = published.get(done.file)
            if present is not None and present[1] == done.bytes:
                shards[done.content] = done
    return AdoptedWork(tuple(runs), tuple(done_lists), shards)


def _listed(output_dir: str) -> dict[str, tuple[str, int]]:
    """Name -> (path, size) of the files directly in the folder; empty if it cannot be listed."""
    try:
        return list_folder(output_dir)
    except STORAGE_ERRORS as err:
        _LOG.warning("not resuming published shards from %s: %s", output_dir, error_reason(err))
        return {}


def input_stamp(path: str) -> Stamp | None:
    """``(size, mtime_ns, inode)`` of a local input, or None (it cannot be stated, or it is on a store:
    a request more per input; a resumed run reads it again, and still reuses its finished shards)."""
    if not is_local(path):
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return stamp_of(found)


def stamp_of(found: os.stat_result) -> Stamp:
    """The ``input_stamp`` of a local input from its ``stat`` or ``fstat``."""
    return found.st_size, found.st_mtime_ns, found.st_ino


def write_done_list(run_path: str, lines: Iterable[bytes]) -> None:
    """Writes a closed run file's done list beside it, through a rename; ``lines`` never joined."""
    write_atomic(run_path + DONE_SUFFIX, lines, run_path.rsplit("/", 1)[0])


def read_done_inputs(done: tuple[str, str, int | None]) -> Iterator[tuple[str, DoneInput]]:
    """``(input path, DoneInput)`` for each record a done list names (``AdoptedWork.done_lists``)."""
    path, folder, run_size = done
    with open_lines(path) as lines:
        if lines is None:
            return
        for entry in parse_done_list(lines, folder, run_size):
            yield entry.path, entry


def record_done_shard(content: str, result: ShardResult) -> None:
    """Writes the done record of a shard this run staged, beside it, through a rename."""
    _write_done_shard(ShardDone(**vars(StagedShard.of(result)), content=content,
                                key=(result.split, result.index, result.count),
                                label_counts=dict(result.stats.label_counts)))


def _write_done_shard(done: ShardDone) -> None:
    write_atomic(done.staged + DONE_SUFFIX, done.dumps(), done.staged.rsplit("/", 1)[0])


def adopt_shard(done: ShardDone, output_dir: str, run_id: str) -> ShardResult | None:
    """Moves an earlier run's finished staged shard into this run's staging, once its CRC32C checks
    (copies it when that run's journal published it); its ``ShardResult``, or None: the caller writes it."""
    try:
        staging = staging_folder(output_dir, run_id)
        source, source_index, source_keys = done.staged, done.staged_index, done.staged_keys
        published = not exists(source)  # its run's journal renamed it into the folder: copied, never moved
        if published:
            source = join_path(output_dir, done.file)
            source_index = index_name(source) if done.staged_index else None
            source_keys = keys_name(source) if done.staged_keys else None
        if any(path and not hashes_match(path, crc) for path, crc in (
                (source, done.crc32c), (source_index, done.index_crc32c), (source_keys, done.keys_crc32c))):
            _LOG.warning("not reusing %s: its CRC32C is not the one recorded when it was written", source)
            return None

        def here(path: str | None) -> str | None:
            """Where a staged file of ``done`` goes in this run's staging."""
            return join_path(staging, path.rsplit("/", 1)[-1]) if path else None

        staged, staged_index, staged_keys = here(done.staged), here(done.staged_index), here(done.staged_keys)
        (copy_files if published else rename_files)(
            [(a, b) for a, b in ((source, staged), (source_index, staged_index), (source_keys, staged_keys)) if b])
    except STORAGE_ERRORS as err:  # e.g. another attempt of the same shard moved it first
        _LOG.info("not reusing %s: %s", done.staged, error_reason(err))
        return None
    split, index, count = done.key
    result = ShardResult(split, index, count, done.file, staged, staged_index,
                         ShardStats(done.records, done.bytes, done.sha256, dict(done.label_counts), done.crc32c,
                                    done.index_crc32c, done.keys_crc32c), staged_keys=staged_keys)
    moved = dataclasses.replace(done, staged=staged, staged_index=staged_index, staged_keys=staged_keys)
    try:
        delete_files([done.staged + DONE_SUFFIX])
        _write_done_shard(moved)  # a run killed after this reuses it again
    except STORAGE_ERRORS as err:
        _LOG.info("could not move the done record of %s: %s", done.staged, error_reason(err))
    return result

