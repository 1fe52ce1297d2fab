"""Reliability: a worker of the portable runner's EXTERNAL pool SIGKILLed, then the build run again.

The workers run in a mount namespace with a /tmp of their own
(``tests.servers.start_worker_pool``), started through ``tests/worker_boot.py``,
whose pause (``TFRS_WORKER_PAUSE_AT``) stops a worker before a chosen file
operation on a path pattern and writes a marker in a folder the test shares
with it. The test then SIGKILLs that worker's process. The launcher (the job
service runs in it: ``--job_endpoint embed``) runs as a subprocess, as a user
runs it. Inputs, output, staging and ``--temp_location`` are on s3:// (moto).
The job must fail saying its staged work is kept; the rerun, on the same pool
(the marker now exists: no pause), must publish the bytes a DirectRunner build
of the same inputs publishes, and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from beam_jobs.cli.harness import KEPT_LINE
from tests.engine_support import Bucket, external_flags, s3_flags
from tests.servers import REPO, start_worker_pool, stop_server, unshare_refused
from tests.shard_fixtures import make_class_tree
from tests.worker_boot import PAUSE_ENV

pytest.importorskip("boto3", reason="needs apache-beam[aws] (pip install -e '.[test]')")

# --drop_other_splits: an older set's validation split goes when the run publishes over it.
FLAGS = ["--num_shards", "4", "--max_bad_fraction", "0.2", "--seed", "9", "--drop_other_splits"]
# The older set: train shards under the same names with other bytes, and validation shards to delete.
OLD_FLAGS = ["--num_shards", "4", "--split_fractions", "train=0.5,validation=0.5", "--max_bad_fraction", "0.2",
             "--seed", "1"]
WAIT_S = 240.0  # bound on reaching the moment
ENDED_S = 90.0  # bound on the launcher's end once its worker is killed (it ends in a few seconds)
RESUMED = re.compile(r"^  resumed: reused ([\d,]+) of ([\d,]+) inputs \(\d+ MiB\) and (\d+) finished shards? "
                     r"from the interrupted run ([0-9a-f]{32})$", re.M)
STAGED_SHARD = r"/\.staging/.*/train-\d+-of-00004\.tfrecord\.[0-9a-f]{32}\.tmp$"


@pytest.fixture(scope="module")
def store(s3_server, tmp_path_factory, monkeypatch_module):
    """The bucket (its own), with 3 classes of 8 images and 3 broken files under raw/, a
    DirectRunner build of them under reference/ and an older set of them under old/."""
    monkeypatch_module.setenv("AWS_EC2_METADATA_DISABLED", "true")
    bucket = Bucket(s3_server.url, "engine-kill")
    bucket.client.create_bucket(Bucket=bucket.name)
    root = str(tmp_path_factory.mktemp("raw"))
    make_class_tree(root, per_class=8)
    bucket.upload_tree(root, "raw")
    from beam_jobs import build_shards

    assert build_shards.run(["--input", bucket.url("raw"), "--output_dir", bucket.url("reference"), *FLAGS,
                             *s3_flags(s3_server.url)]) == 0
    assert build_shards.run(["--input", bucket.url("raw"), "--output_dir", bucket.url("old"), *OLD_FLAGS,
                             *s3_flags(s3_server.url)]) == 0
    return bucket


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture
def shared():
    """A folder the test and the workers both see (outside /tmp, which is the workers' own)."""
    folder = tempfile.mkdtemp(prefix="tfrs-engine-", dir="/var/tmp")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _paused_pool(tmp_path, shared: str, op: str, pattern: str, nth: int):
    refused = unshare_refused()
    if refused:
        pytest.skip(refused)
    marker = os.path.join(shared, "stopped.json")
    setting = json.dumps({"op": op, "pattern": pattern, "nth": nth, "marker": marker})
    return start_worker_pool(str(tmp_path / "pool.log"), env={PAUSE_ENV: setting}, boot=True), marker


def _tail(log: str) -> str:
    with open(log, "rb") as fh:
        return fh.read()[-4000:].decode(errors="replace")


def _killed_run(argv: list[str], marker: str, log: str, pool_log: str) -> tuple[dict, int, str]:
    """Runs ``tfrecord-shards ARGV`` as a subprocess until a worker writes ``marker``, SIGKILLs that
    worker, waits for the launcher to end; returns the marker, the launcher's status and its output."""
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "beam_jobs.cli.main", *argv], cwd=REPO, stdout=fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": REPO})
    try:
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(marker):
            if proc.poll() is not None:
                pytest.fail(f"the job ended ({proc.returncode}) before the moment:\n{_tail(log)}\n"
                            f"pool:\n{_tail(pool_log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"no worker reached the moment in {WAIT_S:.0f} s:\n{_tail(log)}\npool:\n{_tail(pool_log)}")
            try:
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
        with open(marker, encoding="utf-8") as fh:
            stopped = json.load(fh)
        assert stopped["pid"] != proc.pid  # a worker of the pool, not the launcher
        os.kill(stopped["pid"], signal.SIGKILL)
        try:
            status = proc.wait(timeout=ENDED_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the launcher still runs {ENDED_S:.0f} s after its worker was killed:\n{_tail(log)}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with open(log, "rb") as fh:
        return stopped, status, fh.read().decode(errors="replace")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    from beam_jobs.cli import main

    capsys.readouterr()
    status = main.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.slow
def test_a_worker_killed_while_writing_shards_fails_the_job_and_the_rerun_resumes_it(
        store, s3_server, tmp_path, shared, capsys) -> None:
    pool, marker = _paused_pool(tmp_path, shared, "create", STAGED_SHARD, 3)  # 2 of 4 shards staged
    try:
        out = store.url("killed-writing")
        argv = ["build", "--input", store.url("raw"), "--output_dir", out, *FLAGS, *s3_flags(s3_server.url),
                "--temp_location", store.url("temp"), *external_flags(pool)]
        stopped, status, printed = _killed_run(argv, marker, str(tmp_path / "job.log"), str(tmp_path / "pool.log"))
        assert re.search(STAGED_SHARD, stopped["path"]), stopped
        assert status == 1, printed
        staging = f"{out}/.staging"
        assert printed.rstrip().splitlines()[-1] == "build_shards: " + KEPT_LINE.format(staging=staging), printed
        keys = store.keys("killed-writing")
        done = [k for k in keys if k.endswith(".tmp.done") and k[:-len(".done")] in keys]
        assert len(done) >= 2 and not any(k.endswith("manifest.json") for k in keys)

        status, stdout, err = _run(capsys, *argv)
        assert status == 0, err
    finally:
        stop_server(pool.process)
    found = RESUMED.search(stdout)
    assert found, stdout
    assert (int(found[2]), int(found[3])) == (27, len(done))  # the finished shards the killed run staged
    assert int(found[1]) == 0  # inputs on a store have no stamp: each is read again
    published = store.objects("killed-writing")
    assert published == store.objects("reference")  # every shard, index/, manifest, labels, dead letters


# (id, op, pattern): moments of the publish, which runs on a worker (``PublishShards``): the old
# manifest deleted with no shard renamed yet, and the new manifest written with the old set's
# files not yet deleted (the journal deletes them last). On s3:// a
# batch of renames is one file system call (Beam copies every object, then deletes the sources).
# The second moment is in the publish's last stage, which hands no data back to the launcher:
# there Beam 2.77's FnApiRunner alone waits for the dead worker's answer forever
# (``beam_compat._fail_bundles_of_lost_workers`` fails the bundle instead).
PUBLISH_MOMENTS = [
    pytest.param("old_manifest_gone", "rename", r"/killed-publish/[^/]+/train-\d+-of-00004\.tfrecord$",
                 id="old_manifest_gone"),
    pytest.param("renamed_before_stale_deleted", "delete", r"/killed-publish/[^/]+/validation-",
                 id="renamed_before_stale_deleted"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, op, pattern", PUBLISH_MOMENTS)
def test_a_worker_killed_while_publishing_over_a_set_leaves_a_whole_set_after_the_rerun(
        store, s3_server, tmp_path, shared, capsys, name, op, pattern) -> None:
    store.copy("old", "killed-publish/" + name)
    old = store.objects("old")
    pool, marker = _paused_pool(tmp_path, shared, op, pattern, 1)
    try:
        prefix = f"killed-publish/{name}"
        out = store.url(prefix)
        argv = ["build", "--input", store.url("raw"), "--output_dir", out, *FLAGS, *s3_flags(s3_server.url),
                "--temp_location", store.url("temp"), *external_flags(pool)]
        stopped, status, printed = _killed_run(argv, marker, str(tmp_path / "job.log"), str(tmp_path / "pool.log"))
        assert re.search(pattern, stopped["path"]), stopped
        assert status == 1, printed
        assert printed.rstrip().splitlines()[-1].startswith(f"build_shards: staged work kept in {out}/.staging"), printed
        keys = store.keys(prefix)
        if name == "old_manifest_gone":  # the old manifest is gone; the new one is not there yet
            assert f"{prefix}/manifest.json" not in keys
        else:  # the new manifest is already in place: the old set's files are deleted after it
            assert store.objects(prefix)["manifest.json"] == store.objects("reference")["manifest.json"]

        status, stdout, err = _run(capsys, *argv)
        assert status == 0, err
    finally:
        stop_server(pool.process)
    published = store.objects(prefix)
    assert published != old
    assert published == store.objects("reference")  # the new set whole: no old shard, no staging
