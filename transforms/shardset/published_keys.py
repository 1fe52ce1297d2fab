"""The image keys (``image/key/sha256``) in a published shard, read from its records (pure).

A build that writes some splits into a folder that keeps others must not put an image in two
splits; where a kept shard has no keys file, its keys are read from its records.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator

from transforms.errors import ExampleError, ShardsError
from transforms.example.codec import decode_example
from transforms.example.scan import scan_example
from transforms.tfrecord.framing import iter_records

__all__ = ["KEY_FEATURE", "LABEL_FEATURE", "record_keys", "record_key", "record_label"]

KEY_FEATURE = "image/key/sha256"
LABEL_FEATURE = "image/class/label"


def _features(data: bytes, where: str) -> dict:
    """A record's features (the image's bytes not copied), by the fast scan or the full parse (``ShardsError``
    naming ``where``: not a ``tf.train.Example``)."""
    features = scan_example(data, views=("image/encoded",))
    if features is not None:
        return features
    try:
        return decode_example(data)
    except ExampleError as err:
        raise ShardsError(f"{where} is not an Example: {err}") from err


def record_keys(fh: BinaryIO, path: str = "") -> Iterator[str]:
    """The ``image/key/sha256`` of every record of a shard (``fh``: decompressed, at its start) that has one
    (``RecordError``: a record is damaged; ``ShardsError``: not an Example)."""
    for offset, data in iter_records(fh, path):
        key = record_key(data, f"{path}: record at byte {offset}")
        if key is not None:
            yield key


def record_key(data: bytes, where: str = "") -> str | None:
    """A record's ``image/key/sha256``, or None where it has none (``ShardsError``: not an Example)."""
    kind, values = _features(data, where).get(KEY_FEATURE, ("bytes", []))
    return bytes(values[0]).decode("ascii", "replace") if kind == "bytes" and len(values) == 1 else None


def record_label(data: bytes, where: str = "") -> int | tuple[int, ...] | None:
    """A record's ``image/class/label``: its one value, its values (multi-label), or None (``ShardsError``)."""
    kind, values = _features(data, f"{where}: record").get(LABEL_FEATURE, ("int64", []))
    if kind != "int64" or not values:
        return None
    return int(values[0]) if len(values) == 1 else tuple(int(v) for v in values)
