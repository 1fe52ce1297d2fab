"""Resuming an interrupted build: what a run leaves for a rerun with the same flags, and when it is reused.

Pure code; the I/O is in ``transforms.storage.resume_files``. A build writes, in its staging folder,
``resume.json`` (``RunMarker``) when it starts, a *done list* beside each closed run file
(``done_list``) and a *done shard* beside each staged shard (``ShardDone``). The next run with the
same ``fingerprint`` reuses an input's record when its path, listing, stamp and context are the same
(``DoneInput.matches``), and a staged shard with the same content key once its hash is checked again.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

from transforms.errors import ManifestError
from transforms.images.image_codec import ImageInfo
from transforms.images.items import ImageMeta, SourceImage
from transforms.shardset.manifest import parse_json
from transforms.shardset.staged import StagedShard
from transforms.tfrecord.file_hash import crc32c_value
from transforms.tfrecord.run_files import RunSlice

__all__ = ["RESUME_NAME", "DONE_SUFFIX", "Stamp", "RunMarker", "fingerprint", "changed_flags", "source_key",
           "context_key", "DoneInput", "DoneLines", "DONE_PIECE_BYTES", "done_list_header", "done_list_line",
           "parse_done_list", "ShardDone", "shard_content_key"]

# The marker a run writes in its staging folder when it starts.
RESUME_NAME = "resume.json"
# The suffix of a run file's done list and of a staged shard's done record.
DONE_SUFFIX = ".done"
# Bumped when what a run leaves, or how a record is made, changes: older staging is not reused.
_FORMAT = 1
# Flags that change whether a run publishes, never the bytes it writes.
_NOT_IN_FINGERPRINT = ("max_bad_fraction",)

# (size, mtime in ns, inode number) of a local input when it was read. Not the
# ctime: linking, chmod or a backup tool change it, and reuse would be lost for nothing.
Stamp = tuple[int, int, int]
# The most bytes of done-list lines ``DoneLines.pieces`` gives back at once.
DONE_PIECE_BYTES = 1 << 20


def fingerprint(options: Mapping[str, Any], version: str) -> str:
    """The hex sha256 of the flags that change what a build writes (the manifest's ``options``, less
    ``_NOT_IN_FINGERPRINT``), and of the tool's version."""
    kept = {key: value for key, value in options.items() if key not in _NOT_IN_FINGERPRINT}
    text = json.dumps({"format": _FORMAT, "version": version, "options": kept}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RunMarker:
    """What a build's staging folder says of the run that made it (``resume.json``)."""

    run_id: str
    fingerprint: str
    options: Mapping[str, Any]

    def dumps(self) -> bytes:
        return (json.dumps({"format": _FORMAT, "run_id": self.run_id, "fingerprint": self.fingerprint,
                            "options": dict(self.options)}, sort_keys=True, default=repr) + "\n").encode("utf-8")

    @classmethod
    def loads(cls, data: bytes) -> "RunMarker":
        """Parses a marker; ``ManifestError`` when this version of the tool did not write it."""
        obj = parse_json(data, "resume marker is not JSON")
        if not (isinstance(obj, dict) and obj.get("format") == _FORMAT and isinstance(obj.get("run_id"), str)
                and isinstance(obj.get("fingerprint"), str) and isinstance(obj.get("options"), dict)):
            raise ManifestError("resume marker lacks format, run_id, fingerprint or options")
        return cls(obj["run_id"], obj["fingerprint"], obj["options"])


def _flag(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "none"
    return "none" if value is None else str(value)


def changed_flags(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``--NAME OLD -> NEW`` for each flag (of the fingerprint) that differs, sorted by name."""
    keys = sorted((set(old) | set(new)) - set(_NOT_IN_FINGERPRINT))
    return [f"--{key} {_flag(old.get(key))} -> {_flag(new.get(key))}" for key in keys
            if old.get(key) != new.get(key)]


def source_key(source: SourceImage) -> str:
    """A digest of everything the listing said of an input (path, name, split, labels, features, boxes)."""
    return hashlib.sha256(repr(source).encode("utf-8")).hexdigest()[:32]


def context_key(labels: Sequence[str], layout: Any) -> str:
    """A digest of what every record of a run depends on besides its input: class list and record layout."""
    return hashlib.sha256(repr((tuple(labels), layout)).encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class DoneInput:
    """An input whose record a run wrote to a run file, as its done list says.

    Attributes:
        source: ``source_key`` of the input as listed.
        stamp: Its ``Stamp``, taken before reading it.
        context: ``context_key`` of the run that read it.
        meta: Its metadata, ``meta.run`` naming the record in the run file;
            ``meta.source`` is rebuilt from the rerun's listing (``for_source``).
    """

    path: str
    source: str
    stamp: Stamp
    context: str
    meta: ImageMeta

    def matches(self, source: SourceImage, stamp: Stamp | None, context: str, key: str | None = None) -> bool:
        """True if the record may stand for ``source``: same listing (``key``: its ``source_key``), stamp, context."""
        return (stamp is not None and tuple(stamp) == tuple(self.stamp) and context == self.context
                and source.path == self.path and (key or source_key(source)) == self.source)

    def for_source(self, source: SourceImage) -> ImageMeta:
        """The metadata, its source the rerun's (the split chosen by content kept)."""
        return dataclasses.replace(self.meta, source=dataclasses.replace(source, split=self.meta.source.split))


# ImageInfo's fields in a done list's "info", in order, and their types (a line is checked, not trusted).
_INFO_TYPES = {"format": str, "height": int, "width": int, "channels": int, "source_format": str,
               "tf_decodes": bool, "png_fix": str, "orientation": int, "upright": str}


# A done-list line as json.dumps (ensure_ascii) writes it, formatted at once for every record of a build.
_LINE = ('{"path": %s, "source": %s, "stamp": [%d, %d, %d], "split": %s, "label_index": %d, "sha256": %s, '
         '"info": [%s, %d, %d, %d, %s, %s, %s, %d, %s], "record_size": %d, "order_key": %d, "extra": %s, '
         '"offset": %d, "length": %d')


def done_list_header(run_name: str, run_size: int, context: str) -> bytes:
    """The first line of a run file's done list (``done_list``)."""
    return (json.dumps({"format": _FORMAT, "run_file": run_name, "size": run_size, "context": context})
            + "\n").encode("utf-8")


class DoneLines:
    """A bundle's done-list lines, held zlib-compressed (level 1) until its run file is closed, and
    given back in pieces (``pieces``): the list is never whole in memory. Lines are compressed
    ``_LINES_BYTES`` at a time (one call per line costs more than the line's share of a larger one)."""

    _LINES_BYTES = 64 << 10

    def __init__(self) -> None:
        self._zip = zlib.compressobj(1)
        self._chunks: list[bytes] = []
        self._lines: list[bytes] = []  # not yet compressed
        self._lines_bytes = 0
        self.count = 0

    def append(self, line: bytes) -> None:
        self._lines.append(line)
        self._lines_bytes += len(line)
        self.count += 1
        if self._lines_bytes >= self._LINES_BYTES:
            self._compress_lines()

    def _compress_lines(self) -> None:
        chunk = self._zip.compress(b"".join(self._lines))
        if chunk:
            self._chunks.append(chunk)
        self._lines, self._lines_bytes = [], 0

    def pieces(self, piece_bytes: int = DONE_PIECE_BYTES) -> Iterator[bytes]:
        """Every line added, in order, in pieces of at most ``piece_bytes``; no line can be added after."""
        self._compress_lines()
        self._chunks.append(self._zip.flush())
        chunks, self._chunks = self._chunks, []
        unzip = zlib.decompressobj()
        chunks.reverse()  # popped from the end, in order
        while chunks:
            data = chunks.pop()
            while data:
                piece = unzip.decompress(data, piece_bytes)
                data = unzip.unconsumed_tail
                if piece:
                    yield piece
        rest = unzip.flush()
        if rest:
            yield rest


def done_list_line(key: str, stamp: Stamp, meta: ImageMeta) -> bytes:
    """The line of a done list for one record: a few hundred bytes (its ``ImageMeta`` takes kilobytes)."""
    run = meta.run
    if run is None:
        raise ValueError(f"{meta.source.path}: a done list names records in its run file only")
    info, string = meta.info, json.encoder.encode_basestring_ascii
    size, mtime, inode = stamp
    line = _LINE % (string(meta.source.path), string(key), size, mtime, inode, string(meta.source.split),
                    meta.label_index, string(meta.sha256), string(info.format), info.height, info.width,
                    info.channels, string(info.source_format), "true" if info.tf_decodes else "false",
                    string(info.png_fix), info.orientation, string(info.upright), meta.record_size,
                    meta.order_key, string(repr(meta.extra) if meta.extra else ""), run.offset, run.length)
    if meta.phash is not None:  # --near_duplicates
        line += ', "phash": %d' % meta.phash
    return (line + "}\n").encode("ascii")


def _entry(obj: Mapping[str, Any], run_path: str, context: str) -> DoneInput:
    values = obj["info"]
    if not isinstance(values, list) or len(values) > len(_INFO_TYPES):
        raise ValueError("info is not a list of ImageInfo's fields")
    extra = ast.literal_eval(obj["extra"]) if obj["extra"] else ()
    if not isinstance(extra, tuple):
        raise ValueError("extra is not a tuple")
    path = obj["path"]
    meta = ImageMeta(source=SourceImage(path=path, relpath="", split=obj["split"], label=""),
                     label_index=int(obj["label_index"]), sha256=str(obj["sha256"]),
                     info=ImageInfo(**{name: kind(value) for (name, kind), value in zip(_INFO_TYPES.items(), values)}),
                     record_size=int(obj["record_size"]), order_key=int(obj["order_key"]), extra=extra,
                     run=RunSlice(run_path, int(obj["offset"]), int(obj["length"])),
                     phash=int(obj["phash"]) if obj.get("phash") is not None else None)
    stamp = tuple(int(v) for v in obj["stamp"])
    if len(stamp) != 3:
        raise ValueError("stamp is not (size, mtime_ns, inode)")
    return DoneInput(str(path), str(obj["source"]), stamp, context, meta)


def parse_done_list(lines: Iterable[bytes], folder: str, run_size: int | None) -> Iterator[DoneInput]:
    """The inputs a done list names, their run file in ``folder``: none when the header is not this
    format's or ``run_size`` (None: gone) not the one recorded; an unreadable line ends the list."""
    lines = iter(lines)
    try:
        header = json.loads(next(lines, b"") or b"null")
    except ValueError:
        return
    if not (isinstance(header, dict) and header.get("format") == _FORMAT and isinstance(header.get("run_file"), str)
            and header.get("size") == run_size and "/" not in header["run_file"]):
        return
    run_path = f"{folder.rstrip('/')}/{header['run_file']}"
    context = str(header.get("context"))
    for line in lines:
        if not line.endswith(b"\n"):
            return
        try:
            yield _entry(json.loads(line), run_path, context)
        except (ValueError, KeyError, TypeError, SyntaxError, MemoryError, RecursionError):
            return


def shard_content_key(key: tuple[str, int, int], compression: str, items: Iterable[ImageMeta]) -> str:
    """A digest of what decides a shard's bytes: key, compression and records (``records.image_example_parts``)."""
    digest = hashlib.sha256(repr((tuple(key), compression)).encode("utf-8"))
    for meta in items:
        info, source = meta.info, meta.source
        digest.update(repr((meta.sha256, source.relpath, source.label, source.split, meta.label_index,
                            meta.record_size, meta.order_key, info.format, info.height, info.width,
                            info.channels, info.source_format, info.tf_decodes, info.png_fix,
                            meta.extra)).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


@dataclass(frozen=True, kw_only=True)
class ShardDone(StagedShard):
    """A staged shard that a run finished writing, as its done record says (``content``:
    ``shard_content_key`` of its items; ``key``: ``(split, index, count)``)."""

    content: str
    key: tuple[str, int, int]
    label_counts: Mapping[str, int]

    def dumps(self) -> bytes:
        """The record, with the staged files' names only (they lie beside it); its keys sorted, so that its
        bytes do not depend on the order of the fields."""
        obj = dataclasses.asdict(self)
        for name in ("staged", "staged_index", "staged_keys"):
            obj[name] = obj[name].rsplit("/", 1)[-1] if obj[name] else None
        return (json.dumps({**obj, "format": _FORMAT}, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def loads(cls, data: bytes, folder: str) -> "ShardDone":
        """Parses a done record whose staged files lie in ``folder`` (``ManifestError``: not this version's)."""
        try:
            obj = json.loads(data)
            if obj.get("format") != _FORMAT:
                raise ValueError("another format")
            split, index, count = obj["key"]
            keys, keys_crc = obj.get("staged_keys"), obj.get("keys_crc32c")  # none in older records
            names = [obj["staged"]] + [name for name in (obj["staged_index"], keys) if name]
            if any(not isinstance(n, str) or "/" in n for n in names):
                raise ValueError("a staged name is not a plain name")
            crc, index_crc = str(obj["crc32c"]), obj["index_crc32c"]
            crc32c_value(crc)
            for what, name, named_crc in ((".idx", obj["staged_index"], index_crc), (".keys file", keys, keys_crc)):
                if (named_crc is None) != (name is None):
                    raise ValueError(f"the {what} and its CRC32C are not both given")
                if named_crc is not None:
                    crc32c_value(named_crc)
            at = folder.rstrip("/")
            return cls(str(obj["file"]), f"{at}/{obj['staged']}",
                       f"{at}/{obj['staged_index']}" if obj["staged_index"] else None,
                       int(obj["records"]), int(obj["bytes"]),
                       None if obj["sha256"] is None else str(obj["sha256"]), crc, index_crc,
                       f"{at}/{keys}" if keys else None, None if keys_crc is None else str(keys_crc),
                       content=str(obj["content"]), key=(str(split), int(index), int(count)),
                       label_counts={str(k): int(v) for k, v in obj["label_counts"].items()})
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
            raise ManifestError(f"done shard record is not readable: {err}") from err
