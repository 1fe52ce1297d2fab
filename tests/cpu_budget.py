"""Each test's CPU time, and the fast tier's budget on it.

Registered as a pytest plugin by ``conftest.py``. A test's CPU time is the
CPU seconds its setup, call and teardown took in the test process plus those
of the child processes it waited for (``RUSAGE_CHILDREN``): a job run on
external workers or in a subprocess counts as much as one in process. Set-up
of a session-wide server (``scope="session"``) is left out, and so are the
CPU seconds of children reaped during a test that started no process (a
child an earlier test left running reaches ``RUSAGE_CHILDREN`` only when it
is waited for, whoever waits), and so is the
first import of TensorFlow in the process (a few CPU seconds, done before the
first test of a module that names it): every test that happens to come first
would pay them.

- A test not marked ``slow`` whose CPU time exceeds ``FAST_CPU_BUDGET_S``
  by more than ``CONTENTION_MARGIN`` (twice it) fails, naming its CPU time: the fast tier (``-m "not slow"``) stays fast.
  A module-scoped build is paid by the first test that uses it, so a module
  whose fast tests share a build must keep that build under the budget.
  ``@pytest.mark.cpu_budget(seconds)`` gives a test that must stay in the fast
  tier another budget, saying why (a hostile input whose peak memory is
  checked in a fresh process).
- ``TEST_CPU_LOG=path`` appends one JSON line per test
  (``nodeid``, ``cpu_s``, ``slow``) to ``path.<worker>``, to find where the
  time goes.
- ``TEST_CPU_BUDGET=off`` turns the budget off (to measure a tree that
  breaks it); ``TEST_CPU_BUDGET=<seconds>`` sets another budget.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
from typing import Iterator

import pytest

FAST_CPU_BUDGET_S = 3.0
"""CPU seconds (process + children) a test outside the ``slow`` mark may take.

One quick job run in process (a build of a few images) takes 1.3 to 1.5 CPU s
on a 2-core AMD EPYC machine; tests measured over 2.0 CPU s are marked slow.
On that machine under a load average of 6 to 11 the same test measured from
1.9 to 2.6 CPU s in two runs, hence the margin.
"""

CONTENTION_MARGIN = 2.0
"""A test fails at this many times its budget: CPU seconds grow when other
processes share the cores (caches, frequency): at a load average of about 12
on 2 cores a test of 1.9 CPU s measured 3.5, and one of 3.0 measured over 3.0.
The budget is what a test should take; the margin keeps a loaded machine from
failing a run that an idle one passes."""

_KEY = pytest.StashKey[float]()
_EXCLUDED = pytest.StashKey[float]()
_CHILDREN = pytest.StashKey[tuple]()


def cpu_seconds() -> float:
    """CPU seconds of this process and of its waited-for children so far."""
    return _own_seconds() + _children_seconds()


def _own_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _children_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


_started = [0]  # processes started so far: subprocess.Popen and multiprocessing


def _count_process_starts() -> None:
    """Counts each process this one starts (``subprocess`` and ``multiprocessing``), once per process."""
    import multiprocessing.process
    import subprocess

    if getattr(subprocess.Popen._execute_child, "_counted", False):
        return
    execute, start = subprocess.Popen._execute_child, multiprocessing.process.BaseProcess.start

    def counted_execute(self, *args, **kwargs):
        _started[0] += 1
        return execute(self, *args, **kwargs)

    def counted_start(self):
        _started[0] += 1
        return start(self)

    counted_execute._counted = True  # type: ignore[attr-defined]
    subprocess.Popen._execute_child = counted_execute
    multiprocessing.process.BaseProcess.start = counted_start


_current: list[pytest.Item] = []
_HEAVY_IMPORTS = ("tensorflow",)
_names_heavy: dict[str, bool] = {}


def _import_heavy_first(item: pytest.Item) -> None:
    """Imports TensorFlow before a test of a module that names it, the CPU left out of the test's."""
    path = str(item.path)
    if path not in _names_heavy:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        _names_heavy[path] = any(name in text for name in _HEAVY_IMPORTS)
    if not _names_heavy[path]:
        return
    for name in _HEAVY_IMPORTS:
        if name not in sys.modules:
            start = cpu_seconds()
            try:
                importlib.import_module(name)
            except ImportError:
                continue  # the test says what it needs
            item.stash[_EXCLUDED] = item.stash.get(_EXCLUDED, 0.0) + cpu_seconds() - start


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
    _count_process_starts()
    _current.append(item)
    item.stash[_KEY] = cpu_seconds()
    item.stash[_CHILDREN] = (_children_seconds(), _started[0])
    _import_heavy_first(item)
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
    children_before, started_before = item.stash[_CHILDREN]
    if _started[0] == started_before:  # what children it reaped, an earlier test started
        used -= _children_seconds() - children_before
    slow = item.get_closest_marker("slow") is not None
    log = os.environ.get("TEST_CPU_LOG")
    if log:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(f"{log}.{worker}", "a", encoding="utf-8") as out:
            out.write(json.dumps({"nodeid": item.nodeid, "cpu_s": round(used, 3), "slow": slow}) + "\n")
    report = outcome.get_result()
    setting = os.environ.get("TEST_CPU_BUDGET", "")
    if slow or setting == "off":
        return
    budget = float(setting) if setting else FAST_CPU_BUDGET_S
    own = item.get_closest_marker("cpu_budget")
    if own is not None:
        budget = float(own.args[0])
    if used > budget * CONTENTION_MARGIN and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {used:.2f} CPU s (process + children, setup to teardown), over twice the "
            f"fast tier's budget of {budget:.2f} CPU s (tests/cpu_budget.py): make it cheaper or mark "
            "it @pytest.mark.slow")
