"""Runs publishing jobs once each, copying the output folder aside before chosen file operations.

Usage::

    python -m tests.publish_snapshots PLAN.json

``PLAN.json`` lists runs, each ``{"command": "build" | "reshard" | "append",
"argv": [...], "out": folder, "snapshots": folder, "steps": [[op, name, nth], ...],
"trace": file}``. Each job runs in this process in turn (``beam_jobs.<job>.run``
on Beam's in-process runner, whose workers are threads of this process), with
every create, rename (each file) and delete in ``out`` recorded (``traced``).
Just before the operation that is the ``nth`` of its ``(op, name)`` (``name``
with run ids and temporary names as ``*``, as ``generic`` writes it) and is
listed in ``steps``, the thread making it copies ``out`` to
``snapshots/<its index in steps>``. That copy is what a SIGKILL there leaves:
what the job had written to the file system, and its lock naming a process
that has ended once this one exits. Every recorded ``(op, name)`` is written
to ``trace`` (JSON) at the end.

``tests/reliability/test_publish_kill.py`` replays kills from these copies:
one uninterrupted run per publish instead of one killed process per step.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import threading
from typing import Callable, Iterator

from apache_beam.io.filesystems import FileSystems

Op = tuple[str, str]


def generic(rel: str) -> str:
    """A name in the folder with its run ids and temporary names as ``*``."""
    return re.sub("[0-9a-f]{32}", "*", rel)


@contextlib.contextmanager
def traced(out: str, before: Callable[[Op], None] | None = None) -> Iterator[list[Op]]:
    """Records ``(op, name in the folder)`` of every create, rename (each file) and delete call in ``out``.

    ``before(entry)``, if given, is called with an operation's entry after it
    is recorded and before the operation is made, in the thread making it.
    """
    seen: list[Op] = []
    create, delete, rename = FileSystems.create, FileSystems.delete, os.rename

    def record(entry: Op) -> None:
        seen.append(entry)
        if before is not None:
            before(entry)

    def traced_create(path, *args, **kwargs):
        if path.startswith(out + "/"):
            record(("create", path[len(out) + 1:]))
        return create(path, *args, **kwargs)

    def traced_delete(paths, *args, **kwargs):
        mine = [p for p in paths if p.startswith(out + "/")]
        if mine:
            record(("delete", min(generic(p[len(out) + 1:]) for p in mine)))  # one call: one moment
        return delete(paths, *args, **kwargs)

    def traced_rename(source, target, *args, **kwargs):
        target = os.fspath(target)
        if target.startswith(out + "/"):
            record(("os.rename", target[len(out) + 1:]))
        return rename(source, target, *args, **kwargs)

    FileSystems.create, FileSystems.delete = staticmethod(traced_create), staticmethod(traced_delete)
    os.rename = traced_rename
    try:
        yield seen
    finally:
        FileSystems.create, FileSystems.delete = staticmethod(create), staticmethod(delete)
        os.rename = rename


def _snapshotting(out: str, steps: list[tuple[str, str, int]], folder: str) -> Callable[[Op], None]:
    """A ``before`` for ``traced`` that copies ``out`` to ``folder/<index>`` before each of ``steps``."""
    wanted = {step: i for i, step in enumerate(steps)}
    count: dict[Op, int] = {}
    lock = threading.Lock()

    def before(entry: Op) -> None:
        key = (entry[0], generic(entry[1]))
        with lock:  # the workers are threads
            count[key] = count.get(key, 0) + 1
            index = wanted.get((*key, count[key]))
        if index is not None:
            shutil.copytree(out, os.path.join(folder, str(index)), symlinks=True)

    return before


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    from beam_jobs import append_shards, build_shards, reshard

    jobs = {"build": build_shards, "reshard": reshard, "append": append_shards}
    with open(argv[0], encoding="utf-8") as fh:
        plan = json.load(fh)
    for run in plan:
        steps = [tuple(step) for step in run["steps"]]
        before = _snapshotting(run["out"], steps, run["snapshots"])
        with traced(run["out"], before) as seen:
            status = jobs[run["command"]].run(run["argv"])
        if status != 0:
            print(f"{run['command']} {run['argv']} exited {status}", file=sys.stderr)
            return 1
        with open(run["trace"], "w", encoding="utf-8") as fh:
            json.dump(seen, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
