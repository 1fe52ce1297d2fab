"""Run files on storage: a bundle's run file written, and records copied back out of run files.

The I/O around ``transforms.tfrecord.run_files``: a step that reads inputs writes each record once
to its bundle's run file and passes on only where it lies; the shard writer copies it from there.
A failed attempt's run file, named by no surviving output, goes with the staging folder.
"""

from __future__ import annotations

import threading
import uuid
from typing import Iterable, Sequence

from transforms.errors import RecordError, ShardsError
from transforms.shardset.naming import join_path
from transforms.filesystems import close_written_file, naming_s3_errors
from transforms.storage.files import RangeReader
from transforms.storage.paths import is_local
from transforms.storage.output_folder import run_files_folder
from transforms.storage.writing import create, reporting_full_disk
from transforms.tfrecord.run_files import FramedRecord, RunFileWriter, RunSlice, checked_record

__all__ = ["BundleRunFile", "RecordCopier", "BATCH_BYTES", "HELD_BYTES"]

# Largest read of neighbouring records of a run file on a store, in bytes (one request).
BATCH_BYTES = 8 << 20
# Bytes of fetched batches a copier holds at once.
HELD_BYTES = 64 << 20

# What a disk-full message says a run needs while it writes run files (in --staging_dir: apart).
_RUN_NEEDS = ("a run needs free space for about twice its shards while it runs (each record is staged "
              "once, then copied into its shard)")
_RUN_NEEDS_APART = ("the run's run files need free space in --staging_dir for about its shards' size while "
                    "it runs (each record is staged there once, then copied into its shard in --output_dir)")


class BundleRunFile:
    """The run file of one bundle, in the run's staging folder or ``staging_dir``: opened at the first
    record, closed when the bundle ends (or when it writes its done list)."""

    def __init__(self, output_dir: str, run_id: str, staging_dir: str | None = None) -> None:
        self._folder = run_files_folder(output_dir, run_id, staging_dir)
        self._full = (staging_dir, _RUN_NEEDS_APART) if staging_dir else (output_dir, _RUN_NEEDS)
        self._open: tuple | None = None  # (file object, RunFileWriter)

    def append(self, parts: Sequence[bytes]) -> RunSlice:
        """Appends the record ``b"".join(parts)``, framed; says where it lies (``PublishError``: disk full)."""
        path = self._open[1].path if self._open else join_path(self._folder, f"{uuid.uuid4().hex}.run")
        with reporting_full_disk(self._full[0], path, self._full[1]), naming_s3_errors(path):
            if self._open is None:
                fh = create(path)
                self._open = (fh, RunFileWriter(fh, path))
            return self._open[1].append(parts)

    @property
    def size(self) -> int:
        """Bytes written to the open file; 0 when none is open."""
        return self._open[1].size if self._open else 0

    def close(self) -> tuple[str, int] | None:
        """Closes the file (call before the bundle ends); returns its path and size, None if none was opened."""
        opened, self._open = self._open, None
        if opened is None:
            return None
        with naming_s3_errors(opened[1].path):
            close_written_file(opened[0])
        return opened[1].path, opened[1].size


class _Batch:
    """Neighbouring records of one run file, read in one request when the first of them is copied."""

    def __init__(self, path: str, start: int, end: int, offsets: list[int]) -> None:
        self.path, self.start, self.end, self.offsets = path, start, end, offsets
        self.left = len(offsets)
        self.data: bytes | None = None
        self.lock = threading.Lock()


def batches(slices: Iterable[RunSlice], limit: int = BATCH_BYTES) -> list[_Batch]:
    """The runs of two or more records that lie end to end in a run file, each spanning at most ``limit`` bytes."""
    by_path: dict[str, list[RunSlice]] = {}
    for where in slices:
        by_path.setdefault(where.path, []).append(where)
    found = []
    for path, wheres in by_path.items():
        wheres.sort(key=lambda w: w.offset)
        start = end = 0
        offsets: list[int] = []
        for where in wheres + [None]:
            if where is not None and offsets and where.offset == end and where.offset + where.length - start <= limit:
                end = where.offset + where.length
                offsets.append(where.offset)
                continue
            if len(offsets) > 1:
                found.append(_Batch(path, start, end, offsets))
            if where is not None:
                start, end, offsets = where.offset, where.offset + where.length, [where.offset]
    return found


class RecordCopier:
    """Reads framed records back out of run files, their CRCs checked; safe from any thread.

    ``batch_bytes``: the largest read of neighbouring records on a store (``plan``).
    """

    def __init__(self, batch_bytes: int = BATCH_BYTES) -> None:
        self._reader = RangeReader()
        self._batch_bytes = batch_bytes
        self._lock = threading.Lock()
        self._batch_of: dict[tuple[str, int], _Batch] = {}
        self._held = 0

    def __getstate__(self) -> dict:
        return {"_batch_bytes": self._batch_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["_batch_bytes"])

    def plan(self, slices: Iterable[RunSlice]) -> None:
        """Says which records will be copied next (a shard's): neighbours on a store are then read together."""
        remote = [where for where in slices if not is_local(where.path)]
        with self._lock:
            self._batch_of.clear()
            self._held = 0
            for batch in batches(remote, self._batch_bytes):
                self._batch_of.update(((batch.path, offset), batch) for offset in batch.offsets)

    def copy(self, where: RunSlice, what: str) -> FramedRecord:
        """The record at ``where`` (``ShardsError`` naming its input ``what``: short or damaged)."""
        with self._lock:
            batch = self._batch_of.pop((where.path, where.offset), None)
        framed = self._from_batch(batch, where) if batch is not None else None
        if framed is None:
            framed = self._reader.read(where.path, where.offset, where.length)
        try:
            return FramedRecord(checked_record(framed, where))
        except RecordError as err:
            raise ShardsError(f"the record of {what} was damaged in its run file: {err}") from err

    def _from_batch(self, batch: _Batch, where: RunSlice) -> bytes | None:
        """The record's bytes out of its batch (read now if it is the first), or None to read it alone."""
        size = batch.end - batch.start
        with batch.lock:
            if batch.data is None and batch.left > 0:
                with self._lock:
                    room = self._held + size <= HELD_BYTES
                    if room:
                        self._held += size
                if not room:
                    batch.left -= 1
                    return None
                batch.data = self._reader.read(batch.path, batch.start, size)
            data = batch.data
            batch.left -= 1
            if batch.left <= 0 and batch.data is not None:
                batch.data = None
                with self._lock:
                    self._held -= size
        return None if data is None else data[where.offset - batch.start:where.offset - batch.start + where.length]

    def close(self) -> None:
        self.plan(())  # drops the batches planned
        self._reader.close()
