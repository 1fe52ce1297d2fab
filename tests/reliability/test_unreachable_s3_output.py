"""Reliability: an s3:// output folder on an endpoint nothing listens on.

The build ends with one line naming the endpoint and saying S3 gave no
answer, no traceback on the terminal, within the bound the S3 client's
configuration sets (``transforms.filesystems``: tries and timeouts per call,
and no retry by Beam of a call that got no answer).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from apache_beam.io.aws import s3io
from apache_beam.options.pipeline_options import PipelineOptions

from tests.imagegen import jpeg
from tests.servers import HOST, free_port
from tests.shard_fixtures import write
from transforms import filesystems as clients

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _s3_flags(url: str) -> list[str]:
    return ["--s3_endpoint_url", url, "--s3_access_key_id", "testing", "--s3_secret_access_key", "testing",
            "--s3_region_name", "us-east-1"]


def test_every_client_beams_s3_file_system_makes_is_bounded_in_tries_and_time():
    client = s3io.S3IO(options=PipelineOptions(_s3_flags(f"http://{HOST}:{free_port()}"))).client
    config = client.client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (clients.S3_CONNECT_TIMEOUT_S, clients.S3_READ_TIMEOUT_S)
    assert config.retries == {"total_max_attempts": clients.S3_READ_ATTEMPTS, "mode": "standard"}  # tries in all
    assert client.client.meta.endpoint_url.startswith(f"http://{HOST}:")


@pytest.mark.slow
def test_an_unreachable_s3_output_is_one_line_naming_the_endpoint(tmp_path):
    for i in range(3):
        write(str(tmp_path / "imgs" / "rose" / f"{i}.jpg"), jpeg("RGB", size=(8 + i, 8)))
    dead_port = free_port()  # nothing listens on it: every connection is refused
    env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true", "PYTHONPATH": REPO}
    # Refused connections: botocore's S3_READ_ATTEMPTS tries with its backoff, a few seconds; the
    # time limit only ends a run that would retry for minutes.
    proc = subprocess.run([sys.executable, "-m", "beam_jobs.cli.main", "build", "--input", str(tmp_path / "imgs"),
                           "--output_dir", "s3://bucket/out", *_s3_flags(f"http://{HOST}:{dead_port}")],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{HOST}:{dead_port}" in lines[0] and "S3 gave no answer" in lines[0], lines[0]
    assert lines[0].startswith("build_shards: failed: s3://bucket/out: "), lines[0]


def test_an_upload_that_gets_no_answer_names_the_endpoint_and_beams_traceback_stays_off_the_terminal(caplog):
    from beam_jobs.cli import logs

    port = free_port()
    client = s3io.S3IO(options=PipelineOptions(_s3_flags(f"http://{HOST}:{port}"))).client
    with caplog.at_level(logging.ERROR), pytest.raises(clients.S3NoAnswerError) as caught:
        s3io.S3Uploader(client, "s3://bucket/out/shard")  # Beam's writer starts its upload here
    assert f"{HOST}:{port}" in str(caught.value) and caught.value.filename == "s3://bucket/out/shard"
    (record,) = [r for r in caplog.records if "_start_upload" in r.getMessage()]
    assert "Traceback" in record.getMessage()  # Beam logs it through the root logger, with its traceback
    assert not logs.not_beam_error(record)
    assert logs.not_beam_error(logging.makeLogRecord({"name": "root", "levelno": logging.ERROR,
                                                      "pathname": __file__, "msg": "our own"}))


def test_a_storage_error_of_one_path_is_one_line_naming_it():
    from apache_beam.io.filesystem import BeamIOError

    from tests.helpers import error_summary

    no_answer = clients.S3NoAnswerError(5, "S3 gave no answer in 3 tries (X)", "s3://b/out/.staging/")
    listing = BeamIOError("List operation failed", {"s3://b/out/.staging/": no_answer})
    assert error_summary(BeamIOError("Match operation failed", {"s3://b/out/.staging/**": listing})) == \
        "s3://b/out/.staging/: S3 gave no answer in 3 tries (X)"
    assert error_summary(BeamIOError("exists() operation failed", {"s3://b/out": no_answer})) == \
        "s3://b/out: S3 gave no answer in 3 tries (X)"
