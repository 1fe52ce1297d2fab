"""When a command started, for the time its summary reports; no Beam.

A job's summary (``Published ... in N s``) counts from the start of the command, not of its pipeline: importing
Beam and checking the inputs take seconds a person waits through too. A command run as a process notes its
process's start time; a job called as a function counts from the call.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator

__all__ = ["process_started", "mark_command_start", "command_running", "run_started", "mark_process_command",
           "job_ends_process"]

_marked: float | None = None
_process_command = False  # this process ends with the job it runs (a command, not a call)
_start: tuple[int, float] | None = None  # (pid, process_started()) once read


def process_started() -> float:
    """When this process started, on the ``time.monotonic`` clock (read once per process); now where that
    cannot be read.

    Linux gives a process's start in clock ticks since boot (``/proc/self/stat``, field 22) and the seconds
    since boot (``/proc/uptime``); both count from boot, so their difference is the process's age. Both
    count in hundredths, so a second reading could move the start by 0.01 s: the first one is kept.
    """
    global _start
    if _start is None or _start[0] != os.getpid():  # a forked child reads its own
        _start = (os.getpid(), _read_start())
    return _start[1]


def _read_start() -> float:
    now = time.monotonic()
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 is the 20th after ")"
    except (OSError, ValueError, IndexError):
        return now
    return now - age if age >= 0 else now


def mark_command_start(at: float | None = None) -> None:
    """Notes when the command the next job run belongs to started (default: this process's start),
    unless a start is noted already."""
    global _marked
    if _marked is None:
        _marked = process_started() if at is None else at


@contextlib.contextmanager
def command_running(at: float | None = None) -> Iterator[None]:
    """Within the block, a job run counts from ``at`` (default: this process's start); after it, from its call."""
    global _marked
    _marked = None
    mark_command_start(at)
    try:
        yield
    finally:
        _marked = None


def run_started() -> float:
    """When the job run that asks started: the command's start if one was noted (taken once), else now."""
    global _marked
    at, _marked = _marked, None
    return time.monotonic() if at is None else at


def mark_process_command() -> None:
    """Notes that this process is a command's: it ends once its job has said how it ended."""
    global _process_command
    _process_command = True


def job_ends_process() -> bool:
    """Whether this process ends with the job it runs (``mark_process_command``)."""
    return _process_command
