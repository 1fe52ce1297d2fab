"""Helpers the tests share that the product does not call: reference implementations the
product's streamed or distributed code is checked against (a protobuf-made Example, a split
planned in memory, shards verified in one process), and small in-memory forms of what the
product does on storage or in a pipeline.
"""

from __future__ import annotations

import dataclasses
import io
import re
import signal
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping, Sequence, Union

from transforms.archives.members import is_container_input
from transforms.errors import ExampleError, RecordError
from transforms.example.codec import BYTES, FLOAT, INT64
from transforms.example.messages import Example
from transforms.example.wire import EntryValue, _ONE, map_entries, varint
from transforms.images.image_codec import ImageInfo, upright_first_frame_png
from transforms.images.library_messages import naming_library_messages
from transforms.images.duplicates import CopyTally, PublishedCopy, _copy_rank, copy_letter
from transforms.images.inputs import (LabelRules, csv_header, is_manifest_path, layout_of_levels, levels_of_paths,
                                      manifest_line_entries, tree_entry, unreadable_folder_entry)
from transforms.images.folder_parts import NAMES_PER_PART
from transforms.images.items import ImageMeta, SourceImage
from transforms.images.key_ranges import KeyRange
from transforms.images.annotations import ObjectClasses
from transforms.images.png_chunks import SrgbProfile, _iccp_verdict
from transforms.images.records import image_example_parts
from transforms.images.coco import coco_categories, coco_image_entries, coco_items, image_key_of
from transforms.shardset.dead_letters import DeadLetter, DeadLetterPart
from transforms.shardset.manifest import LABELS_NAME, Manifest, ShardEntry, SplitEntry
from transforms.shardset.naming import join_path, split_of_shard
from transforms.shardset.ownership import PublishPolicy
from transforms.shardset.planning import SplitTotals, choose_num_shards, cut_records
from transforms.shardset.resume import Stamp, done_list_header, done_list_line
from transforms.shardset.shard_list import LineDigest, shard_line, with_shard_list
from transforms.shardset.staged import ShardListPart
from transforms.storage.listing import walk_local_tree
from transforms.storage.publish import commit_publish, prepare_publish
from transforms.tfrecord.compression import compression_of, open_decompressed
from transforms.tfrecord.file_hash import FileHash
from transforms.tfrecord.framing import DEFAULT_MAX_RECORD_BYTES, HEADER_SIZE, OVERHEAD, _HEADER, masked_crc32c
from transforms.tfrecord.record_index import INDEX_SUFFIX, check_index, index_names
from transforms.tfrecord.record_ranges import ByteRange, read_range, read_stream
from tests.verify_reference import build_report, read_in_ranges, verify_in_memory  # noqa: F401 (re-exported)
from transforms.verify.checks import (Problem, Report, ShardTally, check_record, report_pieces,
                                      duplicate_key_problems, hash_problems, index_hash_problem,
                                      index_problems, labels_problems, listing_problems, record_labels,
                                      shard_problems)

# A feature value of ``encode_example``: one value or a list of values.
Scalar = Union[bytes, str, int, float]
FeatureValue = Union[Scalar, Sequence[Scalar]]


def error_summary(err: BaseException) -> str:
    """Returns one line saying why a pipeline failed.

    Runners wrap errors raised in workers in their own exception types and add
    stack traces to the message; the project's own error, if any, is the line
    a user needs.
    """
    from beam_jobs.cli.harness import error_lines  # Beam, imported where used

    return error_lines(err)[0]


def encode_example(features: Mapping[str, FeatureValue],
                   kinds: Mapping[str, str] | None = None) -> bytes:
    """Serializes features as a ``tf.train.Example``.

    Args:
        features: Feature name to a value or list of values. ``str`` values are
            stored as UTF-8 bytes.
        kinds: Optional feature name to ``bytes``/``int64``/``float``; needed
            only for empty lists, whose kind cannot be inferred.

    Returns:
        The deterministic serialization of the Example.

    Raises:
        ExampleError: A value has an unsupported type or mixes types.
    """
    example = Example()
    fmap = example.features.feature
    for name, value in features.items():
        values = _as_list(name, value)
        kind = (kinds or {}).get(name) or (feature_kind(values) if values else None)
        if kind is None:
            raise ExampleError(f"feature {name!r} is an empty list; its kind must be given")
        try:
            feature = fmap[name]  # names must be str that encode as UTF-8
            if kind == BYTES:
                feature.bytes_list.value.extend(
                    v.encode("utf-8") if isinstance(v, str) else v for v in values)
            elif kind == INT64:
                feature.int64_list.value.extend(values)
            elif kind == FLOAT:
                feature.float_list.value.extend(values)
            else:
                raise ExampleError(f"feature {name!r}: unknown kind {kind!r}")
            if not values:  # an empty list keeps its kind: the list is set, with no values
                getattr(feature, f"{kind}_list").SetInParent()
        except (TypeError, ValueError) as err:
            raise ExampleError(f"feature {name!r}: {err}") from err
    return example.SerializeToString(deterministic=True)


def example_bytes(features: Mapping[str, EntryValue]) -> bytes:
    """The serialized ``tf.train.Example`` of ``features`` (empty bytes for no features)."""
    entries = map_entries(features)
    return b"".join((bytes((_ONE,)), varint(len(entries)), entries)) if entries else b""


@naming_library_messages
def first_frame_png(data: bytes) -> bytes:
    """Converts an image's first frame to PNG, keeping its pixel values (see ``upright_first_frame_png``).

    The pixels are as Pillow decodes them: not turned for an EXIF orientation
    (but a TIFF's, which Pillow's TIFF decoder applies itself).

    Raises:
        ImageError: The source cannot be decoded.
    """
    return upright_first_frame_png(data, upright=False)[0]


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
    values = list(values)
    tally = CopyTally()
    for value in values:
        tally = tally.add(value)
    choice = tally.choice(written, appending)
    if choice is None:
        return None, []
    metas = sorted((v for v in values if not isinstance(v, PublishedCopy)), key=_copy_rank)
    dead = [letter for letter in (copy_letter(meta, choice) for meta in metas) if letter is not None]
    return (tally.best if choice.kept is not None else None), dead


def in_part(path: str, part: int, parts: int) -> bool:
    """True if ``path`` (relative to the folder listed) is listed by part ``part`` of ``parts``.

    The part of a path is the CRC-32 of its UTF-8 bytes modulo ``parts``; a
    name that is not UTF-8 (lone surrogates from ``os.listdir``) hashes its
    bytes as listed.
    """
    return parts == 1 or zlib.crc32(path.encode("utf-8", "surrogateescape")) % parts == part


def decode_manifest(data: bytes) -> str:
    """An input manifest's bytes as text; bytes that are not UTF-8 are kept as lone surrogates.

    ``manifest_entries`` turns each row holding one into a ``bad_manifest_row``
    dead letter, so one bad byte costs one row, not the job.
    """
    return data.decode("utf-8-sig", errors="surrogateescape")


def manifest_entries(text: str, manifest: str, rules: LabelRules) -> Iterator[SourceImage | DeadLetter]:
    """Resolves every row of an input manifest held whole (``manifest_line_entries`` of its lines).

    Args:
        text: The manifest's content (``decode_manifest`` of its bytes).
        manifest: Path or URI of the manifest (for resolving and for errors).
        rules: Labelling rules (split of rows without a ``split``).
    """
    lines = _text_lines(text, manifest)
    if manifest.lower().endswith(".jsonl"):
        yield from manifest_line_entries(enumerate(lines, start=1), manifest, rules)
        return
    fields, problem = csv_header(lines[0])
    if problem:
        yield DeadLetter(f"{manifest}:1", "bad_manifest_row", problem)
        return
    yield from manifest_line_entries(enumerate(lines[1:], start=2), manifest, rules, fields)


def tree_entries(root: str, relpaths: Iterable[str], rules: LabelRules) -> Iterator[SourceImage | DeadLetter]:
    """Resolves every file listed under a folder input (``tree_entry`` of each, in path order).

    Args:
        root: The folder as given (local path or URI).
        relpaths: Paths of the files under it, relative, ``/``-separated,
            hidden files already removed.
        rules: Labelling rules.
    """
    relpaths = sorted(relpaths)
    layout = rules.layout if rules.layout != "auto" else detect_layout(relpaths)
    for rel in relpaths:
        yield tree_entry(root, rel, layout, rules)


def unreadable_folder_entries(root: str, folders: Iterable[tuple[str, str]], relpaths: Sequence[str],
                              rules: LabelRules) -> Iterator[tuple[DeadLetter, str | None]]:
    """``unreadable_folder_entry`` of each ``(relative folder, why)``, the layout detected from ``relpaths``."""
    layout = rules.layout if rules.layout != "auto" else detect_layout(sorted(relpaths))
    for rel, why in folders:
        yield unreadable_folder_entry(root, rel, why, layout, rules)


def hamming(a: int, b: int) -> int:
    """How many bits two hashes differ in."""
    return bin(a ^ b).count("1")


def iccp_verdict(body: bytes, color_type: int) -> tuple[str, SrgbProfile | None]:
    """What libpng makes of an ``iCCP`` chunk's data in a PNG of ``color_type``.

    Returns:
        ``(rejected, profile)``: why libpng refuses the profile (as it words
        it; "" when it accepts it), and the ``SRGB_PROFILES`` entry the profile
        is (None when it is none, or is refused).
    """
    return _iccp_verdict(body, color_type)


def image_example(image: bytes, info: ImageInfo, label_index: int, label_text: str,
                  filename: str, sha256_hex: str, extra: tuple = ()) -> bytes:
    """Returns the serialized ``tf.train.Example`` of one image (docs/output.md, "Example schema").

    ``extra`` holds ``(name, kind, values)`` of further keys (or of the class
    keys as lists, for multi-label records).
    """
    head, tail = image_example_parts(len(image), info, label_index, label_text, filename, sha256_hex, extra)
    return b"".join((head, image, tail))


def coco_entries(text: str, annotations_path: str, image_root: str | None,
                 rules: LabelRules, coco_ids: str = "keep") -> Iterator[SourceImage | DeadLetter | ObjectClasses]:
    """Resolves every image of a COCO annotation file held in memory (``coco_image_entries``, grouped here).

    Args:
        text: The file's content.
        annotations_path: Its path or URI (for resolving and for errors).
        image_root: Folder the ``file_name``s are relative to; None for the
            annotation file's own folder.
        rules: Labelling rules (the split of every image).
        coco_ids: ``keep`` the categories' ids, or ``renumber`` the classes.

    Yields:
        The file's ``ObjectClasses`` (not an input), then as
        ``coco_image_entries``, group by group.

    Raises:
        ManifestError: The file is not COCO JSON at all, or its categories
            cannot name classes (no name, a name or id twice, a kept id below 1).
    """
    import io

    groups: dict[str, tuple[list, list]] = {}
    categories = []
    for kind, index, entry in coco_items(io.BytesIO(text.encode("utf-8", "surrogateescape")), annotations_path):
        if kind == "categories":
            categories.append(entry)
        else:
            groups.setdefault(image_key_of(kind, entry), ([], []))[kind == "annotations"].append((index, entry))
    declared, names = coco_categories(categories, coco_ids, annotations_path)
    yield declared
    for images, naming in groups.values():
        yield from coco_image_entries(images, naming, names, annotations_path,
                                      dataclasses.replace(rules, image_root=image_root))


def plan_in_memory(items: Iterable[tuple[int, int]], target_bytes: int,
                   num_shards: int | None = None) -> tuple[int, list[list[int]]]:
    """Plans one split held in memory; the reference the distributed plan must match.

    Args:
        items: ``(order_key, framed_size)`` per record.
        target_bytes: Target shard size.
        num_shards: Fixed shard count, or None to choose one.

    Returns:
        ``(num_shards, shards)`` where ``shards[i]`` lists indexes into
        ``items`` in write order.
    """
    items = list(items)
    order = sorted(range(len(items)), key=lambda i: items[i])
    total = sum(size for _, size in items)
    count = num_shards if num_shards else min(choose_num_shards(total, target_bytes), max(len(items), 1))
    shards: list[list[int]] = [[] for _ in range(count)]
    for i, shard in zip(order, cut_records((items[i][1] for i in order), count, total)):
        shards[shard].append(i)
    return count, shards


def shard_list_bytes(manifest: Manifest) -> tuple[bytes, bytes]:
    """``(manifest.json, shards.jsonl)`` bytes of a complete manifest held in memory (small sets, tests).

    The publisher writes the same bytes streamed (``shard_sink``).
    """
    digest = LineDigest()
    lines = b"".join(digest.add(shard_line(name, index, entry))
                     for name, split in sorted(manifest.splits.items())
                     for index, entry in enumerate(split.shards))
    splits = {name: SplitEntry(name, split.shards, split.to_counts())
              for name, split in manifest.splits.items()}
    full = dataclasses.replace(manifest, splits=splits, shards_file=digest.summary())
    return full.dumps(), lines


def done_list(run_name: str, run_size: int, context: str,
              entries: Iterable[tuple[str, Stamp, ImageMeta]]) -> Iterator[bytes]:
    """A run file's done list: a header line, then one line per ``(source_key, stamp, meta)`` of its records."""
    yield done_list_header(run_name, run_size, context)
    for key, stamp, meta in entries:
        yield done_list_line(key, stamp, meta)


def list_local_tree(root: str) -> LocalListing:
    """Lists a local folder recursively as Beam's local file system does, reporting what it skips.

    Beam's ``LocalFileSystem`` lists with ``os.walk`` without an error handler, so a
    folder it may not read vanishes with its files. This walks the same way
    (``walk_local_tree``) and returns the folders it could not list.
    """
    unreadable: list[tuple[str, OSError]] = []
    files = []
    for path, err in walk_local_tree(root):
        if err is None:
            files.append(path)
        else:
            unreadable.append((path, err))
    return LocalListing(tuple(files), tuple(unreadable))


def publish_shards(output_dir: str, parts: Sequence[ShardListPart],
                   totals: Sequence[SplitTotals], dead_letters: Sequence[DeadLetterPart],
                   labels: Sequence[str], inputs: int, compression: str,
                   manifest_fields: Mapping[str, Any], max_bad_fraction: float | None,
                   policy: PublishPolicy,
                   sidecar_files: Callable[[Manifest], Mapping[str, bytes | None]] | None = None) -> Manifest:
    """Publishes staged shards in one process; see the module docstring for the order of steps.

    Arguments are those of ``prepare_publish``.

    Returns:
        The published manifest (its shard entries without label counts).
    """
    commit, _ = prepare_publish(output_dir, parts, totals, dead_letters, labels, inputs, compression,
                                manifest_fields, max_bad_fraction, policy, sidecar_files, parallel_from=None)
    return commit_publish(commit, 0)


def check_record_at(buf: bytes | memoryview, pos: int, file_size: int, base: int = 0) -> int | None:
    """Returns the record length if a valid header starts at ``buf[pos]``.

    Only the header is checked: its masked CRC must match and the record must
    fit in the file. ``base`` is the file offset of ``buf[0]``.
    """
    if pos + HEADER_SIZE > len(buf):
        return None
    length, crc = _HEADER.unpack_from(buf, pos)
    if base + pos + length + OVERHEAD > file_size:
        return None
    if masked_crc32c(bytes(buf[pos:pos + 8])) != crc:
        return None
    return length


def format_index(framed_sizes: list[int] | tuple[int, ...]) -> bytes:
    """Returns index bytes for records of the given framed sizes, in file order."""
    lines = []
    offset = 0
    for size in framed_sizes:
        lines.append(b"%d %d\n" % (offset, size))
        offset += size
    return b"".join(lines)


def _as_list(name: str, value: FeatureValue) -> list:
    if isinstance(value, (bytes, str, int, float)):
        return [value]
    # bytearray/memoryview would iterate as ints and a mapping as its keys.
    if isinstance(value, (bytearray, memoryview, Mapping)) or not hasattr(value, "__iter__"):
        raise ExampleError(f"feature {name!r}: unsupported value type {type(value).__name__}")
    return list(value)


def feature_kind(values: Sequence[Scalar]) -> str:
    """Returns ``bytes``, ``int64`` or ``float`` for a non-empty list of values."""
    first = values[0]
    if isinstance(first, (bytes, str)):
        return BYTES
    if isinstance(first, bool) or not isinstance(first, (int, float)):
        raise ExampleError(f"unsupported feature value type {type(first).__name__}")
    return INT64 if isinstance(first, int) else FLOAT


def _text_lines(text: str, manifest: str) -> list[str]:
    """A whole manifest's lines, broken as ``manifest_lines`` breaks them."""
    if manifest.lower().endswith(".jsonl"):
        return text.split("\n")
    return re.split("\r\n|\r|\n", text)


def detect_layout(relpaths: Sequence[str]) -> str:
    """``layout_of_levels`` of the levels the relative paths of a folder's files show."""
    return layout_of_levels(levels_of_paths(relpaths))


@dataclass(frozen=True)
class LocalListing:
    """Files and unreadable folders below a local folder.

    Attributes:
        files: Path of every file, in the order listed.
        unreadable: ``(folder, error)`` of every folder that could not be listed.
    """

    files: tuple[str, ...]
    unreadable: tuple[tuple[str, OSError], ...]


def key_range_holds(keys: KeyRange, key: str) -> bool:
    """True if ``key`` lies in ``keys`` (``after < key <= until``, no bound where None)."""
    return (keys.after is None or key > keys.after) and (keys.until is None or key <= keys.until)


def discover_images_of(inputs: Sequence[str], rules: LabelRules, offline: bool = False,
                       names_per_part: int = NAMES_PER_PART, **options: Any) -> DiscoverImages:
    """``DiscoverImages`` for these ``--input`` values; their folders' tasks are found now (``folder_tasks``).

    ``options`` are ``DiscoverImages``' ``range_bytes``, ``containers``, ``key_ranges`` and ``first_keys``.
    """
    from transforms.discover_images import DiscoverImages, folder_tasks  # Beam, imported where used

    tasks = tuple(task for path in inputs if not is_manifest_path(path) and not is_container_input(path)
                  for task in folder_tasks(path, rules.layout, offline, names_per_part))
    return DiscoverImages(rules, tasks, manifests=[path for path in inputs if is_manifest_path(path)],
                          archives=[path for path in inputs if is_container_input(path)], **options)


def report_bytes(report: Report) -> bytes:
    """The JSON report the verify job writes of ``report``."""
    return b"".join(report_pieces(report.files, report.records, report.bytes, len(report.problems), report.problems))


def report_dict(report: Report) -> dict[str, Any]:
    """``report`` as the JSON report's object."""
    return {"ok": report.ok, "files": report.files, "records": report.records, "bytes": report.bytes,
            "problems": [p.to_dict() for p in report.problems]}


def sigint_as_in_a_terminal() -> None:
    """Run in a child before it starts (``preexec_fn``): SIGINT at its default, as a terminal's foreground
    job gets it. A shell's background job inherits it ignored, and a job keeps an ignored SIGINT ignored,
    so a test that sends a Ctrl-C would otherwise see the job run to its end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
