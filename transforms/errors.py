"""Error types raised by the project: each says what went wrong, where and why."""

from __future__ import annotations


class ShardsError(Exception):
    """Base class of every error this project raises on purpose."""


class UsageError(ShardsError):
    """A flag or option has a value that cannot work; the message says what to fix."""


class RecordError(ShardsError):
    """A TFRecord record is damaged or cannot be read: the ``kind`` of damage (e.g. ``crc_mismatch``) and its
    ``detail``, at ``offset`` (the record's start) of ``path`` ('' for an anonymous stream)."""

    def __init__(self, path: str, offset: int, kind: str, detail: str) -> None:
        self.path = path
        self.offset = offset
        self.kind = kind
        self.detail = detail
        super().__init__(f"{kind}: {path or '<stream>'} at byte {offset}: {detail}")

    def __reduce__(self):  # keep the fields when pickled across Beam workers
        return (type(self), (self.path, self.offset, self.kind, self.detail))


class ExampleError(ShardsError):
    """Bytes that do not parse as a ``tf.train.Example`` or miss the schema."""


class ImageError(ShardsError):
    """An input file is not a usable image: the ``reason`` its dead letter gives (e.g. ``truncated``),
    and a ``detail``."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")

    def __reduce__(self):
        return (type(self), (self.reason, self.detail))


class ManifestError(ShardsError):
    """A manifest (ours or a user's input manifest) is malformed."""


class PlanError(ShardsError):
    """Shard planning was asked for something impossible."""


class PublishError(ShardsError):
    """Publishing finished shards failed or was refused (e.g. too many bad inputs)."""


class NothingToPublish(ShardsError):
    """A run found nothing to change in its output folder (an append whose every input is already there)."""
