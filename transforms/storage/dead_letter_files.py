"""A run's dead letters on storage: staged in sorted parts by the workers, merged when publishing.

A worker sorts up to ``dead_letters.PART_LETTERS`` dead letters and writes
them to a unique name in the run's staging folder with their summary
(``write_dead_letter_part``: a retried bundle writes its own copy).
Publishing writes ``dead_letters.jsonl`` by merging the sorted parts
(``write_dead_letters``), at most ``MERGE_FAN_IN`` files open at once: with
more parts, groups of them are first merged into staged files of their own,
so nothing it holds grows with the dead letters or their parts beyond one
line and a small read buffer per open part.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from typing import Iterable, Iterator, Sequence

from transforms.errors import PublishError
from transforms.shardset.dead_letters import (DeadLetter, DeadLetterPart, RejectionSummary, in_appended_set,
                                              letter_order, merge_sorted_lines)
from transforms.shardset.manifest import DEAD_LETTERS_NAME
from transforms.shardset.naming import join_path
from transforms.storage.files import exists, open_lines
from transforms.storage.folders import delete_if_exists
from transforms.storage.output_folder import staging_folder
from transforms.storage.writing import reporting_full_disk, write_atomic, write_file

__all__ = ["MERGE_FAN_IN", "write_dead_letter_part", "write_dead_letters"]

# Staged parts read at once when merging (each holds a read buffer of MERGE_BUFFER bytes).
MERGE_FAN_IN = 32
MERGE_BUFFER = 256 << 10


def write_dead_letter_part(letters: Iterable[DeadLetter], output_dir: str, run_id: str) -> DeadLetterPart:
    """Stages some dead letters as one part, sorted (``letter_order``), with their summary.

    Args:
        letters: The part's dead letters.
        output_dir: Output folder (the part goes to the run's staging folder).
        run_id: The run's id.
    """
    letters = sorted(letters, key=letter_order)
    path = join_path(staging_folder(output_dir, run_id), f"{DEAD_LETTERS_NAME}.{uuid.uuid4().hex}.tmp")
    with reporting_full_disk(output_dir, path):
        write_file(path, ((letter.to_json() + "\n").encode("utf-8") for letter in letters))
    return DeadLetterPart(path, RejectionSummary.of(letters),
                          RejectionSummary.of(letter for letter in letters if not in_appended_set(letter)))


@contextlib.contextmanager
def _merged(paths: Sequence[str]) -> Iterator[Iterator[bytes]]:
    """The lines of sorted staged files, merged in order."""
    with contextlib.ExitStack() as stack:
        streams = []
        for path in paths:
            lines = stack.enter_context(open_lines(path, MERGE_BUFFER))
            if lines is None:
                raise PublishError(f"staged dead-letter part {path} is gone")
            streams.append(lines)
        yield merge_sorted_lines(streams)


def _published_before(output_dir: str, paths: Sequence[str], count: int) -> bool:
    """Every staged part gone and ``dead_letters.jsonl`` holding ``count`` lines: a finished earlier attempt's."""
    if any(exists(path) for path in paths):
        return False
    with open_lines(join_path(output_dir, DEAD_LETTERS_NAME), MERGE_BUFFER) as lines:
        if lines is None or sum(1 for _ in lines) != count:
            raise PublishError(f"the staged dead-letter parts are gone and {DEAD_LETTERS_NAME} does not "
                               f"hold the {count} dead letters counted")
    return True


def _counted(lines: Iterator[bytes], seen: list[int]) -> Iterator[bytes]:
    for line in lines:
        seen[0] += 1
        yield line


def write_dead_letters(output_dir: str, staging: str, parts: Sequence[DeadLetterPart], target: str | None = None,
                       before: str | None = None) -> RejectionSummary:
    """Writes ``dead_letters.jsonl`` from the staged parts, merged in ``letter_order``; returns their summary.

    The bytes depend only on the dead letters, not on how they were dealt
    into parts. More than ``MERGE_FAN_IN`` parts are merged in rounds, each
    writing merged groups to the staging folder (deleted once merged again).

    A retried publish whose first attempt finished finds every part gone and
    ``dead_letters.jsonl`` in place with as many lines as the parts counted:
    the file is kept as it is.

    Args:
        output_dir: Output folder.
        staging: The run's staging folder.
        parts: The staged parts.
        target: Where the file goes (default: ``dead_letters.jsonl`` of
            ``output_dir``; then a retried publish is recognised as above).
        before: A file whose lines go first (an appended set's dead letters), if present.

    Raises:
        PublishError: A staged part is gone (and the file is not in place), or
            the parts hold other than the lines their summaries count.
    """
    paths = sorted(p.path for p in parts)
    summary = RejectionSummary.merged(p.summary for p in parts)
    if target is None and paths and not exists(paths[0]) and _published_before(output_dir, paths, summary.count):
        return summary
    rounds = 0
    while len(paths) > MERGE_FAN_IN:
        rounds += 1
        merged = []
        for start in range(0, len(paths), MERGE_FAN_IN):
            group = paths[start:start + MERGE_FAN_IN]
            path = join_path(staging, f"{DEAD_LETTERS_NAME}.merge{rounds}.{start}.{uuid.uuid4().hex}.tmp")
            with _merged(group) as lines, reporting_full_disk(output_dir, path):
                write_file(path, lines)
            if rounds > 1:
                delete_if_exists(group)  # merged files of the round before (the workers' parts stay)
            merged.append(path)
        paths = merged
    seen = [0]
    with _merged(paths) as lines, (open_lines(before, MERGE_BUFFER) if before else contextlib.nullcontext()) as first:
        whole = _counted(lines, seen) if first is None else itertools.chain(first, _counted(lines, seen))
        write_atomic(target or join_path(output_dir, DEAD_LETTERS_NAME), whole, staging)
    if rounds:
        delete_if_exists(paths)
    if seen[0] != summary.count:
        raise PublishError(f"the staged dead-letter parts hold {seen[0]} lines but {summary.count} "
                           "dead letters were counted; refusing to publish an inconsistent set")
    return summary
