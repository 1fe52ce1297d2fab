"""The jobs on workers that share no disk with the launcher: Beam's portable runner, EXTERNAL workers.

Dataflow's and Flink's workers run in containers of their own: what they write
to their /tmp the launcher never sees, and a bare SDK harness is not handed
the pipeline's options by any container boot. Here Beam's job service runs
in the launching process (``--job_endpoint embed``) and hands the work to
Beam's worker pool (``tests.servers.worker_pool``), whose workers run in a
mount namespace with a private /tmp. Inputs, outputs and ``--temp_location``
are on s3:// (moto's server). Each job must answer as the DirectRunner does:
the plan the same; build, reshard and append the same bytes (every object, the
manifest included); verify passing.
"""

from __future__ import annotations

import json

import pytest

from tests.engine_support import BUCKET, Bucket, external_flags, s3_flags
from tests.shard_fixtures import make_class_tree

pytest.importorskip("boto3", reason="needs apache-beam[aws] (pip install -e '.[test]')")

FLAGS = ("--shard_size_mb", "0.02", "--max_bad_fraction", "0.5", "--seed", "3")


@pytest.fixture(scope="module")
def store(s3_server, tmp_path_factory, monkeypatch_module):
    """The bucket, with a small class-folder tree (three broken files among it) under raw/, and five
    more images of a new class under more/ (an append's input)."""
    monkeypatch_module.setenv("AWS_EC2_METADATA_DISABLED", "true")
    bucket = Bucket(s3_server.url)
    bucket.client.create_bucket(Bucket=BUCKET)
    root = str(tmp_path_factory.mktemp("raw"))
    make_class_tree(root, per_class=6)
    bucket.upload_tree(root, "raw")
    more = str(tmp_path_factory.mktemp("more"))
    make_class_tree(more, classes=("lily",), per_class=5, broken=False, seed=2)
    bucket.upload_tree(more, "more")
    return bucket


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


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
    s3 = s3_flags(s3_server.url)
    args = ["--input", f"s3://{BUCKET}/raw", "--output_dir", f"s3://{BUCKET}/planned", *FLAGS, *s3]
    direct, external = str(tmp_path / "direct.json"), str(tmp_path / "external.json")
    status, _, err = _run(capsys, "plan", *args, "--plan_json", direct)
    assert status == 0, err
    status, out, err = _run(capsys, "plan", *args, "--plan_json", external, *external_flags(worker_pool))
    assert status == 0, err
    assert "inputs: 21 found" in out
    assert _plan_of(external) == _plan_of(direct)
    assert store.objects("planned") == {}  # the tally the workers handed back is gone


@pytest.mark.slow
def test_build_on_external_workers_is_byte_identical_and_verifies(store, s3_server, worker_pool, capsys):
    s3 = s3_flags(s3_server.url)
    args = ["--input", f"s3://{BUCKET}/raw", *FLAGS, *s3]
    status, _, err = _run(capsys, "build", *args, "--output_dir", f"s3://{BUCKET}/direct")
    assert status == 0, err
    status, out, err = _run(capsys, "build", *args, "--output_dir", f"s3://{BUCKET}/external",
                            "--temp_location", f"s3://{BUCKET}/temp", *external_flags(worker_pool))
    assert status == 0, err
    assert f"Published 18 records to s3://{BUCKET}/external" in out
    published = store.objects("external")
    assert published == store.objects("direct")  # shards, index/, manifest, labels, dead letters; no staging
    assert "manifest.json" in published and not any(key.startswith(".staging") for key in published)
    # verify without --report or --temp_location: its report comes back through the set's staging
    status, out, err = _run(capsys, "verify", "--output_dir", f"s3://{BUCKET}/external", *s3,
                            *external_flags(worker_pool))
    assert status == 0, err
    assert out.startswith(f"OK: s3://{BUCKET}/external:") and "18 records" in out
    assert store.objects("external") == published


def _built(store, s3_server, capsys) -> str:
    """A DirectRunner build of raw/ under built/ (once for the module): reshard's and append's input."""
    if not store.keys("built"):
        status, _, err = _run(capsys, "build", "--input", f"s3://{BUCKET}/raw", *FLAGS, *s3_flags(s3_server.url),
                              "--output_dir", f"s3://{BUCKET}/built")
        assert status == 0, err
    return f"s3://{BUCKET}/built"


@pytest.mark.slow
def test_reshard_on_external_workers_is_byte_identical(store, s3_server, worker_pool, capsys):
    built = _built(store, s3_server, capsys)
    args = ["--input", f"{built}/train-*.tfrecord", "--num_shards", "2", "--split", "train", *s3_flags(s3_server.url)]
    status, _, err = _run(capsys, "reshard", *args, "--output_dir", f"s3://{BUCKET}/reshard-direct")
    assert status == 0, err
    status, out, err = _run(capsys, "reshard", *args, "--output_dir", f"s3://{BUCKET}/reshard-external",
                            "--temp_location", f"s3://{BUCKET}/temp", *external_flags(worker_pool))
    assert status == 0, err
    published = store.objects("reshard-external")
    assert published == store.objects("reshard-direct")  # shards, index/, manifest; no staging
    assert "manifest.json" in published and not any(key.startswith(".staging") for key in published)
    assert sum(1 for key in published if key.endswith(".tfrecord")) == 2


@pytest.mark.slow
def test_append_on_external_workers_is_byte_identical(store, s3_server, worker_pool, capsys):
    built = _built(store, s3_server, capsys)
    s3 = s3_flags(s3_server.url)
    for name, runner in (("append-direct", []), ("append-external", external_flags(worker_pool))):
        store.copy("built", name)
        status, out, err = _run(capsys, "append", "--input", f"s3://{BUCKET}/more", "--output_dir",
                                f"s3://{BUCKET}/{name}", *FLAGS, *s3, "--temp_location", f"s3://{BUCKET}/temp",
                                *runner)
        assert status == 0, err
    published = store.objects("append-external")
    assert published == store.objects("append-direct")  # kept shards, new shards, manifest, labels, dead letters
    assert json.loads(published["manifest.json"])["splits"]["train"]["records"] == 18 + 5
    assert not any(key.startswith(".staging") for key in published)
