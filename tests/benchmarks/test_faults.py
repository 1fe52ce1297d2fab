"""The faults harness (benchmarks/faults.py): every case wired, and reshard's memory at two tiny sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import faults
from tests.benchmarks.harness_checks import assert_cases_wired

ROOT = Path(__file__).resolve().parents[2]


def test_every_case_is_wired(capsys):
    assert_cases_wired(faults.CASES, capsys)


@pytest.mark.slow
def test_reshard_memory_quick_measures_each_size(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.faults", "reshard_memory", "--quick",
                           "--workdir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout[done.stdout.index("["):done.stdout.rindex("]") + 1])
    assert [row["size_mb"] for row in rows] == [4, 8]
    assert rows[1]["records"] > rows[0]["records"] > 0
    assert all(row["peak_rss_mib"] > 0 and row["wall_s"] > 0 for row in rows)
    assert "peak RSS, largest over smallest:" in done.stdout
