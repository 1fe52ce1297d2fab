"""``transforms/beam_compat.py``: the reaches into Beam's internals, each against the Beam they were checked on."""

from __future__ import annotations

import threading

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner import worker_handlers

from transforms import beam_compat


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
