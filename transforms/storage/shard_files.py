"""A run's shards and shard list on storage: staged by the workers, joined when publishing.

Each shard is written with its ``.idx`` and keys file to a unique name in the run's staging
folder (a retried or speculative bundle writes its own copy), and the shard-list lines of up to
``staged.PART_SHARDS`` shards to one staged part, joined line by line when publishing.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import tempfile
import uuid
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from transforms.errors import ManifestError, PublishError
from transforms.shardset.manifest import SHARDS_NAME, Manifest, ShardEntry, ShardsFile, SplitEntry
from transforms.shardset.key_files import KEYS_SUFFIX, KeyCollector
from transforms.shardset.naming import join_path, shard_file_name
from transforms.shardset.shard_list import LineDigest, read_shard_list, shard_line
from transforms.shardset.staged import (ShardListPart, ShardResult, StagedShard, part_ranges, part_tallies,
                                        read_staged_line, staged_line)
from transforms.filesystems import close_written_file, naming_s3_errors
from transforms.storage.files import exists, open_file, open_for_read, open_lines, read_if_present
from transforms.storage.output_folder import staging_folder
from transforms.storage.writing import create, reporting_full_disk, shards_need, write_atomic, write_file, written
from transforms.shardset.planning import SplitTotals, shard_of_offset
from transforms.shardset.published_keys import record_label
from transforms.tfrecord.compression import open_decompressed
from transforms.tfrecord.framing import OVERHEAD, frame_record, iter_records
from transforms.tfrecord.record_index import check_index, read_index
from transforms.tfrecord.run_files import FramedRecord
from transforms.tfrecord.file_hash import FileHash
from transforms.tfrecord.shard_writer import ShardWriter
from transforms.arrayrecord.shard_file import ArrayRecordShardWriter

__all__ = ["write_shard", "write_shard_list_part", "write_shard_list", "lead_records", "published_entries",
           "staged_shards", "staged_of_parts"]


def write_shard(output_dir: str, key: tuple[str, int, int],
                records: Iterable[tuple[bytes | Sequence[bytes], int | None]],
                compression: str, run_id: str, planned_bytes: int | None = None,
                file_format: str = "tfrecord", sha256: bool = False) -> ShardResult:
    """Writes one shard's records, in order, to a unique name in the run's staging folder.

    A record is its bytes, a sequence of pieces whose concatenation is its bytes, or a
    ``FramedRecord`` (copied as it is). Hashes are computed as it is written; the records' keys are
    staged as its keys file (none when a record has no usable ``image/key/sha256``).

    Raises:
        PublishError: The disk is full (naming the space the run's shards need, ``planned_bytes``).
    """
    split, index, count = key
    name = shard_file_name(split, index, count, compression, file_format)
    attempt = uuid.uuid4().hex
    staging = staging_folder(output_dir, run_id)
    staged = join_path(staging, f"{name}.{attempt}.tmp")
    collector = KeyCollector()
    records = _collecting_keys(records, collector, staged)
    if file_format == "array_record":
        result = _write_array_record_shard(output_dir, key, name, staged, records, planned_bytes, sha256)
        return _with_keys(output_dir, result, collector.keys(), attempt)
    staged_index = join_path(staging, f"{name}.idx.{attempt}.tmp") if compression == "none" else None
    with reporting_full_disk(output_dir, staged, shards_need(planned_bytes)), naming_s3_errors(staged):
        fh = create(staged)
        index_fh = create(staged_index) if staged_index else None
        try:
            writer = ShardWriter(fh, compression, index_fh, sha256=sha256)
            _write_records(writer, records)
            stats = writer.close()
        finally:
            close_written_file(fh)
            if index_fh is not None:
                close_written_file(index_fh)
    return _with_keys(output_dir, ShardResult(split, index, count, name, staged, staged_index, stats),
                      collector.keys(), attempt)


def _write_records(writer: ShardWriter | ArrayRecordShardWriter,
                   records: Iterable[tuple[bytes | Sequence[bytes] | FramedRecord, int | None]]) -> None:
    for record, label in records:
        if isinstance(record, FramedRecord):  # copied from a run file as it is
            writer.write_framed(record.data, label)
        elif isinstance(record, bytes):
            writer.write(record, label)
        else:  # the pieces a record is made of, written without joining them
            writer.write_parts(record, label)


def _collecting_keys(records: Iterable[tuple[Any, Any]], collector: KeyCollector,
                     where: str) -> Iterator[tuple[Any, Any]]:
    """Passes the records on, noting each one's key in ``collector``."""
    for number, (record, label) in enumerate(records):
        collector.add(record, f"{where}: record {number}")
        yield record, label


def _with_keys(output_dir: str, result: ShardResult, keys: bytes | None, attempt: str) -> ShardResult:
    """``result`` with its keys file staged beside it (``key_files``), unless a record had no usable key."""
    if keys is None:
        return result
    staged_keys = f"{result.staged[:-len(f'.{attempt}.tmp')]}{KEYS_SUFFIX}.{attempt}.tmp"
    digest = FileHash()
    digest.update(keys)
    with reporting_full_disk(output_dir, staged_keys), naming_s3_errors(staged_keys):
        write_file(staged_keys, keys)  # one request on a store
    return dataclasses.replace(result, staged_keys=staged_keys,
                               stats=dataclasses.replace(result.stats, keys_crc32c=digest.crc32c))


def _write_array_record_shard(output_dir: str, key: tuple[str, int, int], name: str, staged: str,
                              records: Iterable[tuple[bytes | Sequence[bytes], int | None]],
                              planned_bytes: int | None, sha256: bool = False) -> ShardResult:
    """``write_shard`` of an ArrayRecord shard: written to a local temporary file (its writer takes
    local paths only), then copied to ``staged`` and hashed."""
    split, index, count = key
    with tempfile.TemporaryDirectory(prefix="array-record-") as folder, \
            reporting_full_disk(output_dir, staged, shards_need(planned_bytes)), naming_s3_errors(staged):
        local = os.path.join(folder, name)
        writer = ArrayRecordShardWriter(local)
        _write_records(writer, records)
        stats = writer.close()
        digest = FileHash(sha256=sha256)
        with written(staged) as fh, open(local, "rb") as source:
            for block in iter(lambda: source.read(1 << 22), b""):
                digest.update(block)
                stats.bytes += len(block)
                fh.write(block)
    stats.crc32c, stats.sha256 = digest.crc32c, digest.sha256
    return ShardResult(split, index, count, name, staged, None, stats)


def lead_records(output_dir: str, totals: SplitTotals, index: int,
                 compression: str) -> Iterator[tuple[FramedRecord, int | tuple[int, ...] | None]]:
    """The records (framed, with their label) of the merged published shard that begin shard
    ``index`` of an appended split (``planning.append_layout``), their CRCs checked."""
    local = totals.planned_shard(index)
    if totals.merged is None or local is None:
        return
    path = join_path(output_dir, shard_file_name(totals.split, totals.merged, totals.published, compression))
    share = _lead_share(path, totals, local) if compression == "none" else None
    if share is not None and share[0] >= share[1]:
        return
    start = 0 if share is None else share[0]
    opened = open_for_read(path) if share is None else open_file(path, size=totals.lead_bytes, until=share[1])
    with opened as raw, naming_s3_errors(path):
        if start:
            raw.seek(start)
        for _, data in iter_records(open_decompressed(raw, compression), path):
            size = len(data) + OVERHEAD
            shard = shard_of_offset(start, size, totals.total_bytes, totals.num_shards)
            start += size
            if shard > local:
                return
            if shard == local:
                yield FramedRecord(frame_record(data)), record_label(data, path)


def _lead_share(path: str, totals: SplitTotals, local: int) -> tuple[int, int] | None:
    """The bytes ``[start, end)`` of the merged shard ``path`` whose records go to planned shard ``local``,
    from its ``.idx``; None when it has no usable one (the shard is read from its start)."""
    index = read_index(path, read_if_present)
    starts = None if index is None else check_index(index[1], totals.lead_bytes).starts
    if starts is None:
        return None
    ends = list(starts[1:]) + [totals.lead_bytes]
    first = last = None
    for start, end in zip(starts, ends):
        shard = shard_of_offset(start, end - start, totals.total_bytes, totals.num_shards)
        if shard == local:
            first = start if first is None else first
            last = end
        elif shard > local:
            break
    return (first, last) if first is not None else (0, 0)


def write_shard_list_part(item: tuple[tuple[str, int], Iterable[ShardResult]], output_dir: str,
                          run_id: str) -> ShardListPart:
    """Stages the shard-list lines of one part's written shards (``((split, part), [ShardResult])``), in
    index order, and beside them the rows publishing needs: the part is all the publish step is given."""
    (split, part), results = item
    results = sorted(results, key=lambda r: r.index)
    attempt = uuid.uuid4().hex
    path = join_path(staging_folder(output_dir, run_id), f"{SHARDS_NAME}.{split}.{part}.{attempt}.tmp")
    staged_path = join_path(staging_folder(output_dir, run_id), f"staged.{split}.{part}.{attempt}.tmp")
    totals: collections.Counter = collections.Counter()
    for result in results:
        totals.update(result.stats.label_counts)
    lines = (shard_line(split, r.index, dataclasses.replace(StagedShard.of(r).entry(),
                                                            label_counts=r.stats.label_counts)) for r in results)
    with reporting_full_disk(output_dir, path):
        write_file(path, lines)
    with reporting_full_disk(output_dir, staged_path):
        write_file(staged_path, (staged_line(r.index, StagedShard.of(r)) for r in results))
    return ShardListPart(split, part, path, tuple(r.index for r in results), dict(totals), staged_path,
                         sum(r.stats.records for r in results), part_tallies(results))


def staged_shards(part: ShardListPart) -> Iterator[tuple[int, StagedShard]]:
    """``(index, StagedShard)`` of every shard of a staged part, in index order (``PublishError``: gone or short)."""
    with open_lines(part.staged_path) as lines:
        if lines is None:
            raise PublishError(f"staged part {part.staged_path} is gone")
        count = 0
        for line in lines:
            if not line.endswith(b"\n"):
                raise PublishError(f"staged part {part.staged_path} ends inside a line")
            count += 1
            yield read_staged_line(line)
    if count != len(part.indexes):
        raise PublishError(f"staged part {part.staged_path} has {count} shards, not {len(part.indexes)}")


def staged_of_parts(output_dir: str, parts: Sequence[ShardListPart], published: Manifest | None,
                    staging: str, compression: str) -> dict[tuple[str, int], StagedShard]:
    """``(split, index) -> StagedShard`` of every shard the parts cover, read from their staged files.

    A part whose file is gone belongs to a retried publish whose first attempt finished: its
    shards are taken from the published shard list (``PublishError`` if it does not list the split).
    """
    staged: dict[tuple[str, int], StagedShard] = {}
    gone: dict[str, set[int]] = {}
    for part in parts:
        if exists(part.staged_path):
            staged.update(((part.split, index), shard) for index, shard in staged_shards(part))
        else:
            gone.setdefault(part.split, set()).update(part.indexes)
    for split, indexes in sorted(gone.items()):
        if published is None or split not in published.splits:
            raise PublishError(f"the staged parts of split {split!r} are gone and the published set does not "
                               "list it")
        for index, entry in published_entries(output_dir, published, split):
            if index in indexes:
                moved = join_path(staging, f"{entry.file}.published")
                staged[(split, index)] = StagedShard(entry.file, moved, f"{moved}.idx" if compression == "none"
                                                     else None, entry.records, entry.bytes, entry.sha256,
                                                     entry.crc32c, entry.index_crc32c,
                                                     f"{moved}.keys" if entry.keys_crc32c else None,
                                                     entry.keys_crc32c)
    return staged


def published_entries(output_dir: str, old: Manifest, split: str) -> Iterator[tuple[int, ShardEntry]]:
    """``(index, entry)`` of a published split's shards, with label counts, from the previous list."""
    if old.shards_file is None:  # a version-1 manifest: its shards are in memory
        yield from enumerate(old.splits[split].shards)
        return
    path = join_path(output_dir, old.shards_file.file)
    with open_lines(path) as lines:
        if lines is None:
            raise PublishError(f"{path}, the shard list of the published split {split!r}, is gone")
        index = 0
        try:
            for name, entry in read_shard_list(old, lines):  # read to the end: checked as a whole
                if name == split:
                    yield index, entry
                    index += 1
        except ManifestError as err:
            raise PublishError(f"cannot keep split {split!r}: {err}") from err


def _appended_lines(output_dir: str, old: Manifest, totals: SplitTotals, compression: str,
                    parts: Mapping[tuple[str, int], ShardListPart],
                    empty: Mapping[tuple[str, int], ShardEntry]) -> Iterator[bytes]:
    """An appended split's lines: its published shards under their new names, and the staged ones."""
    split = totals.split
    published = ((index, entry) for index, entry in published_entries(output_dir, old, split)
                 if index != totals.merged)
    staged = _part_lines(split, totals.final_count, parts, empty,
                         planned=lambda index: totals.planned_shard(index) is not None)
    for index in range(totals.final_count):
        if totals.planned_shard(index) is not None:
            yield next(staged)
            continue
        number, entry = next(published)
        if number != index:
            raise PublishError(f"the shard list of split {split!r} lists shard {number} where {index} was expected")
        name = shard_file_name(split, index, totals.final_count, compression)
        yield shard_line(split, index, dataclasses.replace(entry, file=name))


def _part_lines(split: str, count: int, parts: Mapping[tuple[str, int], ShardListPart],
                empty: Mapping[tuple[str, int], ShardEntry],
                planned: Callable[[int], bool] | None = None) -> Iterator[bytes]:
    """A written split's lines: each part's staged lines, with the lines of empty shards put in place.

    With ``planned``, only the shards it is true of (an appended split's new ones).
    """
    for part, indexes in part_ranges(count):
        staged = parts.get((split, part))
        have = set(staged.indexes) if staged else set()
        with open_lines(staged.path) if staged else contextlib.nullcontext() as lines:
            if staged and lines is None:
                raise PublishError(f"staged shard-list part {staged.path} is gone")
            for index in indexes:
                if planned is not None and not planned(index):
                    continue
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
                     empty: Mapping[tuple[str, int], ShardEntry],
                     appended: Mapping[str, SplitTotals] | None = None, compression: str = "none",
                     target: str | None = None) -> ShardsFile:
    """Writes ``shards.jsonl`` (to ``target``) line by line while hashing it; returns what ``manifest.json``
    says of it. ``appended``: the plan of each split new records joined (its shards renamed)."""
    appended = appended or {}
    digest = LineDigest(SHARDS_NAME)

    def _published_before(name: str) -> bool:
        """A retried publish whose first attempt finished: its parts are gone, its list is in place."""
        if all(exists(p.path) for p in parts.values() if p.split == name):
            return False
        listed = old.splits.get(name) if old is not None else None
        same = listed is not None and [(e.file, e.records, e.bytes, e.crc32c, e.sha256) for e in listed.shards] == [
            (e.file, e.records, e.bytes, e.crc32c, e.sha256) for e in splits[name].shards]
        if not same:
            raise PublishError(f"the staged shard list of split {name!r} is gone and {SHARDS_NAME} "
                               "does not list the same shards")
        return True

    def lines() -> Iterator[bytes]:
        for name in sorted(splits):
            if name in appended:
                pieces = _appended_lines(output_dir, old, appended[name], compression, parts, empty)
            elif name in kept or _published_before(name):
                pieces = (shard_line(name, index, entry) for index, entry in published_entries(output_dir, old, name))
            else:
                pieces = _part_lines(name, splits[name].num_shards, parts, empty)
            for line in pieces:
                yield digest.add(line)

    write_atomic(target or join_path(output_dir, SHARDS_NAME), lines(), staging)
    return digest.summary()
