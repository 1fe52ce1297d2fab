"""Progress counters that a job's process reads while its local runner's workers count.

Beam's metrics cannot be read while the local runner runs, so each worker process also writes its
counts, at most once every ``WRITE_SECONDS``, to its own file in the folder ``PROGRESS_ENV`` names;
the job's process sums the files. Without the variable (Dataflow, Flink) ``note`` does nothing.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
import uuid
from typing import Callable, Mapping

__all__ = ["PROGRESS_ENV", "WRITE_SECONDS", "note", "read_counts", "flush", "worker_id", "Tally", "INPUTS_LISTED", "IMAGES_READ",
           "IMAGES_ACCEPTED", "IMAGES_DUPLICATE", "RECORDS_READ", "RECORDS_WRITTEN"]

PROGRESS_ENV = "TFRECORD_SHARDS_PROGRESS_DIR"

# The kinds the steps count (items, bytes).
INPUTS_LISTED = "inputs_listed"  # build: input files and manifest rows listed
IMAGES_READ = "images_read"  # build: inputs inspected (read, or rejected unread), bytes read
IMAGES_ACCEPTED = "images_accepted"  # build: inputs that passed inspection
IMAGES_DUPLICATE = "images_duplicate"  # build: accepted copies of an image kept elsewhere, not written
RECORDS_READ = "records_read"  # source: records read, framed bytes
RECORDS_WRITTEN = "records_written"  # sink: records written to shards, framed bytes
# A process writes its counts file at most this often (each write costs a file and a rename).
WRITE_SECONDS = 1.0

_lock = threading.Lock()
_counts: dict[str, dict[str, list[int]]] = {}  # folder -> kind -> [items, bytes]
_flushed: dict[str, float] = {}  # folder -> when its counts were last written
_pending: set[str] = set()  # folders whose counts a timer will write
_clock = time.monotonic


def _later(delay: float, fn: Callable[[], None]) -> None:
    """Calls ``fn`` in ``delay`` seconds, on a daemon thread."""
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    timer.start()


_worker = [uuid.uuid4().hex]


def _new_worker_id() -> None:
    _worker[0] = uuid.uuid4().hex
    _pending.clear()  # the parent's timers do not run in the child


os.register_at_fork(after_in_child=_new_worker_id)


def worker_id() -> str:
    """This worker process's random id (a forked child gets its own), unlike a pid unique across machines."""
    return _worker[0]


def note(kind: str, items: int = 1, nbytes: int = 0) -> None:
    """Counts ``items`` and ``nbytes`` of ``kind`` (e.g. ``images_read``), if a job listens."""
    folder = os.environ.get(PROGRESS_ENV)
    if not folder:
        return
    with _lock:
        entry = _counts.setdefault(folder, {}).setdefault(kind, [0, 0])
        entry[0] += items
        entry[1] += nbytes
        _write_soon(folder, timer=False)


def flush(now: bool = False) -> None:
    """Writes this process's counts (e.g. at the end of a bundle) once ``WRITE_SECONDS`` are up; with ``now``, now."""
    folder = os.environ.get(PROGRESS_ENV)
    if not folder:
        return
    with _lock:
        if folder in _counts:
            if now:
                _flushed.pop(folder, None)
            _write_soon(folder, timer=True)


def _write_soon(folder: str, timer: bool) -> None:
    """Writes the folder's counts if ``WRITE_SECONDS`` passed since the last write; else, with
    ``timer``, has a timer write them when they have (one timer at a time). Holds ``_lock``."""
    now = _clock()
    wait = _flushed.get(folder, float("-inf")) + WRITE_SECONDS - now
    if wait <= 1e-6:
        _write(folder, _counts[folder])
        _flushed[folder] = now
    elif timer and folder not in _pending:
        _pending.add(folder)
        _later(wait, lambda: _write_pending(folder))


def _write_all_pending() -> None:
    """Writes the counts a timer was to write (the process is exiting: the timer would not)."""
    with _lock:
        for folder in sorted(_pending):
            _write(folder, _counts[folder])
        _pending.clear()


# A worker process's last counts are written when it exits (Beam's process workers exit normally).
atexit.register(_write_all_pending)


def _write_pending(folder: str) -> None:
    """The timer's write (put off again if a count was written meanwhile, less than a second ago)."""
    with _lock:
        _pending.discard(folder)
        _write_soon(folder, timer=True)


def _write(folder: str, counts: Mapping[str, list[int]]) -> None:
    path = os.path.join(folder, f"{worker_id()}.json")
    temp = f"{path}.{threading.get_ident()}.tmp"
    try:
        with open(temp, "w", encoding="utf-8") as fh:
            json.dump(counts, fh)
        os.replace(temp, path)
    except OSError:  # the job's process removed the folder: the run is over
        pass


def read_counts(folder: str) -> dict[str, tuple[int, int]]:
    """Returns kind -> (items, bytes), summed over every process's file in ``folder``."""
    total: dict[str, tuple[int, int]] = {}
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".json")]
    except OSError:
        return {}
    for name in names:
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                counts = json.load(fh)
        except (OSError, ValueError):  # replaced or removed while read: skipped this time
            continue
        for kind, (items, nbytes) in counts.items():
            before = total.get(kind, (0, 0))
            total[kind] = (before[0] + items, before[1] + nbytes)
    return total


class Tally:
    """Counts of one kind added up locally and passed to ``note`` every ``every`` items (records)."""

    def __init__(self, kind: str, every: int = 256) -> None:
        self._kind = kind
        self._every = every
        self._items = 0
        self._bytes = 0

    def add(self, items: int = 1, nbytes: int = 0) -> None:
        """Counts ``items`` and ``nbytes`` more."""
        self._items += items
        self._bytes += nbytes
        if self._items >= self._every:
            self._pass_on()

    def _pass_on(self) -> None:
        if self._items or self._bytes:
            note(self._kind, self._items, self._bytes)
            self._items = self._bytes = 0

    def flush(self) -> None:
        """Passes the counts gathered so far to ``note`` and writes this process's counts."""
        self._pass_on()
        flush()
