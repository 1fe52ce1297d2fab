"""Beam steps of the build job that reject duplicates: one relative path, or one image's bytes, twice.

``RejectDuplicatePaths`` rejects inputs that share a relative path in a
split; ``RejectDuplicateImages`` keeps one copy of identical image bytes,
also against the images already published in splits of the output folder
that the run keeps (``ReadPublishedKeys``).
"""

from __future__ import annotations

import logging
from typing import Iterator, NamedTuple, Sequence

import apache_beam as beam

from transforms.errors import ShardsError
from transforms.images.items import SPLIT_BY_CONTENT, ImageMeta, SourceImage
from transforms.progress import counters as progress
from transforms.shardset.dead_letters import DEAD_LETTERS, DeadLetter
from transforms.shardset.planning import split_rank
from transforms.shardset.published_keys import record_keys
from transforms.storage.clients import naming_s3_errors
from transforms.storage.files import STORAGE_ERRORS, open_for_read
from transforms.tfrecord.compression import open_decompressed

__all__ = ["RejectDuplicatePaths", "RejectDuplicateImages", "ReadPublishedKeys", "PublishedCopy",
           "CollectSplitNames"]

_LOG = logging.getLogger(__name__)
# How many other inputs a duplicate_path dead letter names before it only counts them.
_NAMED_DUPLICATES = 3


def _split_named(split: str) -> str:
    return "chosen by content" if split == SPLIT_BY_CONTENT else repr(split)


def _where(source: SourceImage) -> str:
    """Where an input came from: its manifest row, or its path for a listed file."""
    return source.origin or source.path


def _input_order(source: SourceImage) -> tuple[str, str, int]:
    """Sort key of inputs: path, then manifest and row number (``list.csv:9`` before ``:10``)."""
    manifest, _, line = source.origin.rpartition(":")
    return (source.path, manifest, int(line) if line.isdigit() else 0)


def _reject_same_path(keyed):
    """(split, relpath), [SourceImage] -> the image, or dead letters for all of them.

    Each dead letter names its own manifest row, at most ``_NAMED_DUPLICATES``
    of the others and how many there are, so k inputs with one path cost O(k)
    bytes of dead letters, not O(k^2).
    """
    _, sources = keyed
    sources = list(sources)
    if len(sources) == 1:
        yield sources[0]
        return
    sources.sort(key=_input_order)
    named = sources[:_NAMED_DUPLICATES + 1]
    for source in sources:
        others = [_where(s) for s in named if s is not source][:_NAMED_DUPLICATES]
        more = len(sources) - 1 - len(others)
        listed = ", ".join(others) + (f" and {more} more" if more else "")
        row = f" (row {source.origin})" if source.origin else ""
        yield beam.pvalue.TaggedOutput(DEAD_LETTERS, DeadLetter(
            source.path, "duplicate_path",
            f"relative path {source.relpath!r} in split {_split_named(source.split)}{row} also "
            f"comes from {len(sources) - 1} other input{'s' if len(sources) > 2 else ''}: {listed}"))


def _copy_rank(meta: ImageMeta) -> tuple:
    """Which copy of an image is kept: the one in the winning split, then the smallest path."""
    return (split_rank(meta.source.split), meta.source.relpath, meta.source.path)


class PublishedCopy(NamedTuple):
    """An image already published in a split of the output folder, keyed by its sha256."""

    split: str


def _shard_keys(item: tuple[str, str], compression: str) -> Iterator[tuple[str, PublishedCopy]]:
    """(split, published shard) -> (sha256, PublishedCopy) of each of its records.

    A shard that is missing or damaged gives the keys read before the damage:
    whether it matters is publishing's to say (a kept split that changed
    stops the run there, naming the shard; a split this run writes is
    replaced).
    """
    split, path = item
    try:
        with open_for_read(path) as raw, naming_s3_errors(path):
            for key in record_keys(open_decompressed(raw, compression), path):
                yield key, PublishedCopy(split)
    except (*STORAGE_ERRORS, ShardsError) as err:
        _LOG.warning("published shard %s cannot be read to its end (%s); publishing checks it "
                     "if its split is kept", path, err)


class ReadPublishedKeys(beam.PTransform):
    """The keys of the images already published in the output folder's splits.

    Input: the pipeline (``PBegin``). Output: ``(sha256, PublishedCopy)`` per
    record of the given shards, one element per shard read (spread over workers).

    Args:
        shards: ``(split, shard path)`` (``storage.output_folder.published_shards``).
        compression: The shards' compression.
    """

    def __init__(self, shards: Sequence[tuple[str, str]], compression: str) -> None:
        super().__init__()
        self._shards = list(shards)
        self._compression = compression

    def expand(self, pbegin):
        return (pbegin
                | "ListPublishedShards" >> beam.Create(self._shards)  # (split, path)
                | "SpreadPublishedShards" >> beam.Reshuffle()
                | "ReadKeys" >> beam.FlatMap(_shard_keys, self._compression))  # (sha256, PublishedCopy)


def _keep_one_copy(keyed, written: Sequence[str] | None = None):
    """sha256, [ImageMeta or PublishedCopy] -> the copy kept (``_copy_rank``); the rest are dead letters.

    A copy published in a split this run does not write (``written``: the
    splits this run has images in), which publishing keeps, wins over every
    copy of this run: they are ``cross_split_duplicate`` dead letters.
    """
    _, values = keyed
    metas, published = [], set()
    for value in values:
        if isinstance(value, PublishedCopy):
            published.add(value.split)
        else:
            metas.append(value)
    if not metas:
        return
    kept_splits = sorted(published - set(written or ()))
    if kept_splits:
        progress.note(progress.IMAGES_DUPLICATE, len(metas))
        for meta in metas:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, DeadLetter(
                meta.source.path, "cross_split_duplicate",
                f"same bytes (sha256 {meta.sha256[:16]}...) as an image already published in split "
                f"{kept_splits[0]!r} of the output folder, which this run keeps; this copy is in split "
                f"{meta.source.split!r}, and an image belongs to one split only (rebuild both splits "
                "together, or pass --drop_other_splits)"))
        return
    metas.sort(key=_copy_rank)
    kept = metas[0]
    yield kept
    if len(metas) > 1:
        progress.note(progress.IMAGES_DUPLICATE, len(metas) - 1)  # flushed as the bundle ends
    for meta in metas[1:]:
        same = f"same bytes (sha256 {meta.sha256[:16]}...) as {kept.source.relpath!r}"
        if meta.source.split == kept.source.split:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, DeadLetter(
                meta.source.path, "duplicate_image", f"{same} in split {meta.source.split!r}"))
        else:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, DeadLetter(
                meta.source.path, "cross_split_duplicate",
                f"{same}: this copy is in split {meta.source.split!r}, that one in split "
                f"{kept.source.split!r}; an image belongs to one split only, and "
                f"{kept.source.split!r} keeps it (test, validation, val, other splits, train)"))


class _SplitNamesFn(beam.CombineFn):
    """Split names -> the sorted list of the distinct ones."""

    def create_accumulator(self) -> set:
        return set()

    def add_input(self, acc: set, split: str) -> set:
        acc.add(split)
        return acc

    def merge_accumulators(self, accs) -> set:
        return set().union(*accs)

    def extract_output(self, acc: set) -> list[str]:
        return sorted(acc)


class CollectSplitNames(beam.PTransform):
    """Items -> one sorted list of the splits they are in (no item: no element), in one combine.

    Args:
        split_of: item -> split name.
    """

    def __init__(self, split_of) -> None:
        super().__init__()
        self._split_of = split_of

    def expand(self, items):
        return (items
                | "SplitOfEach" >> beam.Map(self._split_of)
                | "Combine" >> beam.CombineGlobally(_SplitNamesFn()).without_defaults())


class RejectDuplicatePaths(beam.PTransform):
    """Two inputs with one relative path in one split: both become dead letters.

    Input: ``PCollection[SourceImage]``. Output: outputs ``main`` (SourceImage)
    and ``DEAD_LETTERS`` (DeadLetter).
    """

    def expand(self, sources):
        return (sources
                | "KeyByPath" >> beam.Map(lambda s: ((s.split, s.relpath), s))
                | "GroupByPath" >> beam.GroupByKey()  # ((split, relpath), [SourceImage])
                | "RejectSamePath" >> beam.FlatMap(_reject_same_path).with_outputs(
                    DEAD_LETTERS, main="main"))


class RejectDuplicateImages(beam.PTransform):
    """Identical image bytes twice, in one split or in several: one copy is kept.

    The copy kept is in the split that ranks first (``planning.split_rank``:
    test, validation, val, other splits by name, train), and within it the
    one with the smallest relative path. Copies in that split become
    ``duplicate_image`` dead letters, copies in other splits
    ``cross_split_duplicate`` ones naming both splits. An image already
    published in a split of the output folder that this run keeps (one it
    writes no image to) keeps its place: every copy of this run is a
    ``cross_split_duplicate``. ``image/key/sha256`` is then unique in the
    whole shard set, so no image is in two splits.
    Input: ``PCollection[ImageMeta]``. Output: outputs ``main`` (ImageMeta)
    and ``DEAD_LETTERS`` (DeadLetter).

    Args:
        published: ``(sha256, PublishedCopy)`` of the output folder's published
            images (``ReadPublishedKeys``), or None.
        written: With ``published``: singleton side input, the splits this run
            has images in.
    """

    def __init__(self, published=None, written=None) -> None:
        super().__init__()
        self._published = published
        self._written = written

    def expand(self, metas):
        keyed = metas | "KeyByContent" >> beam.Map(lambda m: (m.sha256, m))
        side = {}
        if self._published is not None:
            keyed = (keyed, self._published) | "AddPublishedKeys" >> beam.Flatten()
            side = {"written": self._written}
        return (keyed
                | "GroupByContent" >> beam.GroupByKey()  # (sha256, [ImageMeta or PublishedCopy])
                | "KeepOneCopy" >> beam.ParDo(_KeepOneCopyFn(), **side).with_outputs(
                    DEAD_LETTERS, main="main"))


class _KeepOneCopyFn(beam.DoFn):
    """``_keep_one_copy`` over every group; the copies it counts reach the progress report."""

    def process(self, keyed, written=None):
        yield from _keep_one_copy(keyed, written)

    def finish_bundle(self):
        progress.flush()  # a worker process may note nothing more after its last bundle here
