"""The lock a publishing run holds on its output folder: its content and the rules around it.

The I/O is in ``transforms.storage.run_lock_files``. Only a lock taken in this pid namespace (never
judged by host name) can be seen to be stale: its process is gone, or another has its pid.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Callable

from transforms.errors import ManifestError
from transforms.shardset.manifest import parse_json

__all__ = ["LOCK_NAME", "LockInfo", "is_stale", "held_message", "lost_message"]

LOCK_NAME = ".tfrecord-shards.lock"


@dataclass(frozen=True)
class LockInfo:
    """Who holds an output folder: the run, its job, and the host and pid of the process that took it.

    Attributes:
        process_start: Its start time as the OS tells it ('' if unknown), so a reused pid is not
            taken for the holder.
        pid_space: Where ``pid`` means that process ('' if the OS does not tell: never stale).
    """

    run_id: str
    job: str
    host: str
    pid: int
    process_start: str = ""
    pid_space: str = ""

    def dumps(self) -> bytes:
        return (json.dumps(dataclasses.asdict(self), sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def loads(cls, data: bytes) -> "LockInfo":
        """Parses a lock's bytes (``ManifestError``: not a lock this tool wrote)."""
        obj = parse_json(data, "lock is not JSON")
        if not isinstance(obj, dict):
            raise ManifestError("lock is not a JSON object")
        run_id, job, host = obj.get("run_id"), obj.get("job"), obj.get("host")
        pid, start, space = obj.get("pid"), obj.get("process_start", ""), obj.get("pid_space", "")
        if not (isinstance(run_id, str) and isinstance(job, str) and isinstance(host, str)
                and isinstance(pid, int) and not isinstance(pid, bool) and isinstance(start, str)
                and isinstance(space, str)):
            raise ManifestError("lock lacks run_id, job, host or pid")
        return cls(run_id, job, host, pid, start, space)


def is_stale(info: LockInfo, pid_space: str, process_start_of: Callable[[int], str | None]) -> bool:
    """True if the lock's run is known to be gone (a lock of another ``pid_space`` never is).

    ``process_start_of``: pid -> that process's start time ('' if the OS does not tell), None if none runs.
    """
    if not info.pid_space or info.pid_space != pid_space:
        return False
    now = process_start_of(info.pid)
    return now is None or bool(info.process_start and now and now != info.process_start)


def held_message(path: str, info: LockInfo | None) -> str:
    """One line: the folder is in use, by whom, and how to clear a stale lock."""
    who = (f"run {info.run_id} of {info.job} (pid {info.pid} on {info.host})" if info is not None
           else "a lock this tool cannot read")
    return (f"another job is writing to this folder: {path} is held by {who}; wait for it to "
            f"end, or, if no job is running, delete {path} and run again")


def lost_message(path: str, run_id: str, found: LockInfo | None) -> str:
    """One line: this run no longer holds the lock, so it does not publish."""
    now = f"run {found.run_id} of {found.job} (pid {found.pid} on {found.host})" if found else "nobody"
    return (f"{path} no longer holds this run ({run_id}) but {now}: another job writes to this "
            "folder, so this run stops before writing manifest.json")
