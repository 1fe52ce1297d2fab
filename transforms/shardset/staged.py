"""What a run has staged for publishing: written shards and the parts of the shard list.

Workers write each shard to a staging name (a ``ShardResult``), and the shard-list lines of up to
``PART_SHARDS`` shards to one staged part (a ``ShardListPart``), beside a file of their
``StagedShard`` rows. The publish step is given only the parts.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from transforms.shardset.manifest import ShardEntry
from transforms.tfrecord.shard_writer import ShardStats

__all__ = ["PART_SHARDS", "ShardResult", "ShardListPart", "StagedShard", "part_key", "part_ranges",
           "parts_problem", "staged_line", "read_staged_line", "part_tallies"]

# Shards per staged part of the shard list (a part holds their label counts in one worker).
PART_SHARDS = 1000


@dataclass(frozen=True)
class ShardResult:
    """A shard written to its staging name, waiting to be published."""

    split: str
    index: int
    count: int
    file: str
    staged: str
    staged_index: str | None
    stats: ShardStats
    tallies: tuple[tuple[Any, int], ...] = ()  # (key, items) of WriteShards' tally_of, sorted
    staged_keys: str | None = None  # its staged .keys file (key_files), or None without one


@dataclass(frozen=True)
class ShardListPart:
    """Lines of the shard list for up to ``PART_SHARDS`` shards of a split, staged by a worker.

    Attributes:
        part: Its shards ``part * PART_SHARDS`` up to the next part's first.
        path: The staged file: one line per written shard, in index order.
        indexes: The shard indexes it has lines for, ascending.
        staged_path: The staged file of those shards' ``StagedShard`` rows (``staged_line``).
        tallies: ``(key, items)`` of ``WriteShards``' ``tally_of`` summed over those shards, sorted.
    """

    split: str
    part: int
    path: str
    indexes: tuple[int, ...]
    label_counts: Mapping[str, int]
    staged_path: str = ""
    records: int = 0
    tallies: tuple[tuple[Any, int], ...] = ()


@dataclass(frozen=True)
class StagedShard:
    """What publishing needs of a written shard (no label counts)."""

    file: str
    staged: str
    staged_index: str | None
    records: int
    bytes: int
    sha256: str | None
    crc32c: str | None = None
    index_crc32c: str | None = None
    staged_keys: str | None = None
    keys_crc32c: str | None = None

    @classmethod
    def of(cls, result: ShardResult) -> "StagedShard":
        return cls(result.file, result.staged, result.staged_index, result.stats.records,
                   result.stats.bytes, result.stats.sha256, result.stats.crc32c, result.stats.index_crc32c,
                   result.staged_keys, result.stats.keys_crc32c if result.staged_keys else None)

    def entry(self) -> ShardEntry:
        """Its shard-list entry, without label counts."""
        return ShardEntry(self.file, self.records, self.bytes, self.sha256, {}, self.crc32c,
                          self.index_crc32c, self.keys_crc32c)


def staged_line(index: int, shard: StagedShard) -> bytes:
    """One row of a part's staged-shards file: the shard's index and what publishing needs of it."""
    return (json.dumps([index, shard.file, shard.staged, shard.staged_index, shard.records, shard.bytes,
                        shard.sha256, shard.crc32c, shard.index_crc32c, shard.staged_keys, shard.keys_crc32c],
                       separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")


def read_staged_line(line: bytes) -> tuple[int, StagedShard]:
    """``(index, StagedShard)`` of a row ``staged_line`` wrote."""
    index, file, staged, staged_index, records, size, *hashes = json.loads(line)
    return index, StagedShard(file, staged, staged_index, records, size, *hashes)


def part_tallies(results: Sequence[ShardResult]) -> tuple[tuple[Any, int], ...]:
    """The ``tallies`` of the results summed key by key, sorted."""
    out: dict[Any, int] = {}
    for result in results:
        for key, items in result.tallies:
            out[key] = out.get(key, 0) + items
    return tuple(sorted(out.items()))


def part_key(result: ShardResult) -> tuple[tuple[str, int], ShardResult]:
    """ShardResult -> ((split, part), ShardResult): the part of the shard list its line goes to."""
    return (result.split, result.index // PART_SHARDS), result


def part_ranges(count: int) -> Iterator[tuple[int, range]]:
    """``(part, shard indexes)`` of every part of a split of ``count`` shards, in order."""
    for part in range(-(-count // PART_SHARDS)):
        yield part, range(part * PART_SHARDS, min(count, (part + 1) * PART_SHARDS))


def parts_problem(parts: Sequence[ShardListPart], staged: Mapping[tuple[str, int], StagedShard]) -> str | None:
    """Why the staged shard-list parts do not cover exactly the written shards, or None."""
    covered = [(p.split, i) for p in parts for i in p.indexes]
    if len(covered) != len(set(covered)) or set(covered) != set(staged):
        return (f"the shard-list parts cover {len(set(covered))} shards but {len(staged)} were written; "
                "refusing to publish an inconsistent set")
    return None
