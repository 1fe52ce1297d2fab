"""Shard planning: how many shards a split gets and which shard each record goes to.

Pure math, no Beam. The plan is built so that it can be computed in parallel:

1. Every record gets an *order key*, a 63-bit hash of the seed and the record's
   identity (63 bits fit Beam's signed integer coder). Sorting a split by
   order key is its global shuffle.
2. The key space is cut into ``NUM_BUCKETS`` equal ranges (buckets). Byte totals
   per bucket, summed in key order, give every bucket its starting byte offset
   in the shuffled split, so each bucket can be sorted on its own worker.
3. A record whose bytes span ``[start, start + size)`` in the shuffled split goes
   to shard ``floor((start + size / 2) * n / total)`` (its midpoint). Every
   shard then spans ``total / n`` bytes give or take half a record at each end,
   so each shard is within one largest record of ``total / n`` and the largest
   and smallest shard differ by less than twice the largest record. (No split
   that keeps the order can promise less than one largest record.)
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from transforms.errors import PlanError

__all__ = [
    "NUM_BUCKETS", "MIB", "SplitTotals", "choose_num_shards", "order_key",
    "bucket_of", "shard_of", "assign_in_bucket", "plan_in_memory", "shard_file_name",
    "SHARD_NAME_RE", "split_for", "parse_split_fractions", "check_split_name",
]

MIB = 1024 * 1024
NUM_BUCKETS = 4096
_KEY_BITS = 63
_BUCKET_SHIFT = _KEY_BITS - 12  # NUM_BUCKETS == 2**12
_SPLIT_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+\Z")  # \Z: "$" also matches before a final "\n"
SHARD_NAME_RE = re.compile(
    r"^(?P<split>[A-Za-z0-9_-]+)-(?P<index>\d{5,})-of-(?P<count>\d{5,})\.tfrecord(?:\.gz|\.zz)?\Z")
_SUFFIX = {"none": "", "gzip": ".gz", "zlib": ".zz"}


def check_split_name(name: str) -> str:
    """Returns ``name`` if it is a safe split name (``[A-Za-z0-9_-]+``), else raises PlanError."""
    if not _SPLIT_NAME_RE.match(name or ""):
        raise PlanError(f"split name {name!r} must match [A-Za-z0-9_-]+")
    return name


def choose_num_shards(total_bytes: int, target_bytes: int) -> int:
    """Returns the shard count whose average shard size is closest to the target.

    Only counts whose average lies in ``[2T/3, 4T/3]`` are considered; such a
    count always exists when ``total_bytes >= 2T/3``. A split smaller than that
    is one shard. Ties go to the larger average (fewer shards).

    Args:
        total_bytes: Framed bytes of the split.
        target_bytes: Target shard size T.
    """
    if target_bytes <= 0:
        raise PlanError(f"target shard size must be positive, got {target_bytes}")
    if total_bytes < 0:
        raise PlanError(f"total bytes must be >= 0, got {total_bytes}")
    if 3 * total_bytes < 2 * target_bytes:
        return 1
    best = None
    base = max(total_bytes // target_bytes, 1)
    for n in range(max(base - 1, 1), base + 3):
        # average = total / n must satisfy 2T/3 <= average <= 4T/3
        if not (3 * total_bytes >= 2 * target_bytes * n and 3 * total_bytes <= 4 * target_bytes * n):
            continue
        distance = abs(total_bytes - target_bytes * n) / n
        if best is None or distance < best[0]:
            best = (distance, n)
    if best is None:  # unreachable for total >= 2T/3, kept as a guard
        raise PlanError(f"no shard count fits {total_bytes} bytes at target {target_bytes}")
    return best[1]


def order_key(seed: int, identity: bytes) -> int:
    """Returns the 63-bit shuffle key of a record: a keyed hash of its identity."""
    digest = hashlib.blake2b(identity, digest_size=8, key=struct.pack("<q", seed)).digest()
    return struct.unpack(">Q", digest)[0] >> (64 - _KEY_BITS)


def bucket_of(key: int) -> int:
    """Returns the bucket (0..NUM_BUCKETS-1) of an order key: its top 12 of 63 bits."""
    return key >> _BUCKET_SHIFT


def shard_of(start: int, size: int, total: int, num_shards: int) -> int:
    """Returns the shard of a record spanning ``[start, start + size)`` (midpoint rule)."""
    if total <= 0:
        return 0
    return min((2 * start + size) * num_shards // (2 * total), num_shards - 1)


@dataclass(frozen=True)
class SplitTotals:
    """Byte totals of one split, enough to place any bucket in the shuffled order.

    Attributes:
        split: Split name.
        total_bytes: Framed bytes of all records in the split.
        records: Number of records.
        max_record: Largest framed record.
        num_shards: Shard count chosen for the split.
        bucket_start: Bucket -> byte offset of its first record in the
            shuffled split (only buckets that hold records).
    """

    split: str
    total_bytes: int
    records: int
    max_record: int
    num_shards: int
    bucket_start: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.num_shards < 1:
            raise PlanError(f"split {self.split}: num_shards must be >= 1, got {self.num_shards}")

    @classmethod
    def from_buckets(cls, split: str, bucket_bytes: Mapping[int, int], records: int,
                     max_record: int, target_bytes: int,
                     num_shards: int | None = None) -> "SplitTotals":
        """Builds the totals from per-bucket byte sums.

        Args:
            split: Split name.
            bucket_bytes: Bucket -> framed bytes of its records.
            records: Number of records in the split.
            max_record: Largest framed record.
            target_bytes: Target shard size, used when ``num_shards`` is None.
            num_shards: Fixed shard count (``--num_shards``), or None.
        """
        starts = {}
        offset = 0
        for bucket in sorted(bucket_bytes):
            starts[bucket] = offset
            offset += bucket_bytes[bucket]
        count = num_shards if num_shards else choose_num_shards(offset, target_bytes)
        return cls(split, offset, records, max_record, count, starts)


def assign_in_bucket(sizes_in_order: Sequence[int], bucket_start: int, total: int,
                     num_shards: int) -> list[int]:
    """Returns the shard of each record of one bucket, given in order-key order."""
    shards = []
    start = bucket_start
    for size in sizes_in_order:
        shards.append(shard_of(start, size, total, num_shards))
        start += size
    return shards


def plan_in_memory(items: Iterable[tuple[int, int]], target_bytes: int,
                   num_shards: int | None = None) -> tuple[int, list[list[int]]]:
    """Plans one split held in memory; the reference the Beam plan must match.

    Args:
        items: ``(order_key, framed_size)`` per record.
        target_bytes: Target shard size.
        num_shards: Fixed shard count, or None to choose one.

    Returns:
        ``(num_shards, shards)`` where ``shards[i]`` lists indexes into
        ``items`` in write order.
    """
    items = list(items)
    order = sorted(range(len(items)), key=lambda i: items[i][0])
    total = sum(size for _, size in items)
    n = num_shards if num_shards else choose_num_shards(total, target_bytes)
    shards: list[list[int]] = [[] for _ in range(n)]
    start = 0
    for i in order:
        size = items[i][1]
        shards[shard_of(start, size, total, n)].append(i)
        start += size
    return n, shards


def shard_file_name(split: str, index: int, num_shards: int, compression: str = "none") -> str:
    """Returns ``{split}-{index:05d}-of-{num_shards:05d}.tfrecord[.gz|.zz]``."""
    if compression not in _SUFFIX:
        raise PlanError(f"compression must be one of {', '.join(_SUFFIX)}, got {compression!r}")
    return f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord{_SUFFIX[compression]}"


def parse_split_fractions(text: str) -> dict[str, float]:
    """Parses ``train=0.9,validation=0.1`` into a dict; fractions must sum to 1."""
    fractions: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep:
            raise PlanError(f"split fraction {part!r} must look like name=0.9")
        check_split_name(name)
        try:
            fraction = float(value)
        except ValueError as err:
            raise PlanError(f"split fraction for {name!r} is not a number: {value!r}") from err
        if not 0 < fraction <= 1:
            raise PlanError(f"split fraction for {name!r} must be in (0, 1], got {fraction}")
        if name in fractions:
            raise PlanError(f"split {name!r} is given twice")
        fractions[name] = fraction
    if abs(sum(fractions.values()) - 1.0) > 1e-6:
        raise PlanError(f"split fractions must sum to 1, got {sum(fractions.values()):g}")
    return fractions


def split_for(relative_path: str, fractions: Mapping[str, float]) -> str:
    """Picks a split for a path by a stable hash, in proportion to ``fractions``."""
    digest = hashlib.sha256(relative_path.encode("utf-8")).digest()
    point = struct.unpack(">Q", digest[:8])[0] / 2.0**64
    cumulative = 0.0
    names = list(fractions)
    for name in names:
        cumulative += fractions[name]
        if point < cumulative:
            return name
    return names[-1]
