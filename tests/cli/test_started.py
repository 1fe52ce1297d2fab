"""A command's summary counts from its start: the process's, or the call's for a job called as a function."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from beam_jobs.cli import started

IMPORTED_AT = time.monotonic()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_process_started_before_this_module_was_imported() -> None:
    at = started.process_started()
    assert IMPORTED_AT - 24 * 3600 < at <= IMPORTED_AT


def test_a_fresh_process_started_when_it_was_spawned() -> None:
    # Not the age of the machine nor of the parent: between the spawn and the child's own reading
    # (one system-wide monotonic clock; /proc gives the start in clock ticks, hence the margin).
    code = ("import time; from beam_jobs.cli import started; "
            "print(started.process_started(), time.monotonic())")
    spawned = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": ROOT})
    at, child_now = (float(word) for word in done.stdout.split()[-2:])
    assert spawned - 0.05 <= at <= child_now, (spawned, done.stdout)


def test_a_run_takes_the_commands_start_once() -> None:
    with started.command_running(123.0):
        started.mark_command_start()  # logging set up for the command: the start noted stays
        assert started.run_started() == 123.0
        assert started.run_started() > 123.0  # a second run counts from its own call
    before = time.monotonic()
    assert started.run_started() >= before


def test_a_command_start_is_forgotten_after_the_command() -> None:
    with started.command_running(5.0):
        pass
    before = time.monotonic()
    assert started.run_started() >= before


def test_the_process_start_is_read_once_not_moved_by_a_coarser_clock(monkeypatch) -> None:
    # /proc/uptime counts in hundredths: two readings a few ms apart can put the start 0.01 s apart,
    # and a summary (which reads it) then says more seconds than the process had lived when asked.
    ticks = iter([100.000, 100.004])
    uptimes = iter(["50.00 1.0\n", "50.01 1.0\n"])
    real_open = open

    def fake_open(path, *args, **kwargs):
        if path == "/proc/uptime":
            import io
            return io.StringIO(next(uptimes))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(started, "_start", None, raising=False)  # not read yet in this process
    monkeypatch.setattr(started.time, "monotonic", lambda: next(ticks))
    monkeypatch.setattr(started, "open", fake_open, raising=False)
    first = started.process_started()
    assert started.process_started() == first
