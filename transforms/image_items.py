"""Small records passed between the build job's stages (pure dataclasses).

Only these cross Beam's shuffles, never image bytes (except re-encoded images,
whose bytes are the expensive part to recompute).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from transforms.images import ImageInfo

__all__ = ["SourceImage", "ImageMeta", "DeadLetter"]


@dataclass(frozen=True)
class SourceImage:
    """One input file found by listing a folder or reading an input manifest.

    Attributes:
        path: Full path or URI of the file.
        relpath: Path relative to its input root; becomes ``image/filename``.
        split: Split the file belongs to.
        label: Class name.
    """

    path: str
    relpath: str
    split: str
    label: str


@dataclass(frozen=True)
class ImageMeta:
    """An image that passed inspection, with everything needed to write its record.

    Attributes:
        source: The input file it came from.
        label_index: Class index.
        sha256: Hex sha256 of the source file's bytes.
        info: Format and size of the image as stored in the record.
        record_size: Exact framed size of the record in bytes.
        order_key: Shuffle key (see ``planning.order_key``).
        source_crc32c: CRC32C of the source file's bytes, which the writer checks
            when it reads the file again, to refuse a file changed since.
        payload: Encoded image bytes when they are costly to recompute
            (``reencode`` mode); None when the writer re-reads the source.
    """

    source: SourceImage
    label_index: int
    sha256: str
    info: ImageInfo
    record_size: int
    order_key: int
    source_crc32c: int
    payload: bytes | None = None


@dataclass(frozen=True)
class DeadLetter:
    """A rejected input: where it was, why, and the error text."""

    path: str
    reason: str
    error: str

    def to_json(self) -> str:
        return json.dumps({"path": self.path, "reason": self.reason, "error": self.error},
                          ensure_ascii=False, sort_keys=True)
