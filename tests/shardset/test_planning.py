"""Unit tests for transforms.shardset.planning: shard counts, shuffle keys and cutting the shuffled order into shards."""

from __future__ import annotations

import hashlib
import random
from collections import Counter, defaultdict
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from transforms.errors import PlanError
from transforms.shardset.naming import SHARD_NAME_RE, check_split_name, shard_file_name
from transforms.shardset.planning import (BUCKET_BITS, GROUP_RECORDS, NUM_BUCKETS, SplitTotals, bucket_of,
                                          choose_num_shards, group_bits, cut_records, lay_out_split, order_key,
                                          parse_split_fractions, place_bucket, shard_of_offset,
                                          split_by_content, split_rank)
from tests.helpers import plan_in_memory

_FAST = settings(max_examples=150, deadline=None)
KEY_BITS = 63  # order keys fit Beam's signed 64-bit integer coder
_BUCKET_SHIFT = KEY_BITS - BUCKET_BITS

# --- choose_num_shards ------------------------------------------------------------------


@pytest.mark.parametrize(
    "total, target, expected",
    [
        (0, 300, 1),  # empty split
        (1, 300, 1),  # tiny
        (199, 300, 1),  # just under 2T/3: one small shard
        (200, 300, 1),  # exactly 2T/3
        (300, 300, 1),  # exactly T
        (399, 300, 1),
        (400, 300, 1),  # exactly 4T/3: 1 shard of 400 and 2 of 200 are equally far; fewer wins
        (401, 300, 2),  # just above 4T/3: 1 shard no longer fits
        (600, 300, 2),
        (720, 300, 2),  # tie: averages 360 and 240 are both 60 away
        (1000, 300, 3),  # 333.3 beats 250
        (1050, 300, 4),  # 262.5 beats 350
        (66, 100, 1),  # below 2T/3 = 66.67
        (67, 100, 1),
        (5, 1, 5),
        (10**15, 300, 3333333333333),  # huge
        (2**62, 2**20, 2**42),
        (256 * 1024**3, 128 * 1024**2, 2048),  # 256 GiB at 128 MiB
    ],
)
def test_choose_num_shards_table(total: int, target: int, expected: int) -> None:
    assert choose_num_shards(total, target) == expected


@pytest.mark.parametrize("total, target", [(10, 0), (10, -1), (-1, 10)])
def test_choose_num_shards_rejects(total: int, target: int) -> None:
    with pytest.raises(PlanError):
        choose_num_shards(total, target)


def _fits(total: int, target: int, n: int) -> bool:
    return 2 * target * n <= 3 * total <= 4 * target * n


def _reference_num_shards(total: int, target: int) -> int:
    """Brute force over every admissible count, exact arithmetic, ties to fewer shards."""
    admissible = [n for n in range(1, (3 * total) // (2 * target) + 2) if _fits(total, target, n)]
    return min(admissible, key=lambda n: (abs(Fraction(total, n) - target), n))


@_FAST
@given(target=st.integers(1, 10**6), ratio=st.fractions(Fraction(2, 3), 400), jitter=st.integers(0, 2))
def test_choose_num_shards_is_the_closest_admissible_count(target: int, ratio: Fraction, jitter: int) -> None:
    total = max(int(ratio * target) + jitter, -(-2 * target // 3))  # total >= 2T/3
    n = choose_num_shards(total, target)
    assert _fits(total, target, n)  # average within [2T/3, 4T/3]
    assert n == _reference_num_shards(total, target)


@_FAST
@given(target=st.integers(1, 2**40), total=st.integers(0, 2**62))
@example(target=2, total=36_028_797_018_963_967)  # a float's rounding once picked the worse count
def test_choose_num_shards_average_in_range_for_large_values(target: int, total: int) -> None:
    n = choose_num_shards(total, target)
    if 3 * total < 2 * target:
        assert n == 1
        return
    assert _fits(total, target, n)
    # |total/n - T| falls then rises in n, so only floor/ceil of total/T can be best.
    candidates = [c for c in {max(total // target, 1), total // target + 1} if _fits(total, target, c)]
    assert n == min(candidates, key=lambda c: (abs(Fraction(total, c) - target), c))


# --- order keys and buckets ---------------------------------------------------------


def test_order_key_golden_values() -> None:
    # Changing these reshuffles every dataset built before; it must be deliberate.
    assert order_key(0, b"") == 7050385132353981854
    assert order_key(1, b"cat/0001.jpg") == 3337952301968462813
    assert order_key(-1, b"cat/0001.jpg") == 4317015393122414559


def test_order_key_is_a_63_bit_value_that_depends_on_seed_and_identity() -> None:
    keys = {order_key(seed, f"img{i}".encode()) for seed in range(3) for i in range(1000)}
    assert len(keys) == 3000
    assert all(0 <= k < 2**KEY_BITS for k in keys)
    assert max(keys) >= 2**(KEY_BITS - 1)  # the top bit is used
    buckets = Counter(bucket_of(k) for k in keys)
    assert len(buckets) > 2900  # 3000 keys over 2**16 buckets: few share one


@pytest.mark.parametrize(
    "key, bucket",
    [(0, 0), (2**47 - 1, 0), (2**47, 1), (2**62 - 1, 2**15 - 1), (2**62, 2**15),
     (2**63 - 1, NUM_BUCKETS - 1)],
)
def test_bucket_of_table(key: int, bucket: int) -> None:
    assert NUM_BUCKETS == 2**BUCKET_BITS
    assert bucket_of(key) == bucket


# --- shard_of_offset, cut_records, plan_in_memory -------------------------------------------

# The order whose contiguous cut can do no better than a spread of 4 (its largest record).
_SKEWED = [4, 4, 4, 2, 3, 4, 4, 3, 4, 4, 4]


def _shard_bytes(shards: list[list[int]], sizes: list[int]) -> list[int]:
    return [sum(sizes[i] for i in shard) for shard in shards]


@pytest.mark.parametrize(
    "start, size, total, n, shard",
    [
        (0, 10, 100, 4, 0),
        (20, 10, 100, 4, 1),  # midpoint 25: exactly on the boundary goes to the later shard
        (19, 10, 100, 4, 0),  # midpoint 24
        (90, 10, 100, 4, 3),
        (0, 100, 100, 4, 2),  # one record covering the whole line: its midpoint decides
        (0, 0, 0, 3, 0),  # empty split
        (99, 1, 100, 1, 0),
        (2**62, 2, 2**63, 2**20, 2**19),  # huge values stay exact
    ],
)
def test_shard_of_offset_table(start: int, size: int, total: int, n: int, shard: int) -> None:
    assert shard_of_offset(start, size, total, n) == shard


@pytest.mark.parametrize(
    "sizes, n, start, total, expected",
    [
        ([], 3, 0, 0, []),
        ([5, 5, 5], 3, 0, 15, [0, 1, 2]),
        ([10, 1, 1, 1], 2, 0, 13, [0, 1, 1, 1]),  # the big record's midpoint 5 < 6.5
        ([3, 3, 3, 3], 1, 0, 12, [0, 0, 0, 0]),
        (_SKEWED, 4, 0, 40, [0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3]),
        ([4, 4], 4, 20, 40, [2, 2]),  # a run that starts mid-split: midpoints 22, 26 of 40
        ([4, 4], 4, 16, 40, [1, 2]),
    ],
)
def test_cut_records_table(sizes: list[int], n: int, start: int, total: int, expected: list[int]) -> None:
    assert cut_records(sizes, n, total, start) == expected


@pytest.mark.parametrize("n", [0, -2])
def test_cut_records_rejects_bad_counts(n: int) -> None:
    with pytest.raises(PlanError, match="num_shards"):
        cut_records([1], n, 1)


@pytest.mark.parametrize(
    "sizes, target, fixed, expected_bytes",
    [
        (_SKEWED, 10, None, [8, 13, 7, 12]),  # spread 6 < 2 x the largest record
        ([10] * 10, 25, None, [20, 30, 20, 30]),
        ([1] * 12, 4, None, [4, 4, 4]),
        # Never more shards than records: one 100-byte record at target 10 is one shard.
        ([100], 10, None, [100]),
        # Records larger than the average shard can leave a shard empty.
        ([60, 60, 1], 10, None, [60, 0, 61]),
        ([5, 5], 10, 3, [5, 0, 5]),  # fixed count larger than useful leaves a shard empty
        ([], 10, None, [0]),
    ],
)
def test_plan_in_memory_table(sizes: list[int], target: int, fixed: int | None,
                              expected_bytes: list[int]) -> None:
    items = [(key, size) for key, size in enumerate(sizes)]  # keys in index order
    n, shards = plan_in_memory(items, target, fixed)
    assert n == len(shards) == len(expected_bytes)
    assert _shard_bytes(shards, sizes) == expected_bytes


def _target_for(draw, total: int) -> int:
    """A target giving about 1 to 60 shards (a tiny target would make millions of empty lists)."""
    return max(1, total // draw(st.integers(1, 60)) + draw(st.integers(-3, 3)))


def _unique_keys(rnd: random.Random, count: int, buckets: list[int] | None = None,
                 bits: int = BUCKET_BITS) -> list[int]:
    """``count`` distinct order keys, all in ``buckets`` (of ``bits`` bits) when given."""
    keys: list[int] = []
    seen: set[int] = set()
    shift = KEY_BITS - bits
    while len(keys) < count:
        if buckets:
            key = (rnd.choice(buckets) << shift) | rnd.getrandbits(shift)
        else:
            key = rnd.getrandbits(KEY_BITS)
        if key not in seen:
            seen.add(key)
            keys.append(key)
    return keys


@st.composite
def _plan_inputs(draw):
    """(items, target, fixed count) with uniform, skewed or two-valued record sizes."""
    count = draw(st.integers(0, 200))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    shape = draw(st.sampled_from(["uniform", "skewed", "two_sizes"]))
    if shape == "uniform":
        sizes = [rnd.randint(1, 1000) for _ in range(count)]
    elif shape == "skewed":  # mostly small records with a few huge ones
        huge = draw(st.floats(0, 0.5))
        sizes = [rnd.randint(10_000, 200_000) if rnd.random() < huge else rnd.randint(16, 64)
                 for _ in range(count)]
    else:
        sizes = [rnd.choice([16, 17, 5000]) for _ in range(count)]
    keys = _unique_keys(rnd, count)
    target = _target_for(draw, sum(sizes))
    fixed = draw(st.none() | st.integers(1, 40))
    return list(zip(keys, sizes)), target, fixed


@_FAST
@given(_plan_inputs())
def test_plan_in_memory_shards_are_contiguous_runs_of_the_shuffled_order(args) -> None:
    items, target, fixed = args
    n, shards = plan_in_memory(items, target, fixed)
    chosen = min(choose_num_shards(sum(s for _, s in items), target), max(len(items), 1))
    assert n == len(shards) == (fixed or chosen)
    # Concatenated in shard order, the shards are the whole split in (key, size) order.
    assert [i for shard in shards for i in shard] == sorted(range(len(items)), key=lambda i: items[i])


@_FAST
@given(_plan_inputs())
def test_plan_in_memory_balance(args) -> None:
    """Every shard holds the average to within one largest record, so max - min < 2 records."""
    items, target, fixed = args
    n, shards = plan_in_memory(items, target, fixed)
    if not items:
        return
    sizes = [s for _, s in items]
    shard_bytes = _shard_bytes(shards, sizes)
    assert sum(shard_bytes) == sum(sizes)
    average = Fraction(sum(sizes), n)
    assert all(abs(b - average) <= max(sizes) for b in shard_bytes)
    assert max(shard_bytes) - min(shard_bytes) < 2 * max(sizes)


@_FAST
@given(_plan_inputs(), st.integers(0, 2**32))
def test_plan_in_memory_is_deterministic_and_ignores_input_order(args, seed: int) -> None:
    rnd = random.Random(seed)
    items, target, fixed = args
    n, shards = plan_in_memory(items, target, fixed)
    assert plan_in_memory(list(items), target, fixed) == (n, shards)
    shuffled = list(items)
    rnd.shuffle(shuffled)
    n2, shards2 = plan_in_memory(shuffled, target, fixed)
    assert n2 == n
    assert [[shuffled[i][0] for i in s] for s in shards2] == [[items[i][0] for i in s] for s in shards]


def test_balance_bound_is_reached() -> None:
    # Within one record of the average, not less: one record over two shards.
    assert _shard_bytes(plan_in_memory([(1, 5)], target_bytes=10, num_shards=2)[1], [5]) == [0, 5]
    # More than one record apart: 6, 6, 1, 6, 6 over three shards of average 25/3; the
    # midpoints 9, 12.5 and 16 all lie in the middle share [8.3, 16.7).
    n, shards = plan_in_memory([(1, 6), (2, 6), (3, 1), (4, 6), (5, 6)], target_bytes=8, num_shards=3)
    assert _shard_bytes(shards, [6, 6, 1, 6, 6]) == [6, 13, 6]


# --- lay_out_split and place_range: the distributed plan --------------------------------------


@pytest.mark.parametrize(
    "totals, buckets, offsets, records",
    [
        ([], (), (), ()),
        ([(7, 3, 30, 12)], (7,), (0,), (3,)),
        # Buckets in any order; each starts where the one before it ends.
        ([(9, 2, 20, 10), (1, 3, 30, 10), (4, 2, 25, 13), (12, 1, 5, 5)],
         (1, 4, 9, 12), (0, 30, 55, 75), (3, 2, 2, 1)),
        ([(0, 5, 50, 10), (1, 5, 50, 10), (2, 5, 50, 10)], (0, 1, 2), (0, 50, 100), (5, 5, 5)),
    ],
)
def test_lay_out_split_table(totals, buckets, offsets, records) -> None:
    layout = lay_out_split("train", totals, target_bytes=40)
    assert (layout.buckets, layout.offsets, layout.records) == (buckets, offsets, records)
    total = sum(t[2] for t in totals)
    assert layout.totals == SplitTotals("train", total, sum(t[1] for t in totals),
                                        max((t[3] for t in totals), default=0),
                                        min(choose_num_shards(total, 40), max(sum(t[1] for t in totals), 1)))


@pytest.mark.parametrize(
    "totals, error",
    [
        ([(3, 1, 1, 1), (3, 1, 1, 1)], "bucket 3 is given twice"),
        ([(NUM_BUCKETS, 1, 1, 1)], "outside"),
        ([(-1, 1, 1, 1)], "outside"),
    ],
)
def test_lay_out_split_rejects(totals, error: str) -> None:
    with pytest.raises(PlanError, match=error):
        lay_out_split("train", totals, target_bytes=10)


def test_lay_out_split_fixed_count_and_bucket_bits() -> None:
    layout = lay_out_split("train", [(2, 1, 10, 10), (5, 1, 10, 10)], target_bytes=10**9, num_shards=7,
                           bucket_bits=3)
    assert layout.totals.num_shards == 7
    assert (layout.buckets, layout.index_of(5)) == ((2, 5), 1)
    assert bucket_of((1 << KEY_BITS) - 1, 3) == 7 and bucket_of(5 << (KEY_BITS - 3), 3) == 5
    with pytest.raises(PlanError, match="outside 0..7"):
        lay_out_split("train", [(8, 1, 10, 10)], target_bytes=10, bucket_bits=3)


def test_place_bucket_rejects_a_bucket_that_changed() -> None:
    layout = lay_out_split("train", [(2, 2, 10, 5)], target_bytes=10)
    assert place_bucket(layout, 2, [5, 5]) == [0, 0]
    with pytest.raises(PlanError, match="bucket 2: 3 records but 2 were counted"):
        place_bucket(layout, 2, [5, 5, 5])
    with pytest.raises(PlanError, match="bucket 3: records but none were counted"):
        place_bucket(layout, 3, [5])


@pytest.mark.parametrize("value", [-1, 64])
def test_lay_out_split_rejects_bad_bucket_bits(value: int) -> None:
    with pytest.raises(PlanError, match="bucket_bits"):
        lay_out_split("train", [], target_bytes=10, bucket_bits=value)


@st.composite
def _bucketed_inputs(draw):
    """Items whose keys fall in a few buckets (many per bucket) or anywhere, spread over workers."""
    count = draw(st.integers(0, 250))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    bits = draw(st.integers(0, 20))
    pool = [rnd.randrange(1 << bits) for _ in range(rnd.randint(1, 6))]
    keys = _unique_keys(rnd, count, pool if draw(st.booleans()) else None, bits)
    huge = draw(st.floats(0, 0.3))  # share of records 1000x larger than the rest
    sizes = [rnd.randint(16_000, 90_000) if rnd.random() < huge else rnd.randint(16, 90)
             for _ in range(count)]
    target = _target_for(draw, sum(sizes))
    fixed = draw(st.none() | st.integers(1, 30))
    return keys, sizes, target, fixed, bits, rnd


def distributed_plan(keys: list[int], sizes: list[int], target: int, fixed: int | None,
                     bits: int, rnd: random.Random) -> tuple[int, list[list[int]], int]:
    """The Beam flow, without Beam: returns ``(num_shards, shards, largest group)``.

    Bucket totals are summed in any order; one layout per split; each bucket's
    items, sorted by (key, size), are cut in any order of buckets.
    """
    per_bucket: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    members: dict[int, list[int]] = defaultdict(list)
    for i in rnd.sample(range(len(keys)), len(keys)):
        bucket = bucket_of(keys[i], bits)
        acc = per_bucket[bucket]
        acc[0], acc[1], acc[2] = acc[0] + 1, acc[1] + sizes[i], max(acc[2], sizes[i])
        members[bucket].append(i)
    bucket_totals = [(b, *acc) for b, acc in per_bucket.items()]
    rnd.shuffle(bucket_totals)
    layout = lay_out_split("train", bucket_totals, target, fixed, bits)
    shard_of_item: dict[int, int] = {}
    for bucket in rnd.sample(sorted(members), len(members)):  # buckets in any order
        in_order = sorted(members[bucket], key=lambda i: (keys[i], sizes[i]))
        placed = place_bucket(layout, bucket, [sizes[i] for i in in_order])
        shard_of_item.update(zip(in_order, placed))
    n = layout.totals.num_shards
    shards: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(shard_of_item, key=lambda i: (keys[i], sizes[i])):  # write order
        shards[shard_of_item[i]].append(i)
    return n, shards, max((len(m) for m in members.values()), default=0)


@settings(max_examples=150, deadline=None)
@given(_bucketed_inputs())
def test_distributed_plan_reproduces_plan_in_memory(args) -> None:
    keys, sizes, target, fixed, bits, rnd = args
    n, shards, largest_group = distributed_plan(keys, sizes, target, fixed, bits, rnd)
    assert (n, shards) == plan_in_memory(zip(keys, sizes), target, fixed)
    assert largest_group == max(Counter(bucket_of(k, bits) for k in keys).values(), default=0)


@pytest.mark.parametrize("count", [1_000, 4_000, 16_000])
def test_groups_grow_only_as_buckets_do(count: int) -> None:
    rnd = random.Random(count)
    keys = _unique_keys(rnd, count)
    sizes = [rnd.randint(1_000, 200_000) for _ in range(count)]
    n, shards, largest_group = distributed_plan(keys, sizes, 2_000_000, None, 4, rnd)
    assert count / 16 < largest_group <= 1.3 * count / 16  # a 16th of the split, give or take
    assert (n, shards) == plan_in_memory(zip(keys, sizes), 2_000_000)


def test_shuffled_shards_mix_classes() -> None:
    # 3 classes of 300 records each: every shard's class mix stays close to a third.
    items = [(order_key(0, f"{c}/{i}".encode()), 1000 + (i * 37) % 500) for c in range(3) for i in range(300)]
    n, shards = plan_in_memory(items, target_bytes=100_000)
    assert n >= 8
    for shard in shards:
        mix = Counter(i // 300 for i in shard)
        assert all(abs(mix[c] / len(shard) - 1 / 3) < 0.2 for c in range(3)), mix


@pytest.mark.parametrize("num_shards", [0, -1])
def test_split_totals_rejects_bad_counts(num_shards: int) -> None:
    with pytest.raises(PlanError, match="num_shards"):
        SplitTotals("train", 10, 1, 10, num_shards)


# --- Names and splits ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "split, index, count, compression, name",
    [
        ("train", 0, 1, "none", "train-00000-of-00001.tfrecord"),
        ("train", 41, 128, "gzip", "train-00041-of-00128.tfrecord.gz"),
        ("validation", 7, 8, "zlib", "validation-00007-of-00008.tfrecord.zz"),
        ("a_b-c", 99999, 100000, "none", "a_b-c-99999-of-100000.tfrecord"),
        ("t", 123456, 200000, "gzip", "t-123456-of-200000.tfrecord.gz"),
    ],
)
def test_shard_file_name_table(split: str, index: int, count: int, compression: str, name: str) -> None:
    assert shard_file_name(split, index, count, compression) == name
    match = SHARD_NAME_RE.match(name)
    assert match is not None
    assert (match["split"], int(match["index"]), int(match["count"])) == (split, index, count)


def test_shard_file_name_default_is_uncompressed() -> None:
    assert shard_file_name("train", 1, 2) == "train-00001-of-00002.tfrecord"


def test_array_record_shards_are_named_like_tfrecord_ones_and_uncompressed() -> None:
    name = shard_file_name("validation", 3, 12, file_format="array_record")
    assert name == "validation-00003-of-00012.array_record"
    match = SHARD_NAME_RE.match(name)
    assert (match["split"], int(match["index"]), int(match["count"])) == ("validation", 3, 12)
    assert SHARD_NAME_RE.match("train-00000-of-00001.array_record.gz") is None
    with pytest.raises(PlanError, match="uncompressed"):
        shard_file_name("train", 0, 1, "gzip", "array_record")
    with pytest.raises(PlanError, match="file format"):
        shard_file_name("train", 0, 1, "none", "arrayrecord")


@pytest.mark.parametrize("compression", ["gz", "GZIP", "bz2", ""])
def test_shard_file_name_rejects_unknown_compression(compression: str) -> None:
    with pytest.raises(PlanError, match="compression"):
        shard_file_name("train", 0, 1, compression)


@pytest.mark.parametrize(
    "name",
    ["train-1-of-2.tfrecord", "train-00000-of-00001.tfrecord.bz2", "a/b-00000-of-00001.tfrecord",
     "../x-00000-of-00001.tfrecord", "train-00000-of-00001.tfrecords", "train-00000-of-00001",
     "train-00000-of-00001.tfrecord\n", "train\n-00000-of-00001.tfrecord"],
)
def test_shard_name_re_rejects(name: str) -> None:
    assert SHARD_NAME_RE.match(name) is None


@pytest.mark.parametrize(
    "text, fractions",
    [
        ("train=1", {"train": 1.0}),
        ("train=0.9,validation=0.1", {"train": 0.9, "validation": 0.1}),
        (" train = 0.8 , test=0.2 ", {"train": 0.8, "test": 0.2}),
        ("a=0.3333333,b=0.3333333,c=0.3333334", {"a": 0.3333333, "b": 0.3333333, "c": 0.3333334}),
        ("x=0.5,y=.25,z=2.5e-1", {"x": 0.5, "y": 0.25, "z": 0.25}),
    ],
)
def test_parse_split_fractions_good(text: str, fractions: dict[str, float]) -> None:
    assert parse_split_fractions(text) == fractions


def test_parse_split_fractions_keeps_the_given_order() -> None:
    assert list(parse_split_fractions("validation=0.1,train=0.9")) == ["validation", "train"]


@pytest.mark.parametrize(
    "text",
    ["", "train", "train=", "train=x", "train=0", "train=-0.1", "train=1.5", "train=nan",
     "train=inf", "train=0.5", "train=0.5,train=0.5", "../x=1", "a b=1", "a/b=1", "=1",
     "train=0.9,validation=0.1,", "train=0.9;validation=0.1", "train=0.6,test=0.6"],
)
def test_parse_split_fractions_bad(text: str) -> None:
    with pytest.raises(PlanError):
        parse_split_fractions(text)


_FRACTIONS = {"train": 0.8, "validation": 0.1, "test": 0.1}


def test_split_by_content_proportions_over_10k_images() -> None:
    keys = [hashlib.sha256(f"image {i}".encode()).hexdigest() for i in range(10_000)]
    counts = Counter(split_by_content(k, _FRACTIONS) for k in keys)
    assert set(counts) == set(_FRACTIONS)
    for name, fraction in _FRACTIONS.items():
        assert abs(counts[name] / len(keys) - fraction) < 0.02, counts


@pytest.mark.parametrize(
    "key, split",
    [
        # sorted names: test [0, 0.1), train [0.1, 0.9), validation [0.9, 1) of 2**64
        ("0" * 64, "test"),
        ("1999" + "0" * 60, "test"),
        ("1a" + "0" * 62, "train"),
        ("e6" + "0" * 62, "train"),
        ("e8" + "0" * 62, "validation"),
        ("f" * 64, "validation"),
    ],
)
def test_split_by_content_is_the_key_as_a_fraction(key: str, split: str) -> None:
    reordered = dict(reversed(list(_FRACTIONS.items())))  # the flag's order does not matter
    assert split_by_content(key, reordered) == split
    # Pinned: an image must land in the same split on every run, machine and Python version.
    assert split_by_content(key, _FRACTIONS) == split


def test_split_by_content_single_split_takes_everything() -> None:
    keys = [hashlib.sha256(bytes([i])).hexdigest() for i in range(256)]
    assert {split_by_content(k, {"all": 1.0}) for k in keys} == {"all"}


def test_split_rank_puts_evaluation_splits_before_train() -> None:
    names = ["train", "dev", "val", "test", "holdout", "validation"]
    assert sorted(names, key=split_rank) == ["test", "validation", "val", "dev", "holdout", "train"]


@pytest.mark.parametrize("name", ["train", "validation", "val_1", "A-b", "0"])
def test_check_split_name_accepts(name: str) -> None:
    assert check_split_name(name) == name


@pytest.mark.parametrize("name", ["../x", "", "a b", "a/b", ".", "..", "a\\b", "tr\nain", "é", "train\n", None])
def test_check_split_name_rejects(name) -> None:
    with pytest.raises(PlanError):
        check_split_name(name)


@pytest.mark.parametrize("records, most, bits", [
    (0, 16, 0), (1, 16, 0), (GROUP_RECORDS, 16, 0), (GROUP_RECORDS + 1, 16, 1), (4 * GROUP_RECORDS, 16, 2),
    (4 * GROUP_RECORDS + 1, 16, 3), (10**12, 16, 16), (10**12, 5, 5), (10**6, 0, 0),
])
def test_group_bits_table(records: int, most: int, bits: int) -> None:
    assert group_bits(records, most) == bits


@given(st.integers(0, 10**13))
def test_group_bits_give_groups_of_at_most_group_records_up_to_the_most(records: int) -> None:
    bits = group_bits(records)
    assert 0 <= bits <= BUCKET_BITS
    assert bits == BUCKET_BITS or records <= GROUP_RECORDS << bits
    assert bits == 0 or records > GROUP_RECORDS << (bits - 1)
