"""What every benchmark harness's test checks: each case is named, documented and wired."""

from __future__ import annotations

import pytest

from benchmarks import common


def assert_cases_wired(cases: dict[str, common.Case], capsys) -> None:
    """Every case answers ``--help`` with its own usage, and ``--quick`` names arguments it accepts."""
    assert cases
    for name, case in cases.items():
        assert case.doc.strip(), name
        with pytest.raises(SystemExit) as ended:
            common.run_case(cases, [name, "--help"])
        assert ended.value.code == 0, name
        assert "usage:" in capsys.readouterr().out, name
