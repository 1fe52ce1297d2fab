"""Changing what a folder holds: renames (in parallel), deletions that never follow a link, folders made."""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, Optional, Sequence, Tuple

from transforms.filesystems import BeamIOError, FileSystems, filesystem_of

from transforms.errors import PublishError
from transforms.storage.files import exists, hashes_match
from transforms.storage.listing import list_below, list_folder
from transforms.storage.paths import is_local

__all__ = ["link_problem", "delete_files", "delete_if_exists", "delete_tree", "delete_claimed", "copy_files",
           "rename_files", "rename_all", "move_chunk", "move_chunks", "moves_problem", "Move",
           "RENAME_THREADS", "RENAME_CHUNK", "PARALLEL_MOVES", "make_folder", "delete_empty_folder",
           "file_above", "local_write_problem"]

# Threads renaming files at once, and files per rename call (gs:// and s3:// copy and delete
# each object; a call renames its files one batch request at a time).
RENAME_THREADS = 16
RENAME_CHUNK = 100
# A publish with at least this many renames hands them to many workers, RENAME_CHUNK at a time
# (``shard_sink.PublishShards``); fewer are done by the publishing worker itself.
PARALLEL_MOVES = 1000

# (staged path, final path, sha256 or None): one rename of a publish.
Move = Tuple[str, str, Optional[str]]


def _is_junction(path: str) -> bool:
    is_junction = getattr(os.path, "isjunction", None)  # Windows junctions; Python 3.12+
    return bool(is_junction and is_junction(path))


def link_problem(path: str) -> str | None:
    """Why the tool may not delete or write below local ``path`` (a link, or not a folder); None if it may."""
    if os.path.islink(path) or _is_junction(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"{path} is a link (to {target})"
    return f"{path} is a file, not a folder" if os.path.lexists(path) and not os.path.isdir(path) else None


def delete_files(paths: Sequence[str]) -> None:
    """Deletes files by name (never matched: names may hold wildcard characters)."""
    if paths:
        filesystem_of(paths[0]).delete(list(paths))


def delete_if_exists(paths: Sequence[str]) -> None:
    """Deletes those of ``paths`` that exist; nothing if none does."""
    present = [p for p in paths if exists(p)]
    if present:
        delete_files(present)


def _raise(err: OSError) -> None:
    raise err


def _delete_local_tree(folder: str) -> None:
    """Deletes a local folder bottom-up without following links (a link is unlinked, as a link)."""
    if not os.path.lexists(folder):
        return
    problem = link_problem(folder)
    if problem:
        raise PublishError(f"{problem}; refusing to delete through it")
    files, folders = [], []
    for parent, dirs, names in os.walk(folder, topdown=False, onerror=_raise, followlinks=False):
        for name in names + dirs:
            path = os.path.join(parent, name)
            if os.path.islink(path) or _is_junction(path):
                os.unlink(path)
            elif name in dirs:
                folders.append(path)
            else:
                files.append(path)
    if files:
        delete_files(files)  # the tool's own names (no wildcard characters)
    for path in folders + [folder]:
        os.rmdir(path)


def delete_tree(folder: str) -> None:
    """Deletes ``folder`` and every file below it, if it is there, following no link: one below it is
    removed as a link; ``folder`` itself a link or a file raises ``PublishError``."""
    if is_local(folder):
        _delete_local_tree(folder)
        return
    delete_if_exists(list_below(folder) + [folder])


def delete_claimed(path: str, aside: str) -> bool:
    """Deletes ``path`` so that of two callers at once one does (locally renamed to ``aside`` first); True: this one."""
    if is_local(path):
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return False
        os.remove(aside)
    else:
        delete_files([path])
    return True


def copy_files(pairs: Sequence[tuple[str, str]]) -> None:
    """Copies ``(from, to)`` pairs in one call (on a store, within it: no bytes pass through here)."""
    if pairs:
        filesystem_of(pairs[0][0]).copy([source for source, _ in pairs], [target for _, target in pairs])


def rename_files(pairs: Sequence[tuple[str, str]]) -> None:
    """Renames ``(from, to)`` pairs in one call (on a store: copied, then deleted)."""
    if pairs:
        filesystem_of(pairs[0][0]).rename([source for source, _ in pairs], [target for _, target in pairs])


def rename_all(pairs: Sequence[tuple[str, str]]) -> None:
    """Renames ``(from, to)`` pairs, ``RENAME_THREADS`` chunks of ``RENAME_CHUNK`` at a time (failures raised after)."""
    chunks = [pairs[i:i + RENAME_CHUNK] for i in range(0, len(pairs), RENAME_CHUNK)]
    if len(chunks) == 1:
        rename_files(chunks[0])
    elif chunks:
        with ThreadPoolExecutor(max_workers=min(RENAME_THREADS, len(chunks))) as pool:
            for done in [pool.submit(rename_files, chunk) for chunk in chunks]:
                done.result()


def move_chunk(moves: Sequence[Move]) -> int:
    """Renames staged files to their final names in one call; safe to repeat. Returns how many moves.

    When the call fails, a staged file still there is a failure, and one gone must be at its final
    name (a retried chunk's; checked by sha256 where known), else ``PublishError``.
    """
    try:
        rename_files([(staged, final) for staged, final, _ in moves])
    except BeamIOError as err:
        for staged, final, sha256 in moves:
            if exists(staged):
                why = err.exception_details.get((staged, final), err)
                raise PublishError(f"cannot rename {staged} to {final}: {why}") from err
            if not exists(final) or (sha256 is not None and not hashes_match(final, None, sha256)):
                raise PublishError(f"staged file {staged} is gone and {final} does not hold it") from err
    return len(moves)


def move_chunks(moves: Sequence[Move], size: int = RENAME_CHUNK) -> Iterator[tuple[Move, ...]]:
    """``moves`` in chunks of at most ``size``, in order."""
    for start in range(0, len(moves), size):
        yield tuple(moves[start:start + size])


def moves_problem(output_dir: str, expected: int, moved: int) -> str | None:
    """Why a publish cannot be committed: fewer (or more) renames done than handed out; None if all were."""
    if moved == expected:
        return None
    return (f"{moved:,} of the {expected:,} staged files handed out to be renamed into {output_dir} "
            "were renamed; the set is not published (run again to publish it)")


def make_folder(folder: str) -> None:
    """Makes ``folder`` if it is not there (a no-op on object stores, which have no folders)."""
    if not exists(folder):
        FileSystems.mkdirs(folder)


def delete_empty_folder(folder: str) -> None:
    """Deletes ``folder`` if it is there and holds no file."""
    if exists(folder) and not list_folder(folder):
        delete_files([folder])


def file_above(path: str) -> str | None:
    """Returns the file that a local ``path`` would lie below, if one of its parents is a file."""
    if not is_local(path):
        return None
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(parent):
        if os.path.lexists(parent):
            return parent
        parent = os.path.dirname(parent)
    return None


def local_write_problem(path: str) -> str | None:
    """Why a local file cannot be written at ``path`` (its nearest existing folder refuses new files), or None."""
    if not is_local(path):
        return None
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return f"cannot write in {folder}: {err.strerror or err}"
    return None
