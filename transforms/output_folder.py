"""The output folder of a publishing run: checks at start, the run's lock, staging, free space.

The I/O around ``transforms.shardset.run_lock`` and ``transforms.shardset.ownership``
(the rules are there), on local disk, gs:// and s3:// alike:

- ``check_output_dir``: the folder is not a file, does not lie below a file,
  its own folders (``.staging``, ``index``) are real folders and not links,
  and it can be written (a probe file is created and deleted);
- ``acquire_lock`` / ``check_lock`` / ``release_lock``: the run's lock,
  created exclusively: ``O_EXCL`` on local disk; on gs:// an upload with
  ``if_generation_match=0``; on s3:// a put with ``If-None-Match: *``. A store
  that ignores the condition (some S3-compatible stores; the GCS emulator the
  tests use) still gets an existence check first and a read-back of the run id
  after, which leaves a short race between two runs starting together; the
  check before the manifest is written catches the loser then;
- ``folder_state``: the files, manifest and journal a run finds;
- ``read_manifest``: a manifest and, for format 2, its shard list, read line
  by line and checked (``shardset.shard_list``);
- ``clear_staging``: earlier attempts' staging, or the run's own;
- ``delete_tree``: a folder and what it holds; on local disk it never
  descends through a link (a link below the folder is removed as a link) and
  refuses a folder that is itself a link;
- ``free_bytes``: free space of a local folder, for a disk-full message;
- ``published_manifest`` / ``check_replaced_splits``: the published set's
  ``manifest.json`` alone, and the refusal, before any input is read, of a run
  that would replace a split other inputs built (``shardset.replacing``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from transforms import beam_compat
from transforms.errors import ManifestError, PublishError, UsageError
from transforms.file_access import naming_s3_errors
from transforms.shardset.manifest import MANIFEST_NAME, Manifest
from transforms.shardset.replacing import replace_problem
from transforms.shardset.shard_list import with_shard_list
from transforms.shardset.naming import join_path
from transforms.shardset.ownership import (JOURNAL_NAME, Journal, PublishPolicy, owned_files,
                                           unlisted_problem, unlisted_shard_files)
from transforms.tfrecord.record_index import INDEX_DIR
from transforms.shardset.run_lock import LOCK_NAME, LockInfo, held_message, is_stale, lost_message

__all__ = ["STAGING_DIR", "FolderState", "check_output_dir", "check_own_folders", "delete_tree", "acquire_lock", "check_lock", "release_lock",
           "folder_state", "read_manifest", "open_lines", "check_unlisted", "clear_staging", "staging_folder", "free_bytes",
           "prepare_output", "finish_output", "published_shards", "published_manifest",
           "check_replaced_splits"]

STAGING_DIR = ".staging"
_LOG = logging.getLogger(__name__)


def _is_local(path: str) -> bool:
    return "://" not in path


def _reason(err: Exception) -> str:
    """The innermost reason of a file system error, on one line."""
    details = getattr(err, "exception_details", None)
    if isinstance(details, dict) and details:
        err = next(iter(details.values()))
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def staging_folder(output_dir: str, run_id: str | None = None) -> str:
    """``OUTPUT/.staging``, or the run's own ``OUTPUT/.staging/<run_id>``."""
    root = join_path(output_dir, STAGING_DIR)
    return join_path(root, run_id) if run_id else root


def _link_problem(path: str) -> str | None:
    """Why the tool may not delete or write below ``path`` (a link, or not a folder); None if it may."""
    if os.path.islink(path) or _is_junction(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"{path} is a link (to {target})"
    if os.path.lexists(path) and not os.path.isdir(path):
        return f"{path} is a file, not a folder"
    return None


def _is_junction(path: str) -> bool:
    is_junction = getattr(os.path, "isjunction", None)  # Windows junctions; Python 3.12+
    return bool(is_junction and is_junction(path))


def check_own_folders(output_dir: str) -> str | None:
    """Why the tool's own folders in ``output_dir`` cannot be used, or None.

    The tool deletes and renames inside ``OUTPUT/.staging`` and ``OUTPUT/index``;
    a link there (or a file of that name) would send those deletions elsewhere,
    so it is refused, never followed. Object stores have no links: their
    folders are key prefixes, so only local folders are checked.
    """
    if not _is_local(output_dir):
        return None
    for name in (STAGING_DIR, INDEX_DIR):
        problem = _link_problem(os.path.join(output_dir, name))
        if problem:
            return (f"{problem}; the tool deletes and writes files in its own {name} folder and "
                    "never through a link: remove it, or choose another --output_dir")
    return None


def check_output_dir(output_dir: str, run_id: str) -> None:
    """Refuses an output folder that is a file, lies below a file, holds a link
    where the tool's own folders go, or cannot be written.

    Raises:
        UsageError: One line saying which.
    """
    problem = check_own_folders(output_dir)
    if problem:
        raise UsageError(problem)
    if _is_local(output_dir):
        path = os.path.abspath(output_dir)
        if os.path.exists(path) and not os.path.isdir(path):
            raise UsageError(f"--output_dir {output_dir} is a file, not a folder")
        parent = os.path.dirname(path)
        while parent and parent != os.path.dirname(parent):
            if os.path.exists(parent) and not os.path.isdir(parent):
                raise UsageError(f"--output_dir {output_dir} lies below {parent}, which is a file")
            parent = os.path.dirname(parent)
    elif FileSystems.exists(output_dir):
        raise UsageError(f"--output_dir {output_dir} is an object (a file), not a folder")
    probe = join_path(output_dir, f".probe-{run_id}")
    try:
        with naming_s3_errors(probe):
            fh = FileSystems.create(probe, compression_type="uncompressed")
            try:
                fh.write(b"probe\n")
            finally:
                beam_compat.close_written_file(fh)
            FileSystems.delete([probe])
    except (OSError, BeamIOError) as err:
        raise UsageError(f"--output_dir {output_dir} cannot be written: {_reason(err)} "
                         f"(creating {probe})") from err


# ---------------------------------------------------------------------------------------------
# The lock.

def _process_start(pid: int) -> str | None:
    """A process's start time ('' if the OS does not say), or None if it does not run."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else fields[19]  # a zombie has ended
    except FileNotFoundError:
        return None
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return ""
    return ""


def _my_lock(policy: PublishPolicy, job: str) -> LockInfo:
    return LockInfo(policy.run_id, job, socket.gethostname(), os.getpid(),
                    _process_start(os.getpid()) or "")


def _read(path: str) -> bytes | None:
    """A small file's bytes, or None if it does not exist.

    Existence is asked first: opening a missing object raises a different
    error type on every store (gs:// raises the client's ``NotFound``).
    """
    if not FileSystems.exists(path):
        return None
    try:
        with naming_s3_errors(path), FileSystems.open(path, compression_type="uncompressed") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def _bucket_key(path: str) -> tuple[str, str]:
    bucket, _, key = path.split("://", 1)[1].partition("/")
    return bucket, key


def _create_exclusive(path: str, data: bytes) -> bool:
    """Creates ``path`` holding ``data`` unless it exists; True if this call created it."""
    if _is_local(path):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return True
    if FileSystems.exists(path):
        return False
    if path.startswith("s3://"):
        return _create_exclusive_s3(path, data)
    if path.startswith("gs://"):
        return _create_exclusive_gcs(path, data)
    with naming_s3_errors(path):  # any other store: existence checked above, read back after
        fh = FileSystems.create(path, compression_type="uncompressed")
        try:
            fh.write(data)
        finally:
            beam_compat.close_written_file(fh)
    return True


def _create_exclusive_s3(path: str, data: bytes) -> bool:
    from botocore.exceptions import ClientError

    bucket, key = _bucket_key(path)
    client = beam_compat.s3_boto3_client()
    try:
        client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
    except ClientError as err:
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status in (409, 412):  # 409: a concurrent conditional write won
            return False
        if status == 501:  # the store has no conditional put: existence was checked
            client.put_object(Bucket=bucket, Key=key, Body=data)
            return True
        raise OSError(f"S3 answered {status} creating the lock: {err}", path) from err
    return True


def _create_exclusive_gcs(path: str, data: bytes) -> bool:
    from google.api_core.exceptions import PreconditionFailed

    bucket, key = _bucket_key(path)
    blob = beam_compat.gcs_storage_client().bucket(bucket).blob(key)
    try:
        blob.upload_from_string(data, if_generation_match=0)
    except PreconditionFailed:
        return False
    return True


def _lock_path(output_dir: str) -> str:
    return join_path(output_dir, LOCK_NAME)


def _read_lock(path: str) -> tuple[bool, LockInfo | None]:
    """(the lock exists, its content if this tool can read it)."""
    data = _read(path)
    if data is None:
        return False, None
    try:
        return True, LockInfo.loads(data)
    except ManifestError:
        return True, None


def _remove_stale(path: str, info: LockInfo, run_id: str) -> None:
    _LOG.warning("removing the stale lock %s of run %s (pid %d on %s is gone)", path, info.run_id,
                 info.pid, info.host)
    if _is_local(path):
        aside = f"{path}.stale-{run_id}"
        try:
            os.rename(path, aside)  # of two runs breaking the lock, one renames it
        except FileNotFoundError:
            return
        os.remove(aside)
    else:
        FileSystems.delete([path])


def acquire_lock(output_dir: str, policy: PublishPolicy, job: str) -> None:
    """Takes the folder's lock for this run, breaking a stale one.

    Raises:
        UsageError: Another run holds the lock (one line naming it and how to clear it).
    """
    path = _lock_path(output_dir)
    mine = _my_lock(policy, job)
    for _ in range(3):
        try:
            created = _create_exclusive(path, mine.dumps())
        except (OSError, BeamIOError) as err:
            raise UsageError(f"cannot create the lock {path}: {_reason(err)}") from err
        try:
            exists, found = _read_lock(path)
        except (OSError, BeamIOError) as err:  # e.g. a folder of that name
            raise UsageError(f"cannot read the lock {path} ({_reason(err)}); it is not a lock this "
                             "tool wrote: if no job is running, remove it and run again") from err
        if created and found is not None and found.run_id == policy.run_id:
            return
        if not exists:
            continue  # removed in the meantime: try again
        if created or found is None or not is_stale(found, mine.host, _process_start):
            raise UsageError(held_message(path, found))
        _remove_stale(path, found, policy.run_id)
    raise UsageError(held_message(path, None))


def check_lock(output_dir: str, run_id: str) -> None:
    """Raises PublishError unless the folder's lock holds ``run_id``."""
    path = _lock_path(output_dir)
    _, found = _read_lock(path)
    if found is None or found.run_id != run_id:
        raise PublishError(lost_message(path, run_id, found))


def release_lock(output_dir: str, run_id: str) -> bool:
    """Deletes the folder's lock if it holds ``run_id``; True if it did."""
    path = _lock_path(output_dir)
    _, found = _read_lock(path)
    if found is None or found.run_id != run_id:
        return False
    FileSystems.delete([path])
    return True


# ---------------------------------------------------------------------------------------------
# What is in the folder.

@dataclass(frozen=True)
class FolderState:
    """What a run finds in its output folder.

    Attributes:
        present: Name -> size of every file directly in the folder (names not
            starting with ``.``).
        manifest: The folder's manifest, if there is a readable one.
        manifest_problem: Why ``manifest.json`` could not be read, if it is there.
        journal: The journal of an unfinished publish, if any.
    """

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
        for meta in FileSystems.match([join_path(folder, "*")])[0].metadata_list:
            name = meta.path.rstrip("/").rsplit("/", 1)[-1]
            if not name.startswith(".") and not (prefix == "" and name == INDEX_DIR):
                present[prefix + name] = meta.size_in_bytes
    return present


@contextlib.contextmanager
def open_lines(path: str) -> Iterator[Iterator[bytes] | None]:
    """The lines of a text file, read as they are used (newlines kept); None if it does not exist."""
    if not FileSystems.exists(path):
        yield None
        return
    with naming_s3_errors(path), FileSystems.open(path, compression_type="uncompressed") as fh:
        yield iter(fh.readline, b"")


def read_manifest(output_dir: str, data: bytes | None = None, label_counts: bool = False) -> Manifest:
    """The folder's manifest with every shard listed (format 2: read from its shard list).

    The shard list is streamed and checked against ``manifest.json`` (sha256,
    size, lines, split totals). By default shard entries come without label
    counts (the splits' totals keep them), so memory grows with shards, not
    shards x labels.

    Args:
        output_dir: The shard set's folder.
        data: ``manifest.json``'s bytes, if already read.
        label_counts: Keep each shard's label counts.

    Raises:
        ManifestError: The manifest or its shard list cannot be read, or they disagree.
    """
    if data is None:
        data = _read(join_path(output_dir, MANIFEST_NAME))
        if data is None:
            raise ManifestError(f"{join_path(output_dir, MANIFEST_NAME)} does not exist")
    manifest = Manifest.loads(data)
    if manifest.complete:
        return manifest
    with open_lines(join_path(output_dir, manifest.shards_file.file)) as lines:
        return with_shard_list(manifest, lines, label_counts)


def folder_state(output_dir: str) -> FolderState:
    """Reads the folder's listing, manifest (with its shard list) and journal."""
    present = _listing(output_dir)
    manifest, problem = None, None
    data = _read(join_path(output_dir, MANIFEST_NAME))
    if data is not None:
        try:
            manifest = read_manifest(output_dir, data)
        except ManifestError as err:
            problem = str(err)
    journal = None
    data = _read(join_path(output_dir, JOURNAL_NAME))
    if data is not None:
        try:
            journal = Journal.loads(data)
        except ManifestError as err:
            _LOG.warning("ignoring %s: %s", join_path(output_dir, JOURNAL_NAME), err)
    return FolderState(present, manifest, problem, journal)


def check_unlisted(output_dir: str, policy: PublishPolicy) -> None:
    """Refuses to start if the folder holds shard-named files this tool did not publish.

    Raises:
        UsageError: One line naming one such file and how many more.
    """
    state = folder_state(output_dir)
    unlisted = unlisted_shard_files(state.present, state.owned())
    problem = unlisted_problem(output_dir, unlisted, state.manifest_problem)
    if problem and not policy.overwrite_unlisted:
        raise UsageError(problem)


def _delete_local_tree(folder: str) -> None:
    """Deletes a local folder bottom-up without following links (a link is unlinked, as a link)."""
    if not os.path.lexists(folder):
        return
    problem = _link_problem(folder)
    if problem:
        raise PublishError(f"{problem}; refusing to delete through it")
    files, folders = [], []
    for parent, dirs, names in os.walk(folder, topdown=False, onerror=_raise, followlinks=False):
        for name in names + dirs:
            path = os.path.join(parent, name)
            if os.path.islink(path) or _is_junction(path):
                os.unlink(path)
            elif name in dirs:
                folders.append(path)
            else:
                files.append(path)
    if files:
        FileSystems.delete(files)  # the tool's own names (no wildcard characters)
    for path in folders + [folder]:
        os.rmdir(path)


def _raise(err: OSError) -> None:
    raise err


def delete_tree(folder: str) -> None:
    """Deletes ``folder`` and every file below it; nothing if it is not there.

    On local disk no link is followed: a link below the folder is removed as a
    link, and a folder that is itself a link is refused. Object stores (gs://,
    s3://) have no folder objects, only keys under a prefix: the files below it
    are deleted by name.

    Raises:
        PublishError: ``folder`` is a link or a file.
    """
    if _is_local(folder):
        _delete_local_tree(folder)
        return
    below = [m.path for m in FileSystems.match([folder + "/**"])[0].metadata_list]
    present = [p for p in below + [folder] if FileSystems.exists(p)]
    if present:
        FileSystems.delete(present)


def clear_staging(output_dir: str, run_id: str | None = None) -> None:
    """Deletes the staging folder (earlier attempts' too), or only the run's own.

    Raises:
        PublishError: The staging folder is a link (never followed).
    """
    problem = _link_problem(staging_folder(output_dir)) if _is_local(output_dir) else None
    if problem:
        raise PublishError(f"{problem}; refusing to delete through it")
    delete_tree(staging_folder(output_dir, run_id))
    if run_id and _is_local(output_dir):
        try:
            os.rmdir(staging_folder(output_dir))  # the shared folder, once empty
        except OSError:
            pass


def free_bytes(folder: str) -> int | None:
    """Free bytes where ``folder`` lies (local disk), else None."""
    if not _is_local(folder):
        return None
    path = os.path.abspath(folder)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        return os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
    except OSError:
        return None


def prepare_output(output_dir: str, policy: PublishPolicy, job: str) -> None:
    """Everything a publishing run does to its output folder before reading any input.

    Checks the folder can be written, takes the lock, refuses shard-named files
    this tool did not publish, and clears staging left by earlier attempts
    (no other run can be using it: the lock is this run's).

    Raises:
        UsageError: One line saying what to fix; the lock is not left behind.
    """
    check_output_dir(output_dir, policy.run_id)
    acquire_lock(output_dir, policy, job)
    try:
        check_unlisted(output_dir, policy)
        clear_staging(output_dir)
    except BaseException:
        release_lock(output_dir, policy.run_id)
        raise


def published_shards(output_dir: str, policy: PublishPolicy) -> tuple[list[tuple[str, str]], str]:
    """The shards of the splits published in ``output_dir`` that a run may keep, and their compression.

    ``(split, shard path)`` of every shard of the folder's manifest; none
    without a manifest or with ``--drop_other_splits`` (no split is kept).
    Which of them are kept depends on the splits the run writes.

    Raises:
        ManifestError: The manifest or its shard list cannot be read.
    """
    data = None if policy.drop_other_splits else _read(join_path(output_dir, MANIFEST_NAME))
    if data is None:
        return [], "none"
    manifest = read_manifest(output_dir, data)
    return ([(name, join_path(output_dir, shard.file)) for name, split in sorted(manifest.splits.items())
             for shard in split.shards], manifest.compression)


def published_manifest(output_dir: str) -> Manifest | None:
    """The folder's ``manifest.json`` (its splits' totals, without the shard list), or None.

    None when there is none, or when it cannot be read: the checks that need
    it whole (``check_unlisted``, publishing) say why.
    """
    try:
        data = _read(join_path(output_dir, MANIFEST_NAME))
        return None if data is None else Manifest.loads(data)
    except (ManifestError, OSError, BeamIOError) as err:
        _LOG.debug("no readable manifest in %s: %s", output_dir, err)
        return None


def check_replaced_splits(output_dir: str, inputs: Sequence[str],
                          splits: Callable[[], Iterable[str]]) -> None:
    """Refuses, before any input is read, a run that would replace a split other inputs built.

    Args:
        output_dir: The output folder.
        inputs: The run's ``--input`` values.
        splits: Gives the splits the run is known to write (called only when
            the folder holds a split that other inputs built; it may list the
            inputs' top folders). Splits known only once the inputs are listed
            are checked again when the run publishes.

    Raises:
        UsageError: One line naming the split, its records, the inputs that
            built it and ``--replace``.
    """
    old = published_manifest(output_dir)
    if old is None or replace_problem(output_dir, old, old.splits, inputs) is None:
        return
    problem = replace_problem(output_dir, old, splits(), inputs)
    if problem:
        raise UsageError(problem)


def finish_output(output_dir: str, policy: PublishPolicy, ok: bool) -> None:
    """After the run: clears its own staging if it failed, and releases its lock if it holds it.

    Only the run's own staging folder is cleared: if the lock was taken from
    it, the rest may be another run's.
    """
    try:
        if not ok:
            clear_staging(output_dir, policy.run_id)
        release_lock(output_dir, policy.run_id)
    except (OSError, BeamIOError) as err:
        _LOG.warning("could not clean up %s after the run: %s", output_dir, _reason(err))
