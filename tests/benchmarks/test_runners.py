"""The runners harness (benchmarks/runners.py): every case named, documented and wired."""

from __future__ import annotations

from benchmarks import runners
from tests.benchmarks.harness_checks import assert_cases_wired


def test_every_case_is_wired(capsys):
    assert_cases_wired(runners.CASES, capsys)
