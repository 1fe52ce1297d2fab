"""Cutting a store prefix's keys into ranges (``images.key_ranges``): every key once, ranges about even."""

from __future__ import annotations

import bisect
import random
import uuid

import pytest

from transforms.images.key_ranges import KeyRange, key_between, split_keys_after
from tests.helpers import key_range_holds


@pytest.mark.parametrize("lo, hi", [
    ("a", "c"), ("a", "b"), ("a", "a\x01"), ("", "a"), ("abc", "abd"), ("00000999.jpg", "00500000.jpg"),
    ("x", None), ("", None), ("\x7f", None), ("z\uffff", None), ("\ud7ff", "\ue001"), ("a", "aa"),
    ("é", "ê"), ("abc", "abc\x01"),
])
def test_a_key_between_lies_strictly_between_and_is_valid_utf8(lo, hi) -> None:
    middle = key_between(lo, hi)
    assert middle is not None
    assert lo < middle and (hi is None or middle < hi)
    middle.encode("utf-8")  # a name a store takes: no lone surrogates


@pytest.mark.parametrize("lo, hi", [("a", "a\x00"), ("", "\x00")])
def test_no_key_between_adjacent_strings(lo, hi) -> None:
    assert key_between(lo, hi) is None


def test_a_key_between_refuses_bounds_out_of_order() -> None:
    with pytest.raises(ValueError, match="not below"):
        key_between("b", "a")


def _first_after(keys: list[str], probes: list[str]):
    def first_after(name: str) -> str | None:
        probes.append(name)
        at = bisect.bisect_right(keys, name)
        return keys[at] if at < len(keys) else None
    return first_after


def _sizes(keys: list[str], ranges: list[KeyRange]) -> list[int]:
    held = [sum(1 for key in keys if key_range_holds(r, key)) for r in ranges]
    assert sum(held) == sum(1 for key in keys if key > ranges[0].after)  # each key after lo once
    assert all(sum(key_range_holds(r, key) for r in ranges) <= 1 for key in keys)
    return held


_NUMBERED = [f"{i:06d}.jpg" for i in range(20_000)]
random.seed(7)
_HASHED = sorted(uuid.UUID(int=random.getrandbits(128)).hex + ".png" for _ in range(20_000))
_NAMED = sorted(f"img_{i}.jpeg" for i in range(20_000))  # not zero-padded


@pytest.mark.parametrize("keys, largest", [(_NUMBERED, 3 / 8), (_HASHED, 3 / 8), (_NAMED, 0.6)],
                         ids=["numbered", "hashed", "named"])
def test_ranges_hold_every_key_after_lo_once_and_about_evenly(keys, largest) -> None:
    """Names spread evenly over their characters cut about evenly; unpadded numbers less so
    (the key space is halved, not the count: img_1... holds half the names)."""
    probes: list[str] = []
    ranges = split_keys_after(keys[99], _first_after(keys, probes), 8)
    sizes = _sizes(keys, ranges)
    assert ranges[0].after == keys[99] and ranges[-1].until is None
    assert len(ranges) == 8 and min(sizes) > 0 and max(sizes) <= largest * sum(sizes), sizes
    assert len(probes) <= 8 * 8 + 32


def test_ranges_of_few_keys_and_odd_names_still_hold_each_once() -> None:
    keys = sorted(["a", "a\x01", "b", "é", "日本.jpg", "\U0001f600.png", "z" * 300, "z" * 300 + "1"])
    for parts in (1, 2, 5, 16):
        ranges = split_keys_after("a", _first_after(keys, []), parts)
        assert len(ranges) <= parts
        _sizes(keys, ranges)


def test_nothing_after_lo_is_one_range() -> None:
    keys = ["a", "b"]
    assert split_keys_after("b", _first_after(keys, []), 16) == [KeyRange("b", None)]


def test_probes_that_run_out_give_fewer_larger_ranges() -> None:
    keys = ["p" * 500 + f"{i:04d}" for i in range(1000)]  # a long shared start costs probes
    probes: list[str] = []
    ranges = split_keys_after(keys[0], _first_after(keys, probes), 16, max_probes=10)
    assert len(probes) == 10
    assert sum(_sizes(keys, ranges)) == 999


def test_split_keys_after_refuses_no_parts() -> None:
    with pytest.raises(ValueError, match="parts"):
        split_keys_after("a", lambda name: None, 0)
