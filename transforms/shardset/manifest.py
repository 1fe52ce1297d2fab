"""``manifest.json``: what a finished shard set holds, written last and atomically.

Serialization is deterministic (no timestamps, fixed key order): reruns give byte-identical
manifests. Format version 2 holds what does not grow with shards x labels and names its shard
list, ``shards.jsonl`` (``shardset.shard_list``), with its sha256, size and line count.
Version 1 (every shard inside ``manifest.json``) is still read.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from transforms.errors import ManifestError
from transforms.tfrecord.file_hash import crc32c_value

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "READ_VERSIONS", "ShardEntry", "SplitCounts", "SplitEntry",
           "ShardsFile", "Manifest", "sorted_label_counts", "parse_json", "MANIFEST_NAME", "LABELS_NAME",
           "DEAD_LETTERS_NAME", "SHARDS_NAME", "REFUSED_DEAD_LETTERS_NAME"]

FORMAT_NAME = "tfrecord-shards"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
MANIFEST_NAME = "manifest.json"
LABELS_NAME = "labels.txt"
DEAD_LETTERS_NAME = "dead_letters.jsonl"
# A refused append leaves the set's dead letters as they are; its own go here, until a run publishes.
REFUSED_DEAD_LETTERS_NAME = "dead_letters.refused_append.jsonl"
SHARDS_NAME = "shards.jsonl"
_HEX = frozenset("0123456789abcdef")


def parse_json(data: bytes | str, what: str) -> Any:
    """The JSON value of ``data``; ``ManifestError`` (``what: why``) when it is not JSON."""
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise ManifestError(f"{what}: {err}") from err


def _require(obj: Mapping[str, Any], key: str, kind: type | tuple, where: str) -> Any:
    if not isinstance(obj, Mapping):
        raise ManifestError(f"{where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise ManifestError(f"{where}: missing field {key!r}")
    value = obj[key]
    if isinstance(value, bool) and kind in (int, (int,)):
        raise ManifestError(f"{where}.{key}: expected {kind}, got bool")
    if not isinstance(value, kind):
        raise ManifestError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, "
                            f"got {type(value).__name__}")
    if kind is int and value < 0:
        raise ManifestError(f"{where}.{key}: must be >= 0, got {value}")
    return value


@dataclass(frozen=True)
class ShardEntry:
    """One published shard file: it states a ``crc32c``, a ``sha256`` (``--shard_sha256``, or older versions), or both.

    Attributes:
        label_counts: Label index (as a string) -> records with that label.
        crc32c: CRC32C of the file as written, as GCS states it (``gsutil ls -L``), or None; ``index_crc32c``
            and ``keys_crc32c`` the same of its ``.idx`` and ``.keys`` file, or None without one.
    """

    file: str
    records: int
    bytes: int
    sha256: str | None
    label_counts: Mapping[str, int] = field(default_factory=dict)
    crc32c: str | None = None
    index_crc32c: str | None = None
    keys_crc32c: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The entry's JSON object: the hashes it states, in this order, between its sizes and label counts."""
        hashes = (("crc32c", self.crc32c), ("index_crc32c", self.index_crc32c), ("keys_crc32c", self.keys_crc32c),
                  ("sha256", self.sha256))
        return {"file": self.file, "records": self.records, "bytes": self.bytes,
                **{name: value for name, value in hashes if value is not None},
                "label_counts": sorted_label_counts(self.label_counts)}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], where: str) -> "ShardEntry":
        name = _file_name(obj, where)
        sha256 = _sha256(obj, where) if "sha256" in obj else None
        crc = _crc32c(obj, "crc32c", where) if "crc32c" in obj else None
        if sha256 is None and crc is None:
            raise ManifestError(f"{where}: has neither 'crc32c' nor 'sha256'; a shard's entry states one")
        return cls(name, _require(obj, "records", int, where), _require(obj, "bytes", int, where), sha256,
                   _label_counts(obj, where), crc,
                   _crc32c(obj, "index_crc32c", where) if "index_crc32c" in obj else None,
                   _crc32c(obj, "keys_crc32c", where) if "keys_crc32c" in obj else None)


def _crc32c(obj: Mapping[str, Any], key: str, where: str) -> str:
    text = _require(obj, key, str, where)
    try:
        crc32c_value(text)
    except ValueError as err:
        raise ManifestError(f"{where}.{key}: {err}") from err
    return text


def _file_name(obj: Mapping[str, Any], where: str) -> str:
    name = _require(obj, "file", str, where)
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ManifestError(f"{where}.file: {name!r} is not a plain file name")
    return name


def _sha256(obj: Mapping[str, Any], where: str) -> str:
    sha = _require(obj, "sha256", str, where)
    if len(sha) != 64 or not _HEX.issuperset(sha):
        raise ManifestError(f"{where}.sha256: {sha!r} is not 64 lowercase hex digits")
    return sha


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _label_counts(obj: Mapping[str, Any], where: str) -> dict[str, int]:
    counts = _require(obj, "label_counts", dict, where)
    for label, count in counts.items():
        if not _is_count(count):
            raise ManifestError(f"{where}.label_counts[{label!r}]: bad count {count!r}")
    return dict(counts)


def sorted_label_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """Label counts in the manifest's order: numbers numerically, then names."""
    return {k: counts[k] for k in sorted(counts, key=_label_sort)}


# ASCII digits only ("²".isdigit() is true, int("²") fails), at most 18 so int() always parses.
_INT_LABEL = re.compile(r"-?[0-9]{1,18}\Z")


def _label_sort(label: str) -> tuple[int, int | str]:
    return (0, int(label)) if _INT_LABEL.match(label) else (1, label)


@dataclass(frozen=True)
class SplitCounts:
    """A split's totals as a version-2 ``manifest.json`` states them (label counts as ``ShardEntry``'s)."""

    records: int
    bytes: int
    num_shards: int
    label_counts: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label_counts": sorted_label_counts(self.label_counts)}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], where: str) -> "SplitCounts":
        return cls(_require(obj, "records", int, where), _require(obj, "bytes", int, where),
                   _require(obj, "num_shards", int, where), _label_counts(obj, where))


@dataclass(frozen=True)
class SplitEntry:
    """The shards of one split, in index order (none for a version-2 manifest whose shard list was not
    read), and its totals as a version-2 manifest (or the publisher) states them (None: the shards' sums)."""

    name: str
    shards: Sequence[ShardEntry] = ()
    counts: SplitCounts | None = None

    @property
    def records(self) -> int:
        return self.counts.records if self.counts is not None else sum(s.records for s in self.shards)

    @property
    def bytes(self) -> int:
        return self.counts.bytes if self.counts is not None else sum(s.bytes for s in self.shards)

    @property
    def num_shards(self) -> int:
        return self.counts.num_shards if self.counts is not None else len(self.shards)

    @property
    def complete(self) -> bool:
        """True when every shard of the split is listed in ``shards``."""
        return len(self.shards) == self.num_shards

    def label_counts(self) -> dict[str, int]:
        """Label -> records over all shards of the split."""
        if self.counts is not None:
            return dict(self.counts.label_counts)
        total: dict[str, int] = {}
        for shard in self.shards:
            for label, count in shard.label_counts.items():
                total[label] = total.get(label, 0) + count
        return total

    def to_counts(self) -> SplitCounts:
        """The split's totals (what a version-2 ``manifest.json`` states)."""
        return SplitCounts(self.records, self.bytes, self.num_shards, self.label_counts())


@dataclass(frozen=True)
class ShardsFile:
    """The shard list a version-2 manifest names (``shards.jsonl``): its sha256, size and lines (one per shard)."""

    file: str
    sha256: str
    bytes: int
    lines: int

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], where: str) -> "ShardsFile":
        return cls(_file_name(obj, where), _sha256(obj, where), _require(obj, "bytes", int, where),
                   _require(obj, "lines", int, where))


def _images(obj: Any) -> dict[str, dict[str, int]]:
    """Validates the optional ``images`` object: counter -> format -> records."""
    if not isinstance(obj, dict):
        raise ManifestError(f"manifest.images: expected an object, got {type(obj).__name__}")
    out = {}
    for name, counts in obj.items():
        if not isinstance(counts, dict) or not all(map(_is_count, counts.values())):
            raise ManifestError(f"manifest.images[{name!r}]: expected format -> record count")
        out[name] = dict(counts)
    return out


@dataclass(frozen=True)
class Manifest:
    """The whole manifest: the fields of ``docs/output.md``; an empty optional one is not written.

    Attributes:
        images: For builds: counter -> format (or fix) -> records (``images.records.image_counts``).
        shards_file: The shard list a version-2 manifest names; None for version 1 and for a
            manifest whose list is not written yet.
        format_version: The version it was read as (or is written as).
        written_splits: The splits the last run wrote (the others it kept); None in older manifests.
        object_labels: ``(id, name)`` of the object classes, sorted by id (``label_map.pbtxt``).
    """

    created_by: str
    options: Mapping[str, Any]
    seed: int
    compression: str
    feature_spec: Mapping[str, str]
    labels: Sequence[str]
    splits: Mapping[str, SplitEntry]
    dead_letters: int = 0
    images: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    shards_file: ShardsFile | None = None
    format_version: int = FORMAT_VERSION
    built_from: Mapping[str, Sequence[str]] = field(default_factory=dict)
    written_splits: Sequence[str] | None = None
    appended: Mapping[str, int] = field(default_factory=dict)
    object_labels: Sequence[tuple[int, str]] = ()
    near_duplicates: Mapping[str, Any] = field(default_factory=dict)
    known_dead_letters: int = 0

    @property
    def records(self) -> int:
        return sum(s.records for s in self.splits.values())

    @property
    def file_format(self) -> str:
        """The shards' file format: ``tfrecord``, or ``array_record`` for a build with ``--format array_record``."""
        return str(self.options.get("format") or "tfrecord")

    @property
    def num_shards(self) -> int:
        return sum(s.num_shards for s in self.splits.values())

    @property
    def complete(self) -> bool:
        """True when every split lists all its shards (version 1, or its shard list was read)."""
        return all(split.complete for split in self.splits.values())

    def shard_files(self) -> list[str]:
        """Every shard's file name, split by split (``ManifestError``: the shard list was not read)."""
        if not self.complete:
            name = self.shards_file.file if self.shards_file else SHARDS_NAME
            raise ManifestError(f"{MANIFEST_NAME} lists its shards in {name}, which was not read")
        return [shard.file for split in self.splits.values() for shard in split.shards]

    def to_dict(self) -> dict[str, Any]:
        """The version-2 ``manifest.json`` object (needs ``shards_file``)."""
        if self.shards_file is None:
            raise ValueError("a version-2 manifest names its shard list: shards_file is None")
        images = {"images": {name: dict(sorted(counts.items()))
                             for name, counts in sorted(self.images.items())}} if self.images else {}
        written = {} if self.written_splits is None else {"written_splits": sorted(set(self.written_splits))}
        if self.appended:
            written["appended"] = dict(sorted(self.appended.items()))
        if self.known_dead_letters:
            written["known_dead_letters"] = self.known_dead_letters
        return {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "created_by": self.created_by,
            "seed": self.seed,
            "compression": self.compression,
            "options": dict(sorted(self.options.items())),
            "feature_spec": dict(self.feature_spec),
            "labels": list(self.labels),
            **({"object_labels": [{"id": class_id, "name": name} for class_id, name in self.object_labels]}
               if self.object_labels else {}),
            "records": self.records,
            "dead_letters": self.dead_letters,
            **images,
            **({"near_duplicates": dict(self.near_duplicates)} if self.near_duplicates else {}),
            **written,
            "splits": {name: self._split_dict(name, split) for name, split in sorted(self.splits.items())},
            "shards": asdict(self.shards_file),  # its fields, in their order
        }

    def _split_dict(self, name: str, split: SplitEntry) -> dict[str, Any]:
        """A split's object in ``manifest.json``: its totals and, if recorded, what built it."""
        obj = split.to_counts().to_dict()
        if name in self.built_from:
            obj["built_from"] = list(self.built_from[name])
        return obj

    def dumps(self) -> bytes:
        """Returns the deterministic JSON bytes of ``manifest.json`` (version 2)."""
        return (json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n").encode("utf-8")

    @classmethod
    def loads(cls, data: bytes | str) -> "Manifest":
        """Parses and validates ``manifest.json``; version 2 without shard entries (``shard_list.with_shard_list``).

        Raises:
            ManifestError: Not JSON, wrong format or version, or a field is missing, of the wrong type,
                or disagrees with another.
        """
        obj = parse_json(data, "manifest is not valid JSON")
        if not isinstance(obj, dict):
            raise ManifestError("manifest must be a JSON object")
        if obj.get("format") != FORMAT_NAME:
            raise ManifestError(f"manifest format is {obj.get('format')!r}, expected {FORMAT_NAME!r}")
        version = _require(obj, "format_version", int, "manifest")
        if version not in READ_VERSIONS:
            raise ManifestError(f"manifest format_version {version} is not supported "
                                f"(this tool reads {', '.join(map(str, READ_VERSIONS))})")
        labels = _require(obj, "labels", list, "manifest")
        if not all(isinstance(label, str) for label in labels):
            raise ManifestError("manifest.labels must be a list of strings")
        spec = _require(obj, "feature_spec", dict, "manifest")
        splits_obj = _require(obj, "splits", dict, "manifest")
        shards_file = None
        if version == 1:
            splits = {name: _v1_split(name, split) for name, split in splits_obj.items()}
        else:
            splits = {name: SplitEntry(name, (), SplitCounts.from_dict(split, f"manifest.splits[{name!r}]"))
                      for name, split in splits_obj.items()}
            shards_file = ShardsFile.from_dict(_require(obj, "shards", dict, "manifest"), "manifest.shards")
            if shards_file.file != SHARDS_NAME:
                raise ManifestError(f"manifest.shards.file is {shards_file.file!r}, expected {SHARDS_NAME!r}")
            shards = sum(split.num_shards for split in splits.values())
            if shards_file.lines != shards:
                raise ManifestError(f"manifest.shards.lines is {shards_file.lines} but its splits have {shards} shards")
        built_from = {name: _built_from(split, f"manifest.splits[{name!r}]")
                      for name, split in splits_obj.items() if "built_from" in split}
        written = obj.get("written_splits")
        if written is not None and (not isinstance(written, list) or not all(
                isinstance(name, str) and name in splits for name in written)):
            raise ManifestError(f"manifest.written_splits: expected a list of its splits' names, got {written!r}")
        appended = obj.get("appended", {})
        if not isinstance(appended, dict) or not all(name in splits and _is_count(n) for name, n in appended.items()):
            raise ManifestError(f"manifest.appended: expected split name -> records before, got {appended!r}")
        known = obj.get("known_dead_letters", 0)
        if not _is_count(known):
            raise ManifestError(f"manifest.known_dead_letters: expected a count, got {known!r}")
        seed = obj.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ManifestError(f"manifest.seed: expected an integer, got {seed!r}")
        stated, records = _require(obj, "records", int, "manifest"), sum(split.records for split in splits.values())
        if stated != records:
            raise ManifestError(f"manifest.records is {stated} but its splits add up to {records}")
        return cls(
            created_by=_require(obj, "created_by", str, "manifest"),
            options=_require(obj, "options", dict, "manifest"),
            seed=seed,
            compression=_require(obj, "compression", str, "manifest"),
            feature_spec=spec,
            labels=labels,
            splits=splits,
            dead_letters=_require(obj, "dead_letters", int, "manifest"),
            images=_images(obj.get("images", {})),
            shards_file=shards_file,
            format_version=version,
            built_from=built_from,
            written_splits=written,
            appended=appended,
            object_labels=_object_labels(obj.get("object_labels", [])),
            near_duplicates=_near_duplicates(obj.get("near_duplicates", {})),
            known_dead_letters=known,
        )


def _near_duplicates(value: Any) -> dict[str, Any]:
    """Validates the optional ``near_duplicates`` object: its ``pairs`` count and the ``file`` naming them."""
    if not value:
        return {}
    where = "manifest.near_duplicates"
    _require(value, "pairs", int, where)
    _require(value, "file", str, where)
    return dict(value)


def _object_labels(value: Any) -> list[tuple[int, str]]:
    """Validates the optional ``object_labels``: ``[{"id": int, "name": str}, ...]``."""
    where = "manifest.object_labels"
    if not isinstance(value, list):
        raise ManifestError(f"{where}: expected a list, got {type(value).__name__}")
    out = []
    for index, item in enumerate(value):
        class_id, name = (item.get("id"), item.get("name")) if isinstance(item, dict) else (None, None)
        if isinstance(class_id, bool) or not isinstance(class_id, int) or not isinstance(name, str):
            raise ManifestError(f"{where}[{index}]: expected {{\"id\": integer, \"name\": string}}, "
                                f"got {item!r}")
        out.append((class_id, name))
    return out


def _built_from(split: Mapping[str, Any], where: str) -> list[str]:
    """A split's ``built_from``: the ``--input`` values that built it."""
    value = _require(split, "built_from", list, where)
    if not value or not all(isinstance(path, str) for path in value):
        raise ManifestError(f"{where}.built_from: expected a list of --input values, got {value!r}")
    return value


def _v1_split(name: str, split: Any) -> SplitEntry:
    """A split of a version-1 manifest: every shard listed inline."""
    where = f"manifest.splits[{name!r}]"
    shards = _require(split, "shards", list, where)
    entry = SplitEntry(name, [ShardEntry.from_dict(s, f"{where}.shards[{i}]") for i, s in enumerate(shards)])
    for field_name in ("records", "bytes"):
        stated = _require(split, field_name, int, where)
        if stated != getattr(entry, field_name):
            raise ManifestError(f"{where}.{field_name} is {stated} but its shards add up to "
                                f"{getattr(entry, field_name)}")
    return entry
