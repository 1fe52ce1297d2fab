"""What publishing a set does to its folder: the new manifest, the renames in order, the deletions after.

Pure code; a build is an append that keeps no published shard of the splits it writes.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from transforms.errors import PublishError
from transforms.shardset.manifest import (DEAD_LETTERS_NAME, LABELS_NAME, MANIFEST_NAME, Manifest, ShardEntry,
                                          ShardsFile, SplitCounts, SplitEntry)
from transforms.shardset.naming import join_path, shard_file_name
from transforms.shardset.ownership import Journal, files_to_remove
from transforms.shardset.planning import SplitTotals
from transforms.shardset.replacing import kept_built_from, split_inputs
from transforms.shardset.staged import StagedShard
from transforms.shardset.key_files import keys_name
from transforms.tfrecord.record_index import index_name, index_names

__all__ = ["PublishPlan", "relative_name", "unwritten_shards", "plan_publish", "new_manifest", "plan_journal",
           "staged_name", "STAGED_SUFFIX", "SET_FILES"]

# A file of the new set that is not a shard is staged as ``<staging>/<name>.next``.
STAGED_SUFFIX = ".next"
# The set's files that are not shards, in the order they are renamed into place (sidecars go
# between ``shards.jsonl`` and ``manifest.json``).
SET_FILES = (DEAD_LETTERS_NAME, LABELS_NAME, "shards.jsonl")


def relative_name(output_dir: str, path: str) -> str:
    """A path in ``output_dir`` as a name relative to it (``PublishError``: not in it)."""
    prefix = output_dir.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise PublishError(f"{path} is not in {output_dir}")
    return path[len(prefix):]


@dataclass(frozen=True)
class PublishPlan:
    """What a publish changes, decided before anything is renamed: every split of the new set (kept ones
    first), the renames (names relative to the folder, in any order) of staged shards and their files and
    of the published shards an append renames, the new set's shard and ``.idx`` names, and the old set's
    files to delete once the new ``manifest.json`` is in place."""

    splits: Mapping[str, SplitEntry]
    shard_moves: tuple[tuple[str, str], ...]
    keep: frozenset[str]
    remove: tuple[str, ...]
    claimed: frozenset[str]


def unwritten_shards(totals: Iterable[SplitTotals],
                     staged: Mapping[tuple[str, int], StagedShard]) -> list[tuple[str, int, int]]:
    """``(split, index, shard count)`` of the planned shards that no worker wrote, sorted."""
    return [(t.split, index, t.final_count) for t in sorted(totals, key=lambda t: t.split)
            for index in range(t.final_count) if t.planned_shard(index) is not None and (t.split, index) not in staged]


def _shard_files(name: str, indexed: bool, keyed: bool) -> tuple[str, ...]:
    """A published shard's files: the shard, its ``.idx`` (``indexed``) and its keys file (``keyed``)."""
    return (name, *((index_name(name),) if indexed else ()), *((keys_name(name),) if keyed else ()))


def _published_moves(split: str, shard: ShardEntry, final_name: str, present: set[str],
                     compression: str) -> list[tuple[str, str]]:
    """The renames that give a published shard an append keeps its final name, with its ``.idx`` and keys file."""
    if shard.file == final_name:
        return []
    moves = [(shard.file, final_name)]
    if compression == "none":
        index_file = next((n for n in index_names(shard.file) if n in present), None)
        if index_file is None:
            raise PublishError(f"split {split!r}: the index of {shard.file} is missing: "
                               "rebuild the split, or append after verify_shards passes")
        moves.append((index_file, index_name(final_name)))
    if shard.keys_crc32c is not None:
        moves.append((keys_name(shard.file), keys_name(final_name)))
    return moves


def _staged_moves(output_dir: str, result: StagedShard) -> list[tuple[str, str]]:
    """The renames that publish a staged shard with its ``.idx`` and keys file, where it has them."""
    return [(relative_name(output_dir, staged), name) for staged, name in (
        (result.staged, result.file), (result.staged_index, index_name(result.file)),
        (result.staged_keys, keys_name(result.file))) if staged]


def plan_publish(output_dir: str, old: Manifest | None, staged: Mapping[tuple[str, int], StagedShard],
                 totals: Sequence[SplitTotals], kept: Mapping[str, SplitEntry],
                 label_counts: Mapping[str, Mapping[str, int]], present: Iterable[str], owned: set[str],
                 compression: str, overwrite_unlisted: bool = False, appending: bool = False,
                 merged_counts: Mapping[str, Mapping[str, int]] | None = None) -> PublishPlan:
    """Plans the publish of a new set over ``old`` (or into a folder without a set).

    Args:
        old: The published manifest, with its shard list, or None.
        staged: ``(split, index) -> StagedShard`` of every planned shard (``unwritten_shards``
            written empty first).
        kept: The splits of ``old`` listed again as they are.
        label_counts: Split -> label -> records this run wrote to it.
        present: Names of the files in the folder (relative to it); ``owned``: those the tool owns.
        appending: An append: the written splits keep the old label counts (less the merged
            shard's, ``merged_counts``), zeros dropped.

    Raises:
        PublishError: A published shard to rename lacks its ``.idx``.
    """
    present = set(present)
    keep: set[str] = set()
    for split in kept.values():
        for shard in split.shards:
            keep.update((shard.file, *index_names(shard.file)) if compression == "none" else (shard.file,))
            if shard.keys_crc32c is not None:
                keep.add(keys_name(shard.file))
    splits: dict[str, SplitEntry] = {name: SplitEntry(name, split.shards, split.to_counts())
                                     for name, split in kept.items()}
    moves: list[tuple[str, str]] = []
    for t in sorted(totals, key=lambda t: t.split):
        listed = old.splits.get(t.split) if old is not None else None
        counts: collections.Counter[str] = collections.Counter()
        if appending and listed is not None:
            counts.update(listed.label_counts())
            counts.subtract((merged_counts or {}).get(t.split, {}))
        entries = []
        for index in range(t.final_count):
            final_name = shard_file_name(t.split, index, t.final_count, compression)
            if t.planned_shard(index) is None:  # a published shard, kept as it is
                shard = listed.shards[index]
                moves += _published_moves(t.split, shard, final_name, present, compression)
                keep.update(_shard_files(final_name, compression == "none", shard.keys_crc32c is not None))
                entries.append(dataclasses.replace(shard, file=final_name, label_counts={}))
                continue
            result = staged[(t.split, index)]
            moves += _staged_moves(output_dir, result)
            keep.update(_shard_files(result.file, bool(result.staged_index), bool(result.staged_keys)))
            entries.append(result.entry())
        counts.update(label_counts.get(t.split, {}))
        if appending:
            counts = {label: count for label, count in counts.items() if count}
        splits[t.split] = SplitEntry(t.split, entries, SplitCounts(
            sum(e.records for e in entries), sum(e.bytes for e in entries), len(entries), dict(counts)))
    renamed_away = {source for source, _ in moves}
    remove = [name for name in files_to_remove(present, owned, keep, overwrite_unlisted)
              if name not in renamed_away]
    return PublishPlan(splits, tuple(moves), frozenset(keep), tuple(remove),
                       frozenset(owned | keep | set(remove)))


def _add_counts(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two ``images`` objects (or label counts) added key by key."""
    out: dict[str, Any] = dict(a)
    for key, value in b.items():
        if isinstance(value, Mapping):
            out[key] = _add_counts(out.get(key, {}), value)
        else:
            out[key] = out.get(key, 0) + value
    return out


def new_manifest(fields: Mapping[str, Any], compression: str, labels: Sequence[str], plan: PublishPlan,
                 old: Manifest | None, kept: Iterable[str], written_splits: Iterable[str], dead_letters: int,
                 shards_file: ShardsFile | None, inputs_given: Sequence[str] | None,
                 appending: bool = False, where: str = "the published set", known_dead_letters: int = 0) -> Manifest:
    """The manifest a plan publishes.

    Args:
        fields: ``created_by``, ``options``, ``seed``, ``feature_spec`` and a job's own.
        dead_letters: This run's dead letters (an append adds the set's).
        appending: An append: counts, inputs and object classes add to ``old``'s.
        known_dead_letters: Appending: this run's inputs that ``old``'s dead letters held already.

    Raises:
        PublishError: Appending, an object class id names another class than in ``old``.
    """
    kept = list(kept)
    written = set(written_splits)
    common = dict(created_by=fields["created_by"], options=fields["options"], seed=fields["seed"],
                  compression=compression, feature_spec=fields["feature_spec"], labels=list(labels),
                  splits=dict(plan.splits), shards_file=shards_file, written_splits=sorted(written),
                  near_duplicates=fields.get("near_duplicates") or {})
    if not appending:
        return Manifest(**common, dead_letters=dead_letters, images=fields.get("images") or {},
                        built_from={**(kept_built_from(old, kept) if old is not None else {}),
                                    **({name: inputs_given for name in written} if inputs_given else {})},
                        object_labels=fields.get("object_labels") or ())
    built_from = kept_built_from(old, kept)
    for name in written:
        before = split_inputs(old, name) if name in old.splits else ()
        built_from[name] = tuple(dict.fromkeys((*(before or ()), *(inputs_given or ()))))
    objects = dict(old.object_labels)
    for class_id, name in fields.get("object_labels") or ():
        if objects.setdefault(class_id, name) != name:
            raise PublishError(f"object class id {class_id} is {objects[class_id]!r} in {where} but "
                               f"{name!r} in this run's inputs; an append keeps the set's ids")
    return Manifest(**common, dead_letters=old.dead_letters + dead_letters,
                    images=_add_counts(old.images, fields.get("images") or {}), built_from=built_from,
                    appended={name: old.splits[name].records if name in old.splits else 0 for name in written},
                    object_labels=tuple(sorted(objects.items())), known_dead_letters=known_dead_letters)


def plan_journal(run_id: str, plan: PublishPlan, staged_files: Sequence[tuple[str, str]],
                 removed: Sequence[str] = ()) -> Journal:
    """The journal of a plan: shard renames, then the set's staged files (``manifest.json`` last), then deletions.

    ``staged_files``: ``(staged, name)`` of the set's files that are not shards, ``manifest.json``
    among them; ``removed``: more names to delete after.

    Raises:
        PublishError: ``manifest.json`` is not among ``staged_files``.
    """
    files = [pair for pair in staged_files if pair[1] != MANIFEST_NAME]
    manifest = [pair for pair in staged_files if pair[1] == MANIFEST_NAME]
    if len(manifest) != 1:
        raise PublishError(f"the publish of run {run_id} stages no {MANIFEST_NAME}")
    remove = tuple(dict.fromkeys((*plan.remove, *removed)))
    return Journal(run_id, tuple(sorted(plan.claimed | set(remove))),
                   moves=(*plan.shard_moves, *files, *manifest), remove=remove)


def staged_name(staging_relative: str, name: str) -> str:
    """Where a set file ``name`` is staged, relative to the folder (``.staging/<run>/<name>.next``)."""
    return join_path(staging_relative, name + STAGED_SUFFIX)
