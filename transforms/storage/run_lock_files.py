"""The output folder's lock on storage: taken, checked and released by a publishing run.

The lock is created exclusively and read back; on a store that ignores the condition two runs
starting together race, and the check before the manifest is written catches the loser.
"""

from __future__ import annotations

import logging
import os
import socket

from transforms.errors import ManifestError, PublishError, UsageError
from transforms.shardset.naming import join_path
from transforms.shardset.ownership import PublishPolicy
from transforms.shardset.run_lock import LOCK_NAME, LockInfo, held_message, is_stale, lost_message
from transforms.storage.files import STORAGE_ERRORS, error_reason, read_if_present
from transforms.storage.folders import delete_claimed, delete_files
from transforms.storage.writing import create_exclusive

__all__ = ["acquire_lock", "check_lock", "release_lock", "pid_space"]

_LOG = logging.getLogger(__name__)


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
        pass
    return ""


def pid_space() -> str:
    """Where this process's pid means this process: the boot id and pid namespace inode ('' if unknown);
    host names repeat (containers, cloned machines)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}" if boot else ""
    except OSError:
        return ""


def _read_lock(path: str) -> tuple[bool, LockInfo | None]:
    """(the lock exists, its content if this tool can read it)."""
    data = read_if_present(path)
    if data is None:
        return False, None
    try:
        return True, LockInfo.loads(data)
    except ManifestError:
        return True, None


def acquire_lock(output_dir: str, policy: PublishPolicy, job: str) -> None:
    """Takes the folder's lock for this run, breaking a stale one (``UsageError``: another run holds it)."""
    path = join_path(output_dir, LOCK_NAME)
    mine = LockInfo(policy.run_id, job, socket.gethostname(), os.getpid(), _process_start(os.getpid()) or "",
                    pid_space())
    for _ in range(3):
        try:
            created = create_exclusive(path, mine.dumps())
        except STORAGE_ERRORS as err:
            raise UsageError(f"cannot create the lock {path}: {error_reason(err)}") from err
        try:
            exists, found = _read_lock(path)
        except STORAGE_ERRORS as err:  # e.g. a folder of that name
            raise UsageError(f"cannot read the lock {path} ({error_reason(err)}); it is not a lock this "
                             "tool wrote: if no job is running, remove it and run again") from err
        if created and found is not None and found.run_id == policy.run_id:
            return
        if not exists:
            continue  # removed in the meantime: try again
        if created or found is None or not is_stale(found, mine.pid_space, _process_start):
            raise UsageError(held_message(path, found))
        _LOG.warning("removing the stale lock %s of run %s (pid %d on %s is gone)", path, found.run_id,
                     found.pid, found.host)
        delete_claimed(path, f"{path}.stale-{policy.run_id}")  # of two runs breaking it, one removes it
    raise UsageError(held_message(path, None))


def _holder(output_dir: str, run_id: str) -> tuple[str, LockInfo | None, bool]:
    """(the lock's path, its content if readable, whether it holds ``run_id``)."""
    path = join_path(output_dir, LOCK_NAME)
    _, found = _read_lock(path)
    return path, found, found is not None and found.run_id == run_id


def check_lock(output_dir: str, run_id: str) -> None:
    """Raises PublishError unless the folder's lock holds ``run_id``."""
    path, found, held = _holder(output_dir, run_id)
    if not held:
        raise PublishError(lost_message(path, run_id, found))


def release_lock(output_dir: str, run_id: str) -> bool:
    """Deletes the folder's lock if it holds ``run_id``; True if it did."""
    path, _, held = _holder(output_dir, run_id)
    if held:
        delete_files([path])
    return held
