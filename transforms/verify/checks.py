"""Verification of TFRecord shard sets: problems, record checks, manifest reconciliation.

Pure code: small checks the verify job applies in parallel. A problem names a file, a byte offset
when there is one (the record's start, in the decompressed stream for gzip/zlib files), a kind
from ``PROBLEM_KINDS`` and a detail.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from crc32c import crc32c

from transforms.tfrecord.compression import compression_of
from transforms.errors import ExampleError, ImageError
from transforms.verify.decoders import decoder_problems
from transforms.progress.report import plural
from transforms.example.codec import decode_example
from transforms.images.image_codec import decode_size
from transforms.images.structure import check_png
from transforms.images.tf_rule import tf_shape
from transforms.shardset.key_files import keys_problem
from transforms.shardset.manifest import LABELS_NAME, MANIFEST_NAME, SHARDS_NAME, Manifest, ShardEntry, _label_sort
from transforms.shardset.naming import SHARD_NAME_RE, join_path
from transforms.tfrecord.file_hash import FileHash, crc32c_text
from transforms.tfrecord.record_index import check_index, index_name
from transforms.example.schema import IMAGE_FEATURES, record_problems, schema_problems

__all__ = ["PROBLEM_KINDS", "Problem", "RecordCheck", "ShardTally", "Report", "check_record", "check_features",
           "image_problem", "label_problem", "listing_problems", "labels_problems", "shard_label_problems",
           "index_problems", "hash_problems", "index_hash_problem", "keys_file_problems", "shard_problems",
           "duplicate_key_problems", "report_pieces", "problem_line", "read_problem_line", "ProblemPart"]

PROBLEM_KINDS = (
    "crc_mismatch", "truncated", "bad_length", "parse_error", "schema", "count_mismatch",
    "label_mismatch", "size_mismatch", "crc32c_mismatch", "sha256_mismatch", "missing_file", "extra_file",
    "duplicate_key", "decode_error", "not_tfrecord", "decoder_mismatch", "keys_mismatch",
)

# Kinds of damage met while reading a file's records (a ``RecordError``).
_READ_STOPPING = ("crc_mismatch", "truncated", "bad_length")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a shard set (the module docstring says what it names); ``offset`` None: a whole file."""

    file: str
    offset: int | None
    kind: str
    detail: str

    def __post_init__(self) -> None:
        if self.kind not in PROBLEM_KINDS:
            raise ValueError(f"unknown problem kind {self.kind!r}")

    def sort_key(self) -> tuple:
        return (self.file, -1 if self.offset is None else self.offset, self.kind, self.detail)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "offset": self.offset, "kind": self.kind, "detail": self.detail}

    def describe(self) -> str:
        where = self.file if self.offset is None else f"{self.file} at byte {self.offset}"
        return f"{self.kind}: {where}: {self.detail}"


@dataclass(frozen=True)
class RecordCheck:
    """What checking the record at ``offset`` of ``file`` found: its ``image/class/label`` (a tuple when
    it holds a list of another length than one), its ``image/key/sha256`` and its problems."""

    file: str
    offset: int
    label: int | tuple[int, ...] | None = None
    key: str | None = None
    problems: tuple[Problem, ...] = ()


def record_labels(label: int | tuple[int, ...] | None) -> tuple[int, ...]:
    """The class indices a ``RecordCheck.label`` counts for."""
    return () if label is None else label if isinstance(label, tuple) else (label,)


def _single(features: Mapping[str, tuple[str, list]], name: str, kind: str):
    got_kind, values = features.get(name, ("none", []))
    return values[0] if got_kind == kind and len(values) == 1 else None


def image_problem(features: Mapping[str, tuple[str, list]]) -> str | None:
    """Returns why a schema-valid record's image does not match its record, or None.

    The image's first frame must decode with Pillow and be of the stated format, a PNG must pass
    the structure check (``check_png``: Pillow decodes some PNGs TensorFlow refuses), and TensorFlow
    must decode it to the stated height, width and channels (as ``tf_rule`` predicts). A ``raw``
    image must hold exactly height * width * channels bytes.
    """
    encoded = _single(features, "image/encoded", "bytes")
    fmt = _single(features, "image/format", "bytes").decode("utf-8", "replace")
    height, width, channels = (_single(features, f"image/{name}", "int64") for name in ("height", "width", "channels"))
    if fmt == "raw":
        expected = height * width * channels
        return (None if len(encoded) == expected
                else f"raw image has {len(encoded)} bytes; {height}x{width}x{channels} needs {expected}")
    stated = f"the record says {fmt} {height}x{width}x{channels}"
    try:
        info = decode_size(encoded)
        if info.format == "png":
            check_png(encoded)
    except ImageError as err:
        return f"image/encoded ({len(encoded)} bytes, {fmt}) does not decode: {err}"
    if info.format != fmt:
        return f"image is {info.format}; {stated}"
    try:
        shape = tf_shape(encoded)
    except ImageError as err:
        return f"{err.detail}; {stated} (HxWxC)"
    if (shape.height, shape.width, shape.channels) != (height, width, channels):
        return (f"TensorFlow decodes this {fmt} image to {shape.height}x{shape.width}x"
                f"{shape.channels} (HxWxC); {stated}")
    return None


def label_problem(features: Mapping[str, tuple[str, list]], labels: Sequence[str]) -> str | None:
    """Returns why a record's classes do not agree with the shard set's labels, or None.

    Every ``image/class/label`` must lie in ``0 <= label < len(labels)``, and the ``image/class/text``
    beside it, when the record has as many, must be ``labels[label]``.
    """
    kind, values = features.get("image/class/label", ("none", []))
    if kind != "int64":
        return None
    text_kind, texts = features.get("image/class/text", ("none", []))
    if text_kind != "bytes" or len(texts) != len(values):
        texts = [None] * len(values)
    for label, text in zip(values, texts):
        if not 0 <= label < len(labels):
            return (f"image/class/label {label} is outside 0..{len(labels) - 1} "
                    f"({len(labels)} labels in {MANIFEST_NAME})")
        if text is not None and text.decode("utf-8", "replace") != labels[label]:
            return (f"image/class/text is {text.decode('utf-8', 'replace')!r} but label {label} "
                    f"is {labels[label]!r} in {MANIFEST_NAME}")
    return None


def check_record(file: str, offset: int, data: bytes,
                 schema: Mapping[str, str] | bool | None = True, decode_images: bool = False,
                 labels: Sequence[str] | None = None,
                 decode_with: Sequence[str] = ()) -> tuple[RecordCheck, dict[str, tuple[str, list]] | None]:
    """Checks the bytes of the record at ``offset`` of ``file`` (its CRCs were checked when it was read).

    Args:
        schema: The feature spec records must meet (a manifest's ``feature_spec``); True for the
            image schema (``schema.IMAGE_FEATURES``); False or None for none.
        decode_images: Also decode the image (``image_problem``), for records that meet the schema.
        labels: The shard set's class names, to check the record's against (``label_problem``);
            None or empty for no check.
        decode_with: Decoders that must decode the image to the record's size
            (``decoders.decoder_problems``), for records that meet the schema.

    Returns:
        The ``RecordCheck``, and the decoded features (None if the bytes are not an Example).
    """
    try:
        features = decode_example(data)
    except ExampleError as err:
        return RecordCheck(file, offset, problems=(Problem(file, offset, "parse_error", str(err)),)), None
    return check_features(file, offset, features, schema, decode_images, labels, decode_with), features


def check_features(file: str, offset: int, features: Mapping[str, tuple[str, list]],
                   schema: Mapping[str, str] | bool | None = True, decode_images: bool = False,
                   labels: Sequence[str] | None = None, decode_with: Sequence[str] = ()) -> RecordCheck:
    """Checks one record's decoded features: ``check_record`` after the parse (same arguments)."""
    kind, values = features.get("image/class/label", ("none", []))
    label = None if kind != "int64" else values[0] if len(values) == 1 else tuple(values)
    key = _single(features, "image/key/sha256", "bytes")
    key = key.decode("utf-8", "replace") if key is not None else None
    problems = []
    spec = IMAGE_FEATURES if schema is True else (schema or None)
    missing = schema_problems(features, [name for name in IMAGE_FEATURES
                                         if (spec or {}).get(name, "").endswith("_list")])
    if spec and (wrong := record_problems(features, spec)):
        problems.append(Problem(file, offset, "schema", "; ".join(wrong)))
    if decode_images and not missing and (wrong := image_problem(features)):
        problems.append(Problem(file, offset, "decode_error", wrong))
    if decode_with and not missing:
        problems += [Problem(file, offset, "decoder_mismatch", wrong)
                     for wrong in decoder_problems(features, decode_with)]
    if labels and (wrong := label_problem(features, labels)):
        problems.append(Problem(file, offset, "label_mismatch", wrong))
    return RecordCheck(file, offset, label, key, tuple(problems))


@dataclass(frozen=True)
class ShardTally:
    """What reading one shard counted: records, label (as a string) -> records with it, and whether
    a damaged record stopped reading part of it (the counts are then incomplete)."""

    records: int = 0
    label_counts: Mapping[str, int] = field(default_factory=dict)
    damaged: bool = False


def listing_problems(folder: str, manifest: Manifest, present: Mapping[str, int]) -> list[Problem]:
    """Compares the folder's files (``present``: name -> size) with the manifest's shard list: listed shards
    absent or of the wrong size, shard-named files it does not list."""
    problems = []
    listed = {entry.file: entry for split in manifest.splits.values() for entry in split.shards}
    for name, entry in sorted(listed.items()):
        path = join_path(folder, name)
        if name not in present:
            problems.append(Problem(path, None, "missing_file",
                                    f"listed in {MANIFEST_NAME} ({entry.records} records) but absent"))
        elif present[name] != entry.bytes:
            problems.append(Problem(path, None, "size_mismatch",
                                    f"file has {present[name]} bytes; {MANIFEST_NAME} says {entry.bytes}"))
    for name in sorted(present):
        if SHARD_NAME_RE.match(name) and name not in listed:
            problems.append(Problem(join_path(folder, name), None, "extra_file",
                                    f"shard file not listed in {MANIFEST_NAME}"))
    return problems


def labels_problems(folder: str, manifest: Manifest, labels_txt: bytes | None) -> list[Problem]:
    """Reconciles the manifest's labels with ``labels.txt`` (None: absent); its shards' label counts are
    ``shard_label_problems``'."""
    path = join_path(folder, LABELS_NAME)
    if labels_txt is None:
        return [Problem(path, None, "missing_file",
                        f"{MANIFEST_NAME} lists {len(manifest.labels)} labels; {LABELS_NAME} is absent")]
    text = labels_txt.decode("utf-8", "replace")
    lines = text[:-1].split("\n") if text.endswith("\n") else (text.split("\n") if text else [])
    if lines == list(manifest.labels):
        return []
    first = next((i for i, (a, b) in enumerate(zip(lines, manifest.labels)) if a != b),
                 min(len(lines), len(manifest.labels)))
    return [Problem(path, None, "label_mismatch", f"{LABELS_NAME} has {len(lines)} lines, {MANIFEST_NAME} "
                    f"{len(manifest.labels)} labels; they first differ at line {first + 1}")]


def shard_label_problems(folder: str, count: int, entry: ShardEntry) -> list[Problem]:
    """A ``label_mismatch`` when a shard's label counts name a label outside ``0..count-1`` (checked only when
    the manifest has labels: a reshard of records without consistent class names has none)."""
    outside = sorted((k for k in entry.label_counts if not (k.isascii() and k.isdigit() and int(k) < count)),
                     key=_label_sort)
    if not outside:
        return []
    return [Problem(join_path(folder, entry.file), None, "label_mismatch",
                    f"{MANIFEST_NAME} counts labels {', '.join(outside)} for this shard; labels run 0..{count - 1}")]


def index_problems(shard_path: str, index: bytes | None, shard_size: int,
                   required: bool) -> list[Problem]:
    """Checks an uncompressed shard's ``.idx`` (None: absent, a problem if ``required``) against its size."""
    path = index_name(shard_path)
    if index is None:
        return [Problem(path, None, "missing_file", "uncompressed shard has no .idx index")] if required else []
    check = check_index(index, shard_size)
    return [] if check.usable else [Problem(path, check.offset, check.kind, check.problem)]


def hash_problems(path: str, entry: ShardEntry, digest: FileHash) -> list[Problem]:
    """A ``crc32c_mismatch`` and a ``sha256_mismatch`` for each hash of the shard's entry its bytes
    (``digest``) lack."""
    problems = _crc32c_problems(path, digest.crc32c, entry.crc32c)
    if entry.sha256 is not None and digest.sha256 != entry.sha256:
        problems.append(Problem(path, None, "sha256_mismatch",
                                f"file sha256 is {digest.sha256}; {MANIFEST_NAME} says {entry.sha256}"))
    return problems


def _crc32c_problems(path: str, found: str, stated: str | None, what: str = "") -> list[Problem]:
    """A ``crc32c_mismatch`` if the file at ``path`` (``what`` of a shard, when not the shard itself) has the
    CRC32C ``found``, not the ``stated`` one (None: none is stated)."""
    if stated is None or found == stated:
        return []
    return [Problem(path, None, "crc32c_mismatch", f"file CRC32C is {found}; {SHARDS_NAME} says {stated}"
                    f"{f' for {what}' if what else ''}: its bytes changed since it was written")]


def index_hash_problem(shard_path: str, entry: ShardEntry, index: tuple[str, bytes] | None) -> Problem | None:
    """A ``crc32c_mismatch`` if the shard's ``.idx`` (``(path, bytes)``) lacks its entry's CRC32C."""
    if index is None or entry.index_crc32c is None:
        return None
    wrong = _crc32c_problems(index[0], crc32c_text(crc32c(index[1])), entry.index_crc32c, f"the .idx of {shard_path}")
    return wrong[0] if wrong else None


def keys_file_problems(shard_path: str, entry: ShardEntry, keys: tuple[str, bytes | None],
                       record_keys: Sequence[str | None] | None) -> list[Problem]:
    """Problems of a shard's keys file (``keys``: its path, and its bytes or None when absent): a
    ``missing_file``, a ``crc32c_mismatch``, or a ``keys_mismatch`` when it does not list
    ``record_keys`` (the shard's records' keys in order; None when the shard was not read whole)."""
    path, data = keys
    if entry.keys_crc32c is None:
        return []
    if data is None:
        return [Problem(path, None, "missing_file", f"{SHARDS_NAME} states a keys file of {shard_path}")]
    if wrong := _crc32c_problems(path, crc32c_text(crc32c(data)), entry.keys_crc32c, f"the keys of {shard_path}"):
        return wrong
    problem = keys_problem(data, record_keys, path) if record_keys is not None else None
    return [Problem(path, None, "keys_mismatch", problem)] if problem else []


def shard_problems(path: str, entry: ShardEntry, tally: ShardTally) -> list[Problem]:
    """Compares what reading a shard counted with its manifest entry (not a damaged shard's: its
    counts are incomplete, and the damage is reported where it was found)."""
    if tally.damaged:
        return []
    problems = []
    if tally.records != entry.records:
        problems.append(Problem(path, None, "count_mismatch",
                                f"read {tally.records} records; {MANIFEST_NAME} says {entry.records}"))
    found = {k: v for k, v in tally.label_counts.items() if v}
    stated = {k: v for k, v in entry.label_counts.items() if v}
    if found != stated:
        diffs = [f"label {label}: read {found.get(label, 0)}, manifest {stated.get(label, 0)}"
                 for label in sorted(set(found) | set(stated), key=_label_sort)
                 if found.get(label, 0) != stated.get(label, 0)]
        problems.append(Problem(path, None, "label_mismatch", "; ".join(diffs)))
    return problems


def _split_name(split: str | None) -> str:
    return split if split else "(none: the file name names no split)"


def duplicate_key_problems(key: str,
                           locations: Iterable[tuple[str | None, str, int]]) -> list[Problem]:
    """One ``duplicate_key`` per repeat of an ``image/key/sha256`` in a shard set (``locations``: the
    ``(split or None, file, offset)`` of every record with it); the detail names both splits when
    they differ (an image in two splits leaks from training into evaluation)."""
    ordered = sorted(locations, key=lambda loc: (loc[1], loc[2], loc[0] or ""))
    if len(ordered) < 2:
        return []
    first_split, first_file, first_offset = ordered[0]
    problems = []
    for split, file, offset in ordered[1:]:
        detail = f"image/key/sha256 {key} also at byte {first_offset} of {first_file}"
        if split == first_split:
            detail += f" (split {_split_name(split)})"
        else:
            detail += (f": the image is in two splits, {_split_name(split)} here and "
                       f"{_split_name(first_split)} there")
        problems.append(Problem(file, offset, "duplicate_key", detail))
    return problems


@dataclass(frozen=True)
class Report:
    """The outcome of verifying a shard set, as written to ``--report``: files checked, records read,
    their total bytes, and every problem, sorted by file and offset."""

    files: int
    records: int
    bytes: int
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    @classmethod
    def loads(cls, data: bytes) -> "Report":
        obj = json.loads(data)
        return cls(obj["files"], obj["records"], obj["bytes"], tuple(Problem(**p) for p in obj["problems"]))

    def _stops(self) -> list[Problem]:
        """The first damage of each compressed file: reading its stream stopped there.

        An uncompressed file is read on after a damaged record, from the next record start found.
        """
        first: dict[str, Problem] = {}
        for problem in self.problems:
            if (problem.kind in _READ_STOPPING and problem.offset is not None
                    and compression_of(problem.file) != "none" and problem.file not in first):
                first[problem.file] = problem
        return list(first.values())

    def summary(self, target: str, max_listed: int = 20, listed_records: int | None = None) -> str:
        """Returns the human summary of verifying ``target``: totals, problem counts by kind, what was
        not read (of the manifest's ``listed_records``, if known), the first ``max_listed`` problems."""
        rest = f"{plural(self.records, 'record')}, {self.bytes / (1024 * 1024):.1f} MiB"
        if self.ok:
            return f"OK: {target}: {plural(self.files, 'file')}, {rest}; no problems"
        kinds = collections.Counter(problem.kind for problem in self.problems)
        hit = len({problem.file for problem in self.problems})
        files = plural(hit, "file") if hit >= self.files else f"{hit} of {plural(self.files, 'file')}"
        lines = [f"FAILED: {target}: {plural(len(self.problems), 'problem')} in {files}, {rest}",
                 "  by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))]
        if listed_records is not None and listed_records > self.records:
            lines.append(f"  not read: {listed_records - self.records} of the {listed_records} records "
                         f"{MANIFEST_NAME} lists (damaged, or after a damage point)")
        lines += [f"  {p.file}: the records after the damage at byte {p.offset} were not read (a "
                  f"{compression_of(p.file)} stream cannot be read past it)" for p in self._stops()]
        lines += [f"  {p.describe()}" for p in self.problems[:max_listed]]
        if len(self.problems) > max_listed:
            lines.append(f"  ... and {len(self.problems) - max_listed} more (see --report)")
        return "\n".join(lines)


def report_pieces(files: int, records: int, size: int, count: int,
                  problems: Iterable[Problem]) -> Iterator[bytes]:
    """The bytes of the JSON report (``Report.loads`` reads it), a problem at a time.

    ``count`` is how many problems ``problems`` (sorted, read once) yields: ``ok`` is written first.
    """
    head = json.dumps({"ok": not count, "files": files, "records": records, "bytes": size}, indent=2)
    yield (head[:-2] + ',\n  "problems": [').encode("utf-8")
    sep = "\n"
    for problem in problems:
        item = json.dumps(problem.to_dict(), indent=2).replace("\n", "\n    ")
        yield f"{sep}    {item}".encode("utf-8")
        sep = ",\n"
    yield ("]\n}\n" if sep == "\n" else "\n  ]\n}\n").encode("utf-8")


@dataclass(frozen=True)
class ProblemPart:
    """Some problems a worker staged at ``path``, sorted, one a line (``problem_line``); ``count`` of them."""

    path: str
    count: int


def problem_line(problem: Problem) -> bytes:
    """One line of a staged part of problems (``read_problem_line`` reads it back)."""
    return (json.dumps(problem.to_dict(), separators=(",", ":")) + "\n").encode("utf-8")


def read_problem_line(line: bytes) -> Problem:
    """The ``Problem`` of a line ``problem_line`` wrote."""
    return Problem(**json.loads(line))

