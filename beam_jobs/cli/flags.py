"""The jobs' flags: one-line flag errors, value parsers, and the options every job shares.

Beam parses every direct subclass of ``PipelineOptions`` with one argparse
parser, so two jobs cannot each define ``--input``: the flags they share live
here, once, and each job's own options class adds only its own flags.
"""

from __future__ import annotations

import argparse
import math
import os
import posixpath
import uuid
from typing import NoReturn

from apache_beam.options.pipeline_options import PipelineOptions
from PIL import Image

from transforms.errors import UsageError
from transforms.storage.paths import WILDCARDS
from transforms.shardset.ownership import PublishPolicy
from transforms.shardset.tfds_metadata import dataset_name_problem
from transforms.tfrecord.compression import COMPRESSIONS
from transforms.tfrecord.framing import DEFAULT_MAX_RECORD_BYTES

__all__ = ["one_line_errors", "parse_size", "positive_float", "positive_int", "non_negative_int",
           "fraction", "input_path", "folder_path", "wildcard_problem", "WILDCARDS", "ShardingOptions",
           "shard_size_mb", "seed", "publish_policy", "resolved_path", "overlap_problem", "MIN_SHARD_MB",
           "MAX_SHARD_MB", "MAX_SIDE", "RunOptions", "LOG_LEVELS", "record_size_mb", "add_max_record_mb",
           "max_record_bytes", "RecordReadingOptions"]

# --shard_size_mb bounds: 1 KiB (tests and tiny sets) to 1 TiB.
MIN_SHARD_MB = 1 / 1024
MAX_SHARD_MB = 1024 * 1024
# --max_bad_fraction default: build and reshard refuse to publish above it.
DEFAULT_MAX_BAD_FRACTION = 0.01
# --max_record_mb bound: a record is a protocol buffer, which cannot exceed 2 GiB.
MAX_RECORD_MB = 2048
# --resize bound per side (JPEG's limit is 65535; PNG allows more, nothing reads it).
MAX_SIDE = 65535
# The seed keys a hash as a signed 64-bit integer, and Beam's coders carry it as one.
_SEED_RANGE = (-(1 << 63), (1 << 63) - 1)


def _raise_usage(message: str) -> NoReturn:
    raise UsageError(message)


def one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Makes ``parser`` raise ``UsageError`` instead of printing usage and exiting."""
    parser.error = _raise_usage  # type: ignore[method-assign]


def _number(text: str, cast: type, within, rule: str):
    """Parses ``text`` with ``cast`` and checks it with ``within``; argparse errors otherwise."""
    try:
        value = cast(text)
    except ValueError as err:
        kind = "an integer" if cast is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from err
    if not within(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be {rule}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    return _number(text, float, lambda v: v > 0, "> 0")


def shard_size_mb(text: str) -> float:
    """argparse type: a finite shard size in MiB within [MIN_SHARD_MB, MAX_SHARD_MB]."""
    return _number(text, float, lambda v: math.isfinite(v) and MIN_SHARD_MB <= v <= MAX_SHARD_MB,
                   f"between {MIN_SHARD_MB:g} (1 KiB) and {MAX_SHARD_MB} (1 TiB)")


def seed(text: str) -> int:
    """argparse type: a signed 64-bit integer."""
    low, high = _SEED_RANGE
    return _number(text, int, lambda v: low <= v <= high, f"between {low} and {high} (64 bits)")


def record_size_mb(text: str) -> float:
    """argparse type: a record-size limit in MiB, > 0 and at most ``MAX_RECORD_MB``."""
    return _number(text, float, lambda v: math.isfinite(v) and 0 < v <= MAX_RECORD_MB,
                   f"> 0 and at most {MAX_RECORD_MB} (2 GiB, the largest protocol buffer)")


def add_max_record_mb(parser: argparse.ArgumentParser, show_default: bool = False) -> None:
    """Adds ``--max_record_mb``, the largest record a reader accepts, to ``parser``.

    ``show_default`` puts the default in the help text (plain argparse parsers;
    the jobs' ``--help`` shows defaults itself).
    """
    parser.add_argument("--max_record_mb", type=record_size_mb,
                        default=DEFAULT_MAX_RECORD_BYTES >> 20,
                        help="Largest record read, in MiB; a record declaring more is reported "
                             "as damaged (bad_length) before its bytes are read, so a damaged "
                             "length in a small compressed file cannot exhaust memory."
                             + (" (default: %(default)s)" if show_default else ""))


def max_record_bytes(mb: float) -> int:
    """``--max_record_mb`` in bytes."""
    return max(1, int(mb * (1 << 20)))


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _number(text, int, lambda v: v >= 1, ">= 1")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (e.g. a byte offset)."""
    return _number(text, int, lambda v: v >= 0, ">= 0")


def fraction(text: str) -> float:
    """argparse type: a number in [0, 1]."""
    return _number(text, float, lambda v: 0 <= v <= 1, "between 0 and 1")


def parse_size(text: str) -> tuple[int, int]:
    """argparse type: ``WxH`` -> ``(width, height)``."""
    width, sep, height = text.lower().partition("x")
    try:
        size = (int(width), int(height))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r} must look like 224x224 (WIDTHxHEIGHT)") from err
    if not sep or size[0] < 1 or size[1] < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must look like 224x224 (WIDTHxHEIGHT)")
    if max(size) > MAX_SIDE:
        raise argparse.ArgumentTypeError(f"{text!r}: each side must be at most {MAX_SIDE} pixels")
    limit = Image.MAX_IMAGE_PIXELS
    if limit and size[0] * size[1] > limit:
        raise argparse.ArgumentTypeError(
            f"{text!r} is {size[0] * size[1]} pixels, over Pillow's decompression-bomb limit of "
            f"{limit}; such images could not be read back")
    return size


def wildcard_problem(path: str) -> str | None:
    """Returns why a folder cannot be listed safely, or None if it can.

    Beam's file systems' ``match`` reads ``*``, ``?`` and ``[`` anywhere in a
    pattern as wildcards and has no way to quote them, so listing a folder
    named ``out[1]`` (``out[1]/*``) lists ``out1/`` instead, and ``out*``
    lists every sibling that starts with ``out``.
    """
    found = sorted({c for c in path if c in WILDCARDS})
    if not found:
        return None
    return (f"{path!r} holds the wildcard character{'s' if len(found) > 1 else ''} "
            f"{' '.join(found)}; Beam cannot list such a folder without also matching "
            "other folders, so rename it")


def resolved_path(path: str) -> str:
    """``path`` with ``.``, ``..`` and (local) symbolic links resolved, without a trailing ``/``."""
    if "://" in path:
        scheme, rest = path.split("://", 1)
        return f"{scheme}://" + posixpath.normpath("/" + rest).lstrip("/")
    return os.path.realpath(path)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def overlap_problem(input_folder: str, output_dir: str) -> str | None:
    """Why a folder input and the output folder cannot be used together, or None.

    The output folder may not be the input folder, lie inside it, or contain
    it: a later run would read the shards of an earlier one as inputs.
    """
    source, target = resolved_path(input_folder), resolved_path(output_dir)
    if source == target:
        where = "is the --input folder"
    elif _within(target, source):
        where = f"lies inside --input {input_folder}"
    elif _within(source, target):
        where = f"contains --input {input_folder}"
    else:
        return None
    return (f"--output_dir {output_dir} {where}: a later run would read the shards as images; "
            "choose an output folder outside the inputs")


def input_path(text: str) -> str:
    """argparse type: a non-empty path (an empty one would name the current folder, or /)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a folder, a manifest or a pattern")
    return text


def tfds_name(text: str) -> str:
    """argparse type: a dataset name as tensorflow-datasets spells them (``my_set``)."""
    problem = dataset_name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def folder_path(text: str) -> str:
    """argparse type: a folder (local path or URI) without wildcard characters."""
    problem = wildcard_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


class ShardingOptions(PipelineOptions):
    """Inputs, output folder and shard layout, common to build, reshard and verify."""

    @classmethod
    def _add_argparse_args(cls, parser):
        one_line_errors(parser)
        parser.add_argument("--input", action="append", default=None, type=input_path,
                            help="build: folder of class (or split) folders, a .csv/.jsonl input "
                                 "manifest, a .tar/.tar.gz/.tgz/.zip archive, WebDataset shards "
                                 "('shard-{000..099}.tar') or a .parquet file; reshard: TFRecord files "
                                 "or a pattern. Local, gs:// or s3://. Repeatable.")
        parser.add_argument("--output_dir", type=folder_path, default=None,
                            help="Folder of the shard set (no *, ? or [ in its path).")
        parser.add_argument("--split", default=None,
                            help="build: split of unsplit inputs (default train); reshard: put "
                                 "every record in this split (default: keep each file's split, "
                                 "from its shard name).")
        parser.add_argument("--shard_size_mb", type=shard_size_mb, default=150.0,
                            help="Target shard size in MiB; shards land within [2/3, 4/3] of it.")
        parser.add_argument("--num_shards", type=positive_int, default=None,
                            help="Fixed number of shards per split (overrides --shard_size_mb).")
        parser.add_argument("--compression", default="none", choices=COMPRESSIONS,
                            help="Compression of the shards written.")
        parser.add_argument("--seed", type=seed, default=0, help="Shuffle seed (signed 64-bit).")
        parser.add_argument("--overwrite_unlisted_shards", action="store_true", default=False,
                            help="build, reshard: delete shard-named files in --output_dir that no "
                                 "manifest.json of this tool lists (else the run refuses to start).")
        parser.add_argument("--drop_other_splits", action="store_true", default=False,
                            help="build, reshard: remove the listed shards of splits this run does "
                                 "not write (else they are kept and listed again).")
        parser.add_argument("--replace", action="store_true", default=False,
                            help="build, reshard: rebuild a split --output_dir holds from these "
                                 "inputs although other --input values built it (else the run "
                                 "refuses).")
        parser.add_argument("--name", type=tfds_name, default=None,
                            help="build, reshard: the dataset's name for tensorflow-datasets "
                                 "(default: the output folder's name, as tfds spells names).")
        parser.add_argument("--max_bad_fraction", type=fraction, default=DEFAULT_MAX_BAD_FRACTION,
                            help="build, reshard: fail (publishing nothing) if more inputs than "
                                 "this fraction are rejected (reshard: damaged stretches, with "
                                 "--skip_corrupt, against records read).")


class RecordReadingOptions(PipelineOptions):
    """How the jobs that read TFRecord files (reshard, verify) bound a record."""

    @classmethod
    def _add_argparse_args(cls, parser):
        one_line_errors(parser)
        add_max_record_mb(parser)


def publish_policy(shared: ShardingOptions) -> PublishPolicy:
    """The publishing policy of one run, with a fresh run id."""
    return PublishPolicy(run_id=uuid.uuid4().hex, overwrite_unlisted=shared.overwrite_unlisted_shards,
                         drop_other_splits=shared.drop_other_splits, replace=shared.replace)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class RunOptions(PipelineOptions):
    """How a job talks to the person running it: logging, tracebacks, progress."""

    @classmethod
    def _add_argparse_args(cls, parser):
        one_line_errors(parser)
        parser.add_argument("--verbose", action="store_true", default=False,
                            help="Show Beam's INFO logs and the full traceback of a failure.")
        parser.add_argument("--log_level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                            help="Level of the job's own log lines; DEBUG also shows Beam's logs "
                                 "and tracebacks.")
        parser.add_argument("--progress_interval", type=positive_float, default=5.0,
                            help="Seconds between progress reports on the local runners.")
