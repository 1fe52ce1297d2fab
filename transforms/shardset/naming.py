"""Names in a shard set: split names, shard file names, and joining a folder with a name (pure)."""

from __future__ import annotations

import re

from transforms.errors import PlanError
from transforms.tfrecord.compression import SUFFIXES

__all__ = ["WILDCARDS", "MAX_SPLIT_NAME", "SHARD_NAME_RE", "FILE_FORMATS", "FILE_SUFFIXES", "check_split_name",
           "shard_file_name", "split_of_shard", "join_path"]

_SPLIT_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+\Z")  # \Z: "$" also matches before a final "\n"
# Characters Beam's file systems read as wildcards anywhere in a pattern (a folder or a
# name holding one cannot be listed or matched on its own).
WILDCARDS = "*?["
# The shard file formats (--format) and the suffix of each; TFRecord shards add their compression's.
FILE_FORMATS = ("tfrecord", "array_record")
FILE_SUFFIXES = {"tfrecord": ".tfrecord", "array_record": ".array_record"}
SHARD_NAME_RE = re.compile(
    r"^(?P<split>[A-Za-z0-9_-]+)-(?P<index>\d{5,})-of-(?P<count>\d{5,})(?:\.tfrecord"
    r"(?:" + "|".join(re.escape(suffix) for suffix in SUFFIXES.values() if suffix) + r")?"
    r"|" + re.escape(FILE_SUFFIXES["array_record"]) + r")\Z")

# Split names start shard file names; a staged shard's name adds about 70 characters
# ("-00000-of-00001.tfrecord.idx.<32 hex digits>.tmp") and file names end at 255 bytes.
MAX_SPLIT_NAME = 100


def check_split_name(name: str) -> str:
    """Returns ``name`` if it matches ``[A-Za-z0-9_-]+`` within ``MAX_SPLIT_NAME`` characters, else ``PlanError``."""
    if not _SPLIT_NAME_RE.match(name or "") or len(name) > MAX_SPLIT_NAME:
        raise PlanError(f"split name {name!r} must match [A-Za-z0-9_-]+ and have at most "
                        f"{MAX_SPLIT_NAME} characters")
    return name


def shard_file_name(split: str, index: int, num_shards: int, compression: str = "none",
                    file_format: str = "tfrecord") -> str:
    """Returns ``{split}-{index:05d}-of-{num_shards:05d}.tfrecord[.gz|.zz]``, or ``.array_record`` for that format."""
    if compression not in SUFFIXES:
        raise PlanError(f"compression must be one of {', '.join(SUFFIXES)}, got {compression!r}")
    if file_format not in FILE_SUFFIXES:
        raise PlanError(f"file format must be one of {', '.join(FILE_FORMATS)}, got {file_format!r}")
    if file_format != "tfrecord" and compression != "none":
        raise PlanError(f"{file_format} shards are written uncompressed, not {compression}")
    suffix = SUFFIXES[compression] if file_format == "tfrecord" else ""
    return f"{split}-{index:05d}-of-{num_shards:05d}{FILE_SUFFIXES[file_format]}{suffix}"


def split_of_shard(path: str) -> str | None:
    """Returns the split a shard's file name states, or None if it is not named like a shard.

    ``out/validation-00001-of-00004.tfrecord.gz`` -> ``validation`` (the path's last part only).
    """
    match = SHARD_NAME_RE.match(path.rsplit("/", 1)[-1])
    return match["split"] if match else None


def join_path(folder: str, name: str) -> str:
    """Returns ``folder/name`` for local paths and ``gs://``/``s3://`` URLs alike."""
    return f"{folder.rstrip('/')}/{name}" if folder else name
