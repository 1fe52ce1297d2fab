"""Builders for small, real TFRecord shard sets used by the read/verify/inspect tests.

Shards are framed with ``framing.frame_record`` from Examples made by
``encode_example`` around real JPEG/PNG images drawn with Pillow; uncompressed
shards get a ``.idx`` sidecar and every set gets a ``manifest.json``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import random
import zlib
from dataclasses import dataclass, field

from PIL import Image, ImageDraw

from tests.helpers import encode_example
from transforms.tfrecord.framing import frame_record
from transforms.shardset.manifest import (LABELS_NAME, MANIFEST_NAME, SHARDS_NAME, Manifest, ShardEntry,
                                          SplitEntry)
from tests.helpers import shard_list_bytes
from transforms.shardset.naming import shard_file_name
from transforms.tfrecord.record_index import index_name
from tests.helpers import format_index
from transforms.example.schema import IMAGE_FEATURES

CLASSES = ("daisy", "rose", "tulip")
_COLORS = {"daisy": (240, 230, 60), "rose": (200, 30, 60), "tulip": (150, 60, 200)}


def image_bytes(label: str, fmt: str, width: int, height: int, rng: random.Random) -> bytes:
    """A small real image: the class colour, a few random shapes and some noise."""
    base = _COLORS.get(label, (90, 140, 90))
    img = Image.new("RGB", (width, height), base)
    draw = ImageDraw.Draw(img)
    for _ in range(4):
        x0, y0 = rng.randrange(width), rng.randrange(height)
        draw.ellipse((x0, y0, x0 + rng.randint(4, 20), y0 + rng.randint(4, 20)),
                     fill=tuple(rng.randrange(256) for _ in range(3)))
    noise = Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3))
    img = Image.blend(img, noise, 0.15)
    out = io.BytesIO()
    if fmt == "jpeg":
        img.save(out, format="JPEG", quality=85)
    elif fmt == "png":
        img.save(out, format="PNG")
    else:
        raise ValueError(fmt)
    return out.getvalue()


def image_example(label: int, text: str, encoded: bytes, fmt: str, height: int, width: int,
                  channels: int = 3, filename: str = "", key: str | None = None) -> bytes:
    """A serialized Example with exactly the project's image schema."""
    features = {
        "image/encoded": encoded,
        "image/format": fmt,
        "image/height": height,
        "image/width": width,
        "image/channels": channels,
        "image/class/label": label,
        "image/class/text": text,
        "image/filename": filename or f"{text}/{hashlib.sha1(encoded).hexdigest()[:8]}.{fmt}",
        "image/key/sha256": key or hashlib.sha256(encoded).hexdigest(),
        "image/source_format": fmt,
    }
    assert set(features) == set(IMAGE_FEATURES)
    return encode_example(features)


def make_examples(count: int, seed: int = 0, classes: tuple[str, ...] = CLASSES,
                  raw_every: int = 0, sides: tuple[int, int] = (12, 40),
                  formats: tuple[str, ...] = ("jpeg", "jpeg", "png")) -> list[tuple[int, bytes]]:
    """Returns ``count`` ``(label, serialized Example)``, image formats taken in turn from ``formats``.

    With ``raw_every=n``, every n-th record stores raw pixels (format ``raw``);
    image sides are drawn from the range ``sides``.
    """
    rng = random.Random(seed)
    out = []
    for i in range(count):
        label = i % len(classes)
        text = classes[label]
        width, height = rng.randint(*sides), rng.randint(*sides)
        if raw_every and i % raw_every == raw_every - 1:
            pixels = rng.randbytes(width * height * 3)
            out.append((label, image_example(label, text, pixels, "raw", height, width)))
            continue
        fmt = formats[i % len(formats)]
        encoded = image_bytes(text, fmt, width, height, rng)
        out.append((label, image_example(label, text, encoded, fmt, height, width)))
    return out


def write_file(path: str, data: bytes) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def compress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.compress(data, mtime=0)
    if compression == "zlib":
        return zlib.compress(data)
    return data


def write_tfrecords(path: str, records: list[bytes], compression: str = "none",
                    index: bool = True) -> bytes:
    """Writes framed records (plus a ``.idx`` when uncompressed and asked); returns the file bytes."""
    framed = [frame_record(r) for r in records]
    data = compress(b"".join(framed), compression)
    write_file(path, data)
    if index and compression == "none":
        write_file(index_name(path), format_index([len(f) for f in framed]))
    return data


@dataclass
class ShardSet:
    """A shard set written to ``folder``.

    Attributes:
        folder: Output folder holding the shards and ``manifest.json``.
        manifest: The manifest written.
        records: Shard file name -> the serialized Examples in it, in order.
        labels: Shard file name -> the label of each record.
    """

    folder: str
    manifest: Manifest
    records: dict[str, list[bytes]] = field(default_factory=dict)
    labels: dict[str, list[int]] = field(default_factory=dict)

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    @property
    def shard_names(self) -> list[str]:
        return self.manifest.shard_files()

    def record_offsets(self, name: str) -> list[int]:
        """Byte offset of each record of an (uncompressed) shard."""
        offsets, at = [], 0
        for record in self.records[name]:
            offsets.append(at)
            at += len(record) + 16
        return offsets


def write_shard_set(folder: str, splits: dict[str, int] | None = None, per_shard: int = 6,
                    compression: str = "none", seed: int = 0, classes: tuple[str, ...] = CLASSES,
                    raw_every: int = 0, sides: tuple[int, int] = (12, 40),
                    formats: tuple[str, ...] = ("jpeg", "jpeg", "png")) -> ShardSet:
    """Writes a shard set: ``splits`` maps split name -> number of shards."""
    splits = splits or {"train": 2, "validation": 1}
    total = sum(splits.values()) * per_shard
    examples = make_examples(total, seed=seed, classes=classes, raw_every=raw_every, sides=sides,
                             formats=formats)
    shard_set = ShardSet(folder, manifest=None)  # type: ignore[arg-type]
    entries: dict[str, SplitEntry] = {}
    taken = 0
    for split, count in splits.items():
        shards = []
        for index in range(count):
            name = shard_file_name(split, index, count, compression)
            chunk = examples[taken:taken + per_shard]
            taken += per_shard
            records = [record for _, record in chunk]
            data = write_tfrecords(os.path.join(folder, name), records, compression)
            label_counts: dict[str, int] = {}
            for label, _ in chunk:
                label_counts[str(label)] = label_counts.get(str(label), 0) + 1
            shards.append(ShardEntry(name, len(records), len(data),
                                     hashlib.sha256(data).hexdigest(), label_counts))
            shard_set.records[name] = records
            shard_set.labels[name] = [label for label, _ in chunk]
        entries[split] = SplitEntry(split, shards)
    manifest = Manifest(created_by="build_shards", options={}, seed=seed, compression=compression,
                        feature_spec=dict(IMAGE_FEATURES), labels=list(classes), splits=entries)
    write_file(os.path.join(folder, LABELS_NAME), "".join(f"{c}\n" for c in classes).encode("utf-8"))
    manifest_json, shard_list = shard_list_bytes(manifest)
    write_file(os.path.join(folder, SHARDS_NAME), shard_list)
    write_file(os.path.join(folder, MANIFEST_NAME), manifest_json)
    shard_set.manifest = manifest
    return shard_set
