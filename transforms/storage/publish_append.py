"""Publishing an append: new records join a published set whose shards stay as they are.

``publish_append`` runs once, after every new shard is staged, in place of
``publish.publish_shards`` for a run with ``PublishPolicy.append``:

0. the same checks as any publish: the lock still holds this run, no link
   stands where the tool's folders go, the splits this run does not touch are
   still as listed;
1. what the new set lists is worked out: each appended split keeps its
   published shards at their indexes (renamed when the split's shard count
   changes the ``-of-NNNNN`` part of their names; never rewritten), except
   the merged one (``planning.append_layout``), whose records the run wrote
   again with the new ones; new shards take the next indexes;
2. every file of the new set that is not a shard (``dead_letters.jsonl``:
   the set's earlier dead letters and this run's; ``labels.txt``;
   ``shards.jsonl``; sidecars; ``manifest.json``) is written to the run's
   staging folder;
3. the journal (``.publishing.json``) lists every rename still to do (shards
   and ``.idx`` files, then those files, ``manifest.json`` last) and the files
   to delete after;
4. the old ``manifest.json`` is deleted and the journal carried out
   (``finish_journal``), then deleted. With ``folders.PARALLEL_MOVES`` or
   more shard renames, ``prepare_append`` (steps 0-3 and the old manifest
   deleted) hands them to the caller, which has many workers do them
   (``folders.move_chunk``) before ``commit_append`` carries out the rest
   of the journal.

A crash before 3 leaves the set as it was. A crash after 3 leaves the
journal: the next run into the folder carries it out before anything else
(``storage.journal.finish_interrupted``), so the published set is never lost half renamed,
and readers see the old manifest, none, or the new one.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Mapping, Sequence

from transforms.errors import NothingToPublish, PublishError
from transforms.progress.report import plural
from transforms.shardset.dead_letters import (DeadLetterPart, RejectionSummary, rejection_details, rejection_problem,
                                              rejection_verdict)
from transforms.shardset.manifest import (DEAD_LETTERS_NAME, LABELS_NAME, MANIFEST_NAME, REFUSED_DEAD_LETTERS_NAME,
                                          Manifest, ShardEntry, SplitCounts, SplitEntry)
from transforms.shardset.naming import join_path, shard_file_name
from transforms.shardset.ownership import (JOURNAL_NAME, Journal, PublishPolicy, files_to_remove,
                                           kept_split_problem, kept_splits)
from transforms.shardset.planning import SplitTotals
from transforms.shardset.replacing import input_values, kept_built_from, split_inputs
from transforms.shardset.staged import ShardListPart, StagedShard, parts_problem
from transforms.storage.dead_letter_files import write_dead_letters
from transforms.storage.folders import PARALLEL_MOVES, Move, delete_if_exists, delete_tree, make_folder, moves_problem
from transforms.storage.journal import finish_journal, pending_manifest, relative_name, retire_manifest, shard_moves
from transforms.storage.lock import check_lock
from transforms.storage.output_folder import STAGING_DIR, check_own_folders, folder_state, staging_folder
from transforms.storage.shard_files import published_entries, staged_of_parts, write_shard, write_shard_list
from transforms.storage.writing import write_atomic
from transforms.tfrecord.record_index import INDEX_DIR, index_name, index_names

__all__ = ["publish_append", "prepare_append", "commit_append", "AppendCommit"]


_LOG = logging.getLogger(__name__)


def _add_counts(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two ``images`` objects (or label counts) added key by key."""
    out: dict[str, Any] = dict(a)
    for key, value in b.items():
        if isinstance(value, Mapping):
            out[key] = _add_counts(out.get(key, {}), value)
        else:
            out[key] = out.get(key, 0) + value
    return out


@dataclasses.dataclass(frozen=True)
class AppendCommit:
    """What the rest of an append needs once its journal is written: the journal names every rename.

    Attributes:
        output_dir: Output folder.
        journal: The journal written (renames in order, ``manifest.json`` last).
        manifest: The manifest it publishes.
        moves: Shard renames handed to the caller (0: none; ``finish_journal`` does them all).
    """

    output_dir: str
    journal: Journal
    manifest: Manifest
    moves: int


def publish_append(output_dir: str, parts: Sequence[ShardListPart],
                   totals: Sequence[SplitTotals], dead_letters: Sequence[DeadLetterPart],
                   labels: Sequence[str], inputs: int, compression: str,
                   manifest_fields: Mapping[str, Any], max_bad_fraction: float | None,
                   policy: PublishPolicy,
                   sidecar_files: Callable[[Manifest], Mapping[str, bytes]] | None = None) -> Manifest:
    """Publishes an append in one process; see the module docstring for the order of steps.

    Arguments are those of ``publish.publish_shards``; ``totals`` carry each
    appended split's published shards (``SplitTotals.published``, ``merged``).

    Raises:
        PublishError: As ``publish_shards``, and when the folder holds no set to append to.
    """
    commit, _ = prepare_append(output_dir, parts, totals, dead_letters, labels, inputs, compression,
                               manifest_fields, max_bad_fraction, policy, sidecar_files, parallel_from=None)
    return commit_append(commit, 0)


def _handed_out(output_dir: str, journal: Journal) -> list[Move]:
    """The journal's shard renames as full paths, for the workers."""
    return [(join_path(output_dir, a), join_path(output_dir, b), None) for a, b in shard_moves(journal)]


def _prepared_before(output_dir: str, journal: Journal | None,
                     run_id: str) -> tuple[AppendCommit, list[Move]] | None:
    """The prepare step run again (a retried bundle) after it retired the manifest: what its journal says."""
    if journal is None or journal.run_id != run_id or not journal.moves:
        return None
    data = pending_manifest(output_dir)
    if data is None:
        return None
    handed = _handed_out(output_dir, journal)
    return AppendCommit(output_dir, journal, Manifest.loads(data), len(handed)), handed


def prepare_append(output_dir: str, parts: Sequence[ShardListPart],
                   totals: Sequence[SplitTotals], dead_letters: Sequence[DeadLetterPart],
                   labels: Sequence[str], inputs: int, compression: str,
                   manifest_fields: Mapping[str, Any], max_bad_fraction: float | None,
                   policy: PublishPolicy,
                   sidecar_files: Callable[[Manifest], Mapping[str, bytes]] | None = None,
                   parallel_from: int | None = PARALLEL_MOVES) -> tuple[AppendCommit, list[Move]]:
    """Steps 0-3 of an append and the old manifest deleted; hands out the shard renames if many.

    Arguments are those of ``publish_append``, and ``parallel_from``: with at
    least this many shard renames they are returned (full paths, no sha256)
    for the caller to do before ``commit_append``; None: never.

    Returns:
        The commit record, and the renames left to the caller.

    Raises:
        PublishError: As ``publish_append``.
    """
    staging = staging_folder(output_dir, policy.run_id)
    check_lock(output_dir, policy.run_id)
    linked = check_own_folders(output_dir)
    if linked:
        raise PublishError(linked)
    state = folder_state(output_dir)
    old = state.manifest
    again = _prepared_before(output_dir, state.journal, policy.run_id) if old is None else None
    if again is not None:
        return again
    if old is None:
        delete_tree(staging)
        raise PublishError(f"--append: {join_path(output_dir, MANIFEST_NAME)} is gone; nothing to append to")
    written_splits = {t.split for t in totals}
    kept = kept_splits(old, written_splits, policy)
    for split in sorted(kept.values(), key=lambda s: s.name):
        problem = kept_split_problem(split, state.present, old, compression, manifest_fields["feature_spec"])
        if problem:
            delete_tree(staging)
            raise PublishError(problem)
    by_split = {t.split: t for t in totals}
    for t in totals:
        listed = old.splits.get(t.split)
        if t.published != (listed.num_shards if listed else 0):
            delete_tree(staging)
            raise PublishError(f"split {t.split!r} has {listed.num_shards if listed else 0} shards in "
                               f"{output_dir}, not the {t.published} this run planned for: another run "
                               "changed the set; append again")
    staged = staged_of_parts(output_dir, parts, old, staging, compression)
    merged_records = {t.split: old.splits[t.split].shards[t.merged].records
                      for t in totals if t.merged is not None}
    written = sum(s.records for s in staged.values()) - sum(merged_records.values())
    everything = RejectionSummary.merged(part.summary for part in dead_letters)
    bad = RejectionSummary.merged(part.summary if part.bad is None else part.bad for part in dead_letters)
    # Inputs the set already holds are not bad inputs: appending a folder that grew is the usual case.
    present = everything.count - bad.count
    if present == inputs and inputs:
        delete_tree(staging)
        raise NothingToPublish(f"Nothing to append: all {plural(inputs, 'input')} are already in {output_dir} "
                               "(same bytes); nothing was changed")
    if rejection_verdict(inputs, everything.count, present, max_bad_fraction).kind == "nothing_new":
        # Nothing new but inputs as bad as before: the inputs the set holds count as good ones.
        delete_tree(staging)
        raise NothingToPublish("\n".join([
            f"Nothing to append: {present:,} of {plural(inputs, 'input')} are already in {output_dir} "
            f"(same bytes) and the other {bad.count:,} {'was' if bad.count == 1 else 'were'} rejected; "
            "nothing was changed", *rejection_details(bad)]))
    refused_path = join_path(output_dir, REFUSED_DEAD_LETTERS_NAME)
    refusal = (rejection_problem(inputs - present, written, bad, refused_path, max_bad_fraction)
               or parts_problem(parts, staged))
    if refusal is not None:
        write_dead_letters(output_dir, staging, dead_letters, target=refused_path)
        delete_tree(staging)
        raise PublishError(refusal)

    moves: list[tuple[str, str]] = []  # (from, to), full paths
    keep: set[str] = set()
    for split in kept.values():
        for shard in split.shards:
            keep.update((shard.file, *index_names(shard.file)) if compression == "none" else (shard.file,))
    splits: dict[str, SplitEntry] = {name: SplitEntry(name, split.shards, split.to_counts())
                                     for name, split in kept.items()}
    empty: dict[tuple[str, int], ShardEntry] = {}
    for t in sorted(totals, key=lambda t: t.split):
        listed = old.splits.get(t.split)
        label_counts = listed.label_counts() if listed else {}
        if t.merged is not None:
            merged_entry = next(e for i, e in published_entries(output_dir, old, t.split) if i == t.merged)
            for label, count in merged_entry.label_counts.items():
                label_counts[label] = label_counts.get(label, 0) - count
        entries = []
        for index in range(t.final_count):
            final_name = shard_file_name(t.split, index, t.final_count, compression)
            final = join_path(output_dir, final_name)
            if t.planned_shard(index) is None:  # a published shard, kept as it is
                shard = listed.shards[index]
                if shard.file != final_name:
                    moves.append((join_path(output_dir, shard.file), final))
                    if compression == "none":
                        index_file = next((n for n in index_names(shard.file) if n in state.present), None)
                        if index_file is None:
                            delete_tree(staging)
                            raise PublishError(f"split {t.split!r}: the index of {shard.file} is missing: "
                                               "rebuild the split, or append after verify_shards passes")
                        moves.append((join_path(output_dir, index_file), index_name(final)))
                keep.update((final_name, index_name(final_name)) if compression == "none" else (final_name,))
                entries.append(dataclasses.replace(shard, file=final_name, label_counts={}))
                continue
            result = staged.get((t.split, index))
            if result is None:  # a planned shard left empty: written so the set is complete
                result = StagedShard.of(write_shard(output_dir, (t.split, index, t.final_count), [],
                                                    compression, policy.run_id))
                empty[(t.split, index)] = result.entry()
            moves.append((result.staged, final))
            if result.staged_index:
                moves.append((result.staged_index, index_name(final)))
                keep.add(index_name(result.file))
            keep.add(result.file)
            entries.append(result.entry())
        for part in parts:
            if part.split == t.split:
                for label, count in part.label_counts.items():
                    label_counts[label] = label_counts.get(label, 0) + count
        label_counts = {label: count for label, count in label_counts.items() if count}
        splits[t.split] = SplitEntry(t.split, entries, SplitCounts(
            sum(e.records for e in entries), sum(e.bytes for e in entries), len(entries), label_counts))

    # Everything but the shards goes to staging first; the journal then says how to finish.
    def staged_copy(name: str) -> str:
        return join_path(staging, f"{name}.next")

    write_dead_letters(output_dir, staging, dead_letters, target=staged_copy(DEAD_LETTERS_NAME),
                       before=join_path(output_dir, DEAD_LETTERS_NAME))  # the set's, then this run's
    write_atomic(staged_copy(LABELS_NAME), "".join(f"{l}\n" for l in labels).encode("utf-8"), staging)
    shards_file = write_shard_list(output_dir, staging, splits, kept, old, {(p.split, p.part): p for p in parts},
                                   empty, appended=by_split, compression=compression,
                                   target=staged_copy("shards.jsonl"))
    inputs_given = input_values(manifest_fields["options"]) or ()
    built_from = kept_built_from(old, kept)
    for name in written_splits:
        before = split_inputs(old, name) if name in old.splits else ()
        built_from[name] = tuple(dict.fromkeys((*(before or ()), *inputs_given)))
    objects = dict(old.object_labels)
    for class_id, name in manifest_fields.get("object_labels") or ():
        if objects.setdefault(class_id, name) != name:
            delete_tree(staging)
            raise PublishError(f"object class id {class_id} is {objects[class_id]!r} in {output_dir} but "
                               f"{name!r} in this run's inputs; an append keeps the set's ids")
    manifest = Manifest(
        created_by=manifest_fields["created_by"], options=manifest_fields["options"],
        seed=manifest_fields["seed"], compression=compression,
        feature_spec=manifest_fields["feature_spec"], labels=list(labels), splits=splits,
        dead_letters=old.dead_letters + everything.count,
        images=_add_counts(old.images, manifest_fields.get("images") or {}), shards_file=shards_file,
        built_from=built_from, written_splits=sorted(written_splits),
        appended={name: old.splits[name].records if name in old.splits else 0 for name in written_splits},
        object_labels=tuple(sorted(objects.items())),
        near_duplicates=manifest_fields.get("near_duplicates") or {})
    sidecars = sidecar_files(manifest) if sidecar_files else {}
    metadata = [DEAD_LETTERS_NAME, LABELS_NAME, "shards.jsonl"]
    for name, data in sorted(sidecars.items()):
        if data is not None:
            write_atomic(staged_copy(name), data, staging)
            metadata.append(name)
    write_atomic(staged_copy(MANIFEST_NAME), manifest.dumps(), staging)
    metadata.append(MANIFEST_NAME)

    renamed_away = {relative_name(output_dir, source) for source, _ in moves}
    owned = state.owned()
    stale = [name for name in files_to_remove(state.present, owned, keep, False) if name not in renamed_away]
    stale += [name for name, data in sorted(sidecars.items()) if data is None]
    journal = Journal(policy.run_id, tuple(sorted(owned | keep | set(stale))),
                      moves=tuple((relative_name(output_dir, a), relative_name(output_dir, b)) for a, b in moves)
                      + tuple((relative_name(output_dir, staged_copy(name)), name) for name in metadata),
                      remove=tuple(stale))
    check_lock(output_dir, policy.run_id)
    write_atomic(join_path(output_dir, JOURNAL_NAME), journal.dumps(), staging)
    handed: list[Move] = []
    shard_renames = shard_moves(journal)
    if parallel_from is not None and len(shard_renames) >= parallel_from:
        retire_manifest(output_dir, journal)  # before any published shard is renamed
        if any(target.startswith(INDEX_DIR + "/") for _, target in shard_renames):
            make_folder(join_path(output_dir, INDEX_DIR))
        handed = _handed_out(output_dir, journal)
    return AppendCommit(output_dir, journal, manifest, len(handed)), handed


def commit_append(commit: AppendCommit, moved: int) -> Manifest:
    """Carries out the rest of an append's journal (``manifest.json`` last), deletes it and staging.

    Args:
        commit: What ``prepare_append`` decided.
        moved: How many of its handed-out shard renames were done (each must be).

    Raises:
        PublishError: Renames are missing, or a file to rename is gone.
    """
    output_dir = commit.output_dir
    problem = moves_problem(output_dir, commit.moves, moved)
    if problem:
        raise PublishError(problem)
    finish_journal(output_dir, commit.journal, shards_moved=commit.moves > 0)
    delete_if_exists([join_path(output_dir, JOURNAL_NAME)])
    delete_tree(join_path(output_dir, STAGING_DIR))
    return commit.manifest
