"""``tests/ordering.py``: the costliest test modules are collected first, each module's tests in their order."""

from __future__ import annotations

from tests import ordering


class _Item:
    def __init__(self, nodeid: str, slow: bool = False) -> None:
        self.nodeid, self._slow = nodeid, slow

    def get_closest_marker(self, name: str):
        return object() if name == "slow" and self._slow else None


def _ordered(monkeypatch, costs: dict[str, list[float]], items: list[_Item]) -> list[str]:
    monkeypatch.setattr(ordering, "module_costs", lambda: costs)
    ordering.pytest_collection_modifyitems(None, None, items)
    return [item.nodeid for item in items]


def test_the_costliest_modules_come_first_and_each_keeps_its_order(monkeypatch) -> None:
    costs = {"tests/b.py": [1.0, 50.0], "tests/c.py": [20.0, 0.0]}
    items = [_Item("tests/a.py::one"), _Item("tests/b.py::fast"), _Item("tests/b.py::slow", slow=True),
             _Item("tests/c.py::one"), _Item("tests/a.py::two"), _Item("tests/d.py::one")]
    assert _ordered(monkeypatch, costs, items) == [
        "tests/b.py::fast", "tests/b.py::slow", "tests/c.py::one",  # measured: costliest first
        "tests/a.py::one", "tests/a.py::two", "tests/d.py::one"]  # not measured: as collected


def test_without_its_slow_tests_a_module_costs_what_its_fast_tests_do(monkeypatch) -> None:
    costs = {"tests/b.py": [1.0, 50.0], "tests/c.py": [20.0, 0.0]}
    items = [_Item("tests/b.py::fast"), _Item("tests/c.py::one")]  # -m "not slow" deselected b's slow test
    assert _ordered(monkeypatch, costs, items) == ["tests/c.py::one", "tests/b.py::fast"]

