"""The build job submitted through Beam's portable job API, the path a Flink job server takes.

A local job service (``apache_beam.runners.portability.local_job_service_main``)
on loopback stands in for Flink's job server; with ``--environment_type
LOOPBACK`` the SDK worker runs in the submitting process.
"""

from __future__ import annotations

import os

import pytest

from tests.reliability_support import folder_bytes
from tests.shard_fixtures import load_manifest, run_build
from tests.trees import Part


TREE = (Part(per_class=6, broken=True),)  # with three broken files: dead letters too


@pytest.mark.slow
def test_portable_runner_output_is_byte_identical_to_direct(job_server, tree, tmp_path, capsys):
    args = ["--input", tree, "--shard_size_mb", "0.02", "--max_bad_fraction", "0.2", "--seed", "3"]
    direct, portable = str(tmp_path / "direct"), str(tmp_path / "portable")
    status, _, err = run_build(capsys, *args, "--output_dir", direct)
    assert status == 0, err
    status, out, err = run_build(capsys, *args, "--output_dir", portable,
                                 "--runner", "PortableRunner", "--job_endpoint", job_server.address,
                                 "--environment_type", "LOOPBACK")
    assert status == 0, err
    assert f"Published 18 records to {portable}" in out
    manifest = load_manifest(portable)
    assert manifest["dead_letters"] == 3 and len(manifest["splits"]["train"]["shards"]) >= 2
    assert folder_bytes(portable) == folder_bytes(direct)  # shards, index/, manifest, labels, dead letters
