"""The output folder of a publishing run: checks at start, staging, what the folder holds, before and after.

The I/O around the rules of ``transforms.shardset.ownership``, ``replacing`` and ``resume``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from transforms.errors import ManifestError, PublishError, UsageError
from transforms.shardset.manifest import MANIFEST_NAME, Manifest
from transforms.shardset.naming import join_path
from transforms.shardset.ownership import (JOURNAL_NAME, Journal, PublishPolicy, owned_files,
                                           unlisted_problem, unlisted_shard_files)
from transforms.shardset.replacing import replace_problem
from transforms.shardset.resume import RESUME_NAME, RunMarker, changed_flags
from transforms.shardset.shard_list import with_shard_list
from transforms.storage.files import STORAGE_ERRORS, error_reason, exists, open_lines, read_if_present
from transforms.storage.folders import delete_files, delete_tree, link_problem
from transforms.storage.listing import list_below, list_folder
from transforms.storage.journal import finish_interrupted, read_journal
from transforms.storage.run_lock_files import acquire_lock, release_lock
from transforms.storage.paths import is_local
from transforms.storage.writing import check_writable, write_atomic
from transforms.tfrecord.record_index import INDEX_DIR
from transforms.tfrecord.run_files import RUNS_DIR

__all__ = ["STAGING_DIR", "FolderState", "check_output_dir", "check_own_folders", "folder_state",
           "read_manifest", "clear_staging", "clear_staging_keeping", "resumable_runs", "staging_folder",
           "run_files_folder", "run_files_of", "prepare_output", "finish_output", "published_shards",
           "published_shard_sizes", "published_manifest", "check_replaced_splits"]

STAGING_DIR = ".staging"
# In a run's staging folder: where its run files lie when that is not beside it (--staging_dir).
RUN_FILES_NAME = "run_files.url"
# How a run's own folder in --staging_dir is named: this prefix, the output folder's key, the run id.
_RUN_FILES_PREFIX = "tfrecord-shards-"
_LOG = logging.getLogger(__name__)


def staging_folder(output_dir: str, run_id: str | None = None) -> str:
    """``OUTPUT/.staging``, or the run's own ``OUTPUT/.staging/<run_id>``."""
    root = join_path(output_dir, STAGING_DIR)
    return join_path(root, run_id) if run_id else root


def run_files_folder(output_dir: str, run_id: str, staging_dir: str | None = None) -> str:
    """Where the run ``run_id`` writes its run files: ``OUTPUT/.staging/<run id>/runs``, or a folder
    of ``--staging_dir`` named for the output folder and the run (builds sharing it never mix)."""
    if not staging_dir:
        return join_path(staging_folder(output_dir, run_id), RUNS_DIR)
    url = os.path.abspath(output_dir) if is_local(output_dir) else output_dir.rstrip("/")  # 12 hex digits of it
    return join_path(staging_dir, f"{_RUN_FILES_PREFIX}{hashlib.sha256(url.encode('utf-8')).hexdigest()[:12]}-{run_id}")


def _run_files_elsewhere(output_dir: str, run_id: str) -> str | None:
    """The run's folder in a ``--staging_dir`` as its staging folder names it (only the name
    ``run_files_folder`` gives: the file cannot send a deletion elsewhere), or None."""
    data = read_if_present(join_path(staging_folder(output_dir, run_id), RUN_FILES_NAME))
    if data is None:
        return None
    folder = data.decode("utf-8", "replace").strip()
    parent, _, name = folder.rpartition("/")
    if not parent or folder != run_files_folder(output_dir, run_id, parent):
        _LOG.warning("ignoring %s: it names %r, not a folder of this run",
                     join_path(staging_folder(output_dir, run_id), RUN_FILES_NAME), folder)
        return None
    return folder


def run_files_of(output_dir: str, run_id: str) -> str:
    """Where the run ``run_id`` of ``output_dir`` wrote its run files (an interrupted one's, to resume it)."""
    return _run_files_elsewhere(output_dir, run_id) or run_files_folder(output_dir, run_id)


def _mark_run_files(output_dir: str, run_id: str, staging_dir: str) -> None:
    """Checks the run's folder in ``staging_dir`` can be written (``UsageError``); names it in its staging folder."""
    folder = run_files_folder(output_dir, run_id, staging_dir)
    _check_writable("--staging_dir", staging_dir, join_path(folder, ".probe"))
    staging = staging_folder(output_dir, run_id)
    write_atomic(join_path(staging, RUN_FILES_NAME), folder.encode("utf-8") + b"\n", staging)


def _check_writable(flag: str, folder: str, probe: str) -> None:
    """Raises ``UsageError`` naming ``flag`` when ``probe`` in ``folder`` cannot be written."""
    try:
        check_writable(probe)
    except STORAGE_ERRORS as err:
        raise UsageError(f"{flag} {folder} cannot be written: {error_reason(err)} (creating {probe})") from err


def _has_staging(output_dir: str, run_id: str) -> bool:
    """Whether the run's staging folder in ``output_dir`` holds anything."""
    folder = staging_folder(output_dir, run_id)
    return os.path.isdir(folder) if is_local(output_dir) else bool(list_below(folder))


def _delete_run_files_elsewhere(output_dir: str, runs: Iterable[str]) -> None:
    """Deletes the folders in a ``--staging_dir`` that these runs' staging folders name (before those)."""
    for run in runs:
        folder = _run_files_elsewhere(output_dir, run)
        if folder is not None:
            delete_tree(folder)


def check_own_folders(output_dir: str) -> str | None:
    """Why the tool's own folders in a local ``output_dir`` cannot be used (a link or a file there), or None."""
    if not is_local(output_dir):
        return None
    for name in (STAGING_DIR, INDEX_DIR):
        problem = link_problem(os.path.join(output_dir, name))
        if problem:
            return (f"{problem}; the tool deletes and writes files in its own {name} folder and "
                    "never through a link: remove it, or choose another --output_dir")
    return None


def check_output_dir(output_dir: str, run_id: str) -> None:
    """Refuses (``UsageError``) an output folder that is a file, lies below one, holds a link where the
    tool's own folders go, or cannot be written."""
    problem = check_own_folders(output_dir)
    if problem:
        raise UsageError(problem)
    if is_local(output_dir):
        path = os.path.abspath(output_dir)
        if os.path.exists(path) and not os.path.isdir(path):
            raise UsageError(f"--output_dir {output_dir} is a file, not a folder")
        parent = os.path.dirname(path)
        while parent and parent != os.path.dirname(parent):
            if os.path.exists(parent) and not os.path.isdir(parent):
                raise UsageError(f"--output_dir {output_dir} lies below {parent}, which is a file")
            parent = os.path.dirname(parent)
    elif exists(output_dir):
        raise UsageError(f"--output_dir {output_dir} is an object (a file), not a folder")
    _check_writable("--output_dir", output_dir, join_path(output_dir, f".probe-{run_id}"))


@dataclass(frozen=True)
class FolderState:
    """What a run finds in its output folder: name -> size of every file directly in it (names starting
    with ``.`` left out), its manifest if readable, why ``manifest.json`` could not be read if it is
    there, and the journal of an unfinished publish, if any."""

    present: dict[str, int]
    manifest: Manifest | None
    manifest_problem: str | None
    journal: Journal | None

    def owned(self) -> set[str]:
        return owned_files(self.manifest, self.journal)


def _listing(output_dir: str) -> dict[str, int]:
    """Name -> size of the files in the folder and in its ``index/`` folder (as ``index/NAME``)."""
    present = {}
    for folder, prefix in ((output_dir, ""), (join_path(output_dir, INDEX_DIR), INDEX_DIR + "/")):
        for name, (_, size) in list_folder(folder).items():
            if not name.startswith(".") and not (prefix == "" and name == INDEX_DIR):
                present[prefix + name] = size
    return present


def read_manifest(output_dir: str, data: bytes | None = None) -> Manifest:
    """The folder's manifest with every shard listed, without label counts (``data``: its bytes, if read);
    ``ManifestError``: the manifest or its shard list cannot be read, or they disagree."""
    if data is None:
        data = read_if_present(join_path(output_dir, MANIFEST_NAME))
        if data is None:
            raise ManifestError(f"{join_path(output_dir, MANIFEST_NAME)} does not exist")
    manifest = Manifest.loads(data)
    if manifest.complete:
        return manifest
    with open_lines(join_path(output_dir, manifest.shards_file.file)) as lines:
        return with_shard_list(manifest, lines, label_counts=False)


def folder_state(output_dir: str) -> FolderState:
    """Reads the folder's listing, manifest (with its shard list) and journal."""
    present = _listing(output_dir)
    manifest, problem = None, None
    data = read_if_present(join_path(output_dir, MANIFEST_NAME))
    if data is not None:
        try:
            manifest = read_manifest(output_dir, data)
        except ManifestError as err:
            problem = str(err)
    try:
        journal = read_journal(output_dir)
    except ManifestError as err:
        journal = None
        _LOG.warning("ignoring %s: %s", join_path(output_dir, JOURNAL_NAME), err)
    return FolderState(present, manifest, problem, journal)


def _refuse_linked_staging(output_dir: str) -> None:
    """Raises PublishError if the local staging folder is a link (never followed)."""
    problem = link_problem(staging_folder(output_dir)) if is_local(output_dir) else None
    if problem:
        raise PublishError(f"{problem}; refusing to delete through it")


def clear_staging(output_dir: str, run_id: str | None = None) -> None:
    """Deletes the staging folder (earlier attempts' too), or only the run's own (``PublishError``: a link)."""
    _refuse_linked_staging(output_dir)
    _delete_run_files_elsewhere(output_dir, [run_id] if run_id else resumable_runs(output_dir, marked=False))
    delete_tree(staging_folder(output_dir, run_id))
    if run_id and is_local(output_dir):
        with contextlib.suppress(OSError):
            os.rmdir(staging_folder(output_dir))  # the shared folder, once empty


def _run_of(path: str, root: str) -> str | None:
    """The run id of a path below ``root`` (``.staging``), or None for a file directly in it."""
    rest = path[len(root):].lstrip("/")
    return rest.split("/", 1)[0] if "/" in rest else None


def clear_staging_keeping(output_dir: str, mine: RunMarker) -> list[str]:
    """Clears ``OUTPUT/.staging`` but the folders of earlier runs with this run's fingerprint; returns their ids.

    Called by the run holding the lock; a run with other flags is removed with a line naming them.
    """
    _refuse_linked_staging(output_dir)
    root = staging_folder(output_dir)
    if is_local(output_dir) and not os.path.isdir(root):
        return []
    files = list_below(root)
    kept: list[str] = []
    for path in files:
        run = _run_of(path, root)
        if run is None or run == mine.run_id or path != join_path(staging_folder(output_dir, run), RESUME_NAME):
            continue
        try:
            marker = RunMarker.loads(read_if_present(path) or b"")
        except ManifestError:
            continue
        if marker.fingerprint == mine.fingerprint and marker.run_id == run:
            kept.append(run)
        else:
            changed = changed_flags(marker.options, mine.options)
            _LOG.warning("not resuming the interrupted run %s: it was started with %s; its staging was removed",
                         run, ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
                         if changed else "another version of the tool")
    for run in sorted({_run_of(p, root) for p in files} - set(kept) - {None}):
        _delete_run_files_elsewhere(output_dir, [run])
        delete_tree(staging_folder(output_dir, run))
    loose = [p for p in files if _run_of(p, root) is None]
    if loose:
        delete_files(loose)
    return sorted(kept)


def resumable_runs(output_dir: str, marked: bool = True) -> list[str]:
    """The ids of the runs whose staging folder in ``output_dir`` holds a marker (``resume.json``);
    with ``marked`` False, of every run with a staging folder there."""
    root = staging_folder(output_dir)
    if is_local(output_dir) and not os.path.isdir(root):
        return []
    return sorted({run for path in list_below(root) for run in [_run_of(path, root)]
                   if run is not None and (not marked or path == join_path(staging_folder(output_dir, run),
                                                                            RESUME_NAME))})


def prepare_output(output_dir: str, policy: PublishPolicy, job: str) -> None:
    """Everything a publishing run does to its output folder before reading any input.

    A crash's publish is finished before any staging is cleared (``--fresh`` too: the journal needs it).

    Raises:
        UsageError: One line saying what to fix; the lock is not left behind.
    """
    check_output_dir(output_dir, policy.run_id)
    acquire_lock(output_dir, policy, job)
    try:
        finish_interrupted(output_dir)
        state = folder_state(output_dir)
        problem = unlisted_problem(output_dir, unlisted_shard_files(state.present, state.owned()),
                                   state.manifest_problem)
        if problem and not policy.overwrite_unlisted:
            raise UsageError(problem)
        if policy.resume is None or policy.fresh:
            clear_staging(output_dir)
        else:
            clear_staging_keeping(output_dir, policy.resume)
        if policy.resume is not None:
            staging = staging_folder(output_dir, policy.resume.run_id)
            write_atomic(join_path(staging, RESUME_NAME), policy.resume.dumps(), staging)
        if policy.staging_dir:
            _mark_run_files(output_dir, policy.run_id, policy.staging_dir)
    except BaseException:
        release_lock(output_dir, policy.run_id)
        raise


def published_shards(output_dir: str,
                     policy: PublishPolicy) -> tuple[list[tuple[str, str, str | None]], str]:
    """``(split, shard path, keys file's CRC32C or None)`` of the published shards a run may keep, and
    their compression; none without a manifest or with ``--drop_other_splits`` (``ManifestError``: unreadable)."""
    data = None if policy.drop_other_splits else read_if_present(join_path(output_dir, MANIFEST_NAME))
    if data is None:
        return [], "none"
    manifest = read_manifest(output_dir, data)
    return ([(name, join_path(output_dir, shard.file), shard.keys_crc32c)
             for name, split in sorted(manifest.splits.items())
             for shard in split.shards], manifest.compression)


def published_shard_sizes(output_dir: str) -> dict[str, tuple[int, ...]]:
    """Split -> bytes of each of its published shards, in index order (``ManifestError``: unreadable)."""
    manifest = read_manifest(output_dir)
    return {name: tuple(shard.bytes for shard in split.shards) for name, split in sorted(manifest.splits.items())}


def published_manifest(output_dir: str) -> Manifest | None:
    """The folder's ``manifest.json`` without the shard list, or None (none, or unreadable: later checks say why)."""
    try:
        data = read_if_present(join_path(output_dir, MANIFEST_NAME))
        return None if data is None else Manifest.loads(data)
    except (ManifestError, *STORAGE_ERRORS) as err:
        _LOG.debug("no readable manifest in %s: %s", output_dir, err)
        return None


def check_replaced_splits(output_dir: str, inputs: Sequence[str],
                          splits: Callable[[], Iterable[str]]) -> None:
    """Refuses, before any input is read, a run that would replace a split other inputs built.

    ``splits`` (called only when such a split is there) gives the splits the run writes.

    Raises:
        UsageError: One line naming the split, its records, the inputs that built it and ``--replace``.
    """
    old = published_manifest(output_dir)
    if old is None or replace_problem(output_dir, old, old.splits, inputs) is None:
        return
    problem = replace_problem(output_dir, old, splits(), inputs)
    if problem:
        raise UsageError(problem)


def finish_output(output_dir: str, policy: PublishPolicy, ok: bool, resumed: Sequence[str] = (),
                  refused: bool = False) -> bool:
    """After the run: releases its lock if it holds it; returns True if a failed run's staging was kept.

    A failed run keeps its staging when the next can use it: a build's (resumed), and any run's
    while a publish journal has renames to do. Otherwise its own and its resumed runs' go.

    Args:
        refused: A usage error before any image was read: only the run's own staging is cleared.
    """
    pending = not ok and _publish_pending(output_dir)
    kept = not ok and (pending or (policy.resume is not None and not refused))
    try:
        if not ok and not kept:
            for run in (policy.run_id, *(() if refused else resumed)):
                clear_staging(output_dir, run)
        if policy.staging_dir:
            for run in (policy.run_id, *resumed):
                if not _has_staging(output_dir, run):
                    delete_tree(run_files_folder(output_dir, run, policy.staging_dir))
        release_lock(output_dir, policy.run_id)
    except STORAGE_ERRORS as err:
        _LOG.warning("could not clean up %s after the run: %s", output_dir, error_reason(err))
    return kept


def _publish_pending(output_dir: str) -> bool:
    """True if the folder holds a publish journal with renames to do (from staging), or one that cannot be read."""
    try:
        journal = read_journal(output_dir)
        return journal is not None and bool(journal.moves)
    except ManifestError:
        return True
    except STORAGE_ERRORS as err:
        _LOG.warning("could not read the publish journal in %s: %s", output_dir, error_reason(err))
        return True
