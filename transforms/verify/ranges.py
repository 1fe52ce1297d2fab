"""Checking the records of one byte range of a shard, and merging what ranges found.

Pure code. The reader of a range hands every record to a ``RangeChecker`` and emits one
``RangeTally`` per range. A shard's tallies add up to its ``ShardTally`` (``merge_tallies``); their
image keys are dealt into buckets by hash (``key_buckets``), so the duplicate-key check holds one
bucket's keys at a time, never every key of the shard set.
"""

from __future__ import annotations

import collections
import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from transforms.errors import RecordError
from transforms.example.scan import scan_example
from transforms.shardset.manifest import ShardEntry
from transforms.verify.checks import (Problem, ShardTally, check_features, check_record,
                                      duplicate_key_problems, record_labels, shard_problems)
from transforms.verify.preview import PREVIEW_PER_CLASS, PreviewSample, preview_sample

__all__ = ["ShardFile", "KEY_BUCKETS", "BUCKET_KEYS", "RECORD_BYTES_GUESS", "key_bucket_count", "SHARD_GROUP",
           "KEY_GROUP", "RangeTally", "RangeChecker", "merge_tallies", "key_bucket", "key_buckets", "bucket_duplicates",
           "group_parts", "group_problems"]

# Buckets the image keys are dealt into for the duplicate check, at least: a bucket holds
# about 1/KEY_BUCKETS of a small shard set's keys (ImageNet's 1.28M: 20,000 a bucket).
KEY_BUCKETS = 64
# Keys a bucket holds on average at most: larger sets get more buckets (``key_bucket_count``).
# A hash deals keys unevenly; at 40,000 a bucket on average the largest of 2,500 buckets
# (100M keys) holds about 40,800, under the 50,000 any one step may hold.
BUCKET_KEYS = 40_000
# Bytes a record is taken to hold at least when the record count is not known (TFRecord
# files without a manifest): the count is guessed from their size.
RECORD_BYTES_GUESS = 1024


def key_bucket_count(records: int) -> int:
    """Buckets for the keys of ``records`` records: ``KEY_BUCKETS``, or more, ``BUCKET_KEYS`` a bucket."""
    return max(KEY_BUCKETS, math.ceil(records / BUCKET_KEYS))

# The kinds of group of ``group_parts``: a shard's counts, keyed by its path; a bucket of image keys.
SHARD_GROUP = "shard"
KEY_GROUP = "keys"


@dataclass(frozen=True)
class ShardFile:
    """A file the verify job reads.

    Attributes:
        path: Its path, as the match that found it spells it.
        split: Its split (from the manifest, or the shard name), or None when its name states none.
        entry: Its manifest entry, or None without a manifest.
        read_whole: Read as one range, so that the reader hashes the bytes it checks (one read of the
            file); set by ``ReadAndCheckRecords(split_ranges=False)``.
    """

    path: str
    size: int
    split: str | None
    entry: ShardEntry | None = None
    read_whole: bool = False


@dataclass
class RangeTally:
    """What checking the records of one byte range of a shard found.

    Attributes:
        label_counts: Label (as a string) -> records with it.
        keys: ``(image/key/sha256, offset)`` of every record that has a key.
        problems: Problems with the records, the damage that stopped the range, and (for the range
            at byte 0, whose reader also checks the whole file) the file's hashes and ``.idx``.
        damaged: A damaged record stopped the reading of the range.
        samples: Preview samples: the few smallest keys of each label.
        entry: The shard's manifest entry, on the tally of its range at byte 0 only (so that a
            shard's tallies hold it once); None without a manifest.
    """

    file: str
    split: str | None
    records: int = 0
    label_counts: dict[str, int] = field(default_factory=dict)
    keys: list[tuple[str, int]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    damaged: bool = False
    samples: list[PreviewSample] = field(default_factory=list)
    entry: ShardEntry | None = None

    def shard_tally(self) -> ShardTally:
        """This range's counts, as a ``ShardTally`` to merge with the shard's other ranges."""
        return ShardTally(self.records, dict(self.label_counts), self.damaged)


class RangeChecker:
    """Checks records one at a time, as ``check_record`` (with its settings) does, and adds them to a
    ``RangeTally``; ``preview`` keeps preview samples. Bytes outside ``scan_example``'s layout get the full parse.
    """

    def __init__(self, file: str, split: str | None, schema: Mapping[str, str] | bool | None,
                 decode_images: bool = False, labels: Sequence[str] | None = None,
                 preview: bool = False, decode_with: Sequence[str] = ()) -> None:
        self._how = (schema, decode_images, labels, tuple(decode_with))  # check_record's settings
        self._preview = preview
        # The image is only measured unless it is decoded or drawn: it need not be copied.
        self._views = () if decode_images or preview or decode_with else ("image/encoded",)
        self._samples: dict[int, list[PreviewSample]] = {}
        self.tally = RangeTally(file, split)

    def add(self, offset: int, data: bytes) -> None:
        """Checks the record at ``offset``."""
        tally = self.tally
        features = scan_example(data, self._views)
        if features is None:
            check, features = check_record(tally.file, offset, data, *self._how)
        else:
            check = check_features(tally.file, offset, features, *self._how)
        tally.records += 1
        for label in record_labels(check.label):
            tally.label_counts[str(label)] = tally.label_counts.get(str(label), 0) + 1
        if check.key is not None:
            tally.keys.append((check.key, offset))
        tally.problems.extend(check.problems)
        if self._preview and (sample := preview_sample(features)) is not None:  # kept: each label's smallest keys
            kept = self._samples.setdefault(sample.label, [])
            if len(kept) < PREVIEW_PER_CLASS or sample.key < kept[-1].key:
                kept.append(sample)
                kept.sort(key=lambda s: s.key)
                del kept[PREVIEW_PER_CLASS:]

    def damage(self, err: RecordError) -> None:
        """Notes the damaged record that stopped the range."""
        self.tally.damaged = True
        self.tally.problems.append(Problem(err.path, err.offset, err.kind, err.detail))

    def result(self) -> RangeTally:
        """The range's tally, with its preview samples."""
        self.tally.samples = [s for label in sorted(self._samples) for s in self._samples[label]]
        return self.tally


def merge_tallies(tallies: Iterable[ShardTally]) -> ShardTally:
    """Adds up the tallies of one shard's ranges."""
    tallies = list(tallies)
    counts: collections.Counter[str] = collections.Counter()
    for tally in tallies:
        counts.update(tally.label_counts)
    return ShardTally(sum(t.records for t in tallies), dict(counts), any(t.damaged for t in tallies))


def key_bucket(key: str, buckets: int = KEY_BUCKETS) -> int:
    """The bucket of an image key, of ``buckets``."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % buckets


def key_buckets(tally: RangeTally,
                count: int = KEY_BUCKETS) -> list[tuple[int, tuple[str | None, str, list[tuple[str, int]]]]]:
    """A range's keys dealt into ``count`` buckets: ``(bucket, (split, file, [(key, offset)]))``."""
    buckets: dict[int, list[tuple[str, int]]] = {}
    for key, offset in tally.keys:
        buckets.setdefault(key_bucket(key, count), []).append((key, offset))
    return [(bucket, (tally.split, tally.file, keys)) for bucket, keys in sorted(buckets.items())]


def bucket_duplicates(parts: Iterable[tuple[str | None, str, Sequence[tuple[str, int]]]]) -> list[Problem]:
    """The ``duplicate_key`` problems among the keys of one bucket (see ``key_buckets``)."""
    seen: dict[str, list[tuple[str | None, str, int]]] = {}
    for split, file, keys in parts:
        for key, offset in keys:
            seen.setdefault(key, []).append((split, file, offset))
    return [problem for key, locations in seen.items() if len(locations) > 1
            for problem in duplicate_key_problems(key, locations)]


def group_parts(tally: RangeTally, counts: bool = True,
                buckets: int = KEY_BUCKETS) -> list[tuple[tuple[str, Any], tuple]]:
    """A range's parts for the checks across ranges, each keyed by ``(group kind, group)``.

    Returns:
        With ``counts``, the range's counts for the comparison with the shard's manifest entry,
        ``((SHARD_GROUP, file), (ShardTally, entry or None))``; then ``((KEY_GROUP, bucket), (split,
        file, [(key, offset)]))`` per bucket of ``key_buckets`` (``buckets`` of them).
    """
    parts: list[tuple[tuple[str, Any], tuple]] = []
    if counts:
        parts.append(((SHARD_GROUP, tally.file), (tally.shard_tally(), tally.entry)))
    parts += [((KEY_GROUP, bucket), part) for bucket, part in key_buckets(tally, buckets)]
    return parts


def group_problems(group: tuple[str, Any], parts: Iterable[tuple]) -> list[Problem]:
    """The problems of one group of ``group_parts``' parts: a shard's counts, added up over its ranges,
    against its manifest entry (none when no part holds one), or a bucket's repeated keys."""
    kind, name = group
    if kind == KEY_GROUP:
        return bucket_duplicates(parts)
    parts = list(parts)
    entry = next((part_entry for _, part_entry in parts if part_entry is not None), None)  # the range at 0's
    return shard_problems(name, entry, merge_tallies(tally for tally, _ in parts)) if entry is not None else []
