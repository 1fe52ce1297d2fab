"""``beam_jobs/cli/loading.py``: a command's modules load with the garbage collector paused."""

from __future__ import annotations

import gc

from beam_jobs.cli import loading


def test_the_collector_is_paused_until_resume_freezes_what_loaded_and_runs_it_again() -> None:
    assert gc.isenabled()
    try:
        loading.pause()
        assert not gc.isenabled()
        loading.resume()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        loading.resume()  # once only
        assert gc.isenabled()
    finally:
        gc.unfreeze()  # the test process's objects go back to the collector
        gc.enable()


def test_a_collector_paused_by_someone_else_stays_paused() -> None:
    gc.disable()
    try:
        loading.pause()
        loading.resume()
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()
