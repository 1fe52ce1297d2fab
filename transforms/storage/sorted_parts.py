"""Sorted parts on storage: files of sorted lines staged by workers, merged into one ordered stream.

Nothing ``merged_parts`` holds grows with the lines or their parts beyond one line and a read
buffer of ``MERGE_BUFFER`` bytes per open part. Used by the dead letters and verify's report.
"""

from __future__ import annotations

import contextlib
import heapq
from typing import Any, Callable, Generic, Iterable, Iterator, Sequence, TypeVar

from transforms.storage.files import open_lines
from transforms.storage.folders import delete_if_exists
from transforms.storage.writing import write_file

__all__ = ["MERGE_FAN_IN", "MERGE_BUFFER", "Merged", "merged_parts"]

# Staged parts read at once when merging (each holds a read buffer of MERGE_BUFFER bytes).
MERGE_FAN_IN = 32
MERGE_BUFFER = 256 << 10

T = TypeVar("T")


class Merged(Generic[T]):
    """The merged items of sorted parts, read once, counting them (``count``) as they go."""

    def __init__(self, items: Iterator[T]) -> None:
        self._items = items
        self.count = 0

    def __iter__(self) -> Iterator[T]:
        for item in self._items:
            self.count += 1
            yield item


@contextlib.contextmanager
def _opened(paths: Sequence[str], key: Callable[[T], Any], read: Callable[[bytes], T] | None,
            gone: Callable[[str], Exception]) -> Iterator[Iterator[T]]:
    """The items of sorted staged files, merged in order."""
    with contextlib.ExitStack() as stack:
        streams = []
        for path in paths:
            lines = stack.enter_context(open_lines(path, MERGE_BUFFER))
            if lines is None:
                raise gone(path)
            streams.append(lines if read is None else map(read, lines))
        yield heapq.merge(*streams, key=key)


@contextlib.contextmanager
def merged_parts(paths: Sequence[str], *, key: Callable[[T], Any], gone: Callable[[str], Exception],
                 staged_name: Callable[[int, int], str], fan_in: int = MERGE_FAN_IN,
                 read: Callable[[bytes], T] | None = None, line: Callable[[T], bytes] | None = None,
                 write: Callable[[str, Iterable[bytes]], None] = write_file,
                 free_parts: bool = False) -> Iterator[Merged[T]]:
    """The items of sorted staged parts, merged in ``key`` order, at most ``fan_in`` files open at once.

    More than ``fan_in`` parts are merged in rounds, each writing merged groups to staged files of
    its own (deleted once merged again; the last round's when the block exits without an error).

    Args:
        paths: The staged parts (merged in this order where keys tie).
        gone: The error to raise for a part that is gone.
        staged_name: The path of a round's merged group, given the round (from 1) and the group's
            first index in that round.
        read: An item from a line (without it, the items are the lines); ``line`` is its inverse.
        free_parts: Delete ``paths`` as soon as a round has merged them (else the caller does).
    """
    paths = list(paths)
    rounds = 0
    while len(paths) > fan_in:
        rounds += 1
        merged = []
        for start in range(0, len(paths), fan_in):
            group = paths[start:start + fan_in]
            path = staged_name(rounds, start)
            with _opened(group, key, read, gone) as items:
                write(path, items if line is None else map(line, items))
            if rounds > 1 or free_parts:
                delete_if_exists(group)
            merged.append(path)
        paths = merged
    with _opened(paths, key, read, gone) as items:
        yield Merged(items)
    if rounds:
        delete_if_exists(paths)
