"""Write framed records into one shard file object, counting and hashing as it goes.

Compression is done here with ``zlib`` (a gzip header without a timestamp), so the file's size,
CRC32C and sha256, and the ``.idx``'s CRC32C, are known without reading the file back.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Sequence

from transforms.tfrecord.compression import WBITS
from transforms.tfrecord.file_hash import FileHash
from transforms.tfrecord.framing import frame_parts

__all__ = ["ShardStats", "ShardWriter"]
_FLUSH_BYTES = 4 * 1024 * 1024


@dataclass
class ShardStats:
    """What was written to a shard.

    Attributes:
        bytes: Bytes in the file (after compression).
        sha256: Hex sha256 of the file's bytes, or None when not computed.
        label_counts: Label index (as a string) -> records.
        crc32c: CRC32C of the file's bytes, as GCS writes it (``file_hash.crc32c_text``).
        index_crc32c: CRC32C of the ``.idx``'s bytes, or None without one.
        keys_crc32c: CRC32C of the ``.keys`` file's bytes (``shardset.key_files``), or None.
    """

    records: int = 0
    bytes: int = 0
    sha256: str | None = None
    label_counts: dict[str, int] = field(default_factory=dict)
    crc32c: str = ""
    index_crc32c: str | None = None
    keys_crc32c: str | None = None

    def count(self, label: int | Sequence[int] | None) -> None:
        """Counts one record of ``label``: a class index, every index of a multi-label record, or None."""
        self.records += 1
        for each in (label if isinstance(label, (tuple, list)) else () if label is None else (label,)):
            self.label_counts[str(each)] = self.label_counts.get(str(each), 0) + 1


class ShardWriter:
    """Writes records to a shard file and, for uncompressed shards, its ``.idx`` (``record_index``).

    Args:
        sha256: Also compute the shard's sha256 (its CRC32C always is).
    """

    def __init__(self, fh: BinaryIO, compression: str = "none",
                 index_fh: BinaryIO | None = None, sha256: bool = False) -> None:
        self._fh = fh
        self._index_fh = index_fh
        self._compressor = (zlib.compressobj(6, zlib.DEFLATED, WBITS[compression])
                            if compression != "none" else None)
        self._hash = FileHash(sha256=sha256)
        self._index_hash = FileHash() if index_fh is not None else None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._offset = 0  # uncompressed offset of the next record
        self._index_lines: list[bytes] = []
        self.stats = ShardStats()

    def write(self, record: bytes, label: int | Sequence[int] | None = None) -> None:
        """Appends one record, counting its ``label`` (``ShardStats.count``)."""
        self.write_parts((record,), label)

    def write_parts(self, parts: Sequence[bytes], label: int | Sequence[int] | None = None) -> None:
        """Appends one record whose data is ``b"".join(parts)``, without joining the parts."""
        header, footer = frame_parts(parts)
        self._append((header, *parts, footer), len(header) + sum(len(part) for part in parts) + len(footer),
                     label)

    def write_framed(self, framed: bytes, label: int | Sequence[int] | None = None) -> None:
        """Appends one record given already framed (``framing.frame_record``'s bytes)."""
        self._append((framed,), len(framed), label)

    def _append(self, pieces: Sequence[bytes], size: int, label: int | Sequence[int] | None) -> None:
        """Writes (or queues for compression) one framed record of ``size`` bytes, as ``pieces``."""
        if self._index_fh is not None:
            self._index_lines.append(b"%d %d\n" % (self._offset, size))
        self._offset += size
        self.stats.count(label)
        self._pending_bytes += size
        if self._compressor is None:
            for piece in pieces:
                self._emit(piece)
        else:
            self._pending.extend(pieces)
        if self._pending_bytes >= _FLUSH_BYTES:
            self._flush()

    def _emit(self, data: bytes) -> None:
        if data:
            self._hash.update(data)
            self.stats.bytes += len(data)
            self._fh.write(data)

    def _flush(self) -> None:
        data = b"".join(self._pending)
        self._pending = []
        self._pending_bytes = 0
        self._emit(self._compressor.compress(data) if self._compressor else data)
        if self._index_fh is not None and self._index_lines:
            lines = b"".join(self._index_lines)
            self._index_hash.update(lines)
            self._index_fh.write(lines)
            self._index_lines = []

    def close(self) -> ShardStats:
        """Flushes everything (the caller closes the file objects) and returns the stats."""
        self._flush()
        if self._compressor is not None:
            self._emit(self._compressor.flush())
        self.stats.sha256 = self._hash.sha256
        self.stats.crc32c = self._hash.crc32c
        self.stats.index_crc32c = self._index_hash.crc32c if self._index_hash is not None else None
        return self.stats
