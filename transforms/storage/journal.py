"""A publish journal with renames still to do: carried out, by the run that wrote it or the next one.

The protocol is ``storage.publish``'s; the next run into the folder finishes a journal a crash left
(``finish_interrupted``) before anything else.
"""

from __future__ import annotations

import logging

from transforms.errors import PublishError
from transforms.shardset.manifest import MANIFEST_NAME
from transforms.shardset.naming import join_path
from transforms.shardset.ownership import JOURNAL_NAME, Journal, is_shard_named
from transforms.storage.files import exists, read_if_present
from transforms.storage.folders import delete_empty_folder, delete_if_exists, make_folder, rename_all, rename_files
from transforms.tfrecord.record_index import INDEX_DIR

__all__ = ["read_journal", "shard_moves", "retire_manifest", "finish_journal", "finish_interrupted", "pending_manifest"]

_LOG = logging.getLogger(__name__)


def read_journal(output_dir: str) -> Journal | None:
    """The folder's publish journal, or None (``ManifestError``: not one this tool wrote)."""
    data = read_if_present(join_path(output_dir, JOURNAL_NAME))
    return None if data is None else Journal.loads(data)


def shard_moves(journal: Journal) -> list[tuple[str, str]]:
    """The renames of a journal that bring shards and ``.idx`` files to their names, in any order."""
    return [(source, target) for source, target in journal.moves if is_shard_named(target)]


def finish_journal(output_dir: str, journal: Journal, shards_moved: bool = False) -> None:
    """Carries out a journal's renames (in order, ``manifest.json`` last) and deletions, then deletes the journal.

    Safe to repeat: a rename whose source is gone was done; with ``shards_moved``, ``shard_moves`` are not looked at.

    Raises:
        PublishError: A file to rename is gone and its target is not there.
    """
    shards, metadata = [], []  # (from, to) renames still to do
    retire_manifest(output_dir, journal)
    for source, target in journal.moves:
        if shards_moved and is_shard_named(target):
            continue
        src, dst = join_path(output_dir, source), join_path(output_dir, target)
        if exists(src):
            (shards if is_shard_named(target) else metadata).append((src, dst))
        elif not exists(dst):
            raise PublishError(f"{src} is gone and {dst} is not there: the publish of run "
                               f"{journal.run_id} cannot be finished; rebuild the set")
    if any(dst.startswith(join_path(output_dir, INDEX_DIR) + "/") for _, dst in shards):
        make_folder(join_path(output_dir, INDEX_DIR))
    if shards:
        rename_all(shards)  # in chunks, many at once
    for pair in metadata:  # in order: manifest.json last
        rename_files([pair])
    delete_if_exists([join_path(output_dir, name) for name in journal.remove])
    if any(name.startswith(INDEX_DIR + "/") for name in journal.remove):
        delete_empty_folder(join_path(output_dir, INDEX_DIR))  # the index folder of an older uncompressed set
    delete_if_exists([join_path(output_dir, JOURNAL_NAME)])


def retire_manifest(output_dir: str, journal: Journal) -> None:
    """Deletes the old ``manifest.json`` while the journal's new one is still staged (readers see none)."""
    if any(target == MANIFEST_NAME and exists(join_path(output_dir, source)) for source, target in journal.moves):
        delete_if_exists([join_path(output_dir, MANIFEST_NAME)])


def finish_interrupted(output_dir: str) -> bool:
    """Finishes the publish a crash interrupted after its journal was written; True if there was one.

    Called by a run holding the lock, before staging (the files still to rename) is cleared.
    """
    journal = read_journal(output_dir)
    if journal is None or not journal.moves:
        return False
    _LOG.warning("finishing the publish of run %s in %s, which was interrupted", journal.run_id, output_dir)
    finish_journal(output_dir, journal)
    return True


def pending_manifest(output_dir: str) -> bytes | None:
    """The manifest an interrupted publish will publish (``finish_interrupted``), or None."""
    journal = read_journal(output_dir)
    staged = [source for source, target in journal.moves if target == MANIFEST_NAME] if journal else []
    return read_if_present(join_path(output_dir, staged[0])) if staged else None
