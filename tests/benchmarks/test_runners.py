"""The runners harness (benchmarks/runners.py): every case wired, and a quick table on the DirectRunner."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks import runners
from tests.benchmarks.harness_checks import assert_cases_wired

ROOT = Path(__file__).resolve().parents[2]


def test_every_case_is_wired(capsys):
    assert_cases_wired(runners.CASES, capsys)


@pytest.mark.slow
def test_runners_table_quick_runs_every_job_on_the_direct_runner():
    work = tempfile.mkdtemp(prefix="runners-table-test-", dir="/var/tmp")  # the harness refuses /tmp
    try:
        done = subprocess.run([sys.executable, "-m", "benchmarks.runners", "runners_table", "--quick",
                               "--work", str(Path(work) / "w")], cwd=ROOT, capture_output=True, text=True,
                              timeout=900)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "/" in line]
    assert [row.split(" | ")[0][2:] for row in rows] == list(runners.JOBS)
    assert all(row.split(" | ")[1].startswith("yes / ") and row.endswith("| not run | not run |")
               for row in rows)
