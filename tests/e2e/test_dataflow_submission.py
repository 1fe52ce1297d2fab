"""Submitting to Dataflow, offline: the job graph translates, and the package a worker installs is whole.

``--dry_run`` makes Beam's DataflowRunner translate the pipeline, stage the
``--setup_file`` package locally and stop before contacting Google; the build
job then skips its input check (gs:// would need credentials) and the summary.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from tests.servers import free_port
from tests.shard_fixtures import run_build

pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient",
                    reason="needs apache-beam[gcp] (pip install -e '.[test]')")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = ("Discover", "Inspect", "RejectDuplicateImages", "Plan", "Write", "Publish")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> str:
    """A copy of the project's package sources, so building it leaves the work tree alone."""
    dest = tmp_path_factory.mktemp("project")
    shutil.copy(os.path.join(ROOT, "setup.py"), dest)
    for package in ("transforms", "beam_jobs"):
        shutil.copytree(os.path.join(ROOT, package), dest / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return str(dest)


@pytest.mark.slow
def test_dataflow_dry_run_translates_the_job(project, monkeypatch, capsys):
    # Any GCS call would be a bug here: send it to a closed loopback port, never out.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")
    status, out, err = run_build(
        capsys, "--input", "gs://my-bucket-123/raw/flowers", "--output_dir",
        "gs://my-bucket-123/shards/flowers", "--runner", "DataflowRunner", "--dry_run", "True",
        "--project", "my-project-123", "--region", "us-central1",
        "--temp_location", "gs://my-bucket-123/tmp", "--staging_location", "gs://my-bucket-123/staging",
        "--job_name", "build-shards-flowers", "--setup_file", os.path.join(project, "setup.py"))
    assert status == 0, err
    head, steps = out.strip().splitlines()[-2:]
    assert head.startswith("Dry run: the job graph has ") and "nothing was submitted" in head
    assert int(head.split(" has ")[1].split()[0]) > 50
    listed = steps.split("steps: ")[1].split(", ")
    assert [s for s in listed if s in STEPS] == list(STEPS)  # in pipeline order
    assert "Published" not in out


def test_usage_errors_still_fail_a_dry_run(capsys):
    status, _, err = run_build(capsys, "--input", "gs://my-bucket-123/raw", "--output_dir",
                               "gs://my-bucket-123/out", "--runner", "DataflowRunner", "--dry_run",
                               "True", "--resize", "4x4")
    assert status == 2 and "need --image_mode" in err


@pytest.mark.slow
def test_sdist_and_wheel_hold_what_a_worker_needs(project, tmp_path):
    dist = str(tmp_path / "dist")
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--no-isolation",
                    "--outdir", dist, project], check=True, capture_output=True, timeout=300)
    sdist, = glob.glob(os.path.join(dist, "*.tar.gz"))
    wheel, = glob.glob(os.path.join(dist, "*.whl"))
    with tarfile.open(sdist) as tar:
        in_sdist = [name.split("/", 1)[1] for name in tar.getnames() if "/" in name]
    with zipfile.ZipFile(wheel) as whl:
        in_wheel = whl.namelist()
    needed = sorted(os.path.relpath(p, project).replace(os.sep, "/") for pattern in
                    ("transforms/*.py", "transforms/*/*.py", "beam_jobs/*.py",
                     "beam_jobs/*/*.py")
                    for p in glob.glob(os.path.join(project, pattern)))
    needed.append("transforms/example/example.proto")
    assert "transforms/tfrecord/framing.py" in needed and "beam_jobs/build_shards.py" in needed
    assert [n for n in needed if n not in in_wheel] == []
    assert [n for n in needed + ["setup.py"] if n not in in_sdist] == []
    assert not [n for n in in_wheel if n.startswith("tests/")]

    # A worker installs the wheel and imports the jobs from it, not from a source tree.
    site = str(tmp_path / "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", site, wheel], check=True, capture_output=True, timeout=300)
    probe = ("import beam_jobs.build_shards, transforms.example.codec as c; "
             "from transforms.example.messages import Example; e = Example(); "
             "e.features.feature['k'].int64_list.value.append(1); "
             "print(c.__file__); print(c.decode_example(e.SerializeToString()))")
    run = subprocess.run([sys.executable, "-c", probe], cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": site})
    assert run.returncode == 0, run.stderr
    where, decoded = run.stdout.splitlines()[-2:]
    assert where.startswith(site) and decoded == "{'k': ('int64', [1])}"


def _dry_run_args(project: str) -> list[str]:
    return ["--runner", "DataflowRunner", "--dry_run", "True", "--project", "my-project-123",
            "--region", "us-central1", "--temp_location", "gs://my-bucket-123/tmp",
            "--staging_location", "gs://my-bucket-123/staging",
            "--setup_file", os.path.join(project, "setup.py")]


def _offline_env() -> dict[str, str]:
    """The environment without an emulator or credentials: a storage call would hang, then fail."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


@pytest.mark.slow
def test_reshard_dry_run_is_offline(project, tmp_path):
    # Before: the source matched gs://.../train-* while the pipeline was built and the
    # run failed after about two minutes of retries. A dry run touches no storage.
    done = subprocess.run(
        [sys.executable, "-m", "beam_jobs.reshard", "--input", "gs://my-bucket-123/old/train-*",
         "--output_dir", "gs://my-bucket-123/new", *_dry_run_args(project)],
        capture_output=True, text=True, timeout=90, env=_offline_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Dry run: the job graph has " in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("target", [["--output_dir", "gs://my-bucket-123/shards"],
                                    ["--files", "gs://my-bucket-123/shards/*.tfrecord"]])
def test_verify_dry_run_is_offline(project, tmp_path, target):
    # Before: --output_dir was looked up as a file (and --files matched) while the flags were
    # checked, and the run failed after about two minutes of retries.
    done = subprocess.run(
        [sys.executable, "-m", "beam_jobs.verify_shards", *target, *_dry_run_args(project)],
        capture_output=True, text=True, timeout=90, env=_offline_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Dry run: the job graph has " in done.stdout


_GRAPH_LIMIT = 1 << 20
_SHARDS, _CLASSES, _LABELS_PER_SHARD = 70_000, 10_000, 50


def _graph_bytes(out: str) -> int:
    head = next(line for line in out.splitlines() if line.startswith("Dry run: the job graph has "))
    return int(head.split(" transforms and ")[1].split()[0])


@pytest.fixture(scope="module")
def big_shard_set(tmp_path_factory) -> str:
    """The manifest of 70,000 shards of 10,000 classes, 50 per shard, and an empty file per shard."""
    folder = tmp_path_factory.mktemp("big_set")
    labels = [f"class_{i:05d}" for i in range(_CLASSES)]
    shards = [{"file": f"train-{i:05d}-of-{_SHARDS:05d}.tfrecord", "records": 50 * 29,
               "bytes": 157_286_400, "sha256": "0" * 64,
               "label_counts": {str((i * 37 + j * 199) % _CLASSES): 29 for j in range(_LABELS_PER_SHARD)}}
              for i in range(_SHARDS)]
    counts: dict[str, int] = {}
    for shard in shards:
        for label, count in shard["label_counts"].items():
            counts[label] = counts.get(label, 0) + count
    manifest = {"format": "tfrecord-shards", "format_version": 1, "created_by": "build_shards",
                "seed": 0, "compression": "none", "options": {}, "feature_spec": {"image/encoded": "bytes"},
                "labels": labels, "records": 50 * 29 * _SHARDS, "dead_letters": 0,
                "splits": {"train": {"records": 50 * 29 * _SHARDS, "bytes": 157_286_400 * _SHARDS,
                                     "label_counts": counts, "shards": shards}}}
    path = folder / "manifest.json"
    path.write_text(json.dumps(manifest))
    assert path.stat().st_size > 8 * _GRAPH_LIMIT  # the graph would have held it twice before
    with open(folder / "labels.txt", "w") as fh:
        fh.write("".join(f"{label}\n" for label in labels))
    for shard in shards:  # present, so that the job would list every one of them
        (folder / shard["file"]).touch()
    return str(folder)


@pytest.mark.slow
def test_job_graphs_stay_small_for_70000_shards_and_10000_classes(project, big_shard_set, monkeypatch,
                                                                  capsys):
    """Build, verify and reshard translate to graphs under 1 MiB for a shard set this large.

    Before, verify put the manifest's entries in the graph twice (9.2 MB here). Now it
    reads the manifest inside the pipeline.
    """
    from beam_jobs import build_shards, reshard, verify_shards

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")
    runs = {
        build_shards: ["--input", "gs://my-bucket-123/raw", "--output_dir", "gs://my-bucket-123/shards",
                       "--labels_file", os.path.join(big_shard_set, "labels.txt")],
        verify_shards: ["--output_dir", big_shard_set],
        reshard: ["--input", "gs://my-bucket-123/shards/train-*", "--output_dir",
                  "gs://my-bucket-123/resharded"],
    }
    sizes = {}
    for job, argv in runs.items():
        capsys.readouterr()
        status = job.run([*argv, *_dry_run_args(project)])
        out, err = capsys.readouterr()
        assert status == 0, (job.__name__, err)
        sizes[job.__name__] = _graph_bytes(out)
    assert all(size < _GRAPH_LIMIT for size in sizes.values()), sizes
