"""The pure rules of an append: where new records go, shard indexes, the journal."""

from __future__ import annotations

import pytest

from transforms.shardset.ownership import Journal
from transforms.shardset.planning import SplitTotals, append_layout, cut_records, lay_out_split

T = 300


@pytest.mark.parametrize("published, new, expected", [
    ((), 10, (None, 0)),  # a new split: a build's plan
    ((300, 290, 310), 200, (None, 0)),  # 200 >= 2T/3: shards of their own
    ((300, 290, 310), 199, (1, 290)),  # fewer: they join the smallest shard
    ((290, 300, 290), 50, (2, 290)),  # the last of equals
    ((120,), 10, (0, 120)),  # a split smaller than the band is still one shard
])
def test_append_layout(published, new, expected) -> None:
    assert append_layout(published, new, T) == expected


def test_indexes_with_a_merged_shard() -> None:
    totals = SplitTotals("train", 490, 3, 10, 2, published=5, merged=1, lead_bytes=290)
    assert totals.final_count == 6
    assert [totals.final_index(j) for j in range(2)] == [1, 5]
    assert [totals.planned_shard(i) for i in range(6)] == [None, 0, None, None, None, 1]
    assert list(totals.lead_shards()) == [0, 1]  # 290 of 490 bytes: both shards begin with old records


def test_indexes_without_a_merged_shard() -> None:
    totals = SplitTotals("train", 600, 30, 10, 2, published=3)
    assert totals.final_count == 5
    assert [totals.final_index(j) for j in range(2)] == [3, 4]
    assert [totals.planned_shard(i) for i in range(5)] == [None, None, None, 0, 1]
    assert list(totals.lead_shards()) == []


def test_merged_records_come_first_on_the_line() -> None:
    """New records are placed after the merged shard's bytes: offsets start at the lead."""
    layout = lay_out_split("train", [(0, 2, 100, 50), (7, 1, 60, 60)], T, published=(300, 280))
    assert layout.totals.merged == 1 and layout.totals.lead_bytes == 280
    assert layout.offsets == (280, 380)
    assert layout.totals.total_bytes == 440 and layout.totals.num_shards == 2  # 440 > 4T/3: two
    # The old records of the merged shard, cut by the same rule, land in the planned shards.
    assert cut_records([140, 140], layout.totals.num_shards, layout.totals.total_bytes) == [0, 0]


def test_a_merged_shard_too_full_is_cut_in_two() -> None:
    layout = lay_out_split("train", [(3, 1, 150, 150)], T, published=(390, 400))
    totals = layout.totals
    assert totals.merged == 0 and totals.num_shards == 2 and totals.final_count == 3
    assert cut_records([130, 130, 130], 2, totals.total_bytes) == [0, 0, 1]


def test_journal_round_trip_with_moves() -> None:
    journal = Journal("ab" * 16, ("a", "b"), moves=(("x", "y"), (".staging/r/manifest.json.next", "manifest.json")),
                      remove=("old",))
    assert Journal.loads(journal.dumps()) == journal
    plain = Journal("cd" * 16, ("a",))
    assert b"moves" not in plain.dumps() and Journal.loads(plain.dumps()) == plain
