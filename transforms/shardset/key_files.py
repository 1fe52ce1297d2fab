"""``.keys`` sidecars: the raw 32 bytes of each record's ``image/key/sha256``, in record order (pure).

It lives beside the shard's ``.idx`` in ``index/``, so the usual shard globs match shards only. A
shard with a record whose key is missing or not 64 hex digits has no keys file.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from transforms.errors import ShardsError
from transforms.shardset.published_keys import record_key
from transforms.tfrecord.framing import OVERHEAD
from transforms.tfrecord.record_index import INDEX_DIR
from transforms.tfrecord.run_files import FramedRecord

__all__ = ["KEYS_SUFFIX", "KEY_BYTES", "KeyCollector", "keys_name", "parse_keys", "keys_problem"]

KEYS_SUFFIX = ".keys"
KEY_BYTES = 32


def keys_name(shard: str) -> str:
    """``out/train-00000-of-00004.tfrecord`` -> ``out/index/train-00000-of-00004.tfrecord.keys``."""
    folder, sep, base = shard.rpartition("/")
    return f"{folder}{sep}{INDEX_DIR}/{base}{KEYS_SUFFIX}"


def _digest(key: str | None) -> bytes | None:
    """The 32 bytes of a 64-hex-digit key, or None for any other key (or none)."""
    if key is None or len(key) != 2 * KEY_BYTES:
        return None
    try:
        return bytes.fromhex(key)
    except ValueError:
        return None


class KeyCollector:
    """Collects the keys of the records of one shard as they are written, in order."""

    def __init__(self) -> None:
        self._digests: list[bytes] | None = []

    def add(self, record: bytes | FramedRecord | Sequence[bytes], where: str = "") -> None:
        """Notes the key of one record: its bytes, a ``FramedRecord`` (its ``key`` if it says it), or the
        pieces it is made of (joined to be read); a record that is not an Example has no key."""
        if self._digests is None:
            return
        if isinstance(record, FramedRecord) and record.key is not None:
            digest = _digest(record.key)
        else:
            if isinstance(record, FramedRecord):
                data = memoryview(record.data)[OVERHEAD - 4:-4]  # header (12 bytes) and footer (4) off
            elif isinstance(record, (bytes, bytearray, memoryview)):
                data = record
            else:
                data = b"".join(record)
            try:
                digest = _digest(record_key(bytes(data), where))
            except ShardsError:
                digest = None
        if digest is None:
            self._digests = None
        else:
            self._digests.append(digest)

    def keys(self) -> bytes | None:
        """The keys file's bytes, or None when some record had no usable key."""
        return None if self._digests is None else b"".join(self._digests)


def parse_keys(data: bytes, where: str = "") -> Iterator[str]:
    """The hex keys of a keys file's bytes, in order (``ShardsError``: not a multiple of 32 bytes)."""
    if len(data) % KEY_BYTES:
        raise ShardsError(f"{where}: {len(data)} bytes is not a whole number of {KEY_BYTES}-byte keys")
    for start in range(0, len(data), KEY_BYTES):
        yield data[start:start + KEY_BYTES].hex()


def keys_problem(data: bytes, keys: Sequence[str | None], where: str) -> str | None:
    """Why a keys file does not list ``keys`` (the records' keys, in order), or None when it does."""
    if len(data) % KEY_BYTES:
        return f"{where}: {len(data)} bytes is not a whole number of {KEY_BYTES}-byte keys"
    if len(data) // KEY_BYTES != len(keys):
        return f"{where} lists {len(data) // KEY_BYTES} keys; the shard has {len(keys)} records"
    for number, (listed, key) in enumerate(zip(parse_keys(data, where), keys)):
        if listed != key:
            return f"{where}: key {number} is {listed}; record {number}'s image/key/sha256 is {key}"
    return None
