"""What a build command's process loads before its pipeline, and how (BENCHMARKS.md, "Fixed cost").

A build of image folders (the default) needs neither Parquet's compute
kernels nor TensorFlow, ArrayRecord, Grain or Dask: the modules that use them
import them where they are used. Beam itself loads boto3, pyarrow and numpy,
so those are not listed. The command's modules load with Python's cyclic
garbage collector paused (``beam_jobs/cli/loading.py``).

Fresh processes run ``python -m beam_jobs.build_shards --help`` (its
modules loaded, no pipeline) and ``tfrecord-shards build`` with an input
that is not there, and report what they loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Installed with the project's extras, used only by other inputs, formats or runners.
NOT_FOR_A_DEFAULT_BUILD = ("pyarrow.compute", "tensorflow", "tensorflow_datasets", "array_record", "grain",
                           "dask", "distributed", "scipy")

_PROBE = r"""
import gc, json, runpy, sys
collections = []
gc.callbacks.append(lambda phase, info: collections.append(info["generation"]) if phase == "start" else None)
sys.argv = sys.argv[1:]
try:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print(json.dumps({"modules": sorted(sys.modules), "collections": len(collections),
                  "frozen": gc.get_freeze_count(), "collecting": gc.isenabled()}))
"""


def _probe(module: str, *argv: str) -> dict:
    """What ``python -m module argv`` loaded, and what its garbage collector did meanwhile."""
    done = subprocess.run([sys.executable, "-c", _PROBE, module, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def loaded() -> dict:
    """The build command's process, its modules loaded (``--help``: no pipeline)."""
    return _probe("beam_jobs.build_shards", "--help")


@pytest.mark.slow  # a fresh process loads Beam: about 1.5 CPU s
def test_a_default_build_loads_no_module_that_only_other_inputs_need(loaded: dict) -> None:
    assert "beam_jobs.build_shards" in loaded["modules"] and "apache_beam" in loaded["modules"]
    assert [name for name in NOT_FOR_A_DEFAULT_BUILD if name in loaded["modules"]] == []


def _collector_paused_then_frozen(found: dict) -> None:
    assert found["collections"] < 40  # about 420 with the collector left on
    assert found["frozen"] > 100_000  # what the modules made: out of the collector's reach
    assert found["collecting"]  # on again for the pipeline's own garbage


@pytest.mark.slow  # shares the fresh process above
def test_a_commands_modules_load_with_the_collector_paused_then_frozen(loaded: dict) -> None:
    _collector_paused_then_frozen(loaded)


@pytest.mark.slow  # a fresh process loads Beam: about 1.5 CPU s
def test_tfrecord_shards_loads_its_jobs_modules_with_the_collector_paused_too(tmp_path: Path) -> None:
    found = _probe("beam_jobs.cli.main", "build", "--input", str(tmp_path / "missing"),
                   "--output_dir", str(tmp_path / "out"))  # refused once the job's modules loaded
    assert "beam_jobs.build_shards" in found["modules"]
    _collector_paused_then_frozen(found)
