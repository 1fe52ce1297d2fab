"""The jobs run on the DirectRunner's in-process runner without trying to fetch Prism."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading

import pytest

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.core import PTransform

from tests.shard_fixtures import make_class_tree, run_build
from transforms.errors import PublishError
from tests.helpers import error_summary
from transforms.beam_compat import local_runner


@pytest.mark.slow
def test_default_runner_skips_prism(tmp_path, capsys, caplog):
    make_class_tree(str(tmp_path / "in"), per_class=2, broken=False)
    with caplog.at_level(logging.INFO):
        status, _, _ = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(tmp_path / "out"))
    assert status == 0
    text = caplog.text.lower()
    assert "prism" not in text and "downloading" not in text


def test_local_runner_only_for_direct():
    assert local_runner(PipelineOptions([])) is not None
    assert local_runner(PipelineOptions(["--runner", "DirectRunner"])) is not None
    assert local_runner(PipelineOptions(["--runner", "PrismRunner"])) is None
    assert local_runner(PipelineOptions(["--runner", "DataflowRunner"])) is None
    assert local_runner(PipelineOptions(["--prism_location", "/opt/prism"])) is None


def test_error_summary_finds_the_project_error():
    wrapped = RuntimeError("Traceback ...\n  File x\ntransforms.errors.PublishError: 3 of 9 inputs "
                           "were rejected [while running 'Publish/Publish']\n")
    assert error_summary(wrapped) == "3 of 9 inputs were rejected"
    assert error_summary(PublishError("too many [while running 'A/B']")) == "too many"
    assert error_summary(ValueError("a\nb\n")) == "ValueError: b"


@pytest.mark.slow
def test_beams_bigquery_client_warning_is_dropped_from_job_output():
    # Without Beam's optional BigQuery client, importing Beam logs a warning on the root
    # logger; importing a job drops it, and leaves no filter on the root logger behind.
    blocked = "import sys; sys.modules.update(dict.fromkeys(['apitools', 'apitools.base', 'apitools.base.py']))"
    probe = ("import logging; import beam_jobs.build_shards; "
             "print(len(logging.getLogger().filters)); logging.warning('after import')")
    beam = subprocess.run([sys.executable, "-c", f"{blocked}; import apache_beam"],
                          capture_output=True, text=True, timeout=120)
    job = subprocess.run([sys.executable, "-c", f"{blocked}; {probe}"],
                         capture_output=True, text=True, timeout=120)
    assert "apitools not found" in beam.stderr
    assert "apitools not found" not in job.stderr and "after import" in job.stderr
    assert job.stdout.split() == ["0"]


def _timed_flushers(_) -> int:
    """How many timers that flush data-plane streams are alive while an element is processed."""
    from apache_beam.runners.worker import data_plane

    flusher = data_plane.TimeBasedBufferingClosableOutputStream.__name__
    return sum(isinstance(t, data_plane.PeriodicThread) and t.is_alive()
               and getattr(t._function, "__qualname__", "").startswith(flusher)
               for t in threading.enumerate())


def test_thread_workers_send_output_between_elements_only():
    """No timer thread may send a worker's output stream halfway through an element.

    Beam 2.77's thread workers flush every second from a timer thread, which
    failed jobs at random under load (``Invalid PaneInfoEncoding``); the local
    runner turns that off, so while elements are processed no such thread runs.
    """
    options = PipelineOptions(["--direct_num_workers", "2", "--direct_running_mode", "multi_threading"])
    with beam.Pipeline(runner=local_runner(options), options=options) as p:
        counts = p | beam.Create(range(20)) | beam.Reshuffle() | beam.Map(_timed_flushers)
        assert_that(counts, equal_to([0] * 20))


# --- how many local workers a run gets --------------------------------------------------------

from apache_beam.options.pipeline_options import DirectOptions  # noqa: E402

from transforms.beam_compat import (AUTO_WORKERS_MIN_BYTES, WORKER_BYTES, bytes_worth_counting,  # noqa: E402
                                    choose_local_workers)


def _direct(options: PipelineOptions) -> tuple[str, int]:
    direct = options.view_as(DirectOptions)
    return direct.direct_running_mode, direct.direct_num_workers


def test_a_large_local_input_gets_worker_processes():
    options = PipelineOptions([])
    note = choose_local_workers(options, AUTO_WORKERS_MIN_BYTES, cores=4)
    assert _direct(options) == ("multi_processing", 4)
    assert "4 worker processes" in note and "--direct_num_workers 1" in note


@pytest.mark.parametrize("size, cores, workers", [
    (1_320_000_000, 16, 4),  # the 16-core benchmark's set: 4 workers built it fastest, 16 slowest
    (AUTO_WORKERS_MIN_BYTES, 2, 2),
    (AUTO_WORKERS_MIN_BYTES + 1, 16, 4),
    (16 * WORKER_BYTES, 16, 16),
    (100 * WORKER_BYTES, 16, 16),
    (100 * WORKER_BYTES, 3, 3),
])
def test_workers_grow_with_the_input_up_to_the_cores(size, cores, workers):
    options = PipelineOptions([])
    note = choose_local_workers(options, size, cores)
    assert _direct(options) == ("multi_processing", workers)
    assert f"running {workers} worker processes" in note
    assert ("or more" in note) == (workers == cores)  # counting may stop once every core is worth it
    assert bytes_worth_counting(cores) >= min(size, cores * WORKER_BYTES)


@pytest.mark.parametrize("argv, size, cores", [
    ([], AUTO_WORKERS_MIN_BYTES - 1, 4),  # small: one process starts fastest
    ([], None, 4),  # size not known
    ([], AUTO_WORKERS_MIN_BYTES, 1),  # one core
    (["--direct_num_workers", "1"], AUTO_WORKERS_MIN_BYTES * 10, 4),  # Beam's default, but given
    (["--direct_num_workers=3"], AUTO_WORKERS_MIN_BYTES * 10, 4),
    (["--direct_running_mode", "multi_threading"], AUTO_WORKERS_MIN_BYTES * 10, 4),
    (["--runner", "DataflowRunner"], AUTO_WORKERS_MIN_BYTES * 10, 4),
])
def test_workers_are_left_as_they_are(argv, size, cores):
    options = PipelineOptions(argv)
    before = _direct(options)
    assert choose_local_workers(options, size, cores) is None
    assert _direct(options) == before


@pytest.mark.slow
def test_a_build_given_workers_says_so_and_writes_the_same_shards(tmp_path, capsys, monkeypatch):
    """The chosen multi-process run prints one line and publishes what one process publishes."""
    from tests.shard_fixtures import shard_files
    from transforms import beam_compat, worker_threads

    make_class_tree(str(tmp_path / "in"), per_class=3, broken=False)
    one, many = str(tmp_path / "one"), str(tmp_path / "many")
    assert run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", one, "--num_shards", "2")[0] == 0
    monkeypatch.setattr(beam_compat, "AUTO_WORKERS_MIN_BYTES", 1)
    monkeypatch.setattr(worker_threads, "usable_cores", lambda: 2)
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", many, "--num_shards", "2")
    assert status == 0, err
    assert [line for line in err.splitlines() if "worker processes" in line] == [
        next(line for line in err.splitlines() if line.startswith("build_shards: "))]
    assert "running 2 worker processes" in err
    for name in shard_files(one):
        assert open(f"{one}/{name}", "rb").read() == open(f"{many}/{name}", "rb").read()


def test_a_build_counts_its_input_as_far_as_the_workers_need(tmp_path, monkeypatch):
    """The size that chooses the workers is counted past 1 GiB, up to one ``WORKER_BYTES`` per core."""
    from beam_jobs import build_shards
    from transforms import beam_compat

    make_class_tree(str(tmp_path / "in"), per_class=6, broken=False)
    total = sum(f.stat().st_size for f in (tmp_path / "in").rglob("*") if f.is_file())
    assert build_shards._bytes_to_read([str(tmp_path / "in")], [], str(tmp_path / "out"), None, 10 * total) == total
    monkeypatch.setattr(beam_compat, "AUTO_WORKERS_MIN_BYTES", 1)
    monkeypatch.setattr(beam_compat, "WORKER_BYTES", total // 3)
    assert beam_compat.bytes_worth_counting(8) == 8 * (total // 3)  # past the whole input
    options = PipelineOptions([])
    choose_local_workers(options, total, cores=8)
    assert _direct(options) == ("multi_processing", 3)



@pytest.mark.parametrize("cores, workers", [(2, None), (3, None), (4, 4), (16, 16)])
def test_verify_runs_worker_processes_only_where_they_pay(cores, workers, monkeypatch):
    # On 2 cores a second verify worker costs 1.8x the CPU for no wall time (BENCHMARKS.md).
    from types import SimpleNamespace

    from beam_jobs import verify_shards

    monkeypatch.setattr(verify_shards.worker_threads, "usable_cores", lambda: cores)
    options = PipelineOptions([])
    plan = verify_shards._reading_plan([100 * WORKER_BYTES], SimpleNamespace(max_num_workers=None), options)
    if workers is None:
        assert plan["workers_note"] is None and _direct(options) == ("in_memory", 1)
    else:
        assert _direct(options) == ("multi_processing", workers)
        assert f"running {workers} worker processes" in plan["workers_note"]
    # The build still gets a worker process per core on 2 cores.
    build = PipelineOptions([])
    assert choose_local_workers(build, 100 * WORKER_BYTES, 2) is not None and _direct(build)[1] == 2
