"""Publishing a run's staged shards into its output folder, all at once.

``publish_shards`` runs once, after every shard is written to staging
(``shard_files.write_shard``), and makes the result visible in an order that
never lets ``manifest.json`` name a missing or partial file:

0. check that the folder's lock still holds this run, and that the splits of
   the previous manifest this run does not write (kept splits) are still as
   listed; refuse otherwise, having changed nothing;
1. write ``dead_letters.jsonl`` (merged from the sorted parts the workers
   staged: ``dead_letter_files.write_dead_letters``); refuse to publish if
   too many inputs were bad (from the parts' counts);
2. write the journal (``.publishing.json``: every file the tool owns in the
   folder, old and new), then delete the old ``manifest.json`` (from here on,
   no manifest is present, and the journal says which files are the tool's;
   a copy stays in the run's staging folder, ``PREVIOUS_MANIFEST``, so that
   the prepare step run again by a retried bundle knows the set it replaces);
3. rename staged shards and ``.idx`` files to their final names: a few
   (fewer than ``folders.PARALLEL_MOVES``) at once in threads
   (``folders.move_all``); more by the caller on many workers, in chunks
   (``folders.move_chunk``), between ``prepare_publish`` (steps 0-2) and
   ``commit_publish`` (steps 4-5), which checks that every rename was done;
4. delete the files of earlier runs that the new set does not have: only
   files the previous manifest (or journal) lists, and, with
   ``--overwrite_unlisted_shards``, other shard-named files;
5. write ``labels.txt`` and the shard list ``shards.jsonl`` (streamed: the
   parts the workers wrote, joined in order, and the kept splits' lines;
   ``shard_files.write_shard_list``), check the lock again, write
   ``manifest.json`` (new splits and kept ones; it names ``shards.jsonl`` with
   its sha256), delete the journal and clear the staging folder.

Nothing it is given grows with shards: its side inputs are counts and the
staged parts of the shard list (a path, counts and label totals per part of
up to ``PART_SHARDS`` shards). Nothing it holds grows with shards x labels or
with dead letters: it reads the written shards' rows from the parts' staged
files (without their label counts), keeps one small entry per shard and the splits' label totals, copies the shard list from the staged
parts line by line, and is given the dead letters as staged parts with their
counts.

Every file is written under a temporary name in the run's staging folder
(``.staging/<run id>/``) and then renamed into place, so a crash leaves no
temporary file beside the shards. Running out of space while writing fails
with one line naming the folder and the space the run's shards need.

A crash anywhere leaves either no manifest or a complete one; rerunning the
job into the same folder converges on the same bytes.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
from typing import Any, Callable, Mapping, Sequence

from transforms.errors import PublishError, UsageError
from transforms.shardset.dead_letters import DeadLetterPart, rejection_problem
from transforms.shardset.manifest import (DEAD_LETTERS_NAME, LABELS_NAME, MANIFEST_NAME, Manifest, ShardEntry,
                                          SplitCounts, SplitEntry)
from transforms.shardset.naming import join_path
from transforms.shardset.ownership import (JOURNAL_NAME, Journal, PublishPolicy, files_to_remove,
                                           kept_split_problem, kept_splits, merge_labels)
from transforms.shardset.planning import SplitTotals
from transforms.shardset.replacing import input_values, kept_built_from, replace_problem
from transforms.shardset.staged import ShardListPart, StagedShard, parts_problem
from transforms.storage.dead_letter_files import write_dead_letters
from transforms.storage.files import exists, hashes_match, read_if_present
from transforms.storage.folders import (PARALLEL_MOVES, Move, delete_empty_folder, delete_if_exists, delete_tree,
                                       make_folder, move_all, moves_problem)
from transforms.storage.lock import check_lock
from transforms.storage.output_folder import (STAGING_DIR, FolderState, check_own_folders, folder_state,
                                             read_manifest, staging_folder)
from transforms.storage.shard_files import staged_of_parts, write_shard, write_shard_list
from transforms.storage.writing import write_atomic
from transforms.tfrecord.record_index import INDEX_DIR, index_name, index_names

__all__ = ["publish_shards", "prepare_publish", "commit_publish", "PublishCommit", "KEPT_SHA256_BUDGET",
           "COMMIT_RECORD_NAME", "stage_commit_record", "staged_commit_record", "published_already"]

_LOG = logging.getLogger(__name__)
# The manifest a publish deleted, kept in its staging folder until it commits: a retried
# prepare step of the same run (the journal is its own) reads the set it replaces from it.
PREVIOUS_MANIFEST = "manifest.previous.json"
# Kept splits are hashed again (CRC32C, or sha256 where a shard has none) when their shards add up to
# at most this many bytes; larger ones are checked by size only (verify_shards reads them all).
KEPT_SHA256_BUDGET = 1 << 30


def _check_kept(output_dir: str, kept: Mapping[str, SplitEntry], state, compression: str,
                feature_spec: Mapping[str, str]) -> str | None:
    """Why the kept splits cannot be listed again (one line), or None.

    Sizes are checked always; CRC32C (or sha256) too when the kept shards add up to at
    most ``KEPT_SHA256_BUDGET`` bytes (reading more would cost as much as the run).
    """
    for split in sorted(kept.values(), key=lambda s: s.name):
        problem = kept_split_problem(split, state.present, state.manifest, compression, feature_spec)
        if problem:
            return problem
    if sum(split.bytes for split in kept.values()) > KEPT_SHA256_BUDGET:
        _LOG.info("kept splits %s checked by size only; verify_shards checks their bytes",
                  ", ".join(sorted(kept)))
        return None
    for split in sorted(kept.values(), key=lambda s: s.name):
        for shard in split.shards:
            if not hashes_match(join_path(output_dir, shard.file), shard.crc32c, None if shard.crc32c else shard.sha256):
                stated = "CRC32C" if shard.crc32c else "sha256"
                return (f"split {split.name!r}: {shard.file} no longer has the {stated} its shard list states: "
                        f"rebuild split {split.name!r} too, or pass --drop_other_splits to remove it")
    return None


@dataclasses.dataclass(frozen=True)
class PublishCommit:
    """What the rest of a publish needs once its journal is written and its renames are handed out.

    ``prepare_publish`` makes it; ``commit_publish`` finishes the publish from
    it. It names no staged file: the renames travel apart, in chunks.

    Attributes:
        output_dir: Output folder.
        run_id: The publishing run's id.
        compression: Shard compression.
        manifest_fields: As ``publish_shards``'s.
        labels: Class names in index order (merged with the kept splits').
        splits: Every split of the new set, with one small entry per shard.
        kept: The splits of the earlier set listed again.
        old: The manifest the folder held, or None.
        parts: The staged parts of the shard list, by ``(split, part)``.
        empty: The entries of the empty shards written at publish, by ``(split, index)``.
        stale: Names of earlier files to delete once the renames are done.
        keep_index: Whether the set keeps its ``index/`` folder.
        dead_letters: The number of dead letters written.
        written_splits: The splits this run writes.
        inputs_given: The inputs recorded for the written splits.
        moves: Renames handed to the caller (0: ``prepare_publish`` did them all).
    """

    output_dir: str
    run_id: str
    compression: str
    manifest_fields: Mapping[str, Any]
    labels: tuple[str, ...]
    splits: Mapping[str, SplitEntry]
    kept: Mapping[str, SplitEntry]
    old: Manifest | None
    parts: Mapping[tuple[str, int], ShardListPart]
    empty: Mapping[tuple[str, int], ShardEntry]
    stale: tuple[str, ...]
    keep_index: bool
    dead_letters: int
    written_splits: tuple[str, ...]
    inputs_given: Any
    moves: int


def _with_previous_manifest(output_dir: str, state: FolderState, run_id: str, staging: str) -> FolderState:
    """``state``, with the manifest this run deleted when the prepare step runs again (a retried bundle)."""
    if state.manifest is not None or state.journal is None or state.journal.run_id != run_id:
        return state
    data = read_if_present(join_path(staging, PREVIOUS_MANIFEST))
    return state if data is None else dataclasses.replace(state, manifest=read_manifest(output_dir, data))


def publish_shards(output_dir: str, parts: Sequence[ShardListPart],
                   totals: Sequence[SplitTotals], dead_letters: Sequence[DeadLetterPart],
                   labels: Sequence[str], inputs: int, compression: str,
                   manifest_fields: Mapping[str, Any], max_bad_fraction: float | None,
                   policy: PublishPolicy,
                   sidecar_files: Callable[[Manifest], Mapping[str, bytes]] | None = None) -> Manifest:
    """Publishes staged shards in one process; see the module docstring for the order of steps.

    ``prepare_publish`` with every rename done in it, then ``commit_publish``.
    Arguments are those of ``prepare_publish``, and ``sidecar_files``: gives
    further files to write beside the shards (name -> bytes) from the manifest
    about to be written; they are written just before it. A name mapped to
    None is a file of an earlier run this run does not have: it is removed if present.

    Returns:
        The published manifest (its shard entries without label counts).
    """
    commit, _ = prepare_publish(output_dir, parts, totals, dead_letters, labels, inputs, compression,
                                manifest_fields, max_bad_fraction, policy, parallel_from=None)
    return commit_publish(commit, 0, sidecar_files)


def prepare_publish(output_dir: str, parts: Sequence[ShardListPart],
                    totals: Sequence[SplitTotals], dead_letters: Sequence[DeadLetterPart],
                    labels: Sequence[str], inputs: int, compression: str,
                    manifest_fields: Mapping[str, Any], max_bad_fraction: float | None,
                    policy: PublishPolicy, parallel_from: int | None = PARALLEL_MOVES,
                    ) -> tuple[PublishCommit, list[Move]]:
    """Steps 0-2 of a publish (checks, dead letters, journal, old manifest deleted); decides every rename.

    Args:
        output_dir: Output folder.
        parts: The staged parts of the shard list (``write_shard_list_part``)
            covering every written shard: their label counts and record
            counts, and the staged files of their shards' lines and rows
            (staged names, sizes, sha256), read here one part at a time.
        totals: The plan of every split (for shard counts; empty shards are created).
        dead_letters: The staged parts of the dead letters
            (``dead_letter_files.write_dead_letter_part``), every rejected input
            in one of them.
        labels: Class names in index order.
        inputs: Number of inputs (records written + dead letters must equal it).
        compression: Shard compression.
        manifest_fields: ``created_by``, ``options``, ``seed``, ``feature_spec``
            and, for builds, ``images`` and ``object_labels``.
        max_bad_fraction: Refuse to publish when more inputs than this fraction
            were rejected; None for no limit.
        policy: The run's id and how it treats what the folder already holds.
        parallel_from: With at least this many renames they are returned
            for the caller to do (``folders.move_chunk``, on many workers)
            before ``commit_publish``; fewer are done here. None: always here.

    Returns:
        The commit record, and the renames left to the caller (none when done here).

    Raises:
        PublishError: The lock is not this run's, a link stands where its own folders go, a kept split changed or does
            not fit, too many bad inputs, no inputs, or counts that disagree.
        UsageError: The run writes a published split that other inputs built
            (``manifest_fields["options"]["input"]`` against what the manifest
            records) and ``policy.replace`` is not set.
    """
    staging = staging_folder(output_dir, policy.run_id)
    check_lock(output_dir, policy.run_id)
    linked = check_own_folders(output_dir)  # checked at the start too; a link made since is refused
    if linked:
        raise PublishError(linked)
    state = _with_previous_manifest(output_dir, folder_state(output_dir), policy.run_id, staging)
    written_splits = {t.split for t in totals}
    kept = kept_splits(state.manifest, written_splits, policy)
    inputs_given = input_values(manifest_fields["options"])
    replacing = None if policy.replace else replace_problem(output_dir, state.manifest, written_splits,
                                                            inputs_given)
    if replacing is not None:  # a split other inputs built: a flag says whether to replace it
        delete_tree(staging)
        raise UsageError(replacing)
    labels = list(labels)
    refusal = _check_kept(output_dir, kept, state, compression, manifest_fields["feature_spec"])
    if refusal is None and kept:
        merged = merge_labels(state.manifest.labels, labels)
        if merged is None:
            refusal = (f"the classes of this run ({', '.join(labels) or 'none'}) and those of the "
                       f"kept splits {', '.join(sorted(kept))} ({', '.join(state.manifest.labels)}) "
                       "give some index two meanings; fix the class list (--class_names), rebuild "
                       "those splits too, or pass --drop_other_splits")
        else:
            labels = merged
    if refusal is not None:
        delete_tree(staging)
        raise PublishError(refusal)

    # One small entry per shard, read from the parts' staged files (the side input is the parts only).
    staged = staged_of_parts(output_dir, parts, state.manifest, staging, compression)
    dead = write_dead_letters(output_dir, staging, dead_letters)  # their summary: counts, a few examples
    dead_path = join_path(output_dir, DEAD_LETTERS_NAME)
    written = sum(s.records for s in staged.values())
    refusal = (rejection_problem(inputs, written, dead, dead_path, max_bad_fraction)
               or parts_problem(parts, staged))
    if refusal is not None:
        delete_tree(staging)
        raise PublishError(refusal)

    splits: dict[str, SplitEntry] = {name: SplitEntry(name, split.shards, split.to_counts())
                                     for name, split in kept.items()}
    keep: set[str] = set()
    for split in kept.values():
        for shard in split.shards:
            keep.update((shard.file, *index_names(shard.file)) if compression == "none" else (shard.file,))
    moves: list[Move] = []
    empty: dict[tuple[str, int], ShardEntry] = {}
    for plan in sorted(totals, key=lambda t: t.split):
        entries = []
        for index in range(plan.num_shards):
            result = staged.get((plan.split, index))
            if result is None:  # a shard the plan left empty: write it so the set is complete
                result = StagedShard.of(write_shard(output_dir, (plan.split, index, plan.num_shards), [],
                                                    compression, policy.run_id))
                empty[(plan.split, index)] = result.entry()
            final = join_path(output_dir, result.file)
            moves.append((result.staged, final, result.sha256))
            if result.staged_index:
                moves.append((result.staged_index, index_name(final), None))
                keep.add(index_name(result.file))
            keep.add(result.file)
            entries.append(result.entry())
        label_counts: dict[str, int] = {}
        for part in parts:
            if part.split == plan.split:
                for label, count in part.label_counts.items():
                    label_counts[label] = label_counts.get(label, 0) + count
        splits[plan.split] = SplitEntry(plan.split, entries, SplitCounts(
            sum(e.records for e in entries), sum(e.bytes for e in entries), len(entries), label_counts))
    owned = state.owned()
    stale = files_to_remove(state.present, owned, keep, policy.overwrite_unlisted)
    journal = Journal(policy.run_id, tuple(sorted(owned | keep | set(stale))))
    write_atomic(join_path(output_dir, JOURNAL_NAME), journal.dumps(), staging)

    previous = read_if_present(join_path(output_dir, MANIFEST_NAME))
    if previous is not None:
        write_atomic(join_path(staging, PREVIOUS_MANIFEST), previous, staging)
    delete_if_exists([join_path(output_dir, MANIFEST_NAME)])
    index_dir = join_path(output_dir, INDEX_DIR)
    keep_index = any(final.startswith(index_dir + "/") for _, final, _ in moves) or any(
        name.startswith(INDEX_DIR + "/") for name in keep if name in state.present)
    if keep_index:
        make_folder(index_dir)  # a no-op on object stores, which have no folders
    if parallel_from is None or len(moves) < parallel_from:
        move_all(staging, moves)
        moves = []
    commit = PublishCommit(
        output_dir=output_dir, run_id=policy.run_id, compression=compression, manifest_fields=manifest_fields,
        labels=tuple(labels), splits=splits, kept=kept, old=state.manifest,
        parts={(p.split, p.part): p for p in parts}, empty=empty, stale=tuple(stale), keep_index=keep_index,
        dead_letters=dead.count, written_splits=tuple(sorted(written_splits)), inputs_given=inputs_given,
        moves=len(moves))
    return commit, moves


def commit_publish(commit: PublishCommit, moved: int,
                   sidecar_files: Callable[[Manifest], Mapping[str, bytes | None]] | None = None) -> Manifest:
    """Steps 4-5 of a publish, once every rename ``prepare_publish`` handed out is done; ``manifest.json`` last.

    Repeated after it finished (a retried bundle: ``manifest.json`` is in
    place), it finishes what is left of its last steps and returns the
    published manifest.

    Args:
        commit: What ``prepare_publish`` decided.
        moved: How many of its handed-out renames were done (each must be).
        sidecar_files: As ``publish_shards``'s.

    Returns:
        The published manifest (its shard entries without label counts).

    Raises:
        PublishError: Renames are missing, or the lock is no longer this run's.
    """
    output_dir, compression, kept, labels = commit.output_dir, commit.compression, commit.kept, list(commit.labels)
    manifest_fields, written_splits, inputs_given = commit.manifest_fields, set(commit.written_splits), \
        commit.inputs_given
    staging = staging_folder(output_dir, commit.run_id)
    check_lock(output_dir, commit.run_id)
    if exists(join_path(output_dir, MANIFEST_NAME)):  # only this step writes it after the prepare step
        return published_already(output_dir, commit.run_id)  # a retried bundle
    problem = moves_problem(output_dir, commit.moves, moved)
    if problem:
        raise PublishError(problem)
    if commit.stale:
        delete_if_exists([join_path(output_dir, name) for name in commit.stale])
    if not commit.keep_index:
        delete_empty_folder(join_path(output_dir, INDEX_DIR))  # the empty index folder of an earlier uncompressed run

    write_atomic(join_path(output_dir, LABELS_NAME), "".join(f"{l}\n" for l in labels).encode("utf-8"),
                 staging)
    splits, old = commit.splits, commit.old
    shards_file = write_shard_list(output_dir, staging, splits, kept, old, commit.parts, commit.empty)
    manifest = Manifest(
        created_by=manifest_fields["created_by"], options=manifest_fields["options"],
        seed=manifest_fields["seed"], compression=compression,
        feature_spec=manifest_fields["feature_spec"], labels=list(labels), splits=splits,
        dead_letters=commit.dead_letters, images=manifest_fields.get("images") or {}, shards_file=shards_file,
        built_from={**kept_built_from(old, kept),
                    **({name: inputs_given for name in written_splits} if inputs_given else {})},
        written_splits=sorted(written_splits), object_labels=manifest_fields.get("object_labels") or (),
        near_duplicates=manifest_fields.get("near_duplicates") or {})
    sidecars = sidecar_files(manifest) if sidecar_files else {}
    delete_if_exists([join_path(output_dir, name) for name, data in sorted(sidecars.items()) if data is None])
    for name, data in sorted(sidecars.items()):
        if data is not None:
            write_atomic(join_path(output_dir, name), data, staging)
    check_lock(output_dir, commit.run_id)
    write_atomic(join_path(output_dir, MANIFEST_NAME), manifest.dumps(), staging)
    delete_if_exists([join_path(output_dir, JOURNAL_NAME)])
    delete_tree(join_path(output_dir, STAGING_DIR))  # the lock is this run's: all of it
    if kept:
        _LOG.info("kept splits %s of the earlier set", ", ".join(sorted(kept)))
    return manifest


# What a publish's prepare step leaves its commit step, in the run's staging folder (pickled).
COMMIT_RECORD_NAME = "publish.commit"


def stage_commit_record(output_dir: str, run_id: str, record: Any) -> str:
    """Writes what the commit step needs in the run's staging folder; returns the file's path.

    The commit record holds an entry per shard (~134 bytes pickled), so the
    step that prepares a publish hands the step that commits it this file's
    path, not the record: no element between them grows with the set. Both
    steps run the same code, which pickled it; the file goes with staging.
    """
    staging = staging_folder(output_dir, run_id)
    path = join_path(staging, COMMIT_RECORD_NAME)
    write_atomic(path, pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL), staging)
    return path


def staged_commit_record(path: str) -> Any | None:
    """The record ``stage_commit_record`` wrote, or None once the publish finished (staging is gone)."""
    data = read_if_present(path)
    return None if data is None else pickle.loads(data)


def published_already(output_dir: str, run_id: str) -> Manifest:
    """A commit step run again after its run published: finishes clearing and returns the manifest.

    Raises:
        PublishError: The lock is not this run's, or no ``manifest.json`` is there (the staged
            record is gone, yet the run did not publish).
    """
    check_lock(output_dir, run_id)
    published = read_if_present(join_path(output_dir, MANIFEST_NAME))
    if published is None:
        raise PublishError(f"the staged publish record of run {run_id} is gone from {output_dir} and no "
                           "manifest.json was written: run the job again")
    delete_if_exists([join_path(output_dir, JOURNAL_NAME)])
    delete_tree(join_path(output_dir, STAGING_DIR))
    return read_manifest(output_dir, published)
