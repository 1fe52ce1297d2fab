"""Range tallies add up to what record-by-record checking finds."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.verify.test_checks import _record
from tests.helpers import encode_example
from transforms.shardset.manifest import ShardEntry
from transforms.verify.checks import ShardTally, check_record, duplicate_key_problems, shard_problems
from transforms.verify.ranges import (KEY_BUCKETS, KEY_GROUP, SHARD_GROUP, RangeChecker, bucket_duplicates,
                                      group_parts, group_problems, key_buckets, merge_tallies)


def _records() -> list[bytes]:
    return [_record(), _record(label=2, text="tulip"), b"\xff\xff", encode_example({"x": 1}),
            _record(), _record(label=7, text="seven")]


def test_ranges_find_what_check_record_finds_and_add_up() -> None:
    records, labels = _records(), ["a", "rose", "tulip"]
    expected = [check_record("f", 100 * i, data, True, False, labels)[0] for i, data in enumerate(records)]
    ranges = [RangeChecker("f", "train", True, labels=labels) for _ in range(2)]
    for i, data in enumerate(records):
        ranges[i * 2 // len(records)].add(100 * i, data)
    tallies = [r.result() for r in ranges]
    assert [p for t in tallies for p in t.problems] == [p for c in expected for p in c.problems]
    assert [k for t in tallies for k in t.keys] == [(c.key, c.offset) for c in expected if c.key]
    merged = merge_tallies(t.shard_tally() for t in tallies)
    assert merged == ShardTally(6, {"1": 2, "2": 1, "7": 1}, False)


def test_buckets_find_every_repeat_once() -> None:
    checker = RangeChecker("f", "train", True)
    other = RangeChecker("g", "test", True)
    for i, data in enumerate(_records()):
        checker.add(10 * i, data)
        other.add(10 * i, data)
    parts = {}
    for tally in (checker.result(), other.result()):
        for bucket, part in key_buckets(tally):
            assert 0 <= bucket < KEY_BUCKETS
            parts.setdefault(bucket, []).append(part)
    found = sorted((p for group in parts.values() for p in bucket_duplicates(group)), key=lambda p: p.sort_key())
    locations = {}
    for tally in (checker.result(), other.result()):
        for key, offset in tally.keys:
            locations.setdefault(key, []).append((tally.split, tally.file, offset))
    expected = [p for key, locs in locations.items() for p in duplicate_key_problems(key, locs)]
    assert found == sorted(expected, key=lambda p: p.sort_key())
    assert len(found) == sum(len(locs) - 1 for locs in locations.values()) > 0


def _grouped(tallies, counts: bool) -> dict:
    """(kind, group) -> parts, as a GroupByKey of ``group_parts`` gives them."""
    groups = defaultdict(list)
    for tally in tallies:
        for key, part in group_parts(tally, counts):
            groups[key].append(part)
    return groups


def _ranges(file: str, split: str, cuts: tuple[int, ...]) -> list:
    """``_records()`` of one shard read in ranges that end at ``cuts``."""
    records, tallies, start = _records(), [], 0
    for stop in (*cuts, len(records)):
        checker = RangeChecker(file, split, True, labels=["a", "rose", "tulip"])
        for i in range(start, stop):
            checker.add(100 * i, records[i])
        tallies.append(checker.result())
        start = stop
    return tallies


@pytest.mark.parametrize("entry, expected_kinds", [
    (ShardEntry("f", 6, 1, "0" * 64, {"1": 2, "2": 1, "7": 1}), []),
    (ShardEntry("f", 5, 1, "0" * 64, {"1": 2, "2": 1, "7": 1}), ["count_mismatch"]),
    (ShardEntry("f", 6, 1, "0" * 64, {"1": 3, "2": 1}), ["label_mismatch"]),
    (None, []),  # without a manifest the counts are not compared
])
def test_a_shards_group_compares_its_ranges_counts_with_its_entry(entry, expected_kinds) -> None:
    tallies = _ranges("f", "train", (2, 4))
    tallies[0].entry = entry  # the range at byte 0 holds the entry
    groups = _grouped(tallies, counts=True)
    shard_parts = groups[(SHARD_GROUP, "f")]
    assert len(shard_parts) == 3
    found = group_problems((SHARD_GROUP, "f"), shard_parts)
    assert [p.kind for p in found] == expected_kinds
    if entry is not None:
        assert found == shard_problems("f", entry, merge_tallies(t.shard_tally() for t in tallies))
    assert (SHARD_GROUP, "f") not in _grouped(tallies, counts=False)


def test_key_groups_find_the_repeats_bucket_by_bucket() -> None:
    tallies = _ranges("f", "train", (3,)) + _ranges("g", "test", ())
    groups = _grouped(tallies, counts=True)
    assert {kind for kind, _ in groups} == {SHARD_GROUP, KEY_GROUP}
    found = sorted((p for key, parts in groups.items() if key[0] == KEY_GROUP
                    for p in group_problems(key, parts)), key=lambda p: p.sort_key())
    locations = defaultdict(list)
    for tally in tallies:
        for key, offset in tally.keys:
            locations[key].append((tally.split, tally.file, offset))
    expected = [p for key, locs in locations.items() for p in duplicate_key_problems(key, locs)]
    assert found == sorted(expected, key=lambda p: p.sort_key())
    assert len(found) == 7  # 8 records of one image, in two shards and two splits
