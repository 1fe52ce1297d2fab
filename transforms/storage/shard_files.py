"""A run's shards and shard list on storage: staged by the workers, joined when publishing.

Each shard is written with its ``.idx`` (uncompressed shards) to a unique
name in the run's staging folder (``write_shard``: a retried or speculative
bundle writes its own copy), and the shard-list lines of up to
``staged.PART_SHARDS`` written shards to one staged part
(``write_shard_list_part``). Publishing writes ``shards.jsonl`` from the
parts, line by line, with the lines of the splits it keeps from the
previous list (``write_shard_list``): nothing it holds grows with shards x
labels.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Iterable, Iterator, Mapping, Sequence

from transforms.errors import ManifestError, PublishError
from transforms.shardset.manifest import SHARDS_NAME, Manifest, ShardEntry, ShardsFile, SplitEntry
from transforms.shardset.naming import join_path, shard_file_name
from transforms.shardset.shard_list import LineDigest, read_shard_list, shard_line
from transforms.shardset.staged import ShardListPart, ShardResult, part_ranges
from transforms.storage.clients import close_written_file, naming_s3_errors
from transforms.storage.files import exists, open_lines
from transforms.storage.output_folder import staging_folder
from transforms.storage.writing import create, reporting_full_disk, shards_need, write_atomic, write_file
from transforms.tfrecord.run_files import FramedRecord
from transforms.tfrecord.shard_writer import ShardWriter

__all__ = ["write_shard", "write_shard_list_part", "write_shard_list"]


def write_shard(output_dir: str, key: tuple[str, int, int],
                records: Iterable[tuple[bytes | Sequence[bytes], int | None]],
                compression: str, run_id: str, planned_bytes: int | None = None) -> ShardResult:
    """Writes one shard's records, in order, to a unique name in the run's staging folder.

    A record is its bytes, a sequence of pieces whose concatenation is its bytes,
    or a ``FramedRecord`` (its bytes already framed, copied as they are).

    Raises:
        PublishError: The disk is full (the message names the folder and the
            space the run's shards need, ``planned_bytes``).
    """
    split, index, count = key
    name = shard_file_name(split, index, count, compression)
    attempt = uuid.uuid4().hex
    staging = staging_folder(output_dir, run_id)
    staged = join_path(staging, f"{name}.{attempt}.tmp")
    staged_index = join_path(staging, f"{name}.idx.{attempt}.tmp") if compression == "none" else None
    with reporting_full_disk(output_dir, staged, shards_need(planned_bytes)), naming_s3_errors(staged):
        fh = create(staged)
        index_fh = create(staged_index) if staged_index else None
        try:
            writer = ShardWriter(fh, compression, index_fh)
            for record, label in records:
                if isinstance(record, FramedRecord):  # copied from a run file as it is
                    writer.write_framed(record.data, label)
                elif isinstance(record, bytes):
                    writer.write(record, label)
                else:  # the pieces a record is made of, written without joining them
                    writer.write_parts(record, label)
            stats = writer.close()
        finally:
            close_written_file(fh)
            if index_fh is not None:
                close_written_file(index_fh)
    return ShardResult(split, index, count, name, staged, staged_index, stats)


def write_shard_list_part(item: tuple[tuple[str, int], Iterable[ShardResult]], output_dir: str,
                          run_id: str) -> ShardListPart:
    """Stages the shard-list lines of one part's written shards, in index order.

    Args:
        item: ``((split, part), [ShardResult])``.
        output_dir: Output folder (the part goes to the run's staging folder).
        run_id: The run's id.
    """
    (split, part), results = item
    results = sorted(results, key=lambda r: r.index)
    path = join_path(staging_folder(output_dir, run_id), f"{SHARDS_NAME}.{split}.{part}.{uuid.uuid4().hex}.tmp")
    totals: dict[str, int] = {}
    for result in results:
        for label, count in result.stats.label_counts.items():
            totals[label] = totals.get(label, 0) + count
    lines = (shard_line(split, r.index, ShardEntry(r.file, r.stats.records, r.stats.bytes, r.stats.sha256,
                                                   r.stats.label_counts)) for r in results)
    with reporting_full_disk(output_dir, path):
        write_file(path, lines)
    return ShardListPart(split, part, path, tuple(r.index for r in results), totals)


def _kept_lines(output_dir: str, old: Manifest, split: str) -> Iterator[bytes]:
    """The shard-list lines of a kept split, from the previous manifest (or its shard list)."""
    if old.shards_file is None:  # a version-1 manifest: its shards are in memory
        for index, entry in enumerate(old.splits[split].shards):
            yield shard_line(split, index, entry)
        return
    path = join_path(output_dir, old.shards_file.file)
    with open_lines(path) as lines:
        if lines is None:
            raise PublishError(f"{path}, the shard list of the kept split {split!r}, is gone")
        index = 0
        try:
            for name, entry in read_shard_list(old, lines):  # read to the end: checked as a whole
                if name == split:
                    yield shard_line(split, index, entry)
                    index += 1
        except ManifestError as err:
            raise PublishError(f"cannot keep split {split!r}: {err}") from err


def _part_lines(split: str, count: int, parts: Mapping[tuple[str, int], ShardListPart],
                empty: Mapping[tuple[str, int], ShardEntry]) -> Iterator[bytes]:
    """A written split's lines: each part's staged lines, with the lines of empty shards put in place."""
    for part, indexes in part_ranges(count):
        staged = parts.get((split, part))
        have = set(staged.indexes) if staged else set()
        with open_lines(staged.path) if staged else contextlib.nullcontext() as lines:
            if staged and lines is None:
                raise PublishError(f"staged shard-list part {staged.path} is gone")
            for index in indexes:
                if index not in have:
                    yield shard_line(split, index, empty[(split, index)])
                    continue
                line = next(lines, b"")
                if not line.endswith(b"\n"):
                    raise PublishError(f"staged shard-list part {staged.path} ends before shard {index}")
                yield line


def write_shard_list(output_dir: str, staging: str, splits: Mapping[str, SplitEntry],
                     kept: Mapping[str, SplitEntry], old: Manifest | None,
                     parts: Mapping[tuple[str, int], ShardListPart],
                     empty: Mapping[tuple[str, int], ShardEntry]) -> ShardsFile:
    """Writes ``shards.jsonl`` line by line while hashing it; returns what ``manifest.json`` says of it."""
    digest = LineDigest(SHARDS_NAME)

    def _published_before(name: str) -> bool:
        """A retried publish whose first attempt finished: its parts are gone, its list is in place."""
        if all(exists(p.path) for p in parts.values() if p.split == name):
            return False
        listed = old.splits.get(name) if old is not None else None
        same = listed is not None and [(e.file, e.records, e.bytes, e.sha256) for e in listed.shards] == [
            (e.file, e.records, e.bytes, e.sha256) for e in splits[name].shards]
        if not same:
            raise PublishError(f"the staged shard list of split {name!r} is gone and {SHARDS_NAME} "
                               "does not list the same shards")
        return True

    def lines() -> Iterator[bytes]:
        for name in sorted(splits):
            pieces = (_kept_lines(output_dir, old, name) if name in kept or _published_before(name)
                      else _part_lines(name, splits[name].num_shards, parts, empty))
            for line in pieces:
                yield digest.add(line)

    write_atomic(join_path(output_dir, SHARDS_NAME), lines(), staging)
    return digest.summary()
