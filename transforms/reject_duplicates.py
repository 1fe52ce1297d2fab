"""Beam steps of the build job that reject duplicates: one relative path, or one image's bytes, twice.

``RejectDuplicatePaths`` rejects inputs that share a relative path in a
split; ``RejectDuplicateImages`` keeps one copy of identical image bytes
(also against published ones, ``ReadPublishedKeys``) and, with a
``NearDuplicateRule``, finds near-duplicates across splits.
"""

from __future__ import annotations

import logging
import typing
from typing import Iterator, NamedTuple, Sequence

import apache_beam as beam
import crc32c
from apache_beam import coders
from apache_beam.metrics import Metrics

from transforms.errors import ShardsError
from transforms.images.duplicates import (CONTENT_BUCKET_BITS, PublishedCopy, content_bucket, copy_choices,
                                         copy_letters, path_bucket, same_path_choices, tally_copies)
from transforms.images.items import ImageMeta
from transforms.images.near_duplicates import (DEFAULT_BUCKET_CAP, CappedBucket, NearPair,
                                               bucket_pairs, hashed_image, near_choice)
from transforms.images.perceptual import band_widths, hash_bands
from transforms.packed_groups import GroupPacked, PackFn, unpack_groups
from transforms.progress import counters as progress
from transforms.shardset.dead_letters import DEAD_LETTERS
from transforms.arrayrecord.shard_file import read_records
from transforms.shardset.naming import FILE_SUFFIXES
from transforms.shardset.planning import group_bits
from transforms.shardset.published_keys import record_key, record_keys
from transforms.filesystems import naming_s3_errors
from transforms.shardset.key_files import keys_name, parse_keys
from transforms.storage.files import STORAGE_ERRORS, local_copy, open_for_read, read_if_present
from transforms.tfrecord.file_hash import crc32c_text
from transforms.tfrecord.compression import open_decompressed
from transforms.worker_options import CarriesStorageOptions

__all__ = ["RejectDuplicatePaths", "RejectDuplicateImages", "ReadPublishedKeys", "CollectSplitNames",
           "NearDuplicateRule", "NEAR_DEAD_LETTERS", "NEAR_DUPLICATES", "OVER_CAP", "UNHASHED", "METRICS_NAMESPACE"]

# Outputs of RejectDuplicateImages with a NearDuplicateRule, beside "main" and DEAD_LETTERS.
NEAR_DEAD_LETTERS = "near_dead_letters"  # cross_split_near_duplicate dead letters
NEAR_DUPLICATES = "near_duplicates"  # NearPair whose later copy is an image kept by the exact check
OVER_CAP = "over_cap"  # (members, cap) of each bucket of hashes over its cap
UNHASHED = "unhashed"  # the path of each image kept whose pixels were not hashed

_LOG = logging.getLogger(__name__)


def _reject_same_path(keyed):
    """(split, path bucket), [SourceImage] -> per relative path the image, or dead letters for all
    of them (``same_path_choices``)."""
    for kept, dead in same_path_choices(keyed[1]):
        if kept is not None:
            yield kept
        for letter in dead:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, letter)


def _crc32c_of(data: bytes) -> str:
    """The CRC32C of ``data``, as the shard list states it."""
    return crc32c_text(crc32c.crc32c(data))


def _listed_keys(path: str, keys_crc32c: str) -> list[str] | None:
    """The keys of a published shard read from its keys file (``key_files``), or None when the file is
    missing or its CRC32C is not the one the shard list states (the shard's records are read then)."""
    keys_path = keys_name(path)
    try:
        with naming_s3_errors(keys_path):
            data = read_if_present(keys_path)
    except STORAGE_ERRORS as err:
        _LOG.warning("keys file %s cannot be read (%s); reading the keys from %s", keys_path, err, path)
        return None
    if data is None or _crc32c_of(data) != keys_crc32c:
        _LOG.warning("keys file %s is %s; reading the keys from %s", keys_path,
                     "missing" if data is None else "not the one the shard list states (CRC32C)", path)
        return None
    try:
        return list(parse_keys(data, keys_path))
    except ShardsError as err:
        _LOG.warning("%s; reading the keys from %s", err, path)
        return None


def _shard_keys(item: tuple[str, str, str | None], compression: str) -> Iterator[tuple[str, PublishedCopy]]:
    """(split, published shard, its keys file's CRC32C or None) -> (sha256, PublishedCopy) of each record;
    a missing or damaged shard gives the keys read before the damage (publishing judges it)."""
    split, path, keys_crc32c = item
    listed = _listed_keys(path, keys_crc32c) if keys_crc32c is not None else None
    if listed is not None:
        for key in listed:
            yield key, PublishedCopy(split)
        return
    try:
        if path.endswith(FILE_SUFFIXES["array_record"]):  # read from a local copy: its reader opens local paths
            with local_copy(path) as local:
                for number, data in read_records(local):
                    key = record_key(data, f"{path}: record {number}")
                    if key is not None:
                        yield key, PublishedCopy(split)
            return
        with open_for_read(path) as raw, naming_s3_errors(path):
            for key in record_keys(open_decompressed(raw, compression), path):
                yield key, PublishedCopy(split)
    except (*STORAGE_ERRORS, ShardsError) as err:
        _LOG.warning("published shard %s cannot be read to its end (%s); publishing checks it "
                     "if its split is kept", path, err)


class ReadPublishedKeys(beam.PTransform):
    """The keys of the images already published in the output folder's splits.

    Input: the pipeline (``PBegin``). Output: ``(sha256, PublishedCopy)`` per
    record of the given shards, each shard read by one worker.

    Args:
        shards: ``(split, shard path, keys CRC32C or None)`` (``storage.output_folder.published_shards``).
    """

    def __init__(self, shards: Sequence[tuple[str, str, str | None]], compression: str) -> None:
        super().__init__()
        self._shards = list(shards)
        self._compression = compression

    def expand(self, pbegin):
        return (pbegin
                | "ListPublishedShards" >> beam.Create(self._shards)  # (split, path, keys CRC32C)
                | "SpreadPublishedShards" >> beam.Reshuffle()
                | "ReadKeys" >> beam.FlatMap(_shard_keys, self._compression))  # (sha256, PublishedCopy)


# Namespace of the exact check's metrics: the distribution ``images_per_group``.
METRICS_NAMESPACE = "reject_duplicates"


class _PackByContentFn(PackFn):
    """ImageMeta, or ``(sha256, PublishedCopy)`` -> ``(bucket, pack)``: a bundle's copies, packed and
    compressed per bucket of their sha256 (``content_bucket``), so one element per few thousand
    images crosses the grouping. With ``distance`` (near-duplicates), also each hashed image's
    ``HashedImage`` per band of its hash, keyed by the band (a tuple, never a bucket).
    """

    def __init__(self, coder: coders.Coder, distance: int | None = None) -> None:
        super().__init__(coder, compress=True)
        self._distance = distance

    def start_bundle(self):
        super().start_bundle()
        self._group = (None, CONTENT_BUCKET_BITS)  # (expected copies, bits of the buckets)

    def process(self, copy, expected=None):
        if self._group[0] != expected:  # the bits for the expected count, found once
            self._group = (expected, group_bits(expected, CONTENT_BUCKET_BITS))
        if not isinstance(copy, ImageMeta):  # (sha256, PublishedCopy)
            return self.add(content_bucket(copy[0], self._group[1]), copy)
        out = self.add(content_bucket(copy.sha256, self._group[1]), copy)
        if self._distance is None or copy.phash is None:
            return out
        out, member = list(out or ()), hashed_image(copy)
        for band in hash_bands(copy.phash, self._distance):  # ((band index, band value), HashedImage)
            out.extend(self.add(band, member) or ())
        return out


class _KeepOneCopyFn(CarriesStorageOptions, beam.DoFn):
    """``(bucket, [ImageMeta or (sha256, PublishedCopy)])`` -> the copy kept of each image, and the
    dead letter (``DEAD_LETTERS``) of each other copy of this run (``images.duplicates``).

    Side input ``written`` (optional): the splits this run has images in.
    """

    def __init__(self, appending: bool, near: NearDuplicateRule | None = None) -> None:
        self._appending = appending
        self._near = near
        self._group_images = Metrics.distribution(METRICS_NAMESPACE, "images_per_group")

    def process(self, keyed, written=None):
        key, copies = keyed
        if isinstance(key, tuple):  # a band of the hashes
            yield from self._band_pairs(key, copies)
            return
        tallies = tally_copies(copies)
        self._group_images.update(sum(tally.copies for tally in tallies.values()))
        kept, choices = copy_choices(tallies, written, self._appending)
        del tallies
        yield from kept if self._near is None else ((meta.sha256, meta) for meta in kept)  # keyed: judged next
        for letter in copy_letters(copies, choices):
            progress.note(progress.IMAGES_DUPLICATE, 1)  # flushed as the bundle ends
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, letter)

    def _band_pairs(self, key: tuple, members) -> Iterator[tuple]:
        """A band's members -> (sha256 of the later copy, NearPair) per pair of them, and (its key,
        (members, cap)) over its cap; at most 2 * cap members held."""
        bucket = CappedBucket(self._near.cap)
        for member in members:
            bucket.add(member)
        compared = bucket.members()
        if bucket.count > len(compared):
            yield f"over cap {key}", (bucket.count, bucket.cap)
        for pair in bucket_pairs(compared, self._near.distance):
            yield pair.later.sha256, pair

    def finish_bundle(self):
        progress.flush()  # a worker process may note nothing more after its last bundle here


class NearDuplicateRule(NamedTuple):
    """How ``RejectDuplicateImages`` treats near-duplicates across splits (``--near_duplicates``)."""

    reject: bool  # the later copy is a cross_split_near_duplicate dead letter; else only reported
    distance: int  # the most bits two hashes differ in (--near_duplicate_distance)
    cap: int = DEFAULT_BUCKET_CAP  # the most members of one bucket compared


class _JudgeNearCopiesFn(CarriesStorageOptions, beam.DoFn):
    """(sha256, [the copy kept, NearPair or (members, cap)]) -> the copy, or its dead letter (``near_choice``)."""

    def __init__(self, rule: NearDuplicateRule) -> None:
        self._rule = rule

    def process(self, keyed):
        kept, pairs = None, []
        for value in keyed[1]:
            if isinstance(value, ImageMeta):
                kept = value
            elif isinstance(value, NearPair):
                pairs.append(value)
            else:  # a bucket over its cap
                yield beam.pvalue.TaggedOutput(OVER_CAP, value)
        if kept is not None and kept.phash is None:
            yield beam.pvalue.TaggedOutput(UNHASHED, kept.source.path)
        kept, dead, found = near_choice(kept, pairs, self._rule.reject, self._rule.distance)
        for pair in found:
            yield beam.pvalue.TaggedOutput(NEAR_DUPLICATES, pair)
        for letter in dead:
            progress.note(progress.IMAGES_DUPLICATE, 1)
            yield beam.pvalue.TaggedOutput(NEAR_DEAD_LETTERS, letter)
        if kept is not None:
            yield kept

    def finish_bundle(self):
        progress.flush()


class CollectSplitNames(beam.PTransform):
    """Items -> one sorted list of the splits (``split_of(item)``) they are in; no item: no element."""

    def __init__(self, split_of) -> None:
        super().__init__()
        self._split_of = split_of

    def expand(self, items):
        return (items
                | "SplitOfEach" >> beam.Map(self._split_of)
                | "Combine" >> beam.CombineGlobally(beam.combiners.ToSetCombineFn()).without_defaults()
                | "Sort" >> beam.Map(sorted))


class RejectDuplicatePaths(beam.PTransform):
    """Two inputs with one relative path in one split: both become dead letters.

    Input: ``PCollection[SourceImage]``. Output: outputs ``main`` (SourceImage)
    and ``DEAD_LETTERS`` (DeadLetter).
    """

    def expand(self, sources):
        return (sources
                | "KeyByPath" >> beam.Map(lambda s: ((s.split, path_bucket(s.relpath)), s))
                | "GroupByPath" >> GroupPacked(compress=True)  # ((split, path bucket), [SourceImage])
                | "RejectSamePath" >> beam.FlatMap(_reject_same_path).with_outputs(
                    DEAD_LETTERS, main="main"))


class RejectDuplicateImages(beam.PTransform):
    """Identical image bytes twice, in one split or in several: one copy is kept (``images.duplicates``
    says which), so ``image/key/sha256`` is unique in the whole shard set.

    Input: ``PCollection[ImageMeta]``. Output: a dict of PCollections, ``main``
    (ImageMeta) and ``DEAD_LETTERS``; with ``near`` also the ``NEAR_*`` tags.

    Args:
        published: ``(sha256, PublishedCopy)`` of the output folder's published
            images (``ReadPublishedKeys``), or None.
        written: With ``published``: singleton side input, the splits this run
            has images in.
        appending: The run appends to the published set: an image published
            in any split wins over this run's copies (``duplicate_image``).
        near: Also looks for near-duplicates across splits, or None.
        expected: ``PCollection`` with one element, at least the number of
            images, or None (``planning.group_bits``); the published keys are
            counted beside it.
    """

    def __init__(self, published=None, written=None, appending: bool = False,
                 near: NearDuplicateRule | None = None, expected=None) -> None:
        super().__init__()
        if near is not None:
            band_widths(near.distance)  # refuses a distance out of range here, not on a worker
        self._published = published
        self._written = written
        self._appending = appending
        self._near = near
        self._expected = expected

    def expand(self, metas):
        near = self._near
        copies = metas if self._published is None else (metas, self._published) | "AddPublishedKeys" >> beam.Flatten()
        side = {} if self._written is None else {"written": self._written}  # given only with published
        coder = coders.registry.get_coder(typing.Any)
        # The bits of the buckets: CONTENT_BUCKET_BITS, or fewer for the expected number of copies.
        expected = {}
        if self._expected is not None:
            total = self._expected
            if self._published is not None:  # the published keys share the groups
                keys = self._published | "CountPublishedKeys" >> beam.CombineGlobally(
                    beam.combiners.CountCombineFn()).without_defaults()  # no keys: no element
                total = total | "CountWithPublishedKeys" >> beam.Map(
                    lambda n, more: n + more, beam.pvalue.AsSingleton(keys, default_value=0))
            expected = {"expected": beam.pvalue.AsSingleton(total)}
        keep = beam.ParDo(_KeepOneCopyFn(self._appending, near), **side)
        if near is not None:  # (sha256, ImageMeta), (sha256, NearPair), (key, (members, cap)): grouped next
            keep = keep.with_output_types(typing.Tuple[typing.Any, typing.Any])
        exact = (copies
                 | "PackByContent" >> beam.ParDo(_PackByContentFn(
                     coder, None if near is None else near.distance), **expected).with_output_types(
                     typing.Tuple[typing.Any, bytes])  # (bucket or band, pack)
                 | "GroupByContent" >> beam.GroupByKey()  # (bucket or band, [pack])
                 | "Unpack" >> unpack_groups(coder, compressed=True)  # (bucket, [ImageMeta or (sha256, ...)])
                 | "KeepOneCopy" >> keep.with_outputs(DEAD_LETTERS, main="main"))  # ImageMeta; DeadLetter
        if near is None:
            return {"main": exact.main, DEAD_LETTERS: exact[DEAD_LETTERS]}
        judged = (exact.main
                  | "GroupNearPairs" >> beam.GroupByKey()  # (sha256, [ImageMeta, NearPair or (members, cap)])
                  | "JudgeNearCopies" >> beam.ParDo(_JudgeNearCopiesFn(near)).with_outputs(
                      NEAR_DEAD_LETTERS, NEAR_DUPLICATES, OVER_CAP, UNHASHED, main="main"))
        return {"main": judged.main, DEAD_LETTERS: exact[DEAD_LETTERS], **{tag: judged[tag] for tag in (
            NEAR_DEAD_LETTERS, NEAR_DUPLICATES, OVER_CAP, UNHASHED)}}
