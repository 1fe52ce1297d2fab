"""The planning benchmark at small N: its plan is the reference plan, its groups stay bounded."""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from benchmarks import plan_scale
from transforms.plan_shards import ASSIGNED
from transforms.shardset.planning import plan_in_memory


@pytest.mark.slow
def test_benchmark_plan_equals_the_in_memory_reference():
    count = 25_000  # several chunks of generated items
    items = [it for chunk in plan_scale.chunks_of(count) for it in plan_scale.synthetic_items(chunk)]
    n, shards = plan_in_memory([(it[1], it[2]) for it in items], plan_scale.TARGET_BYTES)
    assert n > 10
    expected = [(shard, items[i][3]) for shard, members in enumerate(shards) for i in members]
    with TestPipeline() as p:
        planned = plan_scale.plan_items(p, count, None, bucket_bits=4)
        assert_that(planned[ASSIGNED] | beam.MapTuple(lambda key, it: (key[1], it[3])), equal_to(expected))


@pytest.mark.parametrize("count", [2_000, 8_000])
def test_groups_are_buckets_of_the_order_key(count, capsys):
    figures = plan_scale.run(["--items", str(count), "--bucket_bits", "4"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == figures  # one JSON line
    assert figures["items"] == count
    assert figures["groups"] == 16  # every bucket of 4 bits is occupied
    assert count / 16 < figures["max_items_per_group"] <= 1.5 * count / 16  # about 1/16 of the items each
    assert figures["max_minus_min_bytes"] < 2 * figures["max_record_bytes"]
    assert figures["peak_rss_mib"] > 0 and figures["seconds"] > 0

