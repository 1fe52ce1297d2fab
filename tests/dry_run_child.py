"""Runs Dataflow dry runs of the jobs in this process with every network call refused, and says what happened.

Used by ``tests/e2e/test_offline_dry_runs.py`` (in a network namespace without
network when the machine allows one). Any ``connect`` or name lookup is
recorded and refused, so a dry run that reached for storage or credentials
shows here at once instead of after minutes of retries.

Run: ``python -m tests.dry_run_child RESULT.json`` with the runs as JSON on
stdin: ``[[module, [arg, ...]], ...]``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import socket
import sys
import traceback

_ATTEMPTS: list[str] = []


def _refused(what: str):
    def refuse(*args, **kwargs):
        _ATTEMPTS.append(f"{what} {args[1:2] if what == 'connect' else args[:2]}")
        raise OSError(101, f"network is unreachable (test: {what} refused)")
    return refuse


def _guard_network() -> None:
    socket.socket.connect = _refused("connect")
    socket.socket.connect_ex = _refused("connect")
    socket.getaddrinfo = _refused("getaddrinfo")
    socket.create_connection = _refused("create_connection")


DRY_RUN = ["--runner", "DataflowRunner", "--dry_run", "True", "--project", "my-project-123",
           "--region", "us-central1", "--temp_location", "gs://my-bucket-123/tmp",
           "--staging_location", "gs://my-bucket-123/staging"]


def main(result_path: str) -> None:
    runs = json.load(sys.stdin)
    _guard_network()
    results = []
    for module, argv in runs:
        job = importlib.import_module(module)
        before = len(_ATTEMPTS)
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = job.run([*argv, *DRY_RUN])
        except Exception:  # noqa: BLE001 - the test reports it with the run it came from
            status, err = -1, io.StringIO(traceback.format_exc())
        results.append({"module": module, "argv": argv, "status": status, "network": _ATTEMPTS[before:],
                        "dry_run_line": "Dry run: the job graph has " in out.getvalue(),
                        "stderr": err.getvalue()[-1500:]})
    with open(result_path, "w") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main(sys.argv[1])
