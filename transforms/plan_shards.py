"""Beam transform that assigns every record to a byte-balanced shard of its split.

See ``transforms/planning.py`` for the math. Only the items' keys and sizes
matter here; items are carried along untouched. Two shuffles:

1. per (split, bucket) byte sums -> per split ``SplitTotals`` (a small side input);
2. items grouped by (split, bucket), sorted by order key, placed with the totals.
"""

from __future__ import annotations

from typing import Any, Callable

import apache_beam as beam

from transforms.planning import SplitTotals, assign_in_bucket, bucket_of

__all__ = ["PlanShards", "ShardKey"]

# (split, shard index, shard count): the key a shard's records are grouped by.
ShardKey = tuple[str, int, int]


class _SumBucketFn(beam.CombineFn):
    """Combines record sizes into (bytes, records, largest record)."""

    def create_accumulator(self):
        return (0, 0, 0)

    def add_input(self, acc, size):
        return (acc[0] + size, acc[1] + 1, max(acc[2], size))

    def merge_accumulators(self, accs):
        total, count, largest = 0, 0, 0
        for t, c, m in accs:
            total, count, largest = total + t, count + c, max(largest, m)
        return (total, count, largest)

    def extract_output(self, acc):
        return acc


def _split_totals(keyed, target_bytes: int, num_shards: int | None) -> SplitTotals:
    """(split, [(bucket, (bytes, records, largest))]) -> SplitTotals."""
    split, buckets = keyed
    buckets = list(buckets)
    return SplitTotals.from_buckets(
        split, {b: s[0] for b, s in buckets}, records=sum(s[1] for _, s in buckets),
        max_record=max(s[2] for _, s in buckets), target_bytes=target_bytes,
        num_shards=num_shards)


def _place_bucket(keyed, totals: dict[str, SplitTotals], order_of: Callable[[Any], tuple],
                  size_of: Callable[[Any], int]):
    """((split, bucket), [item]) -> ((split, shard, count), item) for each item."""
    (split, bucket), items = keyed
    plan = totals[split]
    items = sorted(items, key=order_of)
    shards = assign_in_bucket([size_of(item) for item in items], plan.bucket_start[bucket],
                              plan.total_bytes, plan.num_shards)
    for item, shard in zip(items, shards):
        yield (split, shard, plan.num_shards), item


class PlanShards(beam.PTransform):
    """Places items into shards, balanced by bytes, in seeded-shuffle order.

    Input: ``PCollection[item]``. Outputs (a dict): ``assigned``:
    ``PCollection[(ShardKey, item)]``; ``totals``: ``PCollection[SplitTotals]``.

    Args:
        split_of: item -> split name.
        order_of: item -> sort key whose first element is the 63-bit order key;
            ties must be broken by the rest so the order is total.
        size_of: item -> framed record size in bytes.
        target_bytes: Target shard size.
        num_shards: Fixed shard count per split, or None to choose.
    """

    def __init__(self, split_of: Callable[[Any], str], order_of: Callable[[Any], tuple],
                 size_of: Callable[[Any], int], target_bytes: int,
                 num_shards: int | None = None) -> None:
        super().__init__()
        self._split_of = split_of
        self._order_of = order_of
        self._size_of = size_of
        self._target = target_bytes
        self._num_shards = num_shards

    def expand(self, items):
        split_of, order_of, size_of = self._split_of, self._order_of, self._size_of
        by_bucket = items | "KeyByBucket" >> beam.Map(
            lambda it: ((split_of(it), bucket_of(order_of(it)[0])), it))
        totals = (
            by_bucket
            | "BucketSizes" >> beam.Map(lambda kv: (kv[0], size_of(kv[1])))
            | "SumBuckets" >> beam.CombinePerKey(_SumBucketFn())  # ((split, bucket), (bytes, n, max))
            | "KeyBySplit" >> beam.Map(lambda kv: (kv[0][0], (kv[0][1], kv[1])))
            | "GroupBySplit" >> beam.GroupByKey()  # (split, [(bucket, sums)])
            | "SplitTotals" >> beam.Map(_split_totals, self._target, self._num_shards))
        assigned = (
            by_bucket
            | "GroupByBucket" >> beam.GroupByKey()  # ((split, bucket), [item])
            | "PlaceInShards" >> beam.FlatMap(
                _place_bucket, beam.pvalue.AsDict(totals | "TotalsBySplit" >> beam.Map(lambda t: (t.split, t))),
                order_of, size_of))
        return {"assigned": assigned, "totals": totals}
