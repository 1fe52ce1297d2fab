"""Reliability: S3 faults during a build, injected by a proxy in front of moto's S3 server.

``tests.fault_proxy.FaultProxy`` listens on loopback between the job and the
session's moto server (``s3_server`` in tests/servers.py) and fails chosen
requests: with an HTTP error status, or by closing the connection without an
answer. A transient fault must be retried and leave the output byte-identical
to a local build of the same images; a lasting one must fail the job with
one line (or, for an input that cannot be read, make it a dead letter), and
no manifest may ever list a shard that is not complete.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from tests.fault_proxy import Fault, FaultProxy
from tests.reliability_support import folder_bytes
from tests.shard_fixtures import make_class_tree, run_build

boto3 = pytest.importorskip("boto3", reason="needs apache-beam[aws] (pip install -e '.[test]')")

pytestmark = pytest.mark.slow

BUCKET = "reliability-faults"
FLAGS = ["--num_shards", "3", "--seed", "2"]


def _s3_flags(url: str) -> list[str]:
    return ["--s3_endpoint_url", url, "--s3_access_key_id", "testing", "--s3_secret_access_key", "testing",
            "--s3_region_name", "us-east-1"]


@pytest.fixture(scope="module")
def store(s3_server, tmp_path_factory):
    """The bucket with the input tree under raw/, a boto3 client to moto itself, and a local build."""
    client = boto3.client("s3", endpoint_url=s3_server.url, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    tree = str(tmp_path_factory.mktemp("tree"))
    make_class_tree(tree, per_class=4, broken=False)
    for folder, _, files in os.walk(tree):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                client.put_object(Bucket=BUCKET, Key=f"raw/{os.path.relpath(path, tree)}", Body=fh.read())
    local = str(tmp_path_factory.mktemp("local"))
    from beam_jobs import build_shards

    assert build_shards.run(["--input", tree, "--output_dir", local, *FLAGS]) == 0
    return client, tree, local


def _keys(client, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
    return sorted(o["Key"][len(prefix) + 1:] for page in pages for o in page.get("Contents", []))


def _get(client, key: str) -> bytes:
    return client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def _without_inputs(splits: dict) -> dict:
    """A manifest's splits without the ``--input`` values that built them."""
    return {name: {k: v for k, v in split.items() if k != "built_from"} for name, split in splits.items()}


def _assert_like_local(client, prefix: str, local: str) -> None:
    """The published objects are the local build's files, byte for byte (the manifest's splits too)."""
    names = sorted(folder_bytes(local))  # index/ included
    assert _keys(client, prefix) == names  # nothing under .staging/ either
    for name in names:
        with open(os.path.join(local, name), "rb") as fh:
            data = fh.read()
        if name == "manifest.json":  # it records --input (options, each split's built_from): differs
            published = json.loads(_get(client, f"{prefix}/{name}"))["splits"]
            assert {split["built_from"][0][:5] for split in published.values()} == {"s3://"}
            assert _without_inputs(published) == _without_inputs(json.loads(data)["splits"])
        elif name == "dataset_info.json":  # tfds's dataset name is the folder's: differs
            published = json.loads(_get(client, f"{prefix}/{name}"))
            assert published.pop("name") == prefix
            assert published == {k: v for k, v in json.loads(data).items() if k != "name"}
        else:
            assert _get(client, f"{prefix}/{name}") == data, name


def _assert_manifest_matches_objects(client, prefix: str) -> None:
    if "manifest.json" not in _keys(client, prefix):
        return
    manifest = json.loads(_get(client, f"{prefix}/manifest.json"))
    lines = _get(client, f"{prefix}/{manifest['shards']['file']}")
    assert (len(lines), hashlib.sha256(lines).hexdigest()) == (manifest["shards"]["bytes"],
                                                               manifest["shards"]["sha256"])
    for shard in map(json.loads, lines.splitlines()):
        data = _get(client, f"{prefix}/{shard['file']}")
        assert (len(data), hashlib.sha256(data).hexdigest()) == (shard["bytes"], shard["sha256"])


def _one_failure_line(err: str) -> str:
    """The failure's one line; a failed build then says, last, where its staged work was kept."""
    lines = [line for line in err.splitlines() if line.startswith("build_shards:")]
    if lines and lines[-1].startswith("build_shards: staged work kept in "):
        lines.pop()
    assert len(lines) == 1, err
    return lines[0]


def test_transient_faults_are_retried_and_the_output_is_unchanged(s3_server, store, capsys) -> None:
    client, _, local = store
    prefix = "transient"
    faults = [
        Fault("GET", r"list-type=2", 1, 500),  # a listing
        Fault("GET", r"/raw/tulip/tulip_000\.jpg$", 1, 503),  # an input's bytes (no metadata request first)
        Fault("GET", r"/raw/rose/rose_001\.jpg$", 2, 500),  # an input's bytes, twice
        Fault("PUT", rf"/{prefix}/\.staging/.*partNumber=", 1, None),  # a shard upload, dropped
        Fault("PUT", rf"/{prefix}/train-\d+-of-\d+\.tfrecord$", 1, 503, header="x-amz-copy-source"),  # a rename
    ]
    with FaultProxy(s3_server.port, faults) as proxy:
        status, out, err = run_build(capsys, "--input", f"s3://{BUCKET}/raw", "--output_dir",
                                     f"s3://{BUCKET}/{prefix}", *FLAGS, *_s3_flags(proxy.url))
    assert status == 0, err
    assert f"Published 12 records to s3://{BUCKET}/{prefix}" in out
    for fault in faults:  # every fault was injected, and the request then went through
        assert fault.failed == fault.times, fault
        assert proxy.requests(fault.method, fault.target)[-1] == "forwarded", fault
    _assert_like_local(client, prefix, local)


def test_an_object_that_cannot_be_read_is_a_dead_letter_naming_it(s3_server, store, capsys) -> None:
    client, _, _ = store
    prefix = "unreadable"
    with FaultProxy(s3_server.port, [Fault("GET", r"/raw/rose/rose_001\.jpg$", 1000, 403)]) as proxy:
        status, _, err = run_build(capsys, "--input", f"s3://{BUCKET}/raw", "--output_dir",
                                   f"s3://{BUCKET}/{prefix}", *FLAGS, *_s3_flags(proxy.url))
    # One bad input of 12 is more than the default --max_bad_fraction (1%): nothing is published.
    assert status == 1
    line = _one_failure_line(err)
    assert "1 of 12 inputs" in line and "nothing was published" in line
    assert _keys(client, prefix) == ["dead_letters.jsonl"]
    (dead,) = [json.loads(x) for x in _get(client, f"{prefix}/dead_letters.jsonl").splitlines()]
    assert dead["path"] == f"s3://{BUCKET}/raw/rose/rose_001.jpg" and dead["reason"] == "unreadable"
    assert "PermissionError" in dead["error"] and "403" in dead["error"]


def test_a_refused_upload_fails_the_job_and_publishes_nothing(s3_server, store, capsys) -> None:
    client, _, _ = store
    prefix = "refused"
    fault = Fault("PUT", rf"/{prefix}/\.staging/.*partNumber=", 1000, 403)
    with FaultProxy(s3_server.port, [fault]) as proxy:
        status, _, err = run_build(capsys, "--input", f"s3://{BUCKET}/raw", "--output_dir",
                                   f"s3://{BUCKET}/{prefix}", *FLAGS, *_s3_flags(proxy.url))
    assert status == 1 and fault.failed >= 1
    line = _one_failure_line(err)
    assert "UploadPart" in line and "403" in line, line
    assert f"s3://{BUCKET}/{prefix}/.staging/" in line, line  # names the object refused
    assert [k for k in _keys(client, prefix) if not k.startswith(".staging/")] == []


def test_a_failed_publish_leaves_no_manifest_and_a_rerun_converges(s3_server, store, tmp_path, capsys) -> None:
    client, tree, local = store
    prefix = "publish"
    old = str(tmp_path / "old")  # an earlier, other shard set in the same place
    from beam_jobs import build_shards

    assert build_shards.run(["--input", tree, "--output_dir", old, "--num_shards", "2"]) == 0
    for name, data in folder_bytes(old).items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=data)
    fault = Fault("PUT", rf"/{prefix}/train-00001-of-00003\.tfrecord$", 1000, 403, header="x-amz-copy-source")
    with FaultProxy(s3_server.port, [fault]) as proxy:  # other inputs built the old train: --replace
        status, _, err = run_build(capsys, "--input", f"s3://{BUCKET}/raw", "--output_dir",
                                   f"s3://{BUCKET}/{prefix}", "--replace", *FLAGS, *_s3_flags(proxy.url))
    assert status == 1 and fault.failed >= 1
    line = _one_failure_line(err)
    assert "Rename" in line and f"s3://{BUCKET}/{prefix}/train-00001-of-00003.tfrecord" in line, line
    assert "manifest.json" not in _keys(client, prefix)  # the old one is gone, the new one not written
    _assert_manifest_matches_objects(client, prefix)
    with FaultProxy(s3_server.port) as proxy:  # the same job again, without faults
        status, _, err = run_build(capsys, "--input", f"s3://{BUCKET}/raw", "--output_dir",
                                   f"s3://{BUCKET}/{prefix}", "--replace", *FLAGS, *_s3_flags(proxy.url))
    assert status == 0, err
    _assert_like_local(client, prefix, local)  # old shards and the failed run's staging are gone
