"""The job's file system options travel with the project's DoFns to workers whose file systems have none."""

from __future__ import annotations

import pickle

import pytest
from apache_beam.internal import pickler
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, S3Options

from transforms import shard_sink


@pytest.fixture()
def bare_worker(monkeypatch):
    """Restores the process's file system options after the test changes them."""
    monkeypatch.setattr(FileSystems, "_pipeline_options", FileSystems._pipeline_options)


def test_a_dofn_sets_the_launchers_options_on_a_worker_that_has_none(bare_worker) -> None:
    launcher = PipelineOptions(["--s3_endpoint_url", "http://127.0.0.1:9", "--s3_region_name", "us-east-1"])
    FileSystems.set_options(launcher)
    payload = pickler.dumps(shard_sink._MoveStagedFn())  # as Beam ships a step to its workers
    FileSystems.set_options(None)  # a bare SDK harness: no container boot gave it options
    pickler.loads(payload)
    given = FileSystems._pipeline_options
    assert given is not None and given.view_as(S3Options).s3_endpoint_url == "http://127.0.0.1:9"


def test_a_worker_with_options_keeps_its_own(bare_worker) -> None:
    FileSystems.set_options(PipelineOptions(["--s3_region_name", "us-east-1"]))
    payload = pickle.dumps(shard_sink._MoveStagedFn())
    own = PipelineOptions(["--s3_region_name", "eu-west-1"])
    FileSystems.set_options(own)  # Dataflow's worker, Flink's container: given by the boot
    pickle.loads(payload)
    assert FileSystems._pipeline_options is own
