"""The harnesses' command line (benchmarks/common.py): ``CASE [--quick] [ARG ...]``."""

from __future__ import annotations

from benchmarks import common


def _cases(seen: list[list[str]]) -> dict[str, common.Case]:
    return {"small": common.Case(lambda argv: seen.append(argv), "A case.", ("--size", "2")),
            "wrapper": common.Case(lambda argv: seen.append(argv) or 3, "Passes argv on.", None)}


def test_quick_stands_for_the_case_arguments_and_later_ones_override_them():
    seen: list[list[str]] = []
    assert common.run_case(_cases(seen), ["small", "--quick", "--size", "5"]) == 0
    assert common.run_case(_cases(seen), ["small", "--rounds", "1"]) == 0
    assert seen == [["--size", "2", "--size", "5"], ["--rounds", "1"]]


def test_a_wrapper_gets_its_arguments_untouched_and_its_status_is_the_exit_status():
    seen: list[list[str]] = []
    assert common.run_case(_cases(seen), ["wrapper", "out.json", "mod", "--quick"]) == 3
    assert seen == [["out.json", "mod", "--quick"]]


def test_an_unknown_case_lists_the_cases_and_fails(capsys):
    assert common.run_case(_cases([]), ["nope"]) == 2
    err = capsys.readouterr().err
    assert "small" in err and "wrapper" in err and "unknown case 'nope'" in err
    assert common.run_case(_cases([]), ["--help"]) == 0
    assert "A case." in capsys.readouterr().out
