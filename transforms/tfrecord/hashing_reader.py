"""A file reader that hashes the bytes it reads, so a file is checked and hashed in one read.

The hash covers the file from byte 0 as far as the reads have gone on without a gap; ``finish``
reads whatever it has not seen yet, so only the bytes the reader skipped are read twice.
"""

from __future__ import annotations

from typing import BinaryIO

from transforms.tfrecord.file_hash import FileHash

__all__ = ["HashingReader"]

_FINISH_CHUNK = 8 << 20


class HashingReader:
    """Wraps ``fh`` (seekable, positioned at byte 0): ``read``/``seek``/``tell`` as the file's, hashing
    its CRC32C (and with ``sha256`` its sha256) as it goes."""

    def __init__(self, fh: BinaryIO, sha256: bool = False) -> None:
        self._fh = fh
        self._hash = FileHash(sha256=sha256)
        self._pos = 0
        self._hashed = 0  # the hash covers bytes [0, _hashed)
        self.reread = 0  # bytes ``finish`` had to read again

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        end = self._pos + len(data)
        if self._pos <= self._hashed < end:
            self._hash.update(memoryview(data)[self._hashed - self._pos:])
            self._hashed = end
        self._pos = end
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = self._fh.seek(offset, whence)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def finish(self, size: int) -> FileHash:
        """The hash of the file's first ``size`` bytes, reading what the hash has not seen (the file
        is left positioned at its end)."""
        if self._hashed < size:
            self._fh.seek(self._hashed)
            while self._hashed < size:
                chunk = self._fh.read(min(_FINISH_CHUNK, size - self._hashed))
                if not chunk:
                    break
                self._hash.update(chunk)
                self._hashed += len(chunk)
                self.reread += len(chunk)
            self._pos = self._hashed
        return self._hash
