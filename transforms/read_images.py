"""Beam transform that reads each input image once, checks it and measures its record."""

from __future__ import annotations

import hashlib

import apache_beam as beam
import crc32c
from apache_beam.metrics import Metrics

from transforms.errors import ImageError, ShardsError
from transforms.file_access import read_bytes
from transforms.framing import framed_size
from transforms.image_items import DeadLetter, ImageMeta, SourceImage
from transforms.image_records import EncodeSettings, encode_image, image_example_parts
from transforms.planning import order_key

__all__ = ["InspectImages", "ImageRecordMaker", "image_order", "read_source", "REJECTED_TAG"]

REJECTED_TAG = "rejected"


def read_source(path: str) -> bytes:
    """Reads a whole input file through Beam's file systems (local, gs://, s3://)."""
    return read_bytes(path)


class _InspectImageFn(beam.DoFn):
    """SourceImage -> ImageMeta (main) or DeadLetter (REJECTED_TAG)."""

    def __init__(self, settings: EncodeSettings, seed: int) -> None:
        self._settings = settings
        self._seed = seed
        self._read = Metrics.counter("build", "images_read")
        self._read_bytes = Metrics.counter("build", "image_bytes_read")
        self._rejected = Metrics.counter("build", "images_rejected")

    def process(self, source: SourceImage, labels: list[str]):
        index = self._label_index(labels, source.label)
        if index is None:
            self._rejected.inc()
            yield beam.pvalue.TaggedOutput(REJECTED_TAG, DeadLetter(
                source.path, "unknown_label", f"class {source.label!r} is not in the label list"))
            return
        try:
            data = read_source(source.path)
        except (OSError, beam.io.filesystem.BeamIOError) as err:
            self._rejected.inc()
            yield beam.pvalue.TaggedOutput(REJECTED_TAG, DeadLetter(
                source.path, "unreadable", f"{type(err).__name__}: {err}"))
            return
        self._read.inc()
        self._read_bytes.inc(len(data))
        try:
            stored, info = encode_image(data, self._settings)
        except ImageError as err:
            self._rejected.inc()
            yield beam.pvalue.TaggedOutput(REJECTED_TAG, DeadLetter(source.path, err.reason, err.detail))
            return
        digest = hashlib.sha256(data).digest()
        head, tail = image_example_parts(stored, info, index, source.label, source.relpath,
                                         digest.hex())
        yield ImageMeta(
            source=source, label_index=index, sha256=digest.hex(), info=info,
            record_size=framed_size(len(head) + len(stored) + len(tail)),
            order_key=order_key(self._seed, digest), source_crc32c=crc32c.crc32c(data),
            payload=stored if self._settings.mode == "reencode" else None)

    def _label_index(self, labels: list[str], label: str) -> int | None:
        """Class index of a name; the name -> index table is built once per side input."""
        cached = getattr(self, "_index_cache", None)
        if cached is None or cached[0] is not labels:
            cached = (labels, {name: i for i, name in enumerate(labels)})
            self._index_cache = cached
        return cached[1].get(label)


class InspectImages(beam.PTransform):
    """Reads, validates and measures every image.

    Input: ``PCollection[SourceImage]``. Output: outputs ``main`` (ImageMeta)
    and ``REJECTED_TAG`` (DeadLetter with the reason).

    Args:
        settings: Image options of the build.
        seed: Shuffle seed for the order key.
        labels: Singleton side input with the class names in index order.
    """

    def __init__(self, settings: EncodeSettings, seed: int, labels) -> None:
        super().__init__()
        self._settings = settings
        self._seed = seed
        self._labels = labels

    def expand(self, sources):
        return sources | "InspectImage" >> beam.ParDo(
            _InspectImageFn(self._settings, self._seed), labels=self._labels).with_outputs(
                REJECTED_TAG, main="main")


def image_order(meta: ImageMeta) -> tuple[int, str]:
    """Shuffle order of an image: its order key, ties broken by relative path."""
    return (meta.order_key, meta.source.relpath)


class ImageRecordMaker:
    """ImageMeta -> (the serialized Example's pieces, label index), as the shard writer needs.

    The pieces are the bytes before the image, the image, and the bytes after
    it (``image_example_parts``): the writer writes them without joining them.
    Re-reads the source unless the stored image travelled with the metadata,
    and refuses a source whose bytes changed since it was inspected: their
    CRC32C must be the one inspection saw (a hardware CRC costs a tenth of
    hashing the file again with sha256; what it guards against is a file
    rewritten or truncated while the job runs, not a forgery).
    """

    def __init__(self, settings: EncodeSettings) -> None:
        self._settings = settings

    def __call__(self, meta: ImageMeta) -> tuple[tuple[bytes, bytes, bytes], int]:
        if meta.payload is not None:
            stored = meta.payload
        else:
            data = read_source(meta.source.path)
            checksum = crc32c.crc32c(data)
            if checksum != meta.source_crc32c:
                raise ShardsError(f"{meta.source.path} changed while the job ran (CRC32C "
                                  f"{meta.source_crc32c:08x} when inspected, {checksum:08x} "
                                  "when written)")
            stored = data if self._settings.mode == "passthrough" else encode_image(data, self._settings)[0]
        head, tail = image_example_parts(stored, meta.info, meta.label_index, meta.source.label,
                                         meta.source.relpath, meta.sha256)
        size = framed_size(len(head) + len(stored) + len(tail))
        if size != meta.record_size:
            raise ShardsError(f"{meta.source.path}: record is {size} bytes, "
                              f"planned {meta.record_size}; image encoding is not deterministic")
        return (head, stored, tail), meta.label_index
