"""Every Dataflow dry run (build, verify, reshard; gs:// and s3://, folders and patterns) is offline.

The runs go to one child process (``tests/dry_run_child.py``) in which any
``connect`` or name lookup is recorded and refused; where the machine allows
it (root, ``unshare -n``), that process also runs in a network namespace
that has no network at all. No credentials are in its environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient",
                    reason="needs apache-beam[gcp] (pip install -e '.[test]')")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RUNS = [
    ("beam_jobs.build_shards", ["--input", "gs://b1/raw", "--output_dir", "gs://b1/out"]),
    ("beam_jobs.build_shards", ["--input", "s3://b1/raw/", "--output_dir", "s3://b1/out"]),
    ("beam_jobs.build_shards", ["--input", "gs://b1/list.csv", "--output_dir", "gs://b1/out",
                                "--labels_file", "gs://b1/labels.txt"]),
    ("beam_jobs.build_shards", ["--input", "s3://b1/rows/*.jsonl", "--output_dir", "s3://b1/out",
                                "--labels_file", "s3://b1/labels.txt", "--replace"]),
    ("beam_jobs.build_shards", ["--input", "gs://b1/coco.json", "--output_dir", "s3://b1/out",
                                "--split", "train"]),
    ("beam_jobs.verify_shards", ["--output_dir", "gs://b1/out"]),
    ("beam_jobs.verify_shards", ["--output_dir", "s3://b1/out", "--report", "s3://b1/report.json"]),
    ("beam_jobs.verify_shards", ["--files", "gs://b1/out/*.tfrecord"]),
    ("beam_jobs.verify_shards", ["--files", "s3://b1/out/train-*"]),
    ("beam_jobs.reshard", ["--input", "gs://b1/old/train-*", "--output_dir", "gs://b1/new"]),
    ("beam_jobs.reshard", ["--input", "s3://b1/old/train-*", "--output_dir", "s3://b1/new", "--replace"]),
    ("beam_jobs.reshard", ["--input", "s3://b1/old/a.tfrecord", "--output_dir", "gs://b1/new"]),
]


def _no_network_prefix() -> list[str]:
    """``unshare -n`` where it works here (a namespace with no network), else nothing."""
    tool = shutil.which("unshare")
    if tool is None:
        return []
    try:
        ok = subprocess.run([tool, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return [tool, "-n"] if ok else []


def _offline_env() -> dict[str, str]:
    drop = ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("dry_runs")
    path = folder / "results.json"
    done = subprocess.run([*_no_network_prefix(), sys.executable, "-m", "tests.dry_run_child", str(path)],
                          input=json.dumps(RUNS), capture_output=True, text=True, timeout=240,
                          env=_offline_env(), cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(path.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(RUNS)), ids=[f"{m.split('.')[1]}:{' '.join(a)}" for m, a in RUNS])
def test_a_dry_run_touches_no_storage_and_needs_no_credentials(results, index) -> None:
    run = results[index]
    assert (run["module"], run["argv"]) == (RUNS[index][0], RUNS[index][1])
    assert run["network"] == [], run
    assert run["status"] == 0 and run["dry_run_line"], run["stderr"]


@pytest.mark.slow
def test_the_build_module_runs_a_dry_run_as_python_dash_m(tmp_path) -> None:
    """``python -m beam_jobs.build_shards ... --dry_run True`` (plan_build imports the module by name)."""
    from tests.dry_run_child import DRY_RUN

    done = subprocess.run([*_no_network_prefix(), sys.executable, "-m", "beam_jobs.build_shards",
                           "--input", "gs://b1/raw", "--output_dir", "gs://b1/out", *DRY_RUN],
                          capture_output=True, text=True, timeout=120, env=_offline_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Dry run: the job graph has " in done.stdout
