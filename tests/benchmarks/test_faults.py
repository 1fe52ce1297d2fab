"""The faults harness (benchmarks/faults.py): every case named, documented and wired."""

from __future__ import annotations

from benchmarks import faults
from tests.benchmarks.harness_checks import assert_cases_wired


def test_every_case_is_wired(capsys):
    assert_cases_wired(faults.CASES, capsys)
