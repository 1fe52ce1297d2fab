"""Shard planning: how many shards a split gets and which shard each record goes to (pure math).

The method is docs/building.md's ("Shard size, balance, shuffle, determinism"); no step holds a whole
split. Order keys are 63 bits: they fit Beam's signed integer coder.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from array import array
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Mapping, Sequence

from transforms.errors import PlanError
from transforms.shardset.naming import check_split_name

__all__ = ["BUCKET_BITS", "NUM_BUCKETS", "GROUP_RECORDS", "group_bits", "MIB", "SplitTotals", "SplitLayout",
           "choose_num_shards", "append_layout", "order_key", "bucket_of", "shard_of_offset", "cut_records",
           "lay_out_split", "place_bucket", "split_by_content", "split_rank", "parse_split_fractions"]

MIB = 1024 * 1024
_KEY_BITS = 63
# Buckets per split: at most 50,000 records a group up to about 3 billion records.
BUCKET_BITS = 16
NUM_BUCKETS = 1 << BUCKET_BITS
# The most records a group holds when the number of records is known ahead (``group_bits``).
GROUP_RECORDS = 50_000


def choose_num_shards(total_bytes: int, target_bytes: int) -> int:
    """Returns the shard count whose average shard size in ``[2T/3, 4T/3]`` is closest to the target T.

    A split smaller than ``2T/3`` is one shard. Ties go to the larger average.
    """
    if target_bytes <= 0:
        raise PlanError(f"target shard size must be positive, got {target_bytes}")
    if total_bytes < 0:
        raise PlanError(f"total bytes must be >= 0, got {total_bytes}")
    if 3 * total_bytes < 2 * target_bytes:
        return 1
    base = max(total_bytes // target_bytes, 1)
    # average = total / n must satisfy 2T/3 <= average <= 4T/3; some n does: total >= 2T/3
    fitting = [n for n in range(max(base - 1, 1), base + 3)
               if 2 * target_bytes * n <= 3 * total_bytes <= 4 * target_bytes * n]
    return min(fitting, key=lambda n: Fraction(abs(total_bytes - target_bytes * n), n))  # exact: no float rounding


def order_key(seed: int, identity: bytes) -> int:
    """Returns the 63-bit shuffle key of a record: a keyed hash of its identity."""
    digest = hashlib.blake2b(identity, digest_size=8, key=struct.pack("<q", seed)).digest()
    return struct.unpack(">Q", digest)[0] >> (64 - _KEY_BITS)


def bucket_of(key: int, bits: int = BUCKET_BITS) -> int:
    """Returns the bucket (0..2**bits - 1) of an order key: its top ``bits`` of 63 bits."""
    return key >> (_KEY_BITS - bits)


def group_bits(records: int, most: int = BUCKET_BITS) -> int:
    """The fewest bits of the order key (at most ``most``) whose buckets hold ``records`` in groups of
    at most about ``GROUP_RECORDS`` (evenly spread keys: each bucket gets ``records >> bits``)."""
    bits = 0
    while bits < most and records > GROUP_RECORDS << bits:
        bits += 1
    return bits


def shard_of_offset(start: int, size: int, total_bytes: int, num_shards: int) -> int:
    """Returns the shard of the record covering ``[start, start + size)`` of the split's byte line:
    the one whose share ``[i * total / n, (i + 1) * total / n)`` holds its midpoint (exact integers)."""
    if num_shards < 1:
        raise PlanError(f"num_shards must be >= 1, got {num_shards}")
    if total_bytes <= 0:
        return 0
    return min((2 * start + size) * num_shards // (2 * total_bytes), num_shards - 1)


def cut_records(sizes_in_order: Iterable[int], num_shards: int, total_bytes: int,
                start: int = 0) -> list[int]:
    """A shard per record (framed sizes in shuffled order) of a run of records ``start`` bytes into the split."""
    shards = []
    for size in sizes_in_order:
        shards.append(shard_of_offset(start, size, total_bytes, num_shards))
        start += size
    return shards


@dataclass(frozen=True)
class SplitTotals:
    """The plan's facts about one split: its records' framed bytes, count and largest, its planned shards.

    Attributes:
        published: Appending: shards the split already has (0: none, a new set).
        merged: Appending: the published shard whose records join the new ones
            (rewritten as planned shard 0), or None.
        lead_bytes: Bytes of the merged shard: they come first on the split's
            byte line, before the new records (``total_bytes`` counts them).
    """

    split: str
    total_bytes: int
    records: int
    max_record: int
    num_shards: int
    published: int = 0
    merged: int | None = None
    lead_bytes: int = 0

    def __post_init__(self) -> None:
        if self.num_shards < 1:
            raise PlanError(f"split {self.split}: num_shards must be >= 1, got {self.num_shards}")
        if self.merged is not None and not 0 <= self.merged < self.published:
            raise PlanError(f"split {self.split}: merged shard {self.merged} is not one of its "
                            f"{self.published} published shards")

    @property
    def final_count(self) -> int:
        """Shards of the split once published: the kept published ones and the planned ones."""
        return self.published + self.num_shards - (1 if self.merged is not None else 0)

    def final_index(self, shard: int) -> int:
        """The published index of planned shard ``shard``: after the published ones, the first in
        place of the merged shard, if any (``append_layout``)."""
        if self.merged is None:
            return self.published + shard
        return self.merged if shard == 0 else self.published + shard - 1

    def planned_shard(self, index: int) -> int | None:
        """The planned shard published as ``index`` (inverse of ``final_index``); None: a kept published one."""
        if self.merged is not None and index == self.merged:
            return 0
        local = index - self.published + (1 if self.merged is not None else 0)
        return local if index >= self.published and local < self.num_shards else None

    def lead_shards(self) -> range:
        """Planned shards that begin with records of the merged shard (``lead_bytes`` of the line)."""
        if self.merged is None or self.lead_bytes <= 0:
            return range(0)
        return range(min(self.num_shards, -(-self.lead_bytes * self.num_shards // self.total_bytes)))


@dataclass(frozen=True)
class SplitLayout:
    """A split's plan before any record is placed: its totals and, per occupied bucket (ascending),
    the split's bytes before its first record and its records."""

    totals: SplitTotals
    buckets: tuple[int, ...]
    offsets: tuple[int, ...]
    records: tuple[int, ...]

    def index_of(self, bucket: int) -> int:
        """Returns the position of an occupied bucket in ``buckets``; ``PlanError`` if none was counted."""
        index = bisect.bisect_left(self.buckets, bucket)
        if index == len(self.buckets) or self.buckets[index] != bucket:
            raise PlanError(f"split {self.totals.split!r} bucket {bucket}: records but none were counted; "
                            "was an input changed while the job ran?")
        return index


def append_layout(published: Sequence[int], new_bytes: int, target_bytes: int) -> tuple[int | None, int]:
    """Where records appended to a published split go: ``(merged shard or None, lead bytes)``.

    New records of at least ``2T/3`` get shards of their own. Fewer join the smallest published
    shard (the last of equals; ``published``: their bytes in index order), whose records come first
    on the line cut into shards: at most that one shard is rewritten.
    """
    if not published or 3 * new_bytes >= 2 * target_bytes:
        return None, 0
    merged = min(range(len(published)), key=lambda i: (published[i], -i))
    return merged, published[merged]


def lay_out_split(split: str, bucket_totals: Iterable[tuple[int, int, int, int]], target_bytes: int,
                  num_shards: int | None = None, bucket_bits: int = BUCKET_BITS,
                  published: Sequence[int] | None = None) -> SplitLayout:
    """Turns a split's per-bucket totals into its shard count and the offset of every bucket.

    ``bucket_totals``: ``(bucket, records, bytes, largest record)`` per occupied bucket, in any order;
    ``published``: appending, the bytes of each published shard (``append_layout``).

    Raises:
        PlanError: A bucket given twice or out of range, or a bad count.
    """
    if not 0 <= bucket_bits <= _KEY_BITS:
        raise PlanError(f"bucket_bits must be in 0..{_KEY_BITS}, got {bucket_bits}")
    rows = sorted(bucket_totals)
    buckets, offsets, counts = array("q"), array("q"), array("q")
    offset = records = largest = 0
    for bucket, count, nbytes, biggest in rows:
        if not 0 <= bucket < 1 << bucket_bits:
            raise PlanError(f"split {split!r}: bucket {bucket} is outside 0..{(1 << bucket_bits) - 1}")
        if buckets and buckets[-1] == bucket:
            raise PlanError(f"split {split!r}: bucket {bucket} is given twice")
        buckets.append(bucket)
        offsets.append(offset)
        counts.append(count)
        offset += nbytes
        records += count
        largest = max(largest, biggest)
    merged, lead = append_layout(published or (), offset, target_bytes)
    if lead:
        offsets = array("q", (o + lead for o in offsets))
    # More shards than records would only add empty files (a few huge records).
    count = num_shards if num_shards else min(choose_num_shards(offset + lead, target_bytes),
                                              max(records + (1 if lead else 0), 1))
    totals = SplitTotals(split, offset + lead, records, largest, count, len(published or ()), merged, lead)
    return SplitLayout(totals, tuple(buckets), tuple(offsets), tuple(counts))


def place_bucket(layout: SplitLayout, bucket: int, sizes_in_order: Sequence[int]) -> list[int]:
    """Returns the shard of each record of one bucket, given their framed sizes in shuffled order
    (``PlanError``: not as many records as counted)."""
    index = layout.index_of(bucket)
    expected = layout.records[index]
    if len(sizes_in_order) != expected:
        raise PlanError(f"split {layout.totals.split!r} bucket {bucket}: {len(sizes_in_order)} records but "
                        f"{expected} were counted")
    totals = layout.totals
    return cut_records(sizes_in_order, totals.num_shards, totals.total_bytes, layout.offsets[index])


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


def split_by_content(sha256_hex: str, fractions: Mapping[str, float]) -> str:
    """Picks the split of an image from its sha256, in proportion to ``fractions`` (summing to 1).

    The hash's first 64 bits, as a fraction of 2**64, fall in the cumulative range of a split (by
    name): identical bytes always share a split.
    """
    point = int(sha256_hex[:16], 16) / 2.0**64
    cumulative = 0.0
    names = sorted(fractions)  # the same split whatever order the flag lists
    for name in names:
        cumulative += fractions[name]
        if point < cumulative:
            return name
    return names[-1]


_SPLIT_PRIORITY = {"test": 0, "validation": 1, "val": 2}


def split_rank(split: str) -> tuple[int, str]:
    """Sort key of the split that keeps an image found in several splits (smallest wins): ``test``,
    ``validation``, ``val``, others by name, ``train`` last (never trained on and evaluated on)."""
    if split in _SPLIT_PRIORITY:
        return (_SPLIT_PRIORITY[split], "")
    return (4, "") if split == "train" else (3, split)
