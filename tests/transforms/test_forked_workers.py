"""``transforms/forked_workers.py``: the local runner's worker processes are forks of one that loaded Beam."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from transforms import beam_compat, forked_workers


def _run(tmp_path, fn, workers: int = 2, items: int = 8) -> None:
    """Runs ``Create(range(items)) | Map(fn)`` on the local runner with ``workers`` worker processes."""
    options = PipelineOptions(["--direct_running_mode", "multi_processing", "--direct_num_workers", str(workers)])
    with beam.Pipeline(runner=beam_compat.local_runner(options), options=options) as p:
        _ = p | beam.Create(range(items), reshuffle=False) | beam.Map(fn, str(tmp_path))


def _note_process(item: int, folder: str) -> int:
    with open(os.path.join(folder, f"{item}.txt"), "w") as fh:
        fh.write(f"{os.getpid()} {os.getppid()} {os.environ.get('WORKER_ID', '')}")
    return item


def _processes(folder) -> set[tuple[int, int, str]]:
    found = set()
    for name in os.listdir(folder):
        pid, parent, worker = open(os.path.join(folder, name)).read().split(" ")
        found.add((int(pid), int(parent), worker))
    return found


@pytest.mark.slow  # two local worker processes: about 4 CPU s
def test_each_worker_process_is_a_fork_of_the_one_process_that_loaded_beam(tmp_path) -> None:
    _run(tmp_path, _note_process)
    forker = forked_workers._forker
    assert forker is not None and forker.wait_ready()
    seen = _processes(tmp_path)
    assert {parent for _, parent, _ in seen} == {forker.process.pid}  # Beam alone: this process (a new Python)
    assert all(pid not in (os.getpid(), forker.process.pid) for pid, _, _ in seen)
    assert all(worker.startswith("worker_") for _, _, worker in seen)  # Beam's environment reached each
    # the forking process ran none of the pipeline and keeps no worker of it
    assert forker.process.poll() is None
    assert subprocess.run(["pgrep", "-P", str(forker.process.pid)], capture_output=True).stdout == b""


def _die(item: int, folder: str) -> int:
    os._exit(3)


@pytest.mark.slow  # two local worker processes: about 4 CPU s
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # Beam's worker threads
def test_a_forked_worker_that_dies_fails_the_job_and_a_later_job_starts_new_ones(tmp_path) -> None:
    with pytest.raises(Exception, match="SDK worker was lost|exited with return code 3"):
        _run(tmp_path, _die, items=2)
    (tmp_path / "again").mkdir()
    _run(tmp_path / "again", _note_process, items=2)
    assert len(_processes(tmp_path / "again")) >= 1


def test_a_forked_worker_reports_its_exit_status_as_popen_does(tmp_path) -> None:
    forked_workers.start_forking()
    forker = forked_workers._forker
    assert forker is not None and forker.wait_ready()
    env = dict(os.environ, CONTROL_API_SERVICE_DESCRIPTOR="url: 'localhost:1'")
    worker = forker.fork(env)  # no runner listens there: Beam's worker fails to connect, or waits
    assert worker.poll() in (None, 1)
    worker.kill()
    assert worker.wait() in (-signal.SIGKILL, 1)
    assert worker.poll() == worker.returncode


def test_any_other_command_is_started_as_beam_would(tmp_path) -> None:
    started = forked_workers.popen_or_fork(f"{sys.executable} -c 'raise SystemExit(4)'", shell=True,
                                           env=dict(os.environ))
    assert isinstance(started, subprocess.Popen)
    assert started.wait() == 4
