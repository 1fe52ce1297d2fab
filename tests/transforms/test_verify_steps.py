"""Verify's duplicate-key buckets grow with the records, so no bucket holds more than a step may."""

from __future__ import annotations

import collections
import hashlib

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.verify.test_ranges import _ranges
from transforms.verify import ranges
from transforms.verify.checks import duplicate_key_problems
from transforms.verify.ranges import BUCKET_KEYS, KEY_BUCKETS, key_bucket, key_bucket_count
from transforms.verify_steps import CheckAcrossRanges


@pytest.mark.parametrize("records, buckets", [
    (0, KEY_BUCKETS), (1, KEY_BUCKETS), (KEY_BUCKETS * BUCKET_KEYS, KEY_BUCKETS),
    (KEY_BUCKETS * BUCKET_KEYS + 1, KEY_BUCKETS + 1), (100_000_000, 2_500), (1_000_000_000, 25_000),
])
def test_the_bucket_count_grows_with_the_records(records, buckets) -> None:
    assert key_bucket_count(records) == buckets


def _keys(count: int) -> list[str]:
    return [hashlib.sha256(str(i).encode()).hexdigest() for i in range(count)]


def test_the_largest_bucket_stays_near_the_average(monkeypatch) -> None:
    """Real keys dealt by the real hash: 120,000 keys at 1,000 a bucket (not 64 buckets of 1,875)."""
    monkeypatch.setattr(ranges, "BUCKET_KEYS", 1_000)
    keys = _keys(120_000)
    count = key_bucket_count(len(keys))
    assert count == 120
    sizes = collections.Counter(key_bucket(key, count) for key in keys)
    assert len(sizes) == count and max(sizes.values()) <= 1_150  # ~4 standard deviations above 1,000


@pytest.mark.parametrize("buckets", [1, 7, 1_000])
def test_repeats_are_found_with_buckets_from_a_side_input(buckets) -> None:
    tallies = _ranges("f", "train", (3,)) + _ranges("g", "test", ())
    locations = collections.defaultdict(list)
    for tally in tallies:
        for key, offset in tally.keys:
            locations[key].append((tally.split, tally.file, offset))
    expected = [p for key, locs in locations.items() for p in duplicate_key_problems(key, locs)]
    with TestPipeline() as p:
        count = p | "Count" >> beam.Create([buckets])
        found = (p | "Tallies" >> beam.Create(tallies)
                 | CheckAcrossRanges(compare_counts=False, buckets=beam.pvalue.AsSingleton(count)))
        assert_that(found, equal_to(expected))
    assert len(expected) == 7
