"""The publish benchmark at a small size: every case publishes, and only handed-out renames run in the workers."""

from __future__ import annotations

import pytest

from benchmarks import object_store
from tests.benchmarks.harness_checks import assert_cases_wired


@pytest.mark.slow
def test_handed_out_renames_run_in_every_worker_process_and_the_table_says_so():
    runs = object_store.publish_parallel_run(shards=1_200, rounds=1, rename_ms=0.5)  # over PARALLEL_MOVES
    processes = {(r["mode"], r["workers"]): r["move_processes"] for r in runs}
    assert processes == {("serial", 1): 0, ("parallel", 1): 1, ("serial", 2): 0, ("parallel", 2): 2}
    assert all(r["rename_span"] > 0 for r in runs)
    table = object_store._table(runs, 1_200)
    assert "| parallel | 2 |" in table and table.count("\n") == 5


def test_every_case_is_wired(capsys):
    assert_cases_wired(object_store.CASES, capsys)
