"""What a build finds before its pipeline, as one frozen value (pure: plain values in, no storage, no Beam)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from transforms.errors import UsageError
from transforms.images.class_labels import index_order_problem
from transforms.images.inputs import FolderTask, check_label

__all__ = ["BuildSurvey", "survey_build", "fixed_class_names", "image_threads"]


@dataclass(frozen=True)
class BuildSurvey:
    """What a build found before its pipeline.

    Attributes:
        labels: The class names of ``--class_names``, ``--labels_file`` or Parquet's metadata, or None
            (classes from the listing).
        parquet_folders: ``(folder, its Parquet files)`` of each folder input of Parquet files.
        append_to: With ``--append``, the published set's class names.
        near_hashes: ``--near_duplicates`` is on and the images may fall in two splits: each is hashed.
    """

    labels: tuple[str, ...] | None = None
    folder_tasks: tuple[FolderTask, ...] = ()
    parquet_folders: tuple[tuple[str, tuple[str, ...]], ...] = ()
    append_to: tuple[str, ...] | None = None
    inspect_threads: int = 1
    write_threads: int = 1
    near_hashes: bool = False


def fixed_class_names(names: Sequence[str] | None) -> tuple[str, ...] | None:
    """``--class_names`` (split at commas) or ``--labels_file``'s lines, checked; None without either.

    Raises:
        UsageError: A name is not a class name, one is given twice, or integer labels could not index them.
    """
    if names is None:
        return None
    for name in names:
        problem = check_label(name)
        if problem:
            raise UsageError(f"bad class name in --class_names/--labels_file: {problem}")
    if len(set(names)) != len(names):
        raise UsageError("--class_names/--labels_file names a class twice")
    problem = index_order_problem(names)
    if problem:
        raise UsageError(f"--class_names/--labels_file: {problem}")
    return tuple(names)


def image_threads(requested: int, workers: int | None, cores: int, remote: bool, decodes: bool) -> tuple[int, int]:
    """Threads of the inspect and write steps: ``(inspect_threads, write_threads)``.

    A requested count (``--image_threads``) is used for both. With 0, threads are used where they
    pay: inspecting, when Pillow decodes (or encodes, or hashes) every image without the GIL
    (``decodes``) or inputs are ``remote``; writing, for remote inputs only. The ``structure`` and
    ``header`` checks hold the GIL (BENCHMARKS.md, "Using every core").

    Args:
        workers: The local runner's worker processes, which share ``cores``; None elsewhere (0 is
            passed on: each worker counts its own cores).
    """
    threads = requested or (0 if workers is None else max(1, cores // workers))
    return (threads if requested or remote or decodes else 1, threads if requested or remote else 1)


def survey_build(*, fixed: Sequence[str] | None, parquet_names: tuple[str, ...] | None, only_parquet: bool,
                 append_to: Sequence[str] | None, folder_tasks: Sequence[FolderTask],
                 parquet_folders: Sequence[tuple[str, tuple[str, ...]]], near_duplicates: bool, one_split: bool,
                 threads: tuple[int, int]) -> BuildSurvey:
    """What the build takes from what it read before its pipeline.

    Args:
        parquet_names: The ``ClassLabel`` names the Parquet inputs all give, or None.
        only_parquet: Every input is a Parquet file (their class indices stay the build's).
        append_to: With ``--append``, the published set's class names (an append keeps them); else None.
        near_duplicates: ``--near_duplicates`` is on (and the run is not offline).
        one_split: Every image goes to one split, known before the listing (nothing to compare).
    """
    labels = None if fixed is None else tuple(fixed)
    if labels is None and parquet_names is not None and only_parquet and append_to is None:
        labels = parquet_names  # the files' ClassLabel indices stay the build's (an append keeps the set's)
    return BuildSurvey(labels=labels, folder_tasks=tuple(folder_tasks), parquet_folders=tuple(parquet_folders),
                       append_to=None if append_to is None else tuple(append_to),
                       inspect_threads=threads[0], write_threads=threads[1],
                       near_hashes=near_duplicates and not one_split)
