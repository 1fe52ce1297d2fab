"""Runs the costliest test modules first, so that no long module is left for the end of a parallel run.

Registered as a pytest plugin by ``conftest.py``. With ``--dist loadfile``
pytest-xdist hands whole modules to its workers, in collection order when run
with ``--no-loadscope-reorder`` (otherwise it hands out the modules with the
most tests first, which leaves the modules of a few long job runs for last).
A worker that starts a long module late keeps the run going while the others
idle; with the longest first, the last modules handed out are short ones and
the workers finish together.

``module_costs.json`` holds the CPU seconds each module's tests took (sums
from ``TEST_CPU_LOG``, ``tests/cpu_budget.py``), those outside the ``slow``
mark and those in it apart, so that the fast tier (``-m "not slow"``) is
ordered by what it runs. After deselection, modules are collected in
decreasing cost, those it does not name (new, or cheap) after them in their
usual order, and each module's tests in their own order. To measure again::

    TEST_CPU_LOG=/tmp/cpu.log pytest -n auto --dist loadfile tests
    python -m tests.ordering /tmp/cpu.log.* > tests/module_costs.json
"""

from __future__ import annotations

import collections
import json
import os
import sys

import pytest

COSTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_costs.json")


def module_costs() -> dict[str, list[float]]:
    """Module path (as in a node id, ``tests/e2e/test_x.py``) -> CPU seconds measured of its tests
    outside and inside the ``slow`` mark."""
    with open(COSTS_FILE, encoding="utf-8") as fh:
        return json.load(fh)


@pytest.hookimpl(trylast=True)  # after ``-m`` and ``-k`` deselected what will not run
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Orders the collected tests by their module's measured cost, the costliest first."""
    costs = module_costs()
    first: dict[str, int] = {}
    kinds: dict[str, set[bool]] = collections.defaultdict(set)
    for index, item in enumerate(items):
        module = item.nodeid.split("::", 1)[0]
        first.setdefault(module, index)
        kinds[module].add(item.get_closest_marker("slow") is not None)

    def cost(module: str) -> float:  # a test marked slow since it was measured counts as slow
        fast, slow = costs.get(module, (0.0, 0.0))
        return fast + slow if True in kinds[module] else fast

    def key(pair: tuple[int, pytest.Item]) -> tuple[float, int, int]:
        index, item = pair
        module = item.nodeid.split("::", 1)[0]
        return -cost(module), first[module], index

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


def costs_from_logs(paths: list[str]) -> dict[str, list[float]]:
    """Module -> the CPU seconds of its tests outside and inside the ``slow`` mark in ``TEST_CPU_LOG``
    files, costliest first; modules under a second are left out."""
    total: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                entry = json.loads(line)
                total[entry["nodeid"].split("::", 1)[0]][bool(entry["slow"])] += entry["cpu_s"]
    return {module: [round(fast, 1), round(slow, 1)]
            for module, (fast, slow) in sorted(total.items(), key=lambda m: -sum(m[1])) if fast + slow >= 1.0}


if __name__ == "__main__":
    found = costs_from_logs(sys.argv[1:])
    sys.stdout.write("{\n" + ",\n".join(f"{json.dumps(m)}: {json.dumps(c)}" for m, c in found.items()) + "\n}\n")
