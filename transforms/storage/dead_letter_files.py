"""A run's dead letters on storage: staged in sorted parts by the workers, merged when publishing.

The rule is ``shardset.dead_letters``'; parts go to unique names in the run's staging folder (a
retried bundle writes its own copy) and are merged with ``sorted_parts.merged_parts``.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from typing import Iterable, Sequence

from transforms.errors import PublishError
from transforms.shardset.dead_letters import (DeadLetter, DeadLetterPart, RejectionSummary, in_appended_set,
                                              letter_order, line_order)
from transforms.shardset.manifest import DEAD_LETTERS_NAME
from transforms.shardset.naming import join_path
from transforms.storage.files import exists, open_lines
from transforms.storage.output_folder import staging_folder
from transforms.storage.sorted_parts import MERGE_BUFFER, MERGE_FAN_IN, merged_parts
from transforms.storage.writing import reporting_full_disk, write_atomic, write_file

__all__ = ["MERGE_FAN_IN", "write_dead_letter_part", "write_dead_letters", "dead_lettered_inputs",
           "repeated_letters"]


def write_dead_letter_part(letters: Iterable[DeadLetter], output_dir: str, run_id: str) -> DeadLetterPart:
    """Stages some dead letters as one part in the run's staging folder, sorted, with their summary."""
    letters = sorted(letters, key=letter_order)
    path = join_path(staging_folder(output_dir, run_id), f"{DEAD_LETTERS_NAME}.{uuid.uuid4().hex}.tmp")
    with reporting_full_disk(output_dir, path):
        write_file(path, ((letter.to_json() + "\n").encode("utf-8") for letter in letters))
    return DeadLetterPart(path, RejectionSummary.of(letters),
                          RejectionSummary.of(letter for letter in letters if not in_appended_set(letter)))


def _gone(path: str) -> PublishError:
    return PublishError(f"staged dead-letter part {path} is gone")


def _published_before(output_dir: str, paths: Sequence[str], count: int) -> bool:
    """Every staged part gone and ``dead_letters.jsonl`` holding ``count`` lines: a finished earlier attempt's."""
    if any(exists(path) for path in paths):
        return False
    with open_lines(join_path(output_dir, DEAD_LETTERS_NAME), MERGE_BUFFER) as lines:
        if lines is None or sum(1 for _ in lines) != count:
            raise PublishError(f"the staged dead-letter parts are gone and {DEAD_LETTERS_NAME} does not "
                               f"hold the {count} dead letters counted")
    return True


def dead_lettered_inputs(path: str) -> set[tuple[str, str]]:
    """``(path, reason)`` of every dead letter of a published ``dead_letters.jsonl`` (none if it is absent)."""
    found: set[tuple[str, str]] = set()
    with open_lines(path) as lines:
        for line in lines or ():
            if line.strip():
                letter = DeadLetter.from_json(line)
                found.add((letter.path, letter.reason))
    return found


def repeated_letters(parts: Sequence[DeadLetterPart],
                     known: set[tuple[str, str]]) -> tuple[int, RejectionSummary]:
    """How many of the parts' dead letters ``known`` holds (same path, same reason), and the summary of
    an append's new bad inputs among the others (``PublishError``: a staged part is gone)."""
    repeated = 0

    def new_bad() -> Iterable[DeadLetter]:
        nonlocal repeated
        for part in parts:
            with open_lines(part.path) as lines:
                if lines is None:
                    raise _gone(part.path)
                for line in lines:
                    letter = DeadLetter.from_json(line)
                    if _repeats(letter, known):
                        repeated += 1
                    elif not in_appended_set(letter):
                        yield letter

    summary = RejectionSummary.of(new_bad())
    return repeated, summary


def _repeats(letter: DeadLetter, known: set[tuple[str, str]]) -> bool:
    """True for a letter the set holds already (same path, same reason); never for an input now in
    the set (``in_appended_set``), which an append counts apart."""
    return not in_appended_set(letter) and (letter.path, letter.reason) in known


def write_dead_letters(output_dir: str, staging: str, parts: Sequence[DeadLetterPart], target: str | None = None,
                       before: str | None = None,
                       known: set[tuple[str, str]] | None = None) -> RejectionSummary:
    """Writes ``dead_letters.jsonl`` from the staged parts, merged in ``letter_order``; returns their summary.

    Without ``target``, a retried publish whose first attempt finished (every part gone, the file
    holding as many lines as counted) keeps the file as it is.

    Args:
        before: A file whose lines go first (an appended set's dead letters), if present.
        known: ``(path, reason)`` of dead letters ``before`` holds: the parts' letters among them are left out.

    Raises:
        PublishError: A staged part is gone (and the file is not in place), or the parts hold
            other than the lines their summaries count.
    """
    paths = sorted(p.path for p in parts)
    summary = RejectionSummary.merged(p.summary for p in parts)
    if target is None and paths and not exists(paths[0]) and _published_before(output_dir, paths, summary.count):
        return summary

    def staged_name(round_: int, start: int) -> str:
        return join_path(staging, f"{DEAD_LETTERS_NAME}.merge{round_}.{start}.{uuid.uuid4().hex}.tmp")

    def write_staged(path: str, lines: Iterable[bytes]) -> None:
        with reporting_full_disk(output_dir, path):
            write_file(path, lines)

    head = open_lines(before, MERGE_BUFFER) if before else contextlib.nullcontext()
    with merged_parts(paths, key=line_order, gone=_gone, staged_name=staged_name, fan_in=MERGE_FAN_IN,
                      write=write_staged) as lines, head as first:
        added = lines if not known else (line for line in lines if not _repeats(DeadLetter.from_json(line), known))
        whole = added if first is None else itertools.chain(first, added)
        write_atomic(target or join_path(output_dir, DEAD_LETTERS_NAME), whole, staging)
    if lines.count != summary.count:
        raise PublishError(f"the staged dead-letter parts hold {lines.count} lines but {summary.count} "
                           "dead letters were counted; refusing to publish an inconsistent set")
    return summary
