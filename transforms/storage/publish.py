"""Publishing a run's staged shards into its output folder: one journal, carried forward.

Steps (RELIABILITY.md, "Publishing is atomic; a kill at any moment converges"):
checks (0), a plan (1, ``shardset.publish_plan``), the set's other files staged (2), the journal
written (3), then carried out (4, ``journal.finish_journal``), the shard renames on many workers
between ``prepare_publish`` and ``commit_publish`` from ``folders.PARALLEL_MOVES`` of them on.
Nothing it is given grows with shards: counts and the staged parts of the shard list and dead letters.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import pickle
from typing import Any, Callable, Mapping, NoReturn, Sequence

from transforms.errors import NothingToPublish, PublishError, UsageError
from transforms.progress.report import plural
from transforms.shardset.dead_letters import (DeadLetterPart, RejectionSummary, rejection_details, rejection_problem,
                                              rejection_verdict)
from transforms.shardset.manifest import (DEAD_LETTERS_NAME, LABELS_NAME, MANIFEST_NAME, REFUSED_DEAD_LETTERS_NAME,
                                          Manifest, SplitEntry)
from transforms.shardset.naming import join_path
from transforms.shardset.ownership import (JOURNAL_NAME, Journal, PublishPolicy, kept_split_problem, kept_splits,
                                           labels_conflict, merge_labels)
from transforms.shardset.planning import SplitTotals
from transforms.shardset.publish_plan import (SET_FILES, new_manifest, plan_journal, plan_publish, relative_name,
                                              staged_name, unwritten_shards)
from transforms.shardset.replacing import input_values, replace_problem
from transforms.shardset.staged import ShardListPart, StagedShard, parts_problem
from transforms.storage.dead_letter_files import dead_lettered_inputs, repeated_letters, write_dead_letters
from transforms.storage.files import hashes_match, read_if_present
from transforms.storage.folders import PARALLEL_MOVES, Move, delete_tree, make_folder, moves_problem, rename_files
from transforms.storage.journal import finish_journal, pending_manifest, read_journal, retire_manifest, shard_moves
from transforms.storage.run_lock_files import check_lock
from transforms.storage.output_folder import (STAGING_DIR, FolderState, check_own_folders, folder_state,
                                             read_manifest, staging_folder)
from transforms.storage.shard_files import published_entries, staged_of_parts, write_shard, write_shard_list
from transforms.storage.writing import write_atomic
from transforms.tfrecord.record_index import INDEX_DIR

__all__ = ["prepare_publish", "commit_publish", "PublishCommit", "KEPT_SHA256_BUDGET",
           "COMMIT_RECORD_NAME", "stage_commit_record", "staged_commit_record", "published_already"]

_LOG = logging.getLogger(__name__)
# Kept splits are hashed again (CRC32C, or sha256 where a shard has none) when their shards add up to
# at most this many bytes; larger ones are checked by size only (verify_shards reads them all).
KEPT_SHA256_BUDGET = 1 << 30


@dataclasses.dataclass(frozen=True)
class PublishCommit:
    """What the rest of a publish needs once its journal is written (``moves``: shard renames handed
    to the caller; 0: ``finish_journal`` does them all)."""

    output_dir: str
    journal: Journal
    manifest: Manifest
    moves: int


def _check_kept(output_dir: str, kept: Mapping[str, SplitEntry], state: FolderState, compression: str,
                feature_spec: Mapping[str, str], hashed: bool) -> str | None:
    """Why the kept splits cannot be listed again (one line), or None; sizes are checked, and with
    ``hashed`` their hashes too, up to ``KEPT_SHA256_BUDGET`` bytes."""
    for split in sorted(kept.values(), key=lambda s: s.name):
        problem = kept_split_problem(split, state.present, state.manifest, compression, feature_spec)
        if problem:
            return problem
    if not hashed:
        return None
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


def _hand_out(output_dir: str, journal: Journal, parallel_from: int | None) -> list[Move]:
    """The shard renames the caller's workers do (none below ``parallel_from``); the old manifest goes first."""
    renames = shard_moves(journal)
    if parallel_from is None or len(renames) < parallel_from:
        return []
    retire_manifest(output_dir, journal)  # before any published shard is renamed
    if any(target.startswith(INDEX_DIR + "/") for _, target in renames):
        make_folder(join_path(output_dir, INDEX_DIR))
    return [(join_path(output_dir, a), join_path(output_dir, b), None) for a, b in renames]


def _prepared_before(output_dir: str, journal: Journal | None, run_id: str,
                     parallel_from: int | None) -> tuple[PublishCommit, list[Move]] | None:
    """The prepare step run again (a retried bundle) after it wrote its journal: what the journal says."""
    if journal is None or journal.run_id != run_id or not journal.moves:
        return None
    data = pending_manifest(output_dir)
    if data is None:
        return None
    handed = _hand_out(output_dir, journal, parallel_from)
    return PublishCommit(output_dir, journal, Manifest.loads(data), len(handed)), handed


def _refuse(staging: str, error: Exception) -> NoReturn:
    """Clears the run's staging (nothing of it will be published) and raises ``error``."""
    delete_tree(staging)
    raise error


def _build_checks(output_dir: str, state: FolderState, staging: str, kept: Mapping[str, SplitEntry],
                  written_splits: set[str], labels: list[str], compression: str,
                  manifest_fields: Mapping[str, Any], policy: PublishPolicy) -> list[str]:
    """The checks of a run that replaces the splits it writes; returns the set's class names."""
    replacing = None if policy.replace else replace_problem(output_dir, state.manifest, written_splits,
                                                            input_values(manifest_fields["options"]))
    if replacing is not None:  # a split other inputs built: a flag says whether to replace it
        _refuse(staging, UsageError(replacing))
    refusal = _check_kept(output_dir, kept, state, compression, manifest_fields["feature_spec"], hashed=True)
    if refusal is None and kept:
        merged = merge_labels(state.manifest.labels, labels)
        if merged is None:
            refusal = labels_conflict(labels, kept, state.manifest.labels)
        else:
            labels = merged
    if refusal is not None:
        _refuse(staging, PublishError(refusal))
    return labels


def _append_checks(output_dir: str, state: FolderState, staging: str, kept: Mapping[str, SplitEntry],
                   totals: Sequence[SplitTotals], compression: str, manifest_fields: Mapping[str, Any]) -> None:
    """The checks of an append: a set to append to, kept splits as listed, the plan's shard counts."""
    old = state.manifest
    if old is None:
        _refuse(staging, PublishError(f"--append: {join_path(output_dir, MANIFEST_NAME)} is gone; "
                                      "nothing to append to"))
    problem = _check_kept(output_dir, kept, state, compression, manifest_fields["feature_spec"], hashed=False)
    if problem:
        _refuse(staging, PublishError(problem))
    for t in totals:
        listed = old.splits.get(t.split)
        if t.published != (listed.num_shards if listed else 0):
            _refuse(staging, PublishError(
                f"split {t.split!r} has {listed.num_shards if listed else 0} shards in {output_dir}, not the "
                f"{t.published} this run planned for: another run changed the set; append again"))


def _append_refusal(output_dir: str, staging: str, dead_letters: Sequence[DeadLetterPart], inputs: int,
                    written: int, max_bad_fraction: float | None, repeated: int = 0,
                    new_bad: RejectionSummary | None = None) -> str | None:
    """Why an append is not published (too many bad inputs), or None; raises when it has nothing new.

    ``repeated``: inputs the set dead-lettered already (not judged again); ``new_bad``: the others' summary.
    """
    everything = RejectionSummary.merged(part.summary for part in dead_letters)
    bad = RejectionSummary.merged(part.summary if part.bad is None else part.bad for part in dead_letters)
    # Inputs the set already holds are not bad inputs: appending a folder that grew is the usual case.
    present = everything.count - bad.count
    if present == inputs and inputs:
        _refuse(staging, NothingToPublish(f"Nothing to append: all {plural(inputs, 'input')} are already in "
                                          f"{output_dir} (same bytes); nothing was changed"))
    if rejection_verdict(inputs, everything.count, present + repeated, max_bad_fraction).kind == "nothing_new":
        # Nothing new but inputs as bad as before: the inputs the set holds count as good ones.
        _refuse(staging, NothingToPublish("\n".join([
            f"Nothing to append: {present:,} of {plural(inputs, 'input')} are already in {output_dir} "
            f"(same bytes) and the other {bad.count:,} {'was' if bad.count == 1 else 'were'} rejected; "
            "nothing was changed", *rejection_details(bad)])))
    return rejection_problem(inputs - present - repeated, written, bad if new_bad is None else new_bad,
                             join_path(output_dir, REFUSED_DEAD_LETTERS_NAME), max_bad_fraction)


def _stage_dead_letters(output_dir: str, staging: str, staged: Mapping[tuple[str, int], StagedShard],
                        parts: Sequence[ShardListPart], totals: Sequence[SplitTotals],
                        dead_letters: Sequence[DeadLetterPart], inputs: int, max_bad_fraction: float | None,
                        old: Manifest | None, appending: bool) -> tuple[dict[str, Any], int, int]:
    """Stages the set's ``dead_letters.jsonl`` (an append's: the set's, then this run's), or refuses the run
    (too many bad inputs, counts that disagree), leaving its dead letters to read.

    Returns the merged published shard entries (by split), the dead-letter count and the repeated ones.
    """
    staged_letters = _staged_copy(output_dir, staging, DEAD_LETTERS_NAME)
    if appending:
        merged = {t.split: next(e for i, e in published_entries(output_dir, old, t.split) if i == t.merged)
                  for t in totals if t.merged is not None}
        written = sum(s.records for s in staged.values()) - sum(e.records for e in merged.values())
        known = dead_lettered_inputs(join_path(output_dir, DEAD_LETTERS_NAME))
        repeated, new_bad = repeated_letters(dead_letters, known) if known else (0, None)
        refusal = (_append_refusal(output_dir, staging, dead_letters, inputs, written, max_bad_fraction,
                                   repeated, new_bad)
                   or parts_problem(parts, staged))
        if refusal is not None:  # the refused run's dead letters are left to read
            write_dead_letters(output_dir, staging, dead_letters,
                               target=join_path(output_dir, REFUSED_DEAD_LETTERS_NAME))
            _refuse(staging, PublishError(refusal))
        # The set's dead letters, then this run's.
        write_dead_letters(output_dir, staging, dead_letters, target=staged_letters,
                           before=join_path(output_dir, DEAD_LETTERS_NAME), known=known)
        return merged, RejectionSummary.merged(part.summary for part in dead_letters).count - repeated, repeated
    dead = write_dead_letters(output_dir, staging, dead_letters, target=staged_letters)
    refusal = (rejection_problem(inputs, sum(s.records for s in staged.values()), dead,
                                 join_path(output_dir, DEAD_LETTERS_NAME), max_bad_fraction)
               or parts_problem(parts, staged))
    if refusal is not None:  # the refused run's dead letters are left to read
        rename_files([(staged_letters, join_path(output_dir, DEAD_LETTERS_NAME))])
        _refuse(staging, PublishError(refusal))
    return {}, dead.count, 0


def _stage_set_files(output_dir: str, staging: str, manifest: Manifest,
                     sidecar_files: Callable[[Manifest], Mapping[str, bytes | None]] | None,
                     plan: Any, run_id: str) -> Journal:
    """Stages the sidecar files and ``manifest.json``, then writes the journal."""
    sidecars = sidecar_files(manifest) if sidecar_files else {}
    names = list(SET_FILES)
    for name, data in [*sorted(sidecars.items()), (MANIFEST_NAME, manifest.dumps())]:  # manifest.json last
        if data is not None:
            write_atomic(_staged_copy(output_dir, staging, name), data, staging)
            names.append(name)
    staging_name = relative_name(output_dir, staging)
    journal = plan_journal(run_id, plan, [(staged_name(staging_name, name), name) for name in names],
                           removed=[name for name, data in sorted(sidecars.items()) if data is None])
    check_lock(output_dir, run_id)
    write_atomic(join_path(output_dir, JOURNAL_NAME), journal.dumps(), staging)
    return journal


def _staged_copy(output_dir: str, staging: str, name: str) -> str:
    """Where the set file ``name`` is staged (``publish_plan.staged_name``), as a full path."""
    return join_path(output_dir, staged_name(relative_name(output_dir, staging), name))


def _label_counts(parts: Sequence[ShardListPart]) -> dict[str, dict[str, int]]:
    """Split -> label -> records, summed over the shard-list parts."""
    label_counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for part in parts:
        label_counts[part.split].update(part.label_counts)
    return {split: dict(counts) for split, counts in label_counts.items()}


def _stage_manifest(output_dir: str, staging: str, plan: Any, labels: Sequence[str],
                    parts: Sequence[ShardListPart], totals: Sequence[SplitTotals], kept: Mapping[str, SplitEntry],
                    old: Manifest | None, empty: Mapping[tuple[str, int], StagedShard], written_splits: set[str],
                    dead_count: int, manifest_fields: Mapping[str, Any], compression: str,
                    appending: bool, known_dead_letters: int = 0) -> Manifest:
    """Stages ``labels.txt`` and ``shards.jsonl``; returns the new manifest (refused: staging cleared)."""
    write_atomic(_staged_copy(output_dir, staging, LABELS_NAME), "".join(f"{l}\n" for l in labels).encode("utf-8"),
                 staging)
    entries = {key: plan.splits[key[0]].shards[key[1]] for key in empty}
    shards_file = write_shard_list(output_dir, staging, plan.splits, kept, old, {(p.split, p.part): p for p in parts},
                                   entries, appended={t.split: t for t in totals} if appending else None,
                                   compression=compression, target=_staged_copy(output_dir, staging, "shards.jsonl"))
    try:
        manifest = new_manifest(manifest_fields, compression, labels, plan, old, kept, written_splits, dead_count,
                                shards_file, input_values(manifest_fields["options"]), appending=appending,
                                where=output_dir, known_dead_letters=known_dead_letters)
    except PublishError as err:
        _refuse(staging, err)
    return manifest


def prepare_publish(output_dir: str, parts: Sequence[ShardListPart],
                    totals: Sequence[SplitTotals], dead_letters: Sequence[DeadLetterPart],
                    labels: Sequence[str], inputs: int, compression: str,
                    manifest_fields: Mapping[str, Any], max_bad_fraction: float | None,
                    policy: PublishPolicy,
                    sidecar_files: Callable[[Manifest], Mapping[str, bytes | None]] | None = None,
                    parallel_from: int | None = PARALLEL_MOVES) -> tuple[PublishCommit, list[Move]]:
    """Steps 0-3 of a publish (checks, plan, staged set files, journal); hands out the shard renames if many.

    Args:
        parts: The staged parts of the shard list covering every written shard.
        totals: The plan of every split written (empty shards are created).
        inputs: Number of inputs (records written + dead letters must equal it).
        manifest_fields: ``created_by``, ``options``, ``seed``, ``feature_spec`` and a job's own.
        sidecar_files: Gives further files to publish beside the shards (name -> bytes) from the
            manifest about to be written; a name mapped to None is removed if present.
        parallel_from: With at least this many shard renames they are returned (full paths) for
            the caller to do (``folders.move_chunk``) before ``commit_publish``; None: never.

    Raises:
        PublishError: The lock is not this run's, a link stands where its own folders go, a kept split changed or does
            not fit, too many bad inputs, no inputs, counts that disagree, or nothing to append to.
        UsageError: The run writes a published split that other inputs built and ``policy.replace`` is not set.
        NothingToPublish: An append whose every input the set already holds.
    """
    staging = staging_folder(output_dir, policy.run_id)
    check_lock(output_dir, policy.run_id)
    linked = check_own_folders(output_dir)  # checked at the start too; a link made since is refused
    if linked:
        raise PublishError(linked)
    state = folder_state(output_dir)
    again = _prepared_before(output_dir, state.journal, policy.run_id, parallel_from)
    if again is not None:
        return again
    old = state.manifest
    written_splits = {t.split for t in totals}
    kept = kept_splits(old, written_splits, policy)
    if policy.append:
        _append_checks(output_dir, state, staging, kept, totals, compression, manifest_fields)
        labels = list(labels)
    else:
        labels = _build_checks(output_dir, state, staging, kept, written_splits, list(labels), compression,
                               manifest_fields, policy)
    # One small entry per shard, read from the parts' staged files (the side input is the parts only).
    staged = staged_of_parts(output_dir, parts, old, staging, compression)
    merged, dead_count, repeated = _stage_dead_letters(output_dir, staging, staged, parts, totals, dead_letters, inputs,
                                                       max_bad_fraction, old, policy.append)
    file_format = manifest_fields.get("file_format", "tfrecord")
    empty = {(split, index): StagedShard.of(write_shard(output_dir, (split, index, count), [], compression,
                                                        policy.run_id, file_format=file_format))
             for split, index, count in unwritten_shards(totals, staged)}  # the planned shards no worker wrote
    staged.update(empty)
    try:
        plan = plan_publish(output_dir, old, staged, totals, kept, _label_counts(parts), state.present, state.owned(),
                            compression, overwrite_unlisted=policy.overwrite_unlisted and not policy.append,
                            appending=policy.append,
                            merged_counts={split: entry.label_counts for split, entry in merged.items()})
    except PublishError as err:
        _refuse(staging, err)

    manifest = _stage_manifest(output_dir, staging, plan, labels, parts, totals, kept, old, empty, written_splits,
                               dead_count, manifest_fields, compression, policy.append, repeated)
    journal = _stage_set_files(output_dir, staging, manifest, sidecar_files, plan, policy.run_id)
    # From here on the publish only goes forward: nothing the journal names is deleted.
    handed = _hand_out(output_dir, journal, parallel_from)
    return PublishCommit(output_dir, journal, manifest, len(handed)), handed


def commit_publish(commit: PublishCommit, moved: int) -> Manifest:
    """Step 4 of a publish once every handed-out shard rename is done (``moved`` of them); safe to repeat.
    Returns the published manifest (its shard entries without label counts).

    Raises:
        PublishError: Renames are missing, a file to rename is gone, or the lock is no longer this run's.
    """
    output_dir = commit.output_dir
    check_lock(output_dir, commit.journal.run_id)
    journal = read_journal(output_dir)
    if journal is None or journal.run_id != commit.journal.run_id:
        return published_already(output_dir, commit.journal.run_id)  # a retried bundle, after the journal went
    problem = moves_problem(output_dir, commit.moves, moved)
    if problem:
        raise PublishError(problem)
    finish_journal(output_dir, commit.journal, shards_moved=commit.moves > 0)
    delete_tree(join_path(output_dir, STAGING_DIR))  # the lock is this run's: all of it
    kept = sorted(set(commit.manifest.splits) - set(commit.manifest.written_splits))
    if kept:
        _LOG.info("kept splits %s of the earlier set", ", ".join(kept))
    return commit.manifest


# What a publish's prepare step leaves its commit step, in the run's staging folder (pickled).
COMMIT_RECORD_NAME = "publish.commit"


def stage_commit_record(output_dir: str, run_id: str, record: Any) -> str:
    """Writes what the commit step needs in the run's staging folder; returns the path the steps pass
    (the record, an entry per rename, grows with the set)."""
    staging = staging_folder(output_dir, run_id)
    path = join_path(staging, COMMIT_RECORD_NAME)
    write_atomic(path, pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL), staging)
    return path


def staged_commit_record(path: str) -> Any | None:
    """The record ``stage_commit_record`` wrote, or None once the publish finished (staging is gone)."""
    data = read_if_present(path)
    return None if data is None else pickle.loads(data)


def published_already(output_dir: str, run_id: str) -> Manifest:
    """A commit step run again after its run published: finishes clearing and returns the manifest
    (``PublishError``: the lock is not this run's, or no ``manifest.json`` is there)."""
    check_lock(output_dir, run_id)
    published = read_if_present(join_path(output_dir, MANIFEST_NAME))
    if published is None:
        raise PublishError(f"the staged publish record of run {run_id} is gone from {output_dir} and no "
                           "manifest.json was written: run the job again")
    journal = read_journal(output_dir)
    if journal is None or journal.run_id == run_id:
        if journal is not None:  # its last steps: forward, never dropped half done
            finish_journal(output_dir, journal)
            published = read_if_present(join_path(output_dir, MANIFEST_NAME)) or published
        delete_tree(join_path(output_dir, STAGING_DIR))
    return read_manifest(output_dir, published)
