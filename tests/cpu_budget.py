"""Each test's CPU time, and the fast tier's budget on it.

Registered as a pytest plugin by ``conftest.py``. A test's CPU time is the
CPU seconds its setup, call and teardown took in the test process plus those
of the child processes it waited for (``RUSAGE_CHILDREN``): a job run on
external workers or in a subprocess counts as much as one in process. Set-up
of a session-wide server (``scope="session"``) is left out: every test that
happens to come first would pay it.

- A test not marked ``slow`` whose CPU time exceeds ``FAST_CPU_BUDGET_S``
  fails, naming its CPU time: the fast tier (``-m "not slow"``) stays fast.
  A module-scoped build is paid by the first test that uses it, so a module
  whose fast tests share a build must keep that build under the budget.
- ``TEST_CPU_LOG=path`` appends one JSON line per test
  (``nodeid``, ``cpu_s``, ``slow``) to ``path.<worker>``, to find where the
  time goes.
- ``TEST_CPU_BUDGET=off`` turns the budget off (to measure a tree that
  breaks it).
"""

from __future__ import annotations

import json
import os
import resource
from typing import Iterator

import pytest

FAST_CPU_BUDGET_S = 2.0
"""CPU seconds (process + children) a test outside the ``slow`` mark may take."""

_KEY = pytest.StashKey[float]()
_EXCLUDED = pytest.StashKey[float]()


def cpu_seconds() -> float:
    """CPU seconds of this process and of its waited-for children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_current: list[pytest.Item] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> Iterator[None]:
    """Leaves session-wide fixtures' set-up out of the test that triggers it."""
    if fixturedef.scope != "session" or not _current:
        yield
        return
    start = cpu_seconds()
    yield
    item = _current[-1]
    item.stash[_EXCLUDED] = item.stash.get(_EXCLUDED, 0.0) + cpu_seconds() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Starts the CPU clock of the test's setup, call and teardown."""
    _current.append(item)
    item.stash[_KEY] = cpu_seconds()
    try:
        yield
    finally:
        _current.pop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """After teardown: logs the test's CPU time, and fails a fast test over budget."""
    outcome = yield
    if call.when != "teardown" or _KEY not in item.stash:
        return
    used = cpu_seconds() - item.stash[_KEY] - item.stash.get(_EXCLUDED, 0.0)
    slow = item.get_closest_marker("slow") is not None
    log = os.environ.get("TEST_CPU_LOG")
    if log:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(f"{log}.{worker}", "a", encoding="utf-8") as out:
            out.write(json.dumps({"nodeid": item.nodeid, "cpu_s": round(used, 3), "slow": slow}) + "\n")
    report = outcome.get_result()
    if slow or used <= FAST_CPU_BUDGET_S or os.environ.get("TEST_CPU_BUDGET") == "off":
        return
    if report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {used:.1f} CPU s (process + children, setup to teardown), over the "
            f"fast tier's budget of {FAST_CPU_BUDGET_S:.1f} CPU s (tests/cpu_budget.py): make it "
            "cheaper or mark it @pytest.mark.slow")
