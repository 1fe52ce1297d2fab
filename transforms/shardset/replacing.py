"""Which published splits a run replaces, and whether it may (pure).

A published split built from other inputs than this run's (``Manifest.built_from``; in an older
manifest the last run's options) holds records the run does not have: the run needs ``--replace``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from transforms.progress.report import plural
from transforms.shardset.manifest import Manifest

__all__ = ["input_values", "same_inputs", "split_inputs", "kept_built_from", "replace_problem", "kept_format_problem",
           "listed_splits", "SplitChange", "split_changes", "change_line"]


def input_values(options: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The ``--input`` values recorded in a manifest's options, or None if there are none."""
    value = options.get("input")
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _normal(path: str) -> str:
    return path.rstrip("/") or "/"


def same_inputs(a: Sequence[str], b: Sequence[str]) -> bool:
    """True if two lists of ``--input`` values name the same inputs (order, repeats, trailing ``/`` aside)."""
    return {_normal(p) for p in a} == {_normal(p) for p in b}


def split_inputs(manifest: Manifest, split: str) -> tuple[str, ...] | None:
    """The ``--input`` values that built ``split``: recorded per split, else the manifest's options."""
    recorded = manifest.built_from.get(split)
    return tuple(recorded) if recorded is not None else input_values(manifest.options)


def kept_built_from(old: Manifest, kept: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """What the kept splits were built from, to record again (splits without a record left out)."""
    found = {name: split_inputs(old, name) for name in kept}
    return {name: inputs for name, inputs in found.items() if inputs is not None}


def _flags(inputs: Sequence[str]) -> str:
    return " ".join(f"--input {path}" for path in inputs)


def replace_problem(output_dir: str, old: Manifest | None, splits: Iterable[str],
                    inputs: Sequence[str] | None) -> str | None:
    """A line naming the first published split (by name) the run writes (``splits``) that other inputs
    built, or None (``inputs`` None: nothing is checked; a split whose inputs are not recorded is not refused)."""
    if old is None or not inputs:
        return None
    for name in sorted(set(splits) & set(old.splits)):
        before = split_inputs(old, name)
        if before is None or same_inputs(before, inputs):
            continue
        return (f"--output_dir {output_dir} holds split {name!r} ({plural(old.splits[name].records, 'record')}) "
                f"built from {_flags(before)}; this run would replace it with one built from "
                f"{_flags(inputs)}: pass --replace to rebuild split {name!r} from these inputs, or "
                "choose another --split or --output_dir (nothing was changed)")
    return None


def kept_format_problem(output_dir: str, old: Manifest | None, splits: Iterable[str], file_format: str,
                        drop_other_splits: bool = False) -> str | None:
    """Why a run of ``--format file_format`` may not keep the published splits of ``old`` it does not
    write (one line), or None: a set has one shard file format."""
    kept = sorted(set(old.splits) - set(splits)) if old is not None and not drop_other_splits else []
    if kept and old.file_format != file_format:
        return (f"{output_dir} holds split {', '.join(map(repr, kept))} as {old.file_format} shards, which "
                f"this --format {file_format} run would keep: a set has one format; rebuild every "
                "split with it, or pass --drop_other_splits")
    return None


def listed_splits(named: Iterable[str], split_fractions: Iterable[str] = ()) -> set[str]:
    """The splits a build writes, from those its listed inputs name (``""``: any of ``split_fractions``)."""
    named = set(named)
    return (named - {""}) | (set(split_fractions) if "" in named else set())


@dataclass(frozen=True)
class SplitChange:
    """What a run did to one split of the set it published into (``kind``: ``replaced``, ``appended``,
    ``kept`` or ``removed``), and its records before and after (None: none)."""

    split: str
    kind: str
    before: int | None
    after: int | None


def split_changes(old: Manifest | None, new: Manifest) -> list[SplitChange]:
    """The splits of ``old`` that ``new`` (without ``written_splits``: all written) replaced, kept or removed."""
    if old is None:
        return []
    written = set(new.splits) if new.written_splits is None else set(new.written_splits)
    changes = []
    for name, split in sorted(old.splits.items()):
        if name not in new.splits:
            changes.append(SplitChange(name, "removed", split.records, None))
            continue
        kind = "appended" if name in new.appended else "replaced" if name in written else "kept"
        changes.append(SplitChange(name, kind, split.records, new.splits[name].records))
    return changes


def change_line(change: SplitChange) -> str | None:
    """The summary line of a replaced or removed split (``replaced split train: 2715 -> 100 records``)."""
    if change.kind == "appended":
        return (f"appended to split {change.split}: {change.before} -> {plural(change.after, 'record')} "
                f"(+{change.after - change.before})")
    if change.kind == "replaced":
        return f"replaced split {change.split}: {change.before} -> {plural(change.after, 'record')}"
    if change.kind == "removed":
        return f"removed split {change.split}: {plural(change.before, 'record')} (--drop_other_splits)"
    return None
