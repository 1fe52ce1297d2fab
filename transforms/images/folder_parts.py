"""A huge local folder listed in parts: each part's worker keeps the names that hash to it.

Before the job runs, the launcher counts the files below each folder it will list; a folder with
more than ``NAMES_PER_PART`` files becomes ``parts_for(count)`` tasks of the same folder, and the
task of part ``i`` keeps the paths (relative to the folder, as bytes) whose CRC-32 modulo the
number of parts is ``i``: the same in every process, unlike Python's ``hash``. Every task walks
the whole folder, but only its own names are stat-ed, labelled and passed on.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Callable, Iterable

from transforms.images.inputs import FolderTask

__all__ = ["NAMES_PER_PART", "MAX_PARTS", "parts_for", "names_in_part", "spread_large_folders"]

# Files below one folder that one task lists and labels; a folder with more is listed in parts.
NAMES_PER_PART = 250_000
# The most parts one folder is listed in: each part walks the whole folder, so more parts cost
# more walking than they save (``BENCHMARKS.md``, "One huge folder, listed in parts").
MAX_PARTS = 16


def parts_for(count: int, names_per_part: int = NAMES_PER_PART, max_parts: int = MAX_PARTS) -> int:
    """How many parts a folder of ``count`` files is listed in: 1 up to ``names_per_part``, at most ``max_parts``."""
    if names_per_part < 1 or max_parts < 1:
        raise ValueError(f"names_per_part and max_parts must be >= 1, got {names_per_part}, {max_parts}")
    return max(1, min(max_parts, -(-count // names_per_part)))


def names_in_part(part: int, parts: int) -> Callable[[bytes], Callable[[bytes], bool]]:
    """Whether a path is in part ``part`` of ``parts``, for ``storage.listing.walk_local_tree``'s
    ``keep``: folder (relative to the one listed, ``b""`` for itself) -> test of a name in it."""
    def in_folder(folder: bytes) -> Callable[[bytes], bool]:
        crc = zlib.crc32(folder + b"/") if folder else 0
        return lambda name: zlib.crc32(name, crc) % parts == part
    return in_folder


def spread_large_folders(tasks: Iterable[FolderTask], count: Callable[[str, int], int],
                         names_per_part: int = NAMES_PER_PART, max_parts: int = MAX_PARTS) -> tuple[FolderTask, ...]:
    """The listing tasks (``inputs.plan_folder_listing``) of a local folder input in order, each one that
    lists everything below a large folder (``parts_for``) followed by its other parts.

    Args:
        count: ``(folder, limit) -> files below it``, counted up to ``limit``.
    """
    limit = names_per_part * max_parts
    out: list[FolderTask] = []
    for task in tasks:
        parts = parts_for(count(task.folder, limit), names_per_part, max_parts) if task.below else 1
        out.extend(dataclasses.replace(task, part=part, parts=parts) for part in range(parts))
    return tuple(out)
