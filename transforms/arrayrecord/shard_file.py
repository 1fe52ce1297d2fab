"""One ArrayRecord shard file: written from the records a TFRecord shard would hold, and read back.

Pure code on local paths only: ArrayRecord's C++ writer and reader open files by path, so the
storage layer writes a shard to a local temporary file and copies it to its place, and reads a
remote one from a local copy. The records are those a TFRecord shard frames, in the same order.

``group_size:1`` puts every record in a chunk of its own (random access: Grain, tfds
``as_data_source``); ``uncompressed``: the records are mostly JPEG/PNG bytes that do not compress.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from transforms.errors import RecordError
from transforms.tfrecord.framing import FOOTER_SIZE, HEADER_SIZE, OVERHEAD
from transforms.tfrecord.shard_writer import ShardStats

__all__ = ["WRITER_OPTIONS", "ArrayRecordShardWriter", "read_records", "record_count", "missing_module"]

WRITER_OPTIONS = "group_size:1,uncompressed"
_READ_BATCH = 256
_ERRORS = (RuntimeError, ValueError, OSError)  # what ArrayRecord's C++ reader raises


def missing_module() -> str | None:
    """Why ArrayRecord files cannot be written or read here, or None."""
    try:
        from array_record.python import array_record_module  # noqa: F401
    except ImportError as err:
        return f"ArrayRecord needs the array_record package (pip install array_record): {err}"
    return None


def _module():
    from array_record.python import array_record_module

    return array_record_module


class ArrayRecordShardWriter:
    """Writes records to the local ArrayRecord file ``path`` (created or replaced), counting them and their
    labels (``ShardWriter``'s interface)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._writer = _module().ArrayRecordWriter(path, WRITER_OPTIONS)
        self.stats = ShardStats()

    def write(self, record: bytes, label: int | Sequence[int] | None = None) -> None:
        """Appends one record (a serialized Example)."""
        self._writer.write(record)
        self.stats.count(label)

    def write_parts(self, parts: Sequence[bytes], label: int | Sequence[int] | None = None) -> None:
        """Appends one record whose bytes are ``b"".join(parts)``."""
        self.write(b"".join(parts), label)

    def write_framed(self, framed: bytes, label: int | Sequence[int] | None = None) -> None:
        """Appends the record of one TFRecord-framed record (a run file's, written by this run).

        Its CRCs are not checked again, as a TFRecord shard copies such a record as it is;
        its length field must match its size.
        """
        if len(framed) < OVERHEAD or int.from_bytes(framed[:8], "little") != len(framed) - OVERHEAD:
            raise RecordError(self._path, 0, "bad_length",
                              f"a framed record of {len(framed)} bytes declares another length")
        self.write(framed[HEADER_SIZE:len(framed) - FOOTER_SIZE], label)

    def close(self) -> ShardStats:
        """Closes the file; the caller fills in the stats' ``bytes`` and ``sha256`` as it copies it."""
        self._writer.close()
        return self.stats


def _open(path: str):
    """ArrayRecord's reader of a local file; ``RecordError`` (``crc_mismatch``, ArrayRecord's reason) when
    it is not an ArrayRecord file."""
    try:
        reader = _module().ArrayRecordReader(path)
        if not reader.ok():  # a file too short or not ArrayRecord's: its reason comes with closing it
            reader.close()
            raise RecordError(path, 0, "crc_mismatch", "not a readable ArrayRecord file")
    except _ERRORS as err:
        raise RecordError(path, 0, "crc_mismatch", f"not a readable ArrayRecord file: {err}") from err
    return reader


def _close(reader, path: str) -> None:
    try:
        reader.close()
    except _ERRORS as err:
        raise RecordError(path, 0, "crc_mismatch", f"ArrayRecord file cannot be closed: {err}") from err


def record_count(path: str) -> int:
    """The number of records of a local ArrayRecord file (``RecordError`` as ``_open``)."""
    reader = _open(path)
    try:
        return reader.num_records()
    finally:
        _close(reader, path)


def read_records(path: str, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, bytes]]:
    """``(index, record)`` of a local ArrayRecord file's records ``start..stop-1`` (all: to the end), in order.

    A batch ArrayRecord refuses is read again record by record, so that the ``RecordError``
    (``crc_mismatch``, ArrayRecord's detail) names the first record that cannot be read.
    """
    reader = _open(path)
    try:
        stop = reader.num_records() if stop is None else min(stop, reader.num_records())
        for first in range(start, stop, _READ_BATCH):
            indexes = list(range(first, min(first + _READ_BATCH, stop)))
            try:
                batch = reader.read(indexes)
            except _ERRORS:
                batch = None
            if batch is not None:
                yield from zip(indexes, batch)
                continue
            for index in indexes:  # the batch again, one record at a time, to the first bad one
                try:
                    record = reader.read([index])[0]
                except _ERRORS as err:
                    raise RecordError(path, index, "crc_mismatch", f"record {index} cannot be read: {err}") from err
                yield index, record
    finally:
        _close(reader, path)
