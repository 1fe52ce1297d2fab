"""One client per worker process for every storage call: made once per store settings, new in a forked child."""

from __future__ import annotations

import os

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from transforms import filesystems

pytest.importorskip("boto3", reason="needs apache-beam[aws]")


def _options(endpoint: str) -> PipelineOptions:
    return PipelineOptions(["--s3_endpoint_url", endpoint, "--s3_access_key_id", "k", "--s3_secret_access_key", "s",
                            "--s3_region_name", "us-east-1"])


def test_the_s3_client_is_made_once_per_process_and_settings():
    first = filesystems.store_client("s3", _options("http://127.0.0.1:1"))
    assert filesystems.store_client("s3", _options("http://127.0.0.1:1")) is first  # other options, same values
    assert filesystems.store_client("s3", _options("http://127.0.0.1:2")) is not first
    assert first.meta.config.connect_timeout == filesystems.S3_CONNECT_TIMEOUT_S
    shared = filesystems.filesystem_of("s3://bucket/key")
    assert filesystems.filesystem_of("s3://bucket/other") is shared
    assert filesystems.filesystem_of("/local/path") is filesystems.FileSystems
    assert filesystems.FileSystems.get_filesystem("s3://bucket/key").scheme() == "s3"  # Beam's own, still one


def test_a_forked_child_makes_its_own_client():
    parent = filesystems.store_client("s3", _options("http://127.0.0.1:1"))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its client is not the parent's
        child = filesystems.store_client("s3", _options("http://127.0.0.1:1"))
        os.write(write, b"new" if child is not parent else b"same")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 16)
    os.waitpid(pid, 0)
    assert answer == b"new"
