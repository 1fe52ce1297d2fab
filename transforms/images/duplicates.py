"""Which input a build keeps when several share a relative path, or an image's bytes, and why the rest go.

One relative path in one split from several inputs: none is kept (``same_path_choice``). One image's
bytes several times: the copy in the split that ranks first (``planning.split_rank``), then with the
smallest relative path, is kept, unless a copy is already published in a split the run keeps
(``CopyTally.choice``). Images are grouped by a bucket of their sha256 (``content_bucket``); a group
is read twice: ``tally_copies`` keeps one ``CopyTally`` per image (the best copy, a count), and
``copy_letters`` reads it again for each other copy's dead letter, made from the image's
``CopyChoice`` alone (``copy_choices``, ``copy_letter``).
"""

from __future__ import annotations

import collections
import hashlib
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple, Sequence

from transforms.images.items import SPLIT_BY_CONTENT, ImageMeta, SourceImage
from transforms.shardset.dead_letters import IN_APPENDED_SET, DeadLetter
from transforms.shardset.planning import split_rank

__all__ = ["PATH_BUCKET_BITS", "path_bucket", "same_path_choices", "NAMED_DUPLICATES", "PublishedCopy",
           "CopyTally", "CopyChoice", "same_path_choice", "copy_letter", "CONTENT_BUCKET_BITS", "content_bucket",
           "tally_copies", "copy_choices", "copy_letters"]

# How many other inputs a duplicate_path dead letter names before it only counts them.
NAMED_DUPLICATES = 3


class PublishedCopy(NamedTuple):
    """An image already published in a split of the output folder, keyed by its sha256."""

    split: str


def _input_order(source: SourceImage) -> tuple[str, str, int]:
    """Sort key of inputs: path, then manifest and row number (``list.csv:9`` before ``:10``)."""
    manifest, _, line = source.origin.rpartition(":")
    return (source.path, manifest, int(line) if line.isdigit() else 0)


# The inputs of a split are grouped by this many bits of a hash of their relative paths: a group
# holds about n / 4,096 of a split's n inputs (~24,000 at 100M), and the step that reads it holds
# only their relative paths (``same_path_choices``).
PATH_BUCKET_BITS = 12


def path_bucket(relpath: str, bits: int = PATH_BUCKET_BITS) -> int:
    """Returns the bucket (0..2**bits - 1) of a relative path: the top bits of its blake2b hash."""
    digest = hashlib.blake2b(relpath.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - bits)


def same_path_choices(sources: Iterable[SourceImage]) -> Iterator[tuple[SourceImage | None, list[DeadLetter]]]:
    """The inputs of one split -> ``same_path_choice`` per relative path; ``sources`` is read twice,
    holding only the relative paths of all and the inputs that share one."""
    counts = collections.Counter(source.relpath for source in sources)
    shared: dict[str, list[SourceImage]] = {}
    for source in sources:
        if counts[source.relpath] == 1:
            yield source, []
        else:
            shared.setdefault(source.relpath, []).append(source)
    for relpath in sorted(shared):
        yield same_path_choice(shared[relpath])


def same_path_choice(sources: Iterable[SourceImage]) -> tuple[SourceImage | None, list[DeadLetter]]:
    """The inputs of one (split, relative path) -> the one kept, or None and a dead letter for each
    (naming at most ``NAMED_DUPLICATES`` of the others, so k inputs cost O(k) bytes)."""
    sources = list(sources)
    if len(sources) == 1:
        return sources[0], []
    sources.sort(key=_input_order)
    named = sources[:NAMED_DUPLICATES + 1]
    dead = []
    for source in sources:
        others = [s.origin or s.path for s in named if s is not source][:NAMED_DUPLICATES]  # row, or file
        more = len(sources) - 1 - len(others)
        listed = ", ".join(others) + (f" and {more} more" if more else "")
        row = f" (row {source.origin})" if source.origin else ""
        split = "chosen by content" if source.split == SPLIT_BY_CONTENT else repr(source.split)
        dead.append(DeadLetter(
            source.path, "duplicate_path",
            f"relative path {source.relpath!r} in split {split}{row} also "
            f"comes from {len(sources) - 1} other input{'s' if len(sources) > 2 else ''}: {listed}"))
    return None, dead


def _copy_rank(meta: ImageMeta) -> tuple:
    """Which copy of an image is kept: the one in the winning split, then the smallest path."""
    return (split_rank(meta.source.split), meta.source.relpath, meta.source.path)


@dataclass(frozen=True)
class CopyChoice:
    """Which copy of an image's bytes stays: enough to write every other copy's dead letter.

    Attributes:
        kept: ``_copy_rank`` of the copy kept, or None when a published copy stays.
        split: The split of the copy kept, or the first kept split that has the image published.
        relpath: The relative path of the copy kept ('' for a published one).
        appended: The published copy that stays is in the set this run appends to.
    """

    kept: tuple | None
    split: str
    relpath: str
    appended: bool = False


@dataclass(frozen=True)
class CopyTally:
    """The copies of one image's bytes seen so far: the copy of this run that ranks first
    (``_copy_rank``, None before one), how many of this run, and the splits of the output folder that
    already have the image."""

    best: ImageMeta | None = None
    copies: int = 0
    published: frozenset = frozenset()

    def add(self, value: ImageMeta | PublishedCopy) -> "CopyTally":
        """The tally with one more copy (of this run, or published)."""
        if isinstance(value, PublishedCopy):
            return CopyTally(self.best, self.copies, self.published | {value.split})
        best = value if self.best is None or _copy_rank(value) < _copy_rank(self.best) else self.best
        return CopyTally(best, self.copies + 1, self.published)

    def choice(self, written: Sequence[str] | None = None, appending: bool = False) -> CopyChoice | None:
        """Which copy stays (None: no copy of this run).

        A copy published in a split this run does not write (``written``) wins over every copy of
        this run; appending, a published copy in any split wins.
        """
        if self.best is None:
            return None
        if appending and self.published:
            return CopyChoice(None, sorted(self.published, key=split_rank)[0], "", appended=True)
        kept_splits = sorted(self.published - set(written or ()))
        if kept_splits:
            return CopyChoice(None, kept_splits[0], "")
        return CopyChoice(_copy_rank(self.best), self.best.source.split, self.best.source.relpath)


def copy_letter(copy: ImageMeta, choice: CopyChoice) -> DeadLetter | None:
    """The dead letter of one copy of an image, given which copy stays; None for the copy kept."""
    sha256, source = copy.sha256, copy.source
    if choice.appended:
        return DeadLetter(source.path, "duplicate_image", f"same bytes (sha256 {sha256[:16]}...) as an image "
                          f"already in split {choice.split!r} " + IN_APPENDED_SET)
    if choice.kept is None:
        return DeadLetter(
            source.path, "cross_split_duplicate",
            f"same bytes (sha256 {sha256[:16]}...) as an image already published in split "
            f"{choice.split!r} of the output folder, which this run keeps; this copy is in split "
            f"{source.split!r}, and an image belongs to one split only (rebuild both splits "
            "together, or pass --drop_other_splits)")
    if (split_rank(source.split), source.relpath, source.path) == choice.kept:
        return None
    same = f"same bytes (sha256 {sha256[:16]}...) as {choice.relpath!r}"
    if source.split == choice.split:
        return DeadLetter(source.path, "duplicate_image", f"{same} in split {source.split!r}")
    return DeadLetter(
        source.path, "cross_split_duplicate",
        f"{same}: this copy is in split {source.split!r}, that one in split "
        f"{choice.split!r}; an image belongs to one split only, and "
        f"{choice.split!r} keeps it (test, validation, val, other splits, train)")


# Images are grouped by at most this many top bits of their sha256: 65,536 groups of about
# ``planning.GROUP_RECORDS`` images hold 3 billion of them.
CONTENT_BUCKET_BITS = 16


def content_bucket(sha256: str, bits: int = CONTENT_BUCKET_BITS) -> int:
    """Returns the bucket (0..2**bits - 1) of an image's sha256 (hex): its top bits. A published
    record's key that is not hex is hashed (blake2b) instead."""
    try:
        top = int(sha256[:16], 16)
    except ValueError:
        top = int.from_bytes(hashlib.blake2b(sha256.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
    return top >> (64 - bits)


_NO_COPY = CopyTally()


def tally_copies(copies: Iterable[ImageMeta | tuple[str, PublishedCopy]]) -> dict[str, CopyTally]:
    """The copies of a group of images (ImageMeta, or ``(sha256, PublishedCopy)``) -> their
    ``CopyTally`` per sha256: one entry per image, however many copies it has."""
    tallies: dict[str, CopyTally] = {}
    get = tallies.get
    for copy in copies:
        if isinstance(copy, ImageMeta):
            sha256 = copy.sha256
        else:
            sha256, copy = copy
        tallies[sha256] = get(sha256, _NO_COPY).add(copy)
    return tallies


def copy_choices(tallies: dict[str, CopyTally], written: Sequence[str] | None = None,
                 appending: bool = False) -> tuple[list[ImageMeta], dict[str, CopyChoice]]:
    """The copies kept (``CopyTally.choice``), and the choice of each image with copies to reject.

    Args:
        written: The splits this run has images in (``CopyTally.choice``).
    """
    kept, choices = [], {}
    for sha256, tally in tallies.items():
        if tally.copies == 1 and not tally.published:  # one copy, nowhere published: it stays
            kept.append(tally.best)
            continue
        choice = tally.choice(written, appending)
        if choice is None:  # published copies only
            continue
        if choice.kept is not None:
            kept.append(tally.best)
        if tally.copies > 1 or choice.kept is None:
            choices[sha256] = choice
    return kept, choices


def copy_letters(copies: Iterable[ImageMeta | tuple[str, PublishedCopy]],
                 choices: dict[str, CopyChoice]) -> Iterator[DeadLetter]:
    """The dead letter of each copy of this run that another copy of its bytes replaces, one at a
    time (``copy_letter``), given the choices of the images with copies to reject (``copy_choices``)."""
    if not choices:
        return
    for copy in copies:
        choice = choices.get(copy.sha256) if isinstance(copy, ImageMeta) else None
        letter = None if choice is None else copy_letter(copy, choice)
        if letter is not None:
            yield letter
