"""The reference verify: a shard set held in memory checked in one process, as the verify job would.

Kept apart from ``tests/helpers.py`` so that a probe measuring a pure reader's
memory imports only pure modules (no Beam).
"""

from __future__ import annotations

import io
from typing import BinaryIO, Iterable, Iterator, Mapping, Sequence, Union

from transforms.errors import RecordError
from transforms.shardset.manifest import LABELS_NAME, Manifest, ShardEntry
from transforms.shardset.naming import join_path, split_of_shard
from transforms.shardset.shard_list import with_shard_list
from transforms.tfrecord.compression import compression_of, open_decompressed
from transforms.tfrecord.file_hash import FileHash
from transforms.tfrecord.framing import DEFAULT_MAX_RECORD_BYTES
from transforms.tfrecord.record_index import INDEX_SUFFIX, check_index, index_names
from transforms.tfrecord.record_ranges import ByteRange, read_range, read_stream
from transforms.verify.checks import (Problem, Report, ShardTally, check_record, duplicate_key_problems,
                                      hash_problems, index_hash_problem, index_problems, labels_problems,
                                      listing_problems, record_labels, shard_label_problems, shard_problems)

# What a range reader yields here: a record ``(offset, data)``, or the damage that stopped it.
ReadItem = Union[tuple[int, bytes], RecordError]


def verify_in_memory(files: Mapping[str, bytes], manifest: Manifest | None = None,
                     folder: str = "", decode_images: bool = False, ranges: int = 3) -> Report:
    """Verifies a shard set held in memory, in one process.

    Args:
        files: Name -> bytes. With a manifest, every file of the folder
            (shards, ``.idx`` sidecars, ``labels.txt``, anything else);
            without, the TFRecord files to check plus any ``.idx`` sidecars
            (a key repeated in two of them is reported, with the splits their
            shard names state).
        manifest: The shard set's manifest, or None to check the files alone
            (CRCs and Example parsing, no schema). A format-2 manifest without
            its shards reads them from ``files`` (``shards.jsonl``); a missing
            or disagreeing list raises ``ManifestError``.
        folder: Prefix for file names in problems.
        decode_images: Decode every image (see ``image_problem``).
        ranges: Byte ranges each uncompressed file is read in, as a split read would.

    Returns:
        The ``Report``.
    """
    problems: list[Problem] = []
    entries: dict[str, tuple[str, ShardEntry]] = {}
    if manifest is not None and not manifest.complete:  # format 2: its shard list is one of the files
        listed = files.get(manifest.shards_file.file) if manifest.shards_file else None
        manifest = with_shard_list(manifest, io.BytesIO(listed).readlines() if listed is not None else None)
    if manifest is not None:
        present = {name: len(data) for name, data in files.items()}
        problems += listing_problems(folder, manifest, present)
        entries = {e.file: (split, e) for split, s in manifest.splits.items() for e in s.shards}
        shard_names = sorted(name for name in entries if name in files)
        problems += labels_problems(folder, manifest, files.get(LABELS_NAME))
        problems += [problem for _, entry in entries.values() if manifest.labels
                     for problem in shard_label_problems(folder, len(manifest.labels), entry)]
    else:
        shard_names = sorted(name for name in files if not name.endswith(INDEX_SUFFIX))
    records = 0
    keys: dict[str, list[tuple[str | None, str, int]]] = {}
    for name in shard_names:
        path, data = join_path(folder, name), files[name]
        index = next((files[n] for n in index_names(name) if n in files), None)
        uncompressed = compression_of(name) == "none"
        if uncompressed:
            problems += index_problems(path, index, len(data), required=manifest is not None)
        tally_labels: dict[str, int] = {}
        count, damaged = 0, False
        for item in _read_records(path, data, index, ranges):
            if isinstance(item, RecordError):
                problems.append(Problem(item.path, item.offset, item.kind, item.detail))
                damaged = True
                continue
            offset, record = item
            count += 1
            check, _ = check_record(path, offset, record,
                                    schema=manifest.feature_spec if manifest is not None else None,
                                    decode_images=decode_images,
                                    labels=manifest.labels if manifest is not None else None)
            problems += check.problems
            for label in record_labels(check.label):
                tally_labels[str(label)] = tally_labels.get(str(label), 0) + 1
            if check.key is not None:
                split = entries[name][0] if name in entries else split_of_shard(name)
                keys.setdefault(check.key, []).append((split, path, offset))
        records += count
        if name in entries:
            entry = entries[name][1]
            digest = FileHash(sha256=entry.sha256 is not None)
            digest.update(data)
            problems += hash_problems(path, entry, digest)
            index_path = next((join_path(folder, n) for n in index_names(name) if n in files), None)
            problems += [p for p in [index_hash_problem(path, entry, (index_path, index) if index_path else None)]
                         if p]
            problems += shard_problems(path, entry, ShardTally(count, tally_labels, damaged))
    for key, locations in keys.items():
        problems += duplicate_key_problems(key, locations)
    size = sum(len(files[name]) for name in shard_names)
    return build_report(len(shard_names), records, size, problems)


def _read_records(path: str, data: bytes, index: bytes | None, ranges: int):
    """Reads a file like the Beam source: uncompressed files in ``ranges`` byte ranges."""
    compression = compression_of(path)
    if compression != "none":
        try:
            yield from read_stream(open_decompressed(io.BytesIO(data), compression), path)
        except RecordError as err:
            yield err
        return
    starts = check_index(index, len(data)).starts if index is not None else None
    cuts = sorted({len(data) * i // ranges for i in range(1, ranges)} - {0})
    yield from read_in_ranges(io.BytesIO(data), len(data), cuts, path, starts)


def read_in_ranges(fh: BinaryIO, size: int, cuts: Sequence[int], path: str = "",
                   index: Sequence[int] | None = None,
                   max_length: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[ReadItem]:
    """Reads an uncompressed file as consecutive ranges, one after the other.

    The single-process equivalent of a split read: each range is read on its
    own, and a range that hits a damaged record yields the ``RecordError``
    and stops, while the others go on.

    Args:
        cuts: Sorted split points strictly inside ``(0, size)``.

    Yields:
        ``(offset, data)`` per record, and a ``RecordError`` per failed range.
    """
    bounds = [0, *cuts, size]
    for start, stop in zip(bounds, bounds[1:]):
        try:
            yield from read_range(fh, size, ByteRange(start, stop), path, index, max_length)
        except RecordError as err:
            yield err


def build_report(files: int, records: int, size: int, problems: Iterable[Problem]) -> Report:
    """A ``Report`` of these totals, its problems sorted as the verify job sorts them."""
    return Report(files, records, size, tuple(sorted(problems, key=Problem.sort_key)))
