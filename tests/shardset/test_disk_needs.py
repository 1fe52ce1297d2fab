"""Unit tests of ``shardset.disk_needs``: a build's peak disk need and the shortfall."""

from __future__ import annotations

import pytest

from transforms.shardset.disk_needs import DiskNeed, apart_shortfall_clause, build_disk_need, shortfall, size_text

MIB = 1 << 20


def test_a_build_needs_its_records_twice_at_its_peak() -> None:
    need = build_disk_need(635 * MIB)
    assert need == DiskNeed(635 * MIB, 635 * MIB) and need.peak == 1270 * MIB


@pytest.mark.parametrize("need, free, expected", [
    (1270 * MIB, 700 * MIB, 570 * MIB), (100, 100, 0), (100, 5000, 0), (100, None, None)])
def test_the_shortfall_is_what_to_free_first(need, free, expected) -> None:
    assert shortfall(need, free) == expected


@pytest.mark.parametrize("nbytes, text", [(3 * 1024, "3 KiB"), (635 * MIB, "635 MiB"), (1270 * MIB, "1.24 GiB")])
def test_sizes_read_as_the_disk_lines_say_them(nbytes, text) -> None:
    assert size_text(nbytes) == text


def test_what_a_failed_build_staged_counts_toward_the_peak_its_rerun_needs() -> None:
    from transforms.shardset.disk_needs import shortfall_clause

    mib = 1 << 20
    assert shortfall_clause(3 * mib, 0, kept=2 * mib).endswith(
        "and 0 KiB are free now besides the 2 MiB it staged: free about 4 MiB more")
    assert shortfall_clause(3 * mib, 2 * mib).endswith("and 2 MiB are free now: free about 4 MiB more")
    assert shortfall_clause(3 * mib, 5 * mib, kept=mib).endswith("and 5 MiB are free now besides the 1 MiB it staged")


@pytest.mark.parametrize("stage_free, out_free, expected", [
    (100 * MIB, 700 * MIB, "this build needs about 635 MiB free in /ssd/tmp for its run files (100 MiB free now: "
                           "free about 535 MiB more) and about 635 MiB in /nas/out for its shards (700 MiB free now)"),
    (None, None, "this build needs about 635 MiB free in /ssd/tmp for its run files and about 635 MiB in /nas/out "
                 "for its shards"),
])
def test_with_a_staging_dir_each_place_needs_the_records_once(stage_free, out_free, expected) -> None:
    assert apart_shortfall_clause(635 * MIB, "/ssd/tmp", stage_free, "/nas/out", out_free) == expected
