"""Verify's report on storage: problems staged in sorted parts by the workers, merged into the report.

The steps that find problems stage them as they go, up to ``PART_PROBLEMS``
sorted to a file (``write_problem_part``: a retried bundle writes its own
copy), in a folder of the run's own beside the report (``parts_folder``).
The report step merges the parts in ``Problem.sort_key`` order into the
JSON report a problem at a time (``write_report``), at most
``MERGE_FAN_IN`` parts open at once, then deletes the folder: nothing it
holds grows with the problems.
"""

from __future__ import annotations

import contextlib
import heapq
import uuid
from typing import Iterable, Iterator, Sequence

from transforms.errors import ShardsError
from transforms.storage.files import open_lines
from transforms.storage.folders import delete_if_exists, delete_tree
from transforms.storage.writing import write_file
from transforms.verify.checks import Problem, ProblemPart, problem_line, read_problem_line, report_pieces

__all__ = ["PART_PROBLEMS", "MERGE_FAN_IN", "parts_folder", "write_problem_part", "write_report"]

# Problems a worker sorts and stages in one part.
PART_PROBLEMS = 50_000
# Staged parts read at once when merging (each holds a read buffer of MERGE_BUFFER bytes).
MERGE_FAN_IN = 32
MERGE_BUFFER = 256 << 10


def parts_folder(report: str) -> str:
    """A new folder for one run's staged problems, beside ``report``."""
    return f"{report}.parts-{uuid.uuid4().hex}"


def write_problem_part(problems: Iterable[Problem], folder: str) -> ProblemPart:
    """Stages some problems as one part, sorted by ``Problem.sort_key``."""
    problems = sorted(problems, key=Problem.sort_key)
    path = f"{folder}/{uuid.uuid4().hex}.jsonl"
    write_file(path, (problem_line(problem) for problem in problems))
    return ProblemPart(path, len(problems))


@contextlib.contextmanager
def _merged(paths: Sequence[str]) -> Iterator[Iterator[Problem]]:
    """The problems of sorted staged parts, merged in order."""
    with contextlib.ExitStack() as stack:
        streams = []
        for path in paths:
            lines = stack.enter_context(open_lines(path, MERGE_BUFFER))
            if lines is None:
                raise ShardsError(f"staged problems {path} are gone; verify again")
            streams.append(map(read_problem_line, lines))
        yield heapq.merge(*streams, key=Problem.sort_key)


def _counted(problems: Iterator[Problem], seen: list[int]) -> Iterator[Problem]:
    for problem in problems:
        seen[0] += 1
        yield problem


def write_report(path: str, files: int, records: int, size: int, parts: Sequence[ProblemPart],
                 folder: str) -> int:
    """Writes the JSON report (``Report.dumps``'s bytes) from the staged parts; returns the problems.

    Args:
        path: Where the report goes.
        files: Shard files checked.
        records: Records read.
        size: Total size of the files checked.
        parts: The staged parts of every problem found.
        folder: The folder they were staged in (``parts_folder``), deleted once merged.

    Raises:
        ShardsError: A part is gone or holds other than the problems it counted.
    """
    paths = sorted(part.path for part in parts)
    count = sum(part.count for part in parts)
    rounds = 0
    while len(paths) > MERGE_FAN_IN:
        rounds += 1
        merged = []
        for start in range(0, len(paths), MERGE_FAN_IN):
            group = paths[start:start + MERGE_FAN_IN]
            target = f"{folder}/merge{rounds}.{start}.{uuid.uuid4().hex}.jsonl"
            with _merged(group) as problems:
                write_file(target, (problem_line(problem) for problem in problems))
            delete_if_exists(group)
            merged.append(target)
        paths = merged
    seen = [0]
    with _merged(paths) as problems:
        write_file(path, report_pieces(files, records, size, count, _counted(problems, seen)))
    delete_tree(folder)
    if seen[0] != count:
        raise ShardsError(f"the staged problems hold {seen[0]} lines but {count} were counted; verify again")
    return count
