"""Runs the build job, stopping it before a chosen file operation until it is killed.

Usage::

    python -m tests.pause_at OP PATTERN NTH MARKER -- BUILD_ARGS...
    python -m tests.pause_at OP PATTERN NTH MARKER -- COMMAND ARGS...

Before the NTH call of ``FileSystems.OP`` (``create``, ``rename`` or
``delete``, or ``match``: during a job's checks before its pipeline; or ``read``: the build's
opening of an input image, ``inspect_images.open_local``) on a path matching the regular
expression ``PATTERN`` (for ``rename``, the destination), the process writes ``MARKER`` (JSON with the
operation and path) and waits until it is killed, or until a file
``MARKER.go`` appears: then it goes on with the operation. ``OP`` ``os.rename`` stops
before one file of a batch that ``FileSystems.rename`` hands to the local
file system, which renames them one by one. A test watching for the
marker then knows exactly where the job stands, checks the output folder,
and sends SIGKILL. Nothing else about the job changes: it is
``beam_jobs.build_shards.run`` on Beam's in-process runner, whose workers are
threads of this process. With a ``COMMAND`` (``build``, ``verify``, ...) first,
the job runs as ``tfrecord-shards COMMAND`` does (``beam_jobs.cli.main.main``),
its logging and failure lines included.

With ``PAUSE_AT_MOVE_CHUNK=N`` in the environment, the publish hands every
rename to its parallel step (``MoveStaged``) in chunks of N, however few there
are (``shard_sink.PARALLEL_MOVES`` 0). With ``PAUSE_AT_DONE_EVERY=N``, a bundle that reads
inputs closes its run file and writes its done list every N records
(``inspect_images.DONE_LIST_RECORDS``). The marker lists the functions on the
stack where the job stopped (``stack``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import traceback
from typing import Callable

from apache_beam.io.filesystems import FileSystems

_OPS = ("create", "rename", "delete", "os.rename", "match", "read")
_os_rename = os.rename


def _stop_here(marker: str, op: str, path: str) -> None:
    temp = marker + ".tmp"
    with open(temp, "w", encoding="utf-8") as fh:
        json.dump({"op": op, "path": path, "pid": os.getpid(),
                   "stack": [frame.name for frame in traceback.extract_stack()]}, fh)
    _os_rename(temp, marker)
    resume, waiting = marker + ".go", threading.Event()
    while not os.path.exists(resume):  # until SIGKILL, or until told to go on
        waiting.wait(0.01)


def _watch(op: str, pattern: str, nth: int, marker: str) -> None:
    """Wraps ``FileSystems.<op>`` (or ``os.rename``) to stop before its ``nth`` call on a matching path."""
    wanted = re.compile(pattern)
    if op == "read":
        from transforms import inspect_images

        original: Callable = inspect_images.open_local
    else:
        original = _os_rename if op == "os.rename" else getattr(FileSystems, op)
    seen = 0
    lock = threading.Lock()

    def targets(args: tuple) -> list[str]:
        if op in ("create", "read"):
            return [args[0]]
        if op == "rename":
            return list(args[1])
        if op == "os.rename":
            return [os.fspath(args[1])]
        return list(args[0])  # delete, match: a list of paths or patterns

    def wrapper(*args, **kwargs):
        nonlocal seen
        for path in targets(args):
            if wanted.search(path):
                with lock:
                    seen += 1
                    if seen == nth:
                        _stop_here(marker, op, path)
        return original(*args, **kwargs)

    if op == "os.rename":
        os.rename = wrapper
    elif op == "read":
        inspect_images.open_local = wrapper
    else:
        setattr(FileSystems, op, staticmethod(wrapper))


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") != 4 or argv[0] not in _OPS:
        print(__doc__, file=sys.stderr)
        return 2
    op, pattern, nth, marker = argv[:4]
    _watch(op, pattern, int(nth), marker)
    if os.environ.get("PAUSE_AT_MOVE_CHUNK"):
        from transforms import shard_sink

        shard_sink.PARALLEL_MOVES, shard_sink.RENAME_CHUNK = 0, int(os.environ["PAUSE_AT_MOVE_CHUNK"])
    if os.environ.get("PAUSE_AT_DONE_EVERY"):
        from transforms import inspect_images

        inspect_images.DONE_LIST_RECORDS = int(os.environ["PAUSE_AT_DONE_EVERY"])
    if argv[5:] and not argv[5].startswith("-"):
        from beam_jobs.cli import main as cli

        return cli.main(argv[5:])
    from beam_jobs import build_shards

    return build_shards.run(argv[5:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
