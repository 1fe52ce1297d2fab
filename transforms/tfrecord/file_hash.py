"""A whole file's CRC32C (and, when asked, sha256), computed from the bytes as they pass.

The CRC32C is the one Google Cloud Storage keeps of every object (unmasked, over the whole file),
written as GCS's ``crc32c`` metadata and ``gsutil hash -c`` give it (``crc32c_text``). ``HashingReader``
hashes a file as it is read, so a file is checked and hashed in one read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import BinaryIO

import crc32c as _crc32c

__all__ = ["FileHash", "HashingReader", "crc32c_text", "crc32c_value"]

_FINISH_CHUNK = 8 << 20


def crc32c_text(value: int) -> str:
    """A CRC32C as GCS writes it: base64 of its 4 bytes, big-endian (0xE3069283 -> ``4waSgw==``)."""
    return base64.b64encode(value.to_bytes(4, "big")).decode("ascii")


def crc32c_value(text: str) -> int:
    """The CRC32C that ``text`` (as ``crc32c_text`` writes it) states.

    Raises:
        ValueError: ``text`` is not the base64 of 4 bytes.
    """
    if not isinstance(text, str) or len(text) != 8 or not text.endswith("=="):
        raise ValueError(f"{text!r} is not a CRC32C in GCS's form (base64 of 4 bytes, e.g. '4waSgw==')")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ValueError(f"{text!r} is not a CRC32C in GCS's form (base64 of 4 bytes): {err}") from err
    if len(raw) != 4 or crc32c_text(int.from_bytes(raw, "big")) != text:
        raise ValueError(f"{text!r} is not a CRC32C in GCS's form (base64 of 4 bytes)")
    return int.from_bytes(raw, "big")


class FileHash:
    """The running CRC32C of the bytes given to ``update``, and their sha256 with ``sha256=True``."""

    def __init__(self, sha256: bool = False) -> None:
        self._crc = 0
        self._sha = hashlib.sha256() if sha256 else None

    def update(self, data: bytes | memoryview) -> None:
        """Adds the next bytes of the file."""
        self._crc = _crc32c.crc32c(data, self._crc)
        if self._sha is not None:
            self._sha.update(data)

    @property
    def crc32c(self) -> str:
        """The CRC32C so far, as GCS writes it (``crc32c_text``)."""
        return crc32c_text(self._crc)

    @property
    def sha256(self) -> str | None:
        """The hex sha256 so far, or None when it is not computed."""
        return self._sha.hexdigest() if self._sha is not None else None


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
