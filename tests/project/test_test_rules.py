"""The suite's own rules: the fast tier's CPU budget, and shared trees stay as they were made."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

@pytest.fixture(autouse=True)
def _bare(monkeypatch) -> None:
    """The inner runs load only the plugin they test (fewer CPU seconds)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


_BURN = """
import resource
import pytest

def burn(seconds):
    def used():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    start = used()
    while used() - start < seconds:
        sum(range(10000))

def test_fast():
    pass

def test_over_budget():
    burn(0.2)

@pytest.mark.slow
def test_over_budget_but_slow():
    burn(0.2)

@pytest.mark.cpu_budget(5.0)
def test_over_budget_but_given_its_own():
    burn(0.2)
"""


def test_a_test_over_the_cpu_budget_fails_unless_marked_slow_or_given_its_own(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.setenv("TEST_CPU_BUDGET", "0.05")
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    cpu_budget: budget\n")
    pytester.makepyfile(test_burn=_BURN)
    result = pytester.runpytest_inprocess("-p", "tests.cpu_budget", "-q")
    result.assert_outcomes(passed=4, errors=1)  # the failed teardown of the test over budget
    result.stdout.fnmatch_lines(["*test_over_budget took * CPU s*over twice the fast tier's budget of 0.05 CPU s*"])
    assert "test_over_budget_but_slow took" not in result.stdout.str()
    assert "test_over_budget_but_given_its_own took" not in result.stdout.str()


def test_the_budget_can_be_turned_off(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.setenv("TEST_CPU_BUDGET", "off")
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    cpu_budget: budget\n")
    pytester.makepyfile(test_burn=_BURN)
    pytester.runpytest_inprocess("-p", "tests.cpu_budget", "-q").assert_outcomes(passed=4)


def test_a_test_writing_into_a_shared_tree_fails_at_the_end_of_its_module(pytester: pytest.Pytester,
                                                                          monkeypatch) -> None:
    monkeypatch.setenv("TEST_CPU_BUDGET", "off")
    pytester.makepyfile(test_writes="""
import os
from tests.trees import Part

TREE = (Part(per_class=1),)

def test_reads(tree):
    assert sorted(os.listdir(tree)) == ["daisy", "rose", "tulip"]

def test_writes(tree):
    with open(os.path.join(tree, "daisy", "extra.jpg"), "wb") as fh:
        fh.write(b"x")
""")
    result = pytester.runpytest_inprocess("-p", "tests.trees", "-q")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*is shared by the tests of this process and changed: copy it before changing it*"])


_LEFTOVER = """
import subprocess, sys

BURN = "import resource\\nwhile sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) < 0.3: pass"
held = []

def test_starts_a_child_and_leaves_it_running():
    held.append(subprocess.Popen([sys.executable, "-c", BURN]))

def test_that_reaps_a_child_it_did_not_start():
    held[0].wait()  # the child's CPU seconds reach this process now

def test_runs_its_own_child():
    subprocess.run([sys.executable, "-c", BURN], check=True)
"""


def test_a_child_an_earlier_test_left_is_not_charged_to_the_test_that_reaps_it(pytester: pytest.Pytester,
                                                                             monkeypatch) -> None:
    monkeypatch.setenv("TEST_CPU_BUDGET", "0.1")
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    cpu_budget: budget\n")
    pytester.makepyfile(test_leftover=_LEFTOVER)
    result = pytester.runpytest_inprocess("-p", "tests.cpu_budget", "-q")
    result.assert_outcomes(passed=3, errors=1)  # only the test that ran its own child is over budget
    result.stdout.fnmatch_lines(["*test_runs_its_own_child took * CPU s*"])
    assert "test_that_reaps_a_child_it_did_not_start took" not in result.stdout.str()
