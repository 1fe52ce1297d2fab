"""Inspect: print the records of one TFRecord (or ArrayRecord) file as readable text.

Usage: ``python -m beam_jobs.inspect_shard SHARD [--limit 2] [--offset 1048576]``. Each record is shown
as its features (docs/verify.md, "Inspect one shard"); ``--offset`` is a byte offset (an ArrayRecord
file's: a record number). Exits 0, 1 if a damaged record is met, 2 on a bad flag or path.
"""

from __future__ import annotations

import beam_jobs.quiet_beam  # noqa: F401  (first: Beam imported without its BigQuery warning)
import os
import sys
from typing import Iterator, Sequence, TextIO

from beam_jobs.cli import jobs
from beam_jobs.cli import values as opt
from beam_jobs.cli.declared import parsed_flags
from beam_jobs.cli.logs import run_as_command
from transforms.tfrecord.compression import compression_of, open_decompressed
from transforms.errors import RecordError, UsageError
from transforms.arrayrecord.shard_file import missing_module, read_records, record_count
from transforms.shardset.naming import FILE_SUFFIXES
from transforms.storage.files import local_copy, open_file
from transforms.storage.listing import exact_file, is_folder
from transforms.example.codec import format_record
from transforms.progress.report import plural
from transforms.tfrecord.record_ranges import ByteRange, find_record_start, read_range, read_stream


def _records(path: str, size: int, compression: str, offset: int, out: TextIO,
             max_length: int) -> Iterator[tuple[int | None, int, bytes]]:
    """Yields ``(ordinal, offset, data)`` from the first record at or after ``offset``; ordinals are known
    only when reading from the start of the file."""
    with open_file(path) as fh:
        if compression != "none":
            found = ((at, data) for at, data in read_stream(open_decompressed(fh, compression), path,
                                                            max_length=max_length) if at >= offset)
        else:
            start = find_record_start(fh, size, offset, max_length=max_length) if offset else 0
            if start != offset:
                out.write(f"# no record starts at byte {offset}; the next record start is at byte {start}\n")
            # read_range finds the same start again; the range is the rest of the file.
            found = read_range(fh, size, ByteRange(start), path, max_length=max_length)
        for shown, (at, data) in enumerate(found):
            yield None if offset else shown, at, data


def _array_records(path: str, first: int, limit: int) -> Iterator[tuple[int | None, None, bytes]]:
    """Yields ``(number, None, data)`` of up to ``limit`` records of an ArrayRecord file from record number
    ``first``, then ``(None, None, b"")`` if more follow."""
    problem = missing_module()
    if problem:
        raise UsageError(f"{path}: {problem}")
    with local_copy(path) as local:
        try:
            total = record_count(local)
        except RecordError as err:
            raise UsageError(f"{path} is {err.detail}") from err
        for number, data in read_records(local, first, first + limit):
            yield number, None, data
    if first + limit < total:
        yield None, None, b""


def inspect(path: str, size: int, limit: int, offset: int, compression: str, out: TextIO,
            max_record_bytes: int) -> int:
    """Prints up to ``limit`` records of the file ``path`` of ``size`` bytes; returns the exit status.

    A record declaring more than ``max_record_bytes`` is reported as damaged. An ArrayRecord file's
    ``offset`` is a record number.
    """
    if path.endswith(FILE_SUFFIXES["array_record"]):
        records = _array_records(path, offset, limit)
    else:
        records = _records(path, size, compression_of(path, compression), offset, out, max_record_bytes)
    shown = 0
    try:
        for number, at, data in records:
            if shown == limit:
                out.write(f"# stopped after {plural(limit, 'record')} (--limit); more follow\n")
                return 0
            out.write(format_record(number, at, data) + "\n")
            shown += 1
    except RecordError as err:
        if err.kind == "not_tfrecord":
            raise UsageError(f"{path} is {err.detail}") from err
        out.write(f"# damaged record: {err}\n")
        return 1
    out.write(f"# end of file: {plural(shown, 'record')} shown\n")
    return 0


def run(argv: Sequence[str] | None = None, out: TextIO | None = None, prog: str | None = None) -> int:
    """Runs inspect; returns the exit status (0 ok, 1 damaged record, 2 bad flags)."""
    out = out or sys.stdout
    try:
        args = parsed_flags(jobs.INSPECT, argv, prog or "python -m beam_jobs.inspect_shard")
        if args is None:
            return 0
        if is_folder(args.shard):
            raise UsageError(f"{args.shard} is a folder; give one TFRecord file in it, e.g. "
                             f"{args.shard.rstrip('/')}/train-00000-of-00001.tfrecord")
        shard = exact_file(args.shard)  # the file named, never a match of it as a pattern
        if shard is None and "://" not in args.shard and os.path.exists(args.shard):
            raise UsageError(f"{args.shard} is not a regular file (a device, pipe or socket); give a TFRecord file")
        if shard is None:
            raise UsageError(f"{args.shard} does not exist")
        return inspect(shard.path, shard.size_in_bytes, args.limit, args.offset, args.compression, out,
                       opt.max_record_bytes(args.max_record_mb))
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except UsageError as err:
        print(f"{jobs.INSPECT.name}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    run_as_command(run, "beam_jobs.inspect_shard")
