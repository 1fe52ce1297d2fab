#!/usr/bin/env python
"""A worker of Beam's worker pool, started as the pool's ``--container_executable`` (tests only).

The pool calls it as a container's boot is called (``--id``,
``--control_endpoint``, ``--logging_endpoint``, ``--artifact_endpoint``,
``--provision_endpoint``); it runs a bare SDK harness on the control endpoint,
as the pool's own ``python -c 'SdkHarness(...).run()'`` does: the job's
options are not handed to it (``transforms/worker_options.py`` carries them).

With ``TFRS_WORKER_PAUSE_AT`` set to JSON ``{"op", "pattern", "nth",
"marker"}``, the worker first installs a pause: before its ``nth`` file
system ``op`` (``create``, ``rename``: the destination, or ``delete``) on a
path matching the regular expression ``pattern``, on any of Beam's file
systems (local, s3://, gs://, also those the project makes per process), it
writes ``marker`` (JSON: op, path, pid) and waits until it is killed
(SIGKILL) or ``marker.go`` appears. ``marker`` lies in a folder the test and
the workers share (not /tmp: each sees its own). A worker that boots when
``marker`` already exists installs nothing, so the run after the kill, on the
same pool, goes through.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
from typing import Any, Callable

PAUSE_ENV = "TFRS_WORKER_PAUSE_AT"
_OPS = ("create", "rename", "delete")


def _targets(op: str, args: tuple) -> list[str]:
    """The paths a file system call names: for ``rename``, the destinations."""
    if op == "create":
        return [args[0]]
    if op == "rename":
        return list(args[1])
    return list(args[0])


class _Pause:
    """Counts ``op`` calls on paths matching ``pattern`` across every file system; stops before the nth."""

    def __init__(self, op: str, pattern: str, nth: int, marker: str) -> None:
        if op not in _OPS:
            raise ValueError(f"{PAUSE_ENV}: op {op!r} is not one of {', '.join(_OPS)}")
        self.op, self.wanted, self.nth, self.marker = op, re.compile(pattern), nth, marker
        self.seen = 0
        self.lock = threading.Lock()
        self.inside = threading.local()  # a file system's call that calls another counts once

    def stop(self, path: str) -> None:
        temp = self.marker + ".tmp"
        with open(temp, "w", encoding="utf-8") as fh:
            json.dump({"op": self.op, "path": path, "pid": os.getpid()}, fh)
        os.rename(temp, self.marker)
        waiting = threading.Event()
        while not os.path.exists(self.marker + ".go"):  # until SIGKILL, or until told to go on
            waiting.wait(0.01)

    def wrap(self, original: Callable, bound: bool) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if getattr(self.inside, "active", False):
                return original(*args, **kwargs)
            self.inside.active = True
            try:
                for path in _targets(self.op, args[1:] if bound else args):
                    if self.wanted.search(path):
                        with self.lock:
                            self.seen += 1
                            hit = self.seen == self.nth
                        if hit:
                            self.stop(path)
                return original(*args, **kwargs)
            finally:
                self.inside.active = False

        wrapper.__wrapped_by_pause__ = True  # type: ignore[attr-defined]
        return wrapper

    def install(self) -> None:
        """Wraps ``op`` on ``FileSystems`` and on every file system class, now and defined later."""
        from apache_beam.io.filesystem import FileSystem
        from apache_beam.io.filesystems import FileSystems

        setattr(FileSystems, self.op, staticmethod(self.wrap(getattr(FileSystems, self.op), bound=False)))

        def wrap_class(cls: type) -> None:
            method = cls.__dict__.get(self.op)
            if callable(method) and not getattr(method, "__wrapped_by_pause__", False):
                setattr(cls, self.op, self.wrap(method, bound=True))

        def every_subclass(cls: type):
            for sub in cls.__subclasses__():
                yield sub
                yield from every_subclass(sub)

        for cls in list(every_subclass(FileSystem)):
            wrap_class(cls)

        def init_subclass(cls, **kwargs):
            wrap_class(cls)

        FileSystem.__init_subclass__ = classmethod(init_subclass)  # type: ignore[assignment]


def install_pause(setting: str) -> None:
    """Installs the pause ``setting`` (``PAUSE_ENV``'s JSON) unless its marker exists already."""
    found = json.loads(setting)
    if os.path.exists(found["marker"]):
        return
    # Beam's file systems, loaded as a worker would load them, before wrapping
    import apache_beam.io.localfilesystem  # noqa: F401
    try:
        import apache_beam.io.aws.s3filesystem  # noqa: F401
    except ImportError:  # no boto3: no s3://
        pass

    _Pause(found["op"], found["pattern"], int(found["nth"]), found["marker"]).install()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for flag in ("id", "control_endpoint", "logging_endpoint", "artifact_endpoint", "provision_endpoint"):
        parser.add_argument(f"--{flag}", default="")
    args, _ = parser.parse_known_args(argv)
    if os.environ.get(PAUSE_ENV):
        install_pause(os.environ[PAUSE_ENV])
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    # As worker_pool_main's python -c: no state cache, the default data buffer time.
    SdkHarness(args.control_endpoint, worker_id=args.id, state_cache_size=0, data_buffer_time_limit_ms=-1).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
