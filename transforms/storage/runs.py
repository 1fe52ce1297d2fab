"""Run files on storage: a bundle's run file written, and records copied back out of run files.

The I/O around ``transforms.tfrecord.run_files`` (the format is there), on
local disk, gs:// and s3:// alike. A step that reads inputs writes each
record once, framed, to the run file of its bundle in the run's staging
folder (``OUTPUT/.staging/<run id>/runs/``, or its folder in ``--staging_dir``:
``output_folder.run_files_folder``) and passes on only where the record lies;
the shard writer copies it from there (``RecordCopier``).

Retries: a bundle's run file has a fresh random name and is closed before the
bundle ends, so every output that names it was written in full; a retried
bundle writes a new file, and the failed attempt's file, named by no
surviving output, is deleted with the staging folder when the run publishes
or fails.
"""

from __future__ import annotations

import uuid
from typing import Sequence

from transforms.errors import RecordError, ShardsError
from transforms.shardset.naming import join_path
from transforms.filesystems import close_written_file, naming_s3_errors
from transforms.storage.files import RangeReader
from transforms.storage.output_folder import run_files_folder
from transforms.storage.writing import create, reporting_full_disk
from transforms.tfrecord.run_files import FramedRecord, RunFileWriter, RunSlice, checked_record

__all__ = ["BundleRunFile", "RecordCopier", "runs_folder"]

# What a disk-full message says a run needs while it writes run files.
_RUN_NEEDS = ("a run needs free space for about twice its shards while it runs (each record is staged "
              "once, then copied into its shard)")
# The same, when the run files lie in --staging_dir (the shards still need their own space at the output).
_RUN_NEEDS_APART = ("the run's run files need free space in --staging_dir for about its shards' size while "
                    "it runs (each record is staged there once, then copied into its shard in --output_dir)")


def runs_folder(output_dir: str, run_id: str, staging_dir: str | None = None) -> str:
    """Where a run's run files lie (``output_folder.run_files_folder``)."""
    return run_files_folder(output_dir, run_id, staging_dir)


class BundleRunFile:
    """The run file of one bundle: opened at the first record, closed when the bundle ends
    (or before, when the bundle writes its done list: its next record opens a new one).

    Args:
        output_dir: The output folder (for a disk-full message).
        run_id: The run's id (its staging folder).
        staging_dir: ``--staging_dir``, or None: where the run files lie.
    """

    def __init__(self, output_dir: str, run_id: str, staging_dir: str | None = None) -> None:
        self._folder = runs_folder(output_dir, run_id, staging_dir)
        self._full = (staging_dir, _RUN_NEEDS_APART) if staging_dir else (output_dir, _RUN_NEEDS)
        self._open: tuple | None = None  # (file object, RunFileWriter)

    def append(self, parts: Sequence[bytes]) -> RunSlice:
        """Appends the record ``b"".join(parts)``, framed; says where it lies.

        Raises:
            PublishError: The disk is full (one line naming the folder).
        """
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


class RecordCopier:
    """Reads framed records back out of run files, their CRCs checked; safe from any thread."""

    def __init__(self) -> None:
        self._reader = RangeReader()

    def copy(self, where: RunSlice, what: str) -> FramedRecord:
        """The record at ``where``; ``what`` names its input in an error.

        Raises:
            ShardsError: The record in the run file is short or damaged.
        """
        try:
            return FramedRecord(checked_record(self._reader.read(where.path, where.offset, where.length),
                                               where))
        except RecordError as err:
            raise ShardsError(f"the record of {what} was damaged in its run file: {err}") from err

    def close(self) -> None:
        self._reader.close()
