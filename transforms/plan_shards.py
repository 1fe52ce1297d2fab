"""Beam transform that assigns every record to a byte-balanced shard of its split.

See ``transforms/shardset/planning.py`` for the rule and its distributed
form. Items are grouped, packed, by (split, bucket) while one combine per split
sums the buckets' totals (``lay_out_split``); each bucket's items are then
sorted and cut at shard boundaries (``place_bucket``). Items are carried along
untouched, and no step holds a number of records that grows with the split.
"""

from __future__ import annotations

import typing
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import apache_beam as beam
from apache_beam import coders
from apache_beam.metrics import Metrics

from transforms.errors import PlanError
from transforms.packed_groups import PackFn, in_global_window, unpack_groups
from transforms.shardset.planning import BUCKET_BITS, bucket_of, group_bits, lay_out_split, place_bucket
from transforms.worker_options import CarriesStorageOptions

__all__ = ["PlanShards", "ShardKey", "LeadRecords", "ASSIGNED", "TOTALS", "METRICS_NAMESPACE"]

# (split, shard index, shard count): the key a shard's records are grouped by.
ShardKey = tuple[str, int, int]


class LeadRecords(NamedTuple):
    """Stands, among a shard's items, for the records of the merged published shard that begin it.

    Appending (``PlanShards(published=...)``), each planned shard that starts
    with records of a published shard gets one, so it is written even if no
    new record falls into it; the shard writer reads those records itself.
    """

    split: str


ASSIGNED = "assigned"
TOTALS = "totals"
# Namespace of the planner's metrics: the distribution ``records_per_group``.
METRICS_NAMESPACE = "plan_shards"


# Packs of items are zlib-compressed: items of one split share most of their bytes.
_COMPRESS = True
_BUCKET_TOTALS = "bucket_totals"


class _PackByBucketFn(PackFn):
    """item -> ((split, bucket), pack of items) (``PackFn``); and, as the bundle ends,
    ``_BUCKET_TOTALS``: ``(split, [(bucket, records, bytes, largest)])`` per split.

    Side input ``expected`` (optional): at least the number of items; the
    buckets then have ``group_bits(expected, bits)`` bits.
    """

    def __init__(self, split_of, order_of, size_of, bits: int, coder: coders.Coder) -> None:
        super().__init__(coder, compress=_COMPRESS)
        self._split_of = split_of
        self._order_of = order_of
        self._size_of = size_of
        self._bits = bits

    def start_bundle(self):
        super().start_bundle()
        self._totals: dict[tuple[str, int], list[int]] = {}
        self._group = (None, self._bits)  # (expected items, bits of the groups)

    def process(self, item, expected=None):
        if self._group[0] != expected:  # the bits for the expected count, found once
            self._group = (expected, self._bits if expected is None else group_bits(expected, self._bits))
        key = (self._split_of(item), bucket_of(self._order_of(item)[0], self._group[1]))
        size = self._size_of(item)
        _add_bucket_totals(self._totals, key, 1, size, size)
        return self.add(key, item)

    def finish_bundle(self):
        yield from super().finish_bundle()
        by_split: dict[str, list[tuple[int, int, int, int]]] = {}
        for (split, bucket), (count, size, biggest) in self._totals.items():
            by_split.setdefault(split, []).append((bucket, count, size, biggest))
        for split, totals in by_split.items():
            yield beam.pvalue.TaggedOutput(_BUCKET_TOTALS, in_global_window((split, totals)))
        self._totals = {}


def _add_bucket_totals(acc: dict, bucket, count: int, size: int, biggest: int) -> None:
    """Adds a bucket's records and bytes to ``acc`` and keeps its largest record."""
    totals = acc.get(bucket)
    if totals is None:
        acc[bucket] = [count, size, biggest]
    else:
        totals[0] += count
        totals[1] += size
        if biggest > totals[2]:
            totals[2] = biggest


class _BucketTotalsFn(CarriesStorageOptions, beam.CombineFn):
    """Bundles' ``[(bucket, records, bytes, largest)]`` -> the same, summed per bucket, of one split."""

    def create_accumulator(self) -> dict[int, list[int]]:
        return {}

    def add_input(self, acc: dict[int, list[int]], element: list[tuple[int, int, int, int]]) -> dict[int, list[int]]:
        for bucket, count, size, biggest in element:
            _add_bucket_totals(acc, bucket, count, size, biggest)
        return acc

    def merge_accumulators(self, accs) -> dict[int, list[int]]:
        accs = iter(accs)
        merged = next(accs, None) or {}
        for acc in accs:
            for bucket, (count, size, biggest) in acc.items():
                _add_bucket_totals(merged, bucket, count, size, biggest)
        return merged

    def extract_output(self, acc: dict[int, list[int]]) -> list[tuple[int, int, int, int]]:
        return [(bucket, *totals) for bucket, totals in acc.items()]


class _PlaceInShardsFn(CarriesStorageOptions, beam.DoFn):
    """((split, bucket), [item]) -> ((split, shard, count), item) per item.

    Reads the packed group twice, holding only sort keys and sizes, never the items.
    """

    def __init__(self, order_of: Callable[[Any], tuple], size_of: Callable[[Any], int]) -> None:
        self._order_of = order_of
        self._size_of = size_of
        self._group_records = Metrics.distribution(METRICS_NAMESPACE, "records_per_group")

    def process(self, keyed, layouts):
        (split, bucket), items = keyed
        order_of, size_of = self._order_of, self._size_of
        placed = sorted((order_of(it)[0], size_of(it), order_of(it)) for it in items)
        self._group_records.update(len(placed))
        layout = layouts.get(split)
        if layout is None:
            raise PlanError(f"split {split!r} has records but no plan; was an input changed while the job ran?")
        totals = layout.totals
        count = totals.final_count
        shards_of: dict[tuple, list[int]] = {}
        for (_, size, order), shard in zip(placed, place_bucket(layout, bucket, [p[1] for p in placed])):
            shards_of.setdefault((order, size), []).append(shard)
        for item in items:
            yield (split, totals.final_index(shards_of[(order_of(item), size_of(item))].pop()), count), item


class PlanShards(beam.PTransform):
    """Places items into shards, balanced by bytes, in seeded-shuffle order.

    Input: ``PCollection[item]``. Outputs (a dict): ``ASSIGNED``:
    ``PCollection[(ShardKey, item)]``; ``TOTALS``: ``PCollection[SplitTotals]``.

    Args:
        order_of: item -> sort key whose first element is the 63-bit order key;
            the rest breaks ties so that the write order is total.
        size_of: item -> framed record size in bytes.
        num_shards: Fixed shard count per split, or None to choose.
        bucket_bits: Bits of the order key that make a group; the plan does
            not depend on it.
        published: Appending: split -> bytes of each of its published shards
            (``planning.append_layout``); shard keys then hold the final index
            and count, and a shard that begins with the merged shard's records
            gets a ``LeadRecords`` item.
        expected: ``PCollection`` with one element, at least the number of
            items, or None (``planning.group_bits``).
    """

    def __init__(self, split_of: Callable[[Any], str], order_of: Callable[[Any], tuple],
                 size_of: Callable[[Any], int], target_bytes: int,
                 num_shards: int | None = None, bucket_bits: int = BUCKET_BITS,
                 published: Mapping[str, Sequence[int]] | None = None, expected=None) -> None:
        super().__init__()
        if not 0 <= bucket_bits <= 63:
            raise PlanError(f"bucket_bits must be in 0..63, got {bucket_bits}")
        self._split_of = split_of
        self._order_of = order_of
        self._size_of = size_of
        self._target = target_bytes
        self._num_shards = num_shards
        self._bits = bucket_bits
        self._published = {split: tuple(sizes) for split, sizes in (published or {}).items()}
        self._expected = expected

    def expand(self, items):
        split_of, order_of, size_of = self._split_of, self._order_of, self._size_of
        target, num_shards, bits, published = self._target, self._num_shards, self._bits, self._published
        coder = coders.registry.get_coder(items.element_type or typing.Any)
        # The bits of the groups: bucket_bits, or fewer for the expected number of items.
        side = {} if self._expected is None else {"expected": beam.pvalue.AsSingleton(self._expected)}
        packed = items | "PackByBucket" >> beam.ParDo(_PackByBucketFn(
            split_of, order_of, size_of, bits, coder), **side).with_outputs(
                _BUCKET_TOTALS, main="packs")  # ((split, bucket), pack of items); (split, bucket totals)
        layouts = (
            packed[_BUCKET_TOTALS]
            | "SumBuckets" >> beam.CombinePerKey(_BucketTotalsFn())  # (split, [(bucket, records, bytes, largest)])
            | "LayOutSplit" >> beam.MapTuple(
                lambda split, totals, expected=None: (split, lay_out_split(
                    split, totals, target, num_shards, bits if expected is None else group_bits(expected, bits),
                    published.get(split))), **side))
        assigned = (
            packed.packs
            | "GroupByBucket" >> beam.GroupByKey()  # ((split, bucket), [pack])
            | "Unpack" >> unpack_groups(coder, _COMPRESS)  # ((split, bucket), [item])
            | "PlaceInShards" >> beam.ParDo(_PlaceInShardsFn(order_of, size_of), beam.pvalue.AsDict(layouts)))
        totals = layouts | "Totals" >> beam.MapTuple(lambda _, layout: layout.totals)
        if published:
            leads = totals | "LeadShards" >> beam.FlatMap(
                lambda t: [((t.split, t.final_index(j), t.final_count), LeadRecords(t.split))
                           for j in t.lead_shards()])  # (ShardKey, LeadRecords)
            assigned = (assigned, leads) | "AddLeadShards" >> beam.Flatten()
        return {ASSIGNED: assigned, TOTALS: totals}
