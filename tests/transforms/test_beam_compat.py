"""``transforms/beam_compat.py``: the reaches into Beam's internals, each against the Beam they were checked on."""

from __future__ import annotations

import inspect
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from unittest import mock

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.transforms import core, userstate

from transforms import beam_compat
from transforms.processes import forking

ROOT = Path(__file__).resolve().parents[2]


def _lost_stream(answered: threading.Event):
    """A worker's control stream that answers nothing and breaks, as when the worker is killed."""
    answered.wait(5)
    raise RuntimeError("stream broken (the worker process is gone)")
    yield  # a generator


@pytest.mark.slow  # a worker pool started and its control stream broken: about 35 CPU s on 2 loaded cores
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the broken stream's
def test_an_instruction_of_a_worker_whose_control_stream_breaks_fails_instead_of_waiting_forever() -> None:
    beam_compat.local_runner(PipelineOptions(["--runner", "PortableRunner"]))  # installs it on any runner
    connection = worker_handlers.ControlConnection()
    pushed = threading.Event()
    connection.set_input(_lost_stream(pushed))
    waiting = connection.push(beam_fn_api_pb2.InstructionRequest())
    pushed.set()
    with pytest.raises(RuntimeError, match="SDK worker was lost"):
        waiting.get(timeout=10)  # Beam 2.77 alone: no answer ever comes
    connection._read_thread.join(timeout=30)
    later = connection.push(beam_fn_api_pb2.InstructionRequest())  # sent once the stream is gone
    with pytest.raises(RuntimeError, match="SDK worker was lost"):
        later.get(timeout=10)


class _CountFn(beam.DoFn):
    """A DoFn with user state: Beam finds its spec among its methods' default arguments."""

    COUNT = userstate.BagStateSpec("count", VarIntCoder())

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        count.add(1)
        yield element


class _TwiceFn(beam.DoFn):
    """A DoFn that names the same state twice: Beam refuses it."""

    COUNT = userstate.BagStateSpec("count", VarIntCoder())

    def process(self, element, a=beam.DoFn.StateParam(COUNT), b=beam.DoFn.StateParam(COUNT)):
        yield element


def test_a_dofns_methods_are_inspected_once_however_often_beam_asks_for_its_specs() -> None:
    beam_compat.install_construction_memos()
    fn = _CountFn()
    with mock.patch.object(inspect, "signature", wraps=inspect.signature) as signature:
        assert userstate.is_stateful_dofn(fn)
        first = signature.call_count
        for _ in range(7):  # as ParDo, each visit of the pipeline and its translation ask
            assert userstate.is_stateful_dofn(fn)
            userstate.validate_stateful_dofn(fn)
        assert signature.call_count == first  # Beam 2.77 alone: about 35 more at each question
    states, timers = userstate.get_dofn_specs(fn)
    assert states == {_CountFn.COUNT} and timers == set()
    states.clear()  # each answer is the caller's own
    assert userstate.get_dofn_specs(fn)[0] == {_CountFn.COUNT}
    assert not userstate.is_stateful_dofn(beam.Map(str).fn)  # another DoFn: its own answer


def test_a_dofn_whose_specs_are_invalid_is_refused_each_time() -> None:
    beam_compat.install_construction_memos()
    fn = _TwiceFn()
    for _ in range(2):
        with pytest.raises(ValueError, match="duplicate"):
            userstate.get_dofn_specs(fn)


def test_a_functions_arguments_are_read_again_once_its_defaults_change() -> None:
    beam_compat.install_construction_memos()

    def f(element, scale=2, *, extra=None):
        return element

    assert core.get_function_args_defaults(f) == (["element", "scale"], [2])
    f.__defaults__ = (3,)
    assert core.get_function_args_defaults(f) == (["element", "scale"], [3])
    fn = _CountFn()
    args, defaults = core.get_function_args_defaults(fn.process)  # bound: without self
    assert args == ["element", "count"] and len(defaults) == 1
    args.append("changed")  # each answer is the caller's own
    assert core.get_function_args_defaults(_CountFn().process)[0] == ["element", "count"]
    assert core.get_function_args_defaults(str.upper) == (["self"], [])  # no Python function: asked each time


def test_a_view_of_the_options_is_made_once_and_reads_and_writes_their_shared_values() -> None:
    from apache_beam.options.pipeline_options import StandardOptions, TypeOptions

    beam_compat.install_construction_memos()
    options = PipelineOptions(["--runner", "DirectRunner", "--no_pipeline_type_check"])
    view = options.view_as(TypeOptions)
    assert options.view_as(TypeOptions) is view  # Beam 2.77 alone: a new parser and parse each time
    assert view.pipeline_type_check is False
    options.view_as(StandardOptions).runner = "SomeRunner"  # a write through one view
    assert options.view_as(StandardOptions).runner == "SomeRunner" == options.get_all_options()["runner"]
    other = PipelineOptions(["--pipeline_type_check"])  # other options: their own views
    assert other.view_as(TypeOptions).pipeline_type_check is True and view.pipeline_type_check is False
    options._all_options = dict(options._all_options, pipeline_type_check=True)  # the values replaced
    assert options.view_as(TypeOptions) is not view and options.view_as(TypeOptions).pipeline_type_check is True


def _run_on_workers(tmp_path, fn, items: int = 8) -> None:
    """Runs ``Create(range(items)) | Map(fn)`` on the local runner with two worker processes."""
    options = PipelineOptions(["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"])
    with beam.Pipeline(runner=beam_compat.local_runner(options), options=options) as p:
        _ = p | beam.Create(range(items), reshuffle=False) | beam.Map(fn, str(tmp_path))


def _note_process(item: int, folder: str) -> int:
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as fh:
        forked = b"processes.forking" in fh.read()  # the parent's command line
    with open(os.path.join(folder, f"{item}.txt"), "w") as fh:
        fh.write(f"{os.getppid()} {os.environ.get('WORKER_ID', '')} {forked}")
    return item


def _die(item: int, folder: str) -> int:
    os._exit(3)


@pytest.mark.slow  # two local worker processes: about 4 CPU s
def test_local_worker_processes_are_forks_of_one_process_that_loaded_beam_and_end_with_the_run(tmp_path) -> None:
    _run_on_workers(tmp_path, _note_process)
    seen = {tuple(p.read_text().split(" ")) for p in tmp_path.iterdir()}
    parents = {int(parent) for parent, _, _ in seen}
    assert len(parents) == 1 and os.getpid() not in parents  # Beam alone: this process, each a new Python
    assert {forked for *_, forked in seen} == {"True"}
    assert all(worker.startswith("worker_") for _, worker, _ in seen)  # Beam's environment reached each
    assert forking._forker is None and not os.path.exists(f"/proc/{parents.pop()}")  # ended with the run


@pytest.mark.slow  # two local worker processes: about 4 CPU s
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # Beam's worker threads
def test_a_forked_worker_that_dies_fails_the_job_and_the_next_job_gets_new_ones(tmp_path) -> None:
    with pytest.raises(Exception, match="SDK worker was lost|exited with return code 3"):
        _run_on_workers(tmp_path, _die, items=2)
    (tmp_path / "again").mkdir()
    _run_on_workers(tmp_path / "again", _note_process, items=2)
    assert len(list((tmp_path / "again").iterdir())) == 2


def test_any_command_but_beam_s_worker_is_started_as_beam_would() -> None:
    started = beam_compat._popen_or_fork(f"{sys.executable} -c 'raise SystemExit(4)'", shell=True,
                                         env=dict(os.environ))
    assert isinstance(started, subprocess.Popen) and started.wait() == 4


_BLOCKED_RUN = """
import os, sys, threading
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from transforms import beam_compat

def note_and_wait(item, folder):
    with open(os.path.join(folder, f"{os.getpid()}.pid"), "w") as fh:
        fh.write(str(os.getppid()))
    threading.Event().wait()  # until the process is killed

options = PipelineOptions(["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"])
with beam.Pipeline(runner=beam_compat.local_runner(options), options=options) as p:
    _ = p | beam.Create([1, 2], reshuffle=False) | beam.Map(note_and_wait, sys.argv[1])
"""


def _ended_within(pids: list[int], seconds: float) -> bool:
    """Whether every process of ``pids`` ends within ``seconds`` (waited for through pidfds, not polled)."""
    handles = []
    for pid in pids:
        try:
            handles.append(os.pidfd_open(pid))
        except ProcessLookupError:  # already gone
            pass
    try:
        deadline = time.monotonic() + seconds
        waiting = list(handles)
        while waiting:
            ready = select.select(waiting, [], [], max(0.0, deadline - time.monotonic()))[0]
            if not ready:
                return False
            waiting = [fd for fd in waiting if fd not in ready]
        return True
    finally:
        for fd in handles:
            os.close(fd)


@pytest.mark.slow  # two local worker processes: about 4 CPU s each case
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_launcher_killed_mid_run_leaves_no_forked_worker_behind(tmp_path, sig) -> None:
    """Killed before any clean-up of its own could run, the launcher's socket closes: the forking process
    kills its workers and ends."""
    launcher = subprocess.Popen([sys.executable, "-c", _BLOCKED_RUN, str(tmp_path)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not list(tmp_path.glob("*.pid")):  # a worker runs the Map
            with pytest.raises(subprocess.TimeoutExpired):
                launcher.wait(timeout=0.05)
        workers = [int(path.stem) for path in tmp_path.glob("*.pid")]
        forker = int(next(tmp_path.glob("*.pid")).read_text())
        assert forker != launcher.pid  # a fork of the forking process
        launcher.send_signal(sig)
        launcher.wait(timeout=60)
        assert _ended_within([*workers, forker], 60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
