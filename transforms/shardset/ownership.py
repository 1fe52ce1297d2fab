"""Which files of an output folder a publishing run may remove, and which splits it keeps.

Pure code. A run only ever removes files this tool published there: those ``manifest.json``
lists and those a publish's journal claims. A shard-named file that neither lists is the user's
(``--overwrite_unlisted_shards``). A run replaces only the splits it writes; the others are kept,
once checked, unless ``--drop_other_splits``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from transforms.errors import ManifestError
from transforms.shardset.manifest import REFUSED_DEAD_LETTERS_NAME, Manifest, SplitEntry, parse_json
from transforms.shardset.naming import SHARD_NAME_RE
from transforms.shardset.resume import RunMarker
from transforms.shardset.key_files import KEYS_SUFFIX, keys_name
from transforms.tfrecord.record_index import INDEX_DIR, INDEX_SUFFIX, index_names

__all__ = ["JOURNAL_NAME", "PublishPolicy", "Journal", "is_shard_named", "owned_files",
           "unlisted_shard_files", "unlisted_problem", "kept_splits", "kept_split_problem",
           "merge_labels", "labels_conflict", "files_to_remove"]

JOURNAL_NAME = ".publishing.json"


@dataclass(frozen=True)
class PublishPolicy:
    """How one run treats what is already in its output folder (the flags of the same names).

    Attributes:
        run_id: The run's id (32 hex digits): its lock and its staging folder.
        replace: Replace a published split this run writes though other inputs built it.
        resume: The marker of a run that may resume an interrupted one (a build); else None.
    """

    run_id: str
    overwrite_unlisted: bool = False
    drop_other_splits: bool = False
    replace: bool = False
    append: bool = False
    resume: RunMarker | None = None
    fresh: bool = False
    staging_dir: str | None = None


@dataclass(frozen=True)
class Journal:
    """What a publish under way may remove (``claimed``), the renames still to do in order
    (``manifest.json`` last; any run that finds them finishes them), and what to delete after."""

    run_id: str
    claimed: tuple[str, ...]
    moves: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()

    def dumps(self) -> bytes:
        obj: dict = {"run_id": self.run_id, "claimed": sorted(set(self.claimed))}
        if self.moves or self.remove:
            obj.update(moves=[list(move) for move in self.moves], remove=list(self.remove))
        return (json.dumps(obj, indent=1) + "\n").encode("utf-8")

    @classmethod
    def loads(cls, data: bytes) -> "Journal":
        """Parses a journal (``ManifestError``: not one this tool wrote)."""
        obj = parse_json(data, f"{JOURNAL_NAME} is not JSON")
        claimed = obj.get("claimed") if isinstance(obj, dict) else None
        if (not isinstance(claimed, list) or not all(isinstance(n, str) for n in claimed)
                or not isinstance(obj.get("run_id"), str)):
            raise ManifestError(f"{JOURNAL_NAME} lacks run_id or a list of claimed files")
        moves, remove = obj.get("moves", []), obj.get("remove", [])
        if (not isinstance(moves, list) or not all(
                isinstance(m, list) and len(m) == 2 and all(isinstance(n, str) for n in m) for m in moves)
                or not isinstance(remove, list) or not all(isinstance(n, str) for n in remove)):
            raise ManifestError(f"{JOURNAL_NAME}: moves must be [from, to] name pairs and remove names")
        return cls(obj["run_id"], tuple(claimed), tuple((a, b) for a, b in moves), tuple(remove))


def is_shard_named(name: str) -> bool:
    """True for ``split-NNNNN-of-NNNNN.tfrecord[.gz|.zz]``, such a name plus ``.idx``, and
    ``index/`` plus such an index name or keys file name (names relative to the output folder)."""
    if name.startswith(INDEX_DIR + "/"):
        name = name[len(INDEX_DIR) + 1:]
        if name.endswith(KEYS_SUFFIX):
            return bool(SHARD_NAME_RE.match(name[:-len(KEYS_SUFFIX)]))
        if not name.endswith(INDEX_SUFFIX):
            return False
    base = name[:-len(INDEX_SUFFIX)] if name.endswith(INDEX_SUFFIX) else name
    return bool(SHARD_NAME_RE.match(base))


def owned_files(manifest: Manifest | None, journal: Journal | None) -> set[str]:
    """File names the tool published in the folder: shards listed, both places of their index
    (``index/NAME.idx``, older sets ``NAME.idx``), their keys file, the journal's claims."""
    shards = manifest.shard_files() if manifest is not None else ()
    owned = {path for name in shards for path in (name, *index_names(name), keys_name(name))}
    if journal is not None:
        owned |= set(journal.claimed)
    return owned


def unlisted_shard_files(names: Iterable[str], owned: set[str]) -> list[str]:
    """Shard-named files among ``names`` that the tool does not own, sorted."""
    return sorted(n for n in names if is_shard_named(n) and n not in owned)


def unlisted_problem(folder: str, unlisted: Sequence[str], manifest_problem: str | None) -> str | None:
    """One line refusing to start because of files the tool did not publish, or None."""
    if not unlisted:
        return None
    why = (f"its manifest.json cannot be read ({manifest_problem})" if manifest_problem
           else "no manifest.json of this tool lists them")
    more = f" and {len(unlisted) - 1} more" if len(unlisted) > 1 else ""
    return (f"--output_dir {folder} holds shard-named files this tool did not publish there "
            f"({why}): {unlisted[0]}{more}; move them away, choose another --output_dir, or "
            "pass --overwrite_unlisted_shards to let this run delete them")


def kept_splits(old: Manifest | None, written: Iterable[str], policy: PublishPolicy) -> dict[str, SplitEntry]:
    """Splits of the previous manifest that this run keeps (those it does not write)."""
    if old is None or policy.drop_other_splits:
        return {}
    written = set(written)
    return {name: split for name, split in old.splits.items() if name not in written}


def kept_split_problem(split: SplitEntry, present: Mapping[str, int], old: Manifest,
                       compression: str, feature_spec: Mapping[str, str]) -> str | None:
    """Why a kept split of ``old`` cannot be listed again by a run of ``compression`` and
    ``feature_spec`` (one line), or None; ``present`` is name -> size of the folder's files now."""
    fix = f"rebuild split {split.name!r} too, or pass --drop_other_splits to remove it"
    if old.compression != compression:
        return (f"split {split.name!r} in the folder is {old.compression}-compressed but this run "
                f"writes {compression}; one manifest has one compression: {fix}")
    if dict(old.feature_spec) != dict(feature_spec):
        return f"split {split.name!r} in the folder has another feature spec than this run's records: {fix}"
    for shard in split.shards:
        if shard.file not in present:
            return f"split {split.name!r}: {shard.file}, listed in manifest.json, is missing: {fix}"
        if present[shard.file] != shard.bytes:
            return (f"split {split.name!r}: {shard.file} has {present[shard.file]} bytes, "
                    f"manifest.json lists {shard.bytes}: {fix}")
        if compression == "none" and old.file_format == "tfrecord" and not any(
                n in present for n in index_names(shard.file)):  # ArrayRecord files index themselves
            return f"split {split.name!r}: {index_names(shard.file)[0]} is missing: {fix}"
    return None


def merge_labels(kept: Sequence[str], new: Sequence[str]) -> list[str] | None:
    """The class list of a set with kept splits, or None if the two disagree: one must start the other
    (an index means one class in every split), and the longer wins."""
    kept, new = list(kept), list(new)
    short, long = (kept, new) if len(kept) <= len(new) else (new, kept)
    return long if long[:len(short)] == short else None


def labels_conflict(labels: Sequence[str], kept: Iterable[str], kept_labels: Sequence[str]) -> str:
    """The refusal of a run whose classes and those of the kept splits disagree (``merge_labels``)."""
    return (f"the classes of this run ({', '.join(labels) or 'none'}) and those of the kept "
            f"splits {', '.join(sorted(kept))} ({', '.join(kept_labels)}) give some index "
            "two meanings; fix the class list (--class_names), rebuild those splits too, or "
            "pass --drop_other_splits")


def files_to_remove(present: Iterable[str], owned: set[str], keep: set[str],
                    overwrite_unlisted: bool) -> list[str]:
    """Files to delete when a set is published: shard-named ones owned (or, if allowed, any) not
    in ``keep``, and the dead letters of an append refused before (they told of that run)."""
    return sorted(n for n in present if (is_shard_named(n) and n not in keep and (n in owned or overwrite_unlisted))
                  or n == REFUSED_DEAD_LETTERS_NAME)
