"""Which input a build keeps when several share a relative path, or an image's bytes, and why the rest go.

- One relative path in one split from several inputs: none is kept, each is
  a ``duplicate_path`` dead letter naming a few of the others
  (``same_path_choice``).
- One image's bytes several times: the copy in the split that ranks first
  (``planning.split_rank``), then with the smallest relative path, is kept;
  the others are ``duplicate_image`` (same split) or ``cross_split_duplicate``
  dead letters. A copy already published in a split the run keeps wins over
  every copy of the run (``copy_choice``).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

from transforms.images.items import SPLIT_BY_CONTENT, ImageMeta, SourceImage
from transforms.shardset.dead_letters import DeadLetter
from transforms.shardset.planning import split_rank

__all__ = ["NAMED_DUPLICATES", "IN_APPENDED_SET", "PublishedCopy", "same_path_choice", "copy_choice",
           "in_appended_set"]

# How many other inputs a duplicate_path dead letter names before it only counts them.
NAMED_DUPLICATES = 3


# What the duplicate_image dead letter of an image already in the set a run appends to says.
IN_APPENDED_SET = "of the set this run appends to"


def in_appended_set(letter: DeadLetter) -> bool:
    """True for the dead letter of an input already in the set a run appends to (not a bad input)."""
    return letter.reason == "duplicate_image" and letter.error.endswith(IN_APPENDED_SET)


class PublishedCopy(NamedTuple):
    """An image already published in a split of the output folder, keyed by its sha256."""

    split: str


def _split_named(split: str) -> str:
    return "chosen by content" if split == SPLIT_BY_CONTENT else repr(split)


def _where(source: SourceImage) -> str:
    """Where an input came from: its manifest row, or its path for a listed file."""
    return source.origin or source.path


def _input_order(source: SourceImage) -> tuple[str, str, int]:
    """Sort key of inputs: path, then manifest and row number (``list.csv:9`` before ``:10``)."""
    manifest, _, line = source.origin.rpartition(":")
    return (source.path, manifest, int(line) if line.isdigit() else 0)


def same_path_choice(sources: Iterable[SourceImage]) -> tuple[SourceImage | None, list[DeadLetter]]:
    """The inputs of one (split, relative path) -> the one kept, or None and a dead letter for each.

    Each dead letter names its own manifest row, at most ``NAMED_DUPLICATES``
    of the others and how many there are, so k inputs with one path cost O(k)
    bytes of dead letters, not O(k^2).
    """
    sources = list(sources)
    if len(sources) == 1:
        return sources[0], []
    sources.sort(key=_input_order)
    named = sources[:NAMED_DUPLICATES + 1]
    dead = []
    for source in sources:
        others = [_where(s) for s in named if s is not source][:NAMED_DUPLICATES]
        more = len(sources) - 1 - len(others)
        listed = ", ".join(others) + (f" and {more} more" if more else "")
        row = f" (row {source.origin})" if source.origin else ""
        dead.append(DeadLetter(
            source.path, "duplicate_path",
            f"relative path {source.relpath!r} in split {_split_named(source.split)}{row} also "
            f"comes from {len(sources) - 1} other input{'s' if len(sources) > 2 else ''}: {listed}"))
    return None, dead


def _copy_rank(meta: ImageMeta) -> tuple:
    """Which copy of an image is kept: the one in the winning split, then the smallest path."""
    return (split_rank(meta.source.split), meta.source.relpath, meta.source.path)


def copy_choice(values: Iterable[ImageMeta | PublishedCopy],
                written: Sequence[str] | None = None,
                appending: bool = False) -> tuple[ImageMeta | None, list[DeadLetter]]:
    """The copies of one image's bytes -> the copy kept (``_copy_rank``), or None; a dead letter for each other.

    A copy published in a split this run does not write (``written``: the
    splits this run has images in), which publishing keeps, wins over every
    copy of this run: they are ``cross_split_duplicate`` dead letters.
    Appending (``appending``), a published copy in any split wins: every copy
    of this run is a ``duplicate_image`` dead letter.
    """
    metas, published = [], set()
    for value in values:
        if isinstance(value, PublishedCopy):
            published.add(value.split)
        else:
            metas.append(value)
    if not metas:
        return None, []
    if appending and published:
        where = sorted(published, key=split_rank)[0]
        return None, [DeadLetter(
            meta.source.path, "duplicate_image",
            f"same bytes (sha256 {meta.sha256[:16]}...) as an image already in split {where!r} "
            + IN_APPENDED_SET) for meta in metas]
    kept_splits = sorted(published - set(written or ()))
    if kept_splits:
        return None, [DeadLetter(
            meta.source.path, "cross_split_duplicate",
            f"same bytes (sha256 {meta.sha256[:16]}...) as an image already published in split "
            f"{kept_splits[0]!r} of the output folder, which this run keeps; this copy is in split "
            f"{meta.source.split!r}, and an image belongs to one split only (rebuild both splits "
            "together, or pass --drop_other_splits)") for meta in metas]
    metas.sort(key=_copy_rank)
    kept = metas[0]
    dead = []
    for meta in metas[1:]:
        same = f"same bytes (sha256 {meta.sha256[:16]}...) as {kept.source.relpath!r}"
        if meta.source.split == kept.source.split:
            dead.append(DeadLetter(meta.source.path, "duplicate_image", f"{same} in split {meta.source.split!r}"))
        else:
            dead.append(DeadLetter(
                meta.source.path, "cross_split_duplicate",
                f"{same}: this copy is in split {meta.source.split!r}, that one in split "
                f"{kept.source.split!r}; an image belongs to one split only, and "
                f"{kept.source.split!r} keeps it (test, validation, val, other splits, train)"))
    return kept, dead
