"""Planning at scale: ``PlanShards`` on N synthetic items, one JSON line of figures.

    python -m benchmarks.plan_scale --items 10000000 [--shards S] [--bucket_bits B]

Items are generated inside the pipeline in chunks (the driver holds only the
list of chunk bounds): ``(split, order key, framed size, index)`` with framed
sizes drawn from a lognormal around 110 KB, an ImageNet JPEG plus its
features, clipped to [2 KB, 2 MB]. They go through the real ``PlanShards`` on
the DirectRunner; the figures printed are

- ``items``, ``shards``, ``seconds`` (wall clock of the pipeline run),
  ``peak_rss_mib`` (this process and its children);
- ``max_items_per_group``: the most records any planning group held (the
  ``plan_shards/records_per_group`` metric), and ``groups``, how many there were;
- ``max_minus_min_bytes`` between the fullest and the emptiest shard, and
  ``max_record_bytes``, the largest record: the plan promises
  ``max_minus_min_bytes < 2 * max_record_bytes``.

Extra arguments go to Beam (e.g. ``--direct_num_workers 2
--direct_running_mode multi_processing``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import sys
import tempfile
import time
from typing import Any, Iterator, Sequence

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from transforms.beam_compat import local_runner
from transforms.plan_shards import ASSIGNED, METRICS_NAMESPACE, TOTALS, PlanShards
from transforms.shardset.planning import BUCKET_BITS, MIB, order_key

__all__ = ["synthetic_items", "chunks_of", "plan_items", "run"]

_MEAN_RECORD = 110_000 + 300  # an ImageNet JPEG plus the other features and framing
_SIGMA = 0.55
_CHUNK = 10_000
TARGET_BYTES = 150 * MIB


def synthetic_items(chunk: tuple[int, int]) -> Iterator[tuple[str, int, int, int]]:
    """(split, order key, framed size, index) for the items of one chunk of indexes."""
    start, stop = chunk
    rng = random.Random(start)
    mu = math.log(_MEAN_RECORD) - _SIGMA ** 2 / 2
    for i in range(start, stop):
        size = int(min(max(rng.lognormvariate(mu, _SIGMA), 2_000), 2_000_000))
        yield "train", order_key(0, i.to_bytes(8, "little")), size, i


def chunks_of(items: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` index ranges the pipeline generates items in."""
    return [(start, min(start + _CHUNK, items)) for start in range(0, items, _CHUNK)]


def _split_of(item) -> str:
    return item[0]


def _order_of(item) -> tuple[int, int]:
    return item[1], item[3]


def _size_of(item) -> int:
    return item[2]


def plan_items(p: beam.Pipeline, items: int, num_shards: int | None,
               bucket_bits: int = BUCKET_BITS) -> dict[str, beam.PCollection]:
    """Wires the generation of ``items`` synthetic items and their plan into ``p``."""
    return (p
            | "Chunks" >> beam.Create(chunks_of(items))
            | "Spread" >> beam.Reshuffle()
            | "Items" >> beam.FlatMap(synthetic_items)
            | "Plan" >> PlanShards(split_of=_split_of, order_of=_order_of, size_of=_size_of,
                                   target_bytes=TARGET_BYTES, num_shards=num_shards,
                                   bucket_bits=bucket_bits))


def _summary(shard_bytes: list[tuple[int, int]], totals: list, path: str) -> None:
    (split,) = totals
    sizes = dict(shard_bytes)
    per_shard = [sizes.get(i, 0) for i in range(split.num_shards)]
    with open(path, "w", encoding="utf-8") as out:
        json.dump({"items": split.records, "shards": split.num_shards,
                   "planned_bytes": sum(per_shard), "total_bytes": split.total_bytes,
                   "max_minus_min_bytes": max(per_shard) - min(per_shard),
                   "max_record_bytes": split.max_record}, out)


def _peak_rss_mib() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) / 1024, 1)  # Linux reports KiB


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the benchmark; prints and returns its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, required=True)
    parser.add_argument("--shards", type=int, default=None, help="fixed shard count (default: by size)")
    parser.add_argument("--bucket_bits", type=int, default=BUCKET_BITS,
                        help="bits of the order key that make a group (default: the jobs')")
    args, beam_args = parser.parse_known_args(argv)
    if args.items < 1:
        parser.error("--items must be at least 1")
    options = PipelineOptions(list(beam_args))
    with tempfile.TemporaryDirectory(prefix="plan_scale_") as tmp:
        summary_path = os.path.join(tmp, "summary.json")
        p = beam.Pipeline(runner=local_runner(options), options=options)
        planned = plan_items(p, args.items, args.shards, args.bucket_bits)
        _ = (planned[ASSIGNED]
             | "ShardAndSize" >> beam.MapTuple(lambda key, item: (key[1], _size_of(item)))
             | "BytesPerShard" >> beam.CombinePerKey(sum)
             | "AllShards" >> beam.combiners.ToList()
             | "Summarize" >> beam.Map(_summary, beam.pvalue.AsList(planned[TOTALS]), summary_path))
        started = time.monotonic()
        result = p.run()
        result.wait_until_finish()
        seconds = time.monotonic() - started
        with open(summary_path, encoding="utf-8") as summary:
            figures = json.load(summary)
    query = MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name("records_per_group")
    (groups,) = result.metrics().query(query)["distributions"]
    figures.update(seconds=round(seconds, 1), peak_rss_mib=_peak_rss_mib(),
                   max_items_per_group=groups.committed.max, groups=groups.committed.count,
                   bucket_bits=args.bucket_bits)
    if figures["items"] != args.items or figures["planned_bytes"] != figures["total_bytes"]:
        raise RuntimeError(f"planned {figures['items']} items and {figures['planned_bytes']} bytes; "
                           f"expected {args.items} items and {figures['total_bytes']} bytes")
    print(json.dumps(figures, sort_keys=True), flush=True)
    return figures


if __name__ == "__main__":
    run(sys.argv[1:])
