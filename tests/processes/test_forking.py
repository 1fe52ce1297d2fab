"""``transforms/processes/forking.py``: programs forked from one process that loaded their modules."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from transforms.processes import forking

_HERE = __name__
_set_up_ran = False


def exit_as_told(argv: list[str]) -> None:
    """A program for the forking process: says where it runs, then ends as ``EXIT_AS`` tells it."""
    with open(os.environ["NOTE"], "w") as fh:
        fh.write(f"{os.getppid()} {argv[0]} {'json' in sys.modules} {_set_up_ran}")
    print("to stdout")
    print("to stderr", file=sys.stderr)
    how = os.environ["EXIT_AS"]
    if how == "wait":
        signal.pause()
    if how == "raise":
        raise ValueError("failed as told")
    if how.isdigit():
        raise SystemExit(int(how))


def set_up() -> None:
    global _set_up_ran
    _set_up_ran = True


@pytest.fixture
def forker():
    forking.start_forking(["json"], [f"{_HERE}:set_up"], f"{_HERE}:exit_as_told")
    yield forking._forker
    forking.stop_forking()


def _run(tmp_path, how: str) -> tuple[forking.ForkedProgram, list[str]]:
    note = tmp_path / f"note-{how}"
    with open(tmp_path / "out", "a") as out, open(tmp_path / "err", "a") as err:
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            child = forking.fork(dict(os.environ, NOTE=str(note), EXIT_AS=how))
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    assert child is not None
    if how != "wait":
        child.wait()
    return child, (note.read_text().split(" ") if note.exists() else [])


def test_a_child_is_forked_with_its_environment_and_this_process_s_output_and_exit_status(tmp_path, forker) -> None:
    child, (parent, argv0, loaded, set_up_seen) = _run(tmp_path, "0")
    assert child.returncode == 0 and child.poll() == 0
    assert int(parent) == forker.process.pid != os.getpid()  # a child of the forking process
    assert argv0 == _HERE and loaded == "True"  # its modules loaded before the fork
    assert set_up_seen == "True"  # the set-up ran in the forking process, before the fork
    assert (tmp_path / "out").read_text() == "to stdout\n"  # this process's stdout and stderr at the fork
    assert (tmp_path / "err").read_text() == "to stderr\n"
    assert _run(tmp_path, "3")[0].returncode == 3


def test_a_failing_program_ends_with_status_1_and_its_traceback_on_stderr(tmp_path, forker) -> None:
    child, _ = _run(tmp_path, "raise")
    assert child.returncode == 1
    assert "ValueError: failed as told" in (tmp_path / "err").read_text()


def test_a_killed_child_reports_the_signal_as_popen_does(tmp_path, forker) -> None:
    child, _ = _run(tmp_path, "wait")
    assert child.poll() is None
    child.kill()
    assert child.wait() == -signal.SIGKILL


def test_stopping_the_forking_process_kills_a_child_left_and_ends_it(tmp_path, forker) -> None:
    child, _ = _run(tmp_path, "wait")
    forking.stop_forking()
    assert forker.process.returncode == 0
    assert child.wait() == -signal.SIGKILL
    assert forking.fork(dict(os.environ)) is None  # none runs: the caller starts its program itself


def test_a_forking_process_that_fails_to_set_up_answers_none_so_the_caller_starts_its_program_itself() -> None:
    forking.start_forking(["json"], [f"{_HERE}:no_such_function"], f"{_HERE}:exit_as_told")
    try:
        assert forking.fork(dict(os.environ)) is None
        assert forking._forker.process.wait(timeout=30) == 1  # it printed why (to nowhere) and ended
    finally:
        forking.stop_forking()


def test_the_forking_process_ends_when_the_last_block_that_uses_it_ends(tmp_path) -> None:
    with forking.in_use():
        forking.start_forking(["json"], [], f"{_HERE}:exit_as_told")
        first = forking._forker
        with forking.in_use():  # a second pipeline run at the same time in this process
            child, _ = _run(tmp_path, "wait")
        assert forking._forker is first and first.process.poll() is None  # the first's workers live on
        assert child.poll() is None
        child.kill()
    assert forking._forker is None and first.process.returncode == 0
