"""TestPipeline tests of the PlanShards transform against the in-memory reference plan."""

from __future__ import annotations

import random
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.errors import PlanError
from transforms.plan_shards import ASSIGNED, METRICS_NAMESPACE, TOTALS, PlanShards
from transforms.shardset.planning import bucket_of, order_key
from tests.helpers import plan_in_memory


def _items(count: int, seed: int, split: str):
    rng = random.Random(seed)
    sizes = [rng.choice([rng.randint(100, 2000), rng.randint(10_000, 60_000)]) for _ in range(count)]
    return [(split, order_key(seed, f"{split}/{i}".encode()), f"{split}/{i}", size)
            for i, size in enumerate(sizes)]


def _expected(items, target, num_shards=None):
    n, shards = plan_in_memory([(it[1], it[3]) for it in items], target, num_shards)
    return [((items[i][0], shard, n), items[i][2]) for shard, members in enumerate(shards) for i in members]


def test_distributed_plan_equals_reference_plan():
    train, test = _items(700, 1, "train"), _items(90, 2, "test")
    target = 600_000
    expected = _expected(train, target) + _expected(test, target)
    assert len({k for k, _ in expected}) > 5  # several shards, so the test means something
    with TestPipeline() as p:
        planned = (p
                   | beam.Create(train + test)
                   | PlanShards(split_of=lambda it: it[0], order_of=lambda it: (it[1], it[2]),
                                size_of=lambda it: it[3], target_bytes=target))
        assert_that(planned[ASSIGNED] | beam.MapTuple(lambda key, it: (key, it[2])),
                    equal_to(expected), label="CheckAssigned")
        assert_that(planned[TOTALS] | beam.Map(lambda t: (t.split, t.records, t.total_bytes)),
                    equal_to([("train", 700, sum(it[3] for it in train)),
                              ("test", 90, sum(it[3] for it in test))]), label="CheckTotals")


def test_fixed_shard_count():
    items = _items(50, 3, "train")
    with TestPipeline() as p:
        planned = (p | beam.Create(items)
                   | PlanShards(split_of=lambda it: it[0], order_of=lambda it: (it[1], it[2]),
                                size_of=lambda it: it[3], target_bytes=10**9, num_shards=7))
        assert_that(planned[ASSIGNED] | beam.MapTuple(lambda key, it: (key, it[2])),
                    equal_to(_expected(items, 10**9, 7)))


def _largest_group(result) -> int:
    query = MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name("records_per_group")
    (dist,) = result.metrics().query(query)["distributions"]
    return dist.committed.max


@pytest.mark.parametrize("count", [300, 1_200])
def test_groups_are_the_buckets_of_the_order_key(count):
    items = _items(count, 4, "train")
    target = 400_000
    p = TestPipeline()
    planned = (p | beam.Create(items)
               | PlanShards(split_of=lambda it: it[0], order_of=lambda it: (it[1], it[2]),
                            size_of=lambda it: it[3], target_bytes=target, bucket_bits=3))
    assert_that(planned[ASSIGNED] | beam.MapTuple(lambda key, it: (key, it[2])),
                equal_to(_expected(items, target)))
    result = p.run()
    result.wait_until_finish()
    # Each group is one of 8 buckets (the top 3 bits of the order key), whatever the split's size.
    largest = max(Counter(bucket_of(it[1], 3) for it in items).values())
    assert largest < count / 4 and _largest_group(result) == largest


def test_rejects_bad_bucket_bits():
    with pytest.raises(PlanError, match="bucket_bits"):
        PlanShards(split_of=lambda it: it, order_of=lambda it: (0,), size_of=lambda it: 1,
                   target_bytes=10, bucket_bits=64)


def test_a_known_record_count_makes_few_groups_and_the_same_plan():
    # 1,200 records known ahead are one group (group_bits), not one per occupied bucket of 65,536.
    items = _items(1_200, 5, "train") + _items(300, 6, "test")
    target = 400_000
    p = TestPipeline()
    count = p | "Count" >> beam.Create([len(items)])
    planned = (p | beam.Create(items)
               | PlanShards(split_of=lambda it: it[0], order_of=lambda it: (it[1], it[2]),
                            size_of=lambda it: it[3], target_bytes=target, expected=count))
    assert_that(planned[ASSIGNED] | beam.MapTuple(lambda key, it: (key, it[2])),
                equal_to(_expected(items[:1_200], target) + _expected(items[1_200:], target)))
    result = p.run()
    result.wait_until_finish()
    assert _largest_group(result) == 1_200
