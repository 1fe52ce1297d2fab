"""The jobs on workers that share no disk with the launcher: Beam's portable runner, EXTERNAL workers.

Dataflow's and Flink's workers run in containers of their own: what they write
to their /tmp the launcher never sees, and a bare SDK harness is not handed
the pipeline's options by any container boot. Here Beam's job service runs
in the launching process (``--job_endpoint embed``) and hands the work to
Beam's worker pool (``tests.servers.worker_pool``), whose workers run in a
mount namespace with a private /tmp. Inputs, outputs and ``--temp_location``
are on s3:// (moto's server). Each job must answer as the DirectRunner does:
the plan the same, the build the same bytes, verify passing.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.shard_fixtures import make_class_tree

boto3 = pytest.importorskip("boto3", reason="needs apache-beam[aws] (pip install -e '.[test]')")

BUCKET = "external-workers"
FLAGS = ("--shard_size_mb", "0.02", "--max_bad_fraction", "0.5", "--seed", "3")


class _Bucket:
    def __init__(self, url: str) -> None:
        self.client = boto3.client("s3", endpoint_url=url, aws_access_key_id="testing",
                                   aws_secret_access_key="testing", region_name="us-east-1")

    def objects(self, prefix: str) -> dict[str, bytes]:
        """Key below ``prefix`` -> bytes, of every object there (``dataset_info.json`` without the
        dataset's name, which is the folder's)."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
        keys = sorted(o["Key"] for page in pages for o in page.get("Contents", []))
        found = {key[len(prefix) + 1:]: self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                 for key in keys}
        if "dataset_info.json" in found:
            info = json.loads(found["dataset_info.json"])
            assert info.pop("name") == prefix, info
            found["dataset_info.json"] = json.dumps(info, sort_keys=True).encode()
        return found


@pytest.fixture(scope="module")
def store(s3_server, tmp_path_factory, monkeypatch_module):
    """The bucket, with a small class-folder tree (three broken files among it) under raw/."""
    monkeypatch_module.setenv("AWS_EC2_METADATA_DISABLED", "true")
    bucket = _Bucket(s3_server.url)
    bucket.client.create_bucket(Bucket=BUCKET)
    root = str(tmp_path_factory.mktemp("raw"))
    make_class_tree(root, per_class=6)
    for where, _, names in os.walk(root):
        for name in names:
            path = os.path.join(where, name)
            bucket.client.upload_file(path, BUCKET, "raw/" + os.path.relpath(path, root))
    return bucket


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _s3(url: str) -> list[str]:
    return ["--s3_endpoint_url", url, "--s3_access_key_id", "testing", "--s3_secret_access_key", "testing",
            "--s3_region_name", "us-east-1"]


def _external(pool) -> list[str]:
    return ["--runner", "PortableRunner", "--job_endpoint", "embed", "--environment_type", "EXTERNAL",
            "--environment_config", pool.address]


def _run(capsys, job: str, *argv: str) -> tuple[int, str, str]:
    from beam_jobs.cli import main

    capsys.readouterr()
    status = main.main([job, *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _plan_of(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        plan = json.load(fh)
    return {key: value for key, value in plan.items() if "seconds" not in key}  # run times differ


@pytest.mark.slow
def test_plan_on_external_workers_is_the_direct_runners(store, s3_server, worker_pool, tmp_path, capsys):
    s3 = _s3(s3_server.url)
    args = ["--input", f"s3://{BUCKET}/raw", "--output_dir", f"s3://{BUCKET}/planned", *FLAGS, *s3]
    direct, external = str(tmp_path / "direct.json"), str(tmp_path / "external.json")
    status, _, err = _run(capsys, "plan", *args, "--plan_json", direct)
    assert status == 0, err
    status, out, err = _run(capsys, "plan", *args, "--plan_json", external, *_external(worker_pool))
    assert status == 0, err
    assert "inputs: 21 found" in out
    assert _plan_of(external) == _plan_of(direct)
    assert store.objects("planned") == {}  # the tally the workers handed back is gone


@pytest.mark.slow
def test_build_on_external_workers_is_byte_identical_and_verifies(store, s3_server, worker_pool, capsys):
    s3 = _s3(s3_server.url)
    args = ["--input", f"s3://{BUCKET}/raw", *FLAGS, *s3]
    status, _, err = _run(capsys, "build", *args, "--output_dir", f"s3://{BUCKET}/direct")
    assert status == 0, err
    status, out, err = _run(capsys, "build", *args, "--output_dir", f"s3://{BUCKET}/external",
                            "--temp_location", f"s3://{BUCKET}/temp", *_external(worker_pool))
    assert status == 0, err
    assert f"Published 18 records to s3://{BUCKET}/external" in out
    published = store.objects("external")
    assert published == store.objects("direct")  # shards, index/, manifest, labels, dead letters; no staging
    assert "manifest.json" in published and not any(key.startswith(".staging") for key in published)
    # verify without --report or --temp_location: its report comes back through the set's staging
    status, out, err = _run(capsys, "verify", "--output_dir", f"s3://{BUCKET}/external", *s3,
                            *_external(worker_pool))
    assert status == 0, err
    assert out.startswith(f"OK: s3://{BUCKET}/external:") and "18 records" in out
    assert store.objects("external") == published
