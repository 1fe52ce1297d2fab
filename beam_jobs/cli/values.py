"""The values the jobs' flags take: argparse types, their bounds, one-line flag errors.

No Beam, Pillow or numpy (``parse_size`` reads Pillow's pixel limit only when a size is given), so
a command's usage errors are told before a job's modules are imported.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import posixpath
from typing import Iterator, NoReturn

from transforms.errors import UsageError
from transforms.shardset.naming import WILDCARDS
from transforms.shardset.tfds_metadata import dataset_name_problem

__all__ = ["one_line_errors", "usage_error", "parse_size", "positive_float", "positive_int", "non_negative_int", "fraction",
           "input_path", "folder_path", "tfds_name", "wildcard_problem", "shard_size_mb", "seed",
           "resolved_path", "lies_in", "overlap_problem", "record_size_mb", "max_record_bytes",
           "MIN_SHARD_MB", "MAX_SHARD_MB", "MAX_SIDE", "MAX_RECORD_MB", "DEFAULT_MAX_BAD_FRACTION",
           "finite_positive_float", "LOG_LEVELS"]

# --shard_size_mb bounds: 1 KiB (tests and tiny sets) to 1 TiB.
MIN_SHARD_MB = 1 / 1024
MAX_SHARD_MB = 1024 * 1024
# --max_bad_fraction default: build and reshard refuse to publish above it.
DEFAULT_MAX_BAD_FRACTION = 0.01
# --max_record_mb bound: a record is a protocol buffer, which cannot exceed 2 GiB.
MAX_RECORD_MB = 2048
# --resize bound per side (JPEG's limit is 65535; PNG allows more, nothing reads it).
MAX_SIDE = 65535


def _raise_usage(message: str) -> NoReturn:
    raise UsageError(message)


def one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Makes ``parser`` raise ``UsageError`` instead of printing usage and exiting."""
    parser.error = _raise_usage  # type: ignore[method-assign]


@contextlib.contextmanager
def usage_error(prefix: str, *kinds: type[Exception]) -> Iterator[None]:
    """Within the block, an error of one of ``kinds`` is a ``UsageError``: ``prefix`` and the error's text."""
    try:
        yield
    except kinds as err:
        raise UsageError(f"{prefix}{err}") from err


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
    """argparse type: a signed 64-bit integer (the seed keys a hash as one, and Beam's coders carry it as one)."""
    low, high = -(1 << 63), (1 << 63) - 1
    return _number(text, int, lambda v: low <= v <= high, f"between {low} and {high} (64 bits)")


def record_size_mb(text: str) -> float:
    """argparse type: a record-size limit in MiB, > 0 and at most ``MAX_RECORD_MB``."""
    return _number(text, float, lambda v: math.isfinite(v) and 0 < v <= MAX_RECORD_MB,
                   f"> 0 and at most {MAX_RECORD_MB} (2 GiB, the largest protocol buffer)")


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
    from PIL import Image  # here: only a given size needs Pillow's limit

    limit = Image.MAX_IMAGE_PIXELS
    if limit and size[0] * size[1] > limit:
        raise argparse.ArgumentTypeError(
            f"{text!r} is {size[0] * size[1]} pixels, over Pillow's decompression-bomb limit of "
            f"{limit}; such images could not be read back")
    return size


def wildcard_problem(path: str) -> str | None:
    """Returns why a folder cannot be listed safely, or None if it can: Beam's ``match`` reads ``*``,
    ``?`` and ``[`` anywhere as wildcards and cannot quote them (``out[1]/*`` lists ``out1/``)."""
    found = sorted({c for c in path if c in WILDCARDS})
    if not found:
        return None
    return (f"{path!r} holds the wildcard character{'s' if len(found) > 1 else ''} {' '.join(found)}; Beam cannot "
            "list such a folder without also matching other folders, so rename it")


def resolved_path(path: str) -> str:
    """``path`` with ``.``, ``..`` and (local) symbolic links resolved, without a trailing ``/``."""
    if "://" in path:
        scheme, rest = path.split("://", 1)
        return f"{scheme}://" + posixpath.normpath("/" + rest).lstrip("/")
    return os.path.realpath(path)


def lies_in(path: str, folder: str) -> bool:
    """True if ``path`` is ``folder`` or lies below it, both resolved (``resolved_path``)."""
    path, folder = resolved_path(path), resolved_path(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def overlap_problem(input_folder: str, output_dir: str) -> str | None:
    """Why a folder input and the output folder cannot be used together (one is, or holds, the other), or None."""
    if resolved_path(input_folder) == resolved_path(output_dir):
        where = "is the --input folder"
    elif lies_in(output_dir, input_folder):
        where = f"lies inside --input {input_folder}"
    elif lies_in(input_folder, output_dir):
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


def finite_positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (e.g. a size in MiB)."""
    value = positive_float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of MiB")
    return value


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
