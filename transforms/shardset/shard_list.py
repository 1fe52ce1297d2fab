"""``shards.jsonl``: the shard list of a version-2 manifest, one JSON line per shard (pure).

Lines run split by split (sorted by name), each split's shards by index.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
from typing import Iterable, Iterator

from transforms.errors import ManifestError
from transforms.shardset.manifest import (MANIFEST_NAME, SHARDS_NAME, Manifest, ShardEntry, ShardsFile,
                                          SplitEntry, _label_sort, _require, parse_json)

__all__ = ["shard_line", "parse_shard_line", "read_shard_list", "with_shard_list", "LineDigest"]


def shard_line(split: str, index: int, entry: ShardEntry) -> bytes:
    """One line of the shard list (newline included)."""
    return (json.dumps({"split": split, "index": index, **entry.to_dict()}, ensure_ascii=False,
                       separators=(",", ":")) + "\n").encode("utf-8")


def parse_shard_line(line: bytes, where: str) -> tuple[str, int, ShardEntry]:
    """``(split, index, entry)`` of one line (``ManifestError`` naming ``where``: not JSON, or a field wrong)."""
    obj = parse_json(line, f"{where}: not a JSON line")
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: expected an object, got {type(obj).__name__}")
    return (_require(obj, "split", str, where), _require(obj, "index", int, where),
            ShardEntry.from_dict(obj, where))


class LineDigest:
    """Hashes and counts lines as they pass, into the ``ShardsFile`` that names them."""

    def __init__(self, name: str = SHARDS_NAME) -> None:
        self._name = name
        self._sha = hashlib.sha256()
        self.bytes = 0
        self.lines = 0

    def add(self, line: bytes) -> bytes:
        """Counts ``line`` and returns it."""
        self._sha.update(line)
        self.bytes += len(line)
        self.lines += 1
        return line

    def summary(self) -> ShardsFile:
        return ShardsFile(self._name, self._sha.hexdigest(), self.bytes, self.lines)


def read_shard_list(manifest: Manifest, lines: Iterable[bytes],
                    label_counts: bool = True) -> Iterator[tuple[str, ShardEntry]]:
    """Streams ``(split, entry)`` from the lines (newlines included) of a version-2 manifest's shard list.

    Each line must be the next shard in order; once the lines end, their count, size and sha256
    must be those ``manifest.json`` states, and each split's shards must add up to its totals.

    Raises:
        ManifestError: One line naming the file and the line or total that disagrees.
    """
    stated = manifest.shards_file
    if stated is None:
        raise ManifestError(f"{MANIFEST_NAME} names no shard list")
    name = stated.file
    digest = LineDigest(name)
    positions = ((split_name, index) for split_name, split in sorted(manifest.splits.items())
                 for index in range(split.num_shards))
    totals = {split: [0, 0, collections.Counter()] for split in manifest.splits}  # records, bytes, labels
    for line in lines:
        digest.add(line)
        where = f"{name} line {digest.lines}"
        split, index, entry = parse_shard_line(line, where)
        expected = next(positions, None)
        if expected is None:
            raise ManifestError(f"{where}: {MANIFEST_NAME} lists {stated.lines} shards, this line is one more")
        if (split, index) != expected:
            raise ManifestError(f"{where}: split {split!r} shard {index}, expected split "
                                f"{expected[0]!r} shard {expected[1]}")
        total = totals[split]
        total[0] += entry.records
        total[1] += entry.bytes
        total[2].update(entry.label_counts)
        yield split, entry if label_counts else dataclasses.replace(entry, label_counts={})
    for what, got, want in (("lines", digest.lines, stated.lines), ("bytes", digest.bytes, stated.bytes)):
        if got != want:
            raise ManifestError(f"{name} has {got} {what}, {MANIFEST_NAME} says {want}")
    found = digest.summary().sha256
    if found != stated.sha256:
        raise ManifestError(f"{name} has sha256 {found}, {MANIFEST_NAME} says {stated.sha256}")
    for split_name, (records, size, labels) in sorted(totals.items()):
        counts = manifest.splits[split_name].to_counts()
        for what, got, want in (("records", records, counts.records), ("bytes", size, counts.bytes)):
            if got != want:
                raise ManifestError(f"{name}: the shards of split {split_name!r} add up to {got} {what}, "
                                    f"{MANIFEST_NAME} says {want}")
        found_labels = {k: v for k, v in labels.items() if v}
        want_labels = {k: v for k, v in counts.label_counts.items() if v}
        if found_labels != want_labels:
            label = min((k for k in set(found_labels) | set(want_labels)
                         if found_labels.get(k) != want_labels.get(k)), key=_label_sort)
            raise ManifestError(f"{name}: the shards of split {split_name!r} count label {label} "
                                f"{found_labels.get(label, 0)} times, {MANIFEST_NAME} says "
                                f"{want_labels.get(label, 0)}")


def with_shard_list(manifest: Manifest, lines: Iterable[bytes] | None,
                    label_counts: bool = True) -> Manifest:
    """The manifest with its shard entries read from its shard list's ``lines`` (None: absent), checked as
    in ``read_shard_list``; a version-1 manifest as it is.

    Raises:
        ManifestError: The shard list is absent or disagrees with the manifest.
    """
    if manifest.complete:
        return manifest
    if lines is None:
        name = manifest.shards_file.file if manifest.shards_file else SHARDS_NAME
        raise ManifestError(f"{name} is missing; {MANIFEST_NAME} lists its shards there")
    entries: dict[str, list[ShardEntry]] = {name: [] for name in manifest.splits}
    for split, entry in read_shard_list(manifest, lines, label_counts):
        entries[split].append(entry)
    splits = {name: SplitEntry(name, entries[name], split.counts) for name, split in manifest.splits.items()}
    return dataclasses.replace(manifest, splits=splits)
