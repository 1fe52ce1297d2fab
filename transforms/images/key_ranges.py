"""Cutting the keys below one store prefix into ranges that several workers list.

Object stores list keys in code point order and can start a listing after any string (S3
``StartAfter``, GCS ``start_offset``), so a prefix's keys are cut into ranges ``(after, until]`` by
boundary strings that need not be keys. Boundaries are chosen by bisection, each halving checked
with one probe (the first key after it), skipping empty stretches of the key space. Names here are
relative to the prefix being listed.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

__all__ = ["KeyRange", "key_between", "split_keys_after"]

# Code points above this are not valid in names (UTF-16 surrogates are not UTF-8).
_SURROGATES = range(0xD800, 0xE000)
_MAX = 0x10FFFF


class KeyRange(NamedTuple):
    """The keys ``k`` with ``after < k <= until`` (no bound where None)."""

    after: str | None
    until: str | None


def _end_of(code: int) -> int:
    """The code point past which a bisection with no upper bound looks first: ASCII, else all of Unicode."""
    return 0x80 if code < 0x7F else _MAX + 1


def key_between(lo: str, hi: str | None) -> str | None:
    """A string strictly between ``lo`` and ``hi`` (None: no upper bound), near their middle.

    The middle is taken at the first code point where they differ (with no upper bound, within
    ASCII first). None when no string lies between them.
    """
    out: list[str] = []
    i = 0
    while True:
        a = ord(lo[i]) if i < len(lo) else -1
        b = _end_of(a) if hi is None else ord(hi[i]) if i < len(hi) else -1
        if a == b:
            if a < 0:
                return None  # equal strings
            out.append(chr(a))
            i += 1
            continue
        if a > b:
            raise ValueError(f"{lo!r} is not below {hi!r}")
        middle = (a + b) // 2
        if middle in _SURROGATES:
            middle = _SURROGATES.start - 1 if _SURROGATES.start - 1 > a else _SURROGATES.stop
        if a < middle < b:
            return "".join(out) + chr(middle)
        if a < 0:  # lo ends where hi holds the lowest code point: only lo + "\0..." lies between
            return None
        out.append(chr(a))  # b == a + 1: below hi whatever follows, above lo if above lo's rest
        rest = lo[i + 1:]
        tail = key_between(rest, None) if rest else chr(_end_of(-1) // 2)
        return None if tail is None else "".join(out) + tail


def split_keys_after(lo: str, first_after: Callable[[str], str | None], parts: int,
                     max_probes: int | None = None) -> list[KeyRange]:
    """Cuts the keys after ``lo`` into at most ``parts`` ranges of about as many keys each.

    Args:
        lo: A key already listed: the ranges hold the keys after it.
        first_after: ``name -> the first key after it``, or None when there is none
            (one listing request of one key).
        max_probes: Calls of ``first_after`` allowed (default ``8 * parts + 32``);
            when they run out, fewer, larger ranges are given.

    Returns:
        Ranges in key order that together hold every key after ``lo``, the last without an upper bound.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    budget = [8 * parts + 32 if max_probes is None else max_probes]

    def cut(low: str, high: str | None, n: int) -> list[str]:
        """Boundaries inside (low, high) cutting it into about n ranges; low is a key or a boundary."""
        while n > 1 and budget[0] > 0:
            middle = key_between(low, high)
            if middle is None:
                return []
            budget[0] -= 1
            found = first_after(middle)
            if found is None or (high is not None and found > high):
                high = middle  # nothing between the middle and high: look lower
                continue
            return cut(low, middle, n // 2) + [middle] + cut(found, high, n - n // 2)
        return []

    bounds = cut(lo, None, parts)
    return [KeyRange(after, until) for after, until in zip([lo, *bounds], [*bounds, None])]
