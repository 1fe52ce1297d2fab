"""``.idx`` sidecars: where each record of an uncompressed TFRecord file starts.

An index has one ``offset length`` line per record, ``length`` being the framed size, the format NVIDIA DALI's
``tfrecord2idx`` writes. Readers use it to split a file by byte range without searching for record boundaries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from transforms.tfrecord.framing import OVERHEAD

__all__ = ["INDEX_SUFFIX", "INDEX_DIR", "IndexCheck", "index_name", "index_names",
           "indexed_shards", "check_index", "read_index", "index_starts"]

INDEX_SUFFIX = ".idx"
# Indexes live in a subfolder beside the shards, so that the usual shard globs
# (``train*``, ``train-*``) match shards only.
INDEX_DIR = "index"
_LOG = logging.getLogger(__name__)


def index_name(shard: str) -> str:
    """Returns where the index of ``shard`` (a path or a file name) is written.

    ``out/train-00000-of-00004.tfrecord`` -> ``out/index/train-00000-of-00004.tfrecord.idx``.
    """
    folder, sep, base = shard.rpartition("/")
    return f"{folder}{sep}{INDEX_DIR}/{base}{INDEX_SUFFIX}"


def index_names(shard: str) -> tuple[str, str]:
    """Where a reader looks for the index of ``shard``, in order: in ``index/``, then beside the shard
    (where shard sets written before the ``index/`` folder keep it)."""
    return index_name(shard), shard + INDEX_SUFFIX


def indexed_shards(index_path: str) -> tuple[str, ...]:
    """The shard paths an index path can belong to (empty if it is not named like an index)."""
    if not index_path.endswith(INDEX_SUFFIX):
        return ()
    shard = index_path[:-len(INDEX_SUFFIX)]
    folder, sep, base = shard.rpartition("/")
    parent, psep, name = folder.rpartition("/")
    if name == INDEX_DIR or (not psep and folder == INDEX_DIR):
        return (shard, f"{parent}{psep}{base}")
    return (shard,)


@dataclass(frozen=True)
class IndexCheck:
    """The outcome of checking an index against the file it describes.

    Attributes:
        starts: Record start offsets in file order when the index is usable, else None.
        offset: Byte offset in the shard where the index first goes wrong.
        kind: ``parse_error``, ``bad_length`` (entries do not chain) or ``size_mismatch``.
    """

    starts: tuple[int, ...] | None
    offset: int | None = None
    kind: str | None = None
    problem: str | None = None

    @property
    def usable(self) -> bool:
        return self.starts is not None


def check_index(data: bytes, file_size: int) -> IndexCheck:
    """Parses an index and checks that its entries chain from 0 to the end of a file of
    ``file_size`` bytes (a reader checks each record's length as it reads it)."""
    starts = []
    expected = 0
    for number, line in enumerate(data.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or not all(f.isdigit() for f in fields):
            return IndexCheck(None, expected, "parse_error",
                              f"line {number} is not 'offset length': {line[:40]!r}")
        offset, length = int(fields[0]), int(fields[1])
        if offset != expected:
            return IndexCheck(None, expected, "bad_length",
                              f"line {number} says a record starts at {offset}; "
                              f"the previous record ends at {expected}")
        if length < OVERHEAD:
            return IndexCheck(None, offset, "bad_length",
                              f"line {number} gives length {length}, less than "
                              f"the {OVERHEAD} bytes of a framed empty record")
        starts.append(offset)
        expected = offset + length
    if expected != file_size:
        return IndexCheck(None, min(expected, file_size), "size_mismatch",
                          f"index covers {expected} bytes; the file has {file_size}")
    return IndexCheck(tuple(starts))


def read_index(shard: str, read: Callable[[str], bytes | None]) -> tuple[str, bytes] | None:
    """The path and bytes of ``shard``'s index, looked for where ``index_names`` says; None if it has none.

    ``read`` returns a file's bytes, or None where it does not exist (``storage.files.read_if_present``).
    """
    for index_path in index_names(shard):
        data = read(index_path)
        if data is not None:
            return index_path, data
    return None


def index_starts(shard: str, size: int, index: tuple[str, bytes] | None) -> tuple[int, ...] | None:
    """The record starts ``index`` (``read_index``'s) gives if it fits ``shard`` of ``size`` bytes.

    An index that does not fit is ignored, with a warning: the reader scans for record starts.
    """
    if index is None:
        return None
    index_path, data = index
    check = check_index(data, size)
    if not check.usable:
        _LOG.warning("Ignoring %s: %s; scanning %s for record starts instead", index_path, check.problem, shard)
    return check.starts
