"""Near-duplicate images across splits: pairs of perceptual hashes within a distance, found by bands.

Each hashed image goes to ``distance + 1`` buckets, one per band of its hash (``perceptual.hash_bands``):
two images within ``distance`` bits share a bucket, so only the members of one bucket, in different
splits, are compared. A bucket keeps at most ``cap`` members (``CappedBucket``); the rest are counted,
not compared there. Of a pair, the copy that ranks first keeps the image, as for identical bytes; with
``reject`` the later copy is a ``cross_split_near_duplicate`` dead letter (``near_choice``).
"""

from __future__ import annotations

import collections
import heapq
import json
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from transforms.images.items import ImageMeta
from transforms.images.perceptual import popcount
from transforms.shardset.dead_letters import DeadLetter
from transforms.shardset.planning import split_rank

__all__ = ["DEFAULT_BUCKET_CAP", "NEAR_DUPLICATES_NAME",
           "HashedImage", "NearPair", "CappedBucket", "bucket_pairs", "near_choice", "hashed_image",
           "near_duplicates_lines", "near_duplicates_summary", "split_pairs"]

# Members of one bucket compared; a bucket has about images / 2**9 of them at distance 6.
DEFAULT_BUCKET_CAP = 4096
NEAR_DUPLICATES_NAME = "near_duplicates.jsonl"
_BLOCK = 1024  # rows compared at once: at most _BLOCK x cap distances in memory


@dataclass(frozen=True, order=True)
class HashedImage:
    """What the near-duplicate check knows of an image: its hash and where it is."""

    sha256: str
    phash: int
    split: str
    relpath: str
    path: str

    def rank(self) -> tuple:
        """Which copy keeps the image: the one in the split that ranks first, then the smaller path."""
        return (split_rank(self.split), self.relpath, self.path)

    def same_copy(self, meta: ImageMeta) -> bool:
        """True if ``meta`` is this copy."""
        return (self.sha256, self.split, self.relpath, self.path) == (
            meta.sha256, meta.source.split, meta.source.relpath, meta.source.path)

    def to_dict(self) -> dict:
        return {"path": self.path, "relpath": self.relpath, "split": self.split, "sha256": self.sha256,
                "phash": f"{self.phash:016x}"}


def hashed_image(meta: ImageMeta) -> HashedImage:
    return HashedImage(meta.sha256, meta.phash, meta.source.split, meta.source.relpath, meta.source.path)


@dataclass(frozen=True)
class NearPair:
    """Two images in different splits within the distance; ``later`` is the copy that does not keep it."""

    kept: HashedImage
    later: HashedImage
    distance: int

    def to_json(self, rejected: bool) -> str:
        return json.dumps({"distance": self.distance, "kept": self.kept.to_dict(), "later": self.later.to_dict(),
                           "rejected": rejected}, ensure_ascii=False, sort_keys=True)


class CappedBucket:
    """The members of one bucket: at most ``cap`` kept (the smallest, whatever order they arrive in),
    all of them counted."""

    def __init__(self, cap: int = DEFAULT_BUCKET_CAP) -> None:
        self.cap = cap
        self.kept: list[HashedImage] = []
        self.count = 0

    def add(self, member: HashedImage) -> None:
        self.kept.append(member)
        self.count += 1
        if len(self.kept) >= 2 * self.cap:
            self.kept = heapq.nsmallest(self.cap, self.kept)

    def merge(self, other: "CappedBucket") -> "CappedBucket":
        self.kept = heapq.nsmallest(self.cap, self.kept + other.kept)
        self.count += other.count
        return self

    def members(self) -> list[HashedImage]:
        """The members compared: the ``cap`` smallest, sorted."""
        return heapq.nsmallest(self.cap, self.kept)


def bucket_pairs(members: Sequence[HashedImage], distance: int) -> list[NearPair]:
    """The pairs of members in different splits within ``distance`` bits, but for identical bytes
    (the exact check's)."""
    by_split: dict[str, list[HashedImage]] = {}
    for member in members:
        by_split.setdefault(member.split, []).append(member)
    splits = sorted(by_split)
    pairs = []
    for i, first in enumerate(splits):
        left = by_split[first]
        rest = [m for split in splits[i + 1:] for m in by_split[split]]
        if not rest:
            continue
        right = np.array([m.phash for m in rest], dtype=np.uint64)
        for start in range(0, len(left), _BLOCK):
            block = left[start:start + _BLOCK]
            hashes = np.array([m.phash for m in block], dtype=np.uint64)
            apart = popcount(hashes[:, None] ^ right[None, :])
            for row, col in zip(*np.nonzero(apart <= distance)):
                a, b = block[row], rest[col]
                if a.sha256 != b.sha256:
                    first, later = (a, b) if a.rank() <= b.rank() else (b, a)
                    pairs.append(NearPair(first, later, int(apart[row, col])))
    return pairs


def near_choice(kept: ImageMeta | None, pairs: Iterable[NearPair], reject: bool,
                distance: int) -> tuple[ImageMeta | None, list[DeadLetter], list[NearPair]]:
    """The copy the exact check kept, given the pairs naming a copy of its bytes as the later one.

    Pairs naming another copy of the bytes are dropped: the kept copy has its own. Of the pairs
    with copies of one image, the one with its best-ranked copy stands for them.

    Returns:
        The copy (None when ``reject`` and it has a pair), its dead letter, its pairs, nearest first.
    """
    if kept is None:
        return None, [], []
    best: dict[str, NearPair] = {}
    for pair in pairs:
        if pair.later.same_copy(kept):
            other = best.get(pair.kept.sha256)
            if other is None or pair.kept.rank() < other.kept.rank():
                best[pair.kept.sha256] = pair
    found = sorted(best.values(), key=lambda p: (p.distance, p.kept.rank()))
    if not found or not reject:
        return kept, [], found
    near = found[0]
    more = f"; and {len(found) - 1} more" if len(found) > 1 else ""
    letter = DeadLetter(
        kept.source.path, "cross_split_near_duplicate",
        f"looks like {near.kept.relpath!r} in split {near.kept.split!r} (perceptual hash {near.distance} bits "
        f"apart, within --near_duplicate_distance {distance}{more}): this copy is in split "
        f"{kept.source.split!r}; an image belongs to one split only, and {near.kept.split!r} keeps it "
        "(test, validation, val, other splits, train)")
    return None, [letter], found


def near_duplicates_lines(pairs: Iterable[NearPair], rejected: bool) -> bytes:
    """``near_duplicates.jsonl``: one line per pair, sorted by the later copy, then the kept one."""
    ordered = sorted(pairs, key=lambda p: (p.later.split, p.later.relpath, p.later.path,
                                           p.kept.split, p.kept.relpath, p.kept.path))
    return "".join(p.to_json(rejected) + "\n" for p in ordered).encode("utf-8")


def split_pairs(pairs: Iterable[NearPair]) -> list[dict]:
    """How many pairs join each two splits: ``{"kept", "later", "pairs"}`` (the split that keeps the
    image, the split of the later copy), most pairs first, then by name."""
    counts = collections.Counter((pair.kept.split, pair.later.split) for pair in pairs)
    return [{"kept": kept, "later": later, "pairs": n}
            for (kept, later), n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]


def near_duplicates_summary(mode: str, distance: int, pairs: Sequence[NearPair],
                            over_cap: Sequence[tuple[int, int]], unhashed: int) -> dict:
    """The manifest's ``near_duplicates`` object (``mode``: ``report`` or ``reject``) from the pairs
    found, ``(members, cap)`` of each bucket over its cap, and the images whose pixels were not hashed."""
    return {"mode": mode, "distance": distance, "pairs": len(pairs), "file": NEAR_DUPLICATES_NAME,
            "buckets_over_cap": len(over_cap),
            "images_not_compared_in_a_bucket": sum(count - cap for count, cap in over_cap),
            "images_not_hashed": unhashed, "split_pairs": split_pairs(pairs)}
