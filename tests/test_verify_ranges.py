"""Range tallies add up to what record-by-record checking finds."""

from __future__ import annotations

from tests.test_verification import _record
from transforms.example.codec import encode_example
from transforms.verify.checks import ShardTally, check_record, duplicate_key_problems
from transforms.verify.ranges import (KEY_BUCKETS, RangeChecker, bucket_duplicates, key_buckets,
                                      merge_tallies)


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
