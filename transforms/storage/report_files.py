"""Verify's report on storage: problems staged in sorted parts by the workers, merged into the report.

Parts of up to ``PART_PROBLEMS`` lie in a folder of the run's own beside the report (a retried
bundle writes its own copy); the report step merges them a problem at a time, then deletes the
folder: nothing it holds grows with the problems.
"""

from __future__ import annotations

import uuid
from typing import Iterable, Sequence

from transforms.errors import ShardsError
from transforms.storage.folders import delete_tree
from transforms.storage.sorted_parts import MERGE_FAN_IN, merged_parts
from transforms.storage.writing import write_file
from transforms.verify.checks import Problem, ProblemPart, problem_line, read_problem_line, report_pieces

__all__ = ["PART_PROBLEMS", "MERGE_FAN_IN", "parts_folder", "write_problem_part", "write_report"]

# Problems a worker sorts and stages in one part.
PART_PROBLEMS = 50_000


def parts_folder(report: str) -> str:
    """A new folder for one run's staged problems, beside ``report``."""
    return f"{report}.parts-{uuid.uuid4().hex}"


def write_problem_part(problems: Iterable[Problem], folder: str) -> ProblemPart:
    """Stages some problems as one part, sorted by ``Problem.sort_key``."""
    problems = sorted(problems, key=Problem.sort_key)
    path = f"{folder}/{uuid.uuid4().hex}.jsonl"
    write_file(path, (problem_line(problem) for problem in problems))
    return ProblemPart(path, len(problems))


def _gone(path: str) -> ShardsError:
    return ShardsError(f"staged problems {path} are gone; verify again")


def write_report(path: str, files: int, records: int, size: int, parts: Sequence[ProblemPart],
                 folder: str) -> int:
    """Writes the JSON report (``Report.dumps``'s bytes) from the staged parts; returns the problems.

    ``files``, ``records``, ``size``: shard files checked, records read and their size; ``folder``
    (``parts_folder``) is deleted once merged.

    Raises:
        ShardsError: A part is gone or holds other than the problems it counted.
    """
    paths = sorted(part.path for part in parts)
    count = sum(part.count for part in parts)

    def staged_name(round_: int, start: int) -> str:
        return f"{folder}/merge{round_}.{start}.{uuid.uuid4().hex}.jsonl"

    with merged_parts(paths, key=Problem.sort_key, gone=_gone, staged_name=staged_name, fan_in=MERGE_FAN_IN,
                      read=read_problem_line, line=problem_line, free_parts=True) as problems:
        write_file(path, report_pieces(files, records, size, count, problems))
    delete_tree(folder)
    if problems.count != count:
        raise ShardsError(f"the staged problems hold {problems.count} lines but {count} were counted; verify again")
    return count
