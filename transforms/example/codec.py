"""Decode ``tf.train.Example`` records without TensorFlow, to plain Python values (``wire`` encodes them),
and show them as readable text: feature names, types and values.

Short printable byte values are shown as quoted text; long or binary ones as their length and
sha256, so a dump of an image record stays one screen long.
"""

from __future__ import annotations

import hashlib

from google.protobuf.message import DecodeError

from transforms.errors import ExampleError
from transforms.example.messages import Example

__all__ = ["decode_example", "format_value", "format_record"]

BYTES, INT64, FLOAT = "bytes", "int64", "float"
_KINDS = {"bytes_list": BYTES, "int64_list": INT64, "float_list": FLOAT}  # a Feature's list -> its kind
_MAX_TEXT = 64  # bytes shown as text at most
_MAX_VALUES = 8  # values shown per feature at most


def decode_example(data: bytes) -> dict[str, tuple[str, list]]:
    """Parses a serialized ``tf.train.Example`` into feature name -> ``(kind, values)``, kind being
    ``bytes``, ``int64``, ``float`` or ``none`` (a feature with no list set).

    Raises:
        ExampleError: The bytes are not a valid Example.
    """
    example = Example()
    try:
        example.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise ExampleError(f"not a tf.train.Example ({len(data)} bytes): {err}") from err
    out: dict[str, tuple[str, list]] = {}
    for name, feature in example.features.feature.items():
        which = feature.WhichOneof("kind")
        out[name] = (_KINDS[which], list(getattr(feature, which).value)) if which else ("none", [])
    return out


def _shortened(value: bytes) -> str:
    return f"<{len(value)} bytes, sha256 {hashlib.sha256(value).hexdigest()}>"


def format_value(kind: str, value) -> str:
    """Returns one feature value as text."""
    if kind == "bytes":
        if len(value) <= _MAX_TEXT:
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                return _shortened(value)
            if text.isprintable():
                return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return _shortened(value)
    if kind == "float":
        return f"{value:g}"
    return str(value)


def format_record(number: int | None, offset: int | None, data: bytes) -> str:
    """Returns a record's ``data`` as text: a header line, then one line per feature. ``number`` (its
    0-based position) and ``offset`` (its byte offset: None in an ArrayRecord file) may be unknown."""
    ordinal = "record" if number is None else f"record {number}"
    lines = [f"{ordinal}{'' if offset is None else f' at byte {offset}'}: {len(data)} bytes"]
    try:
        features = decode_example(data)
    except ExampleError as err:
        lines.append(f"  not a tf.train.Example ({err}); data {_shortened(data)}")
        lines.append(f"  first bytes: {data[:32].hex(' ')}")
        return "\n".join(lines)
    if not features:
        lines.append("  (no features)")
    width = max((len(name) for name in features), default=0)
    for name in sorted(features):
        kind, values = features[name]
        shown = ", ".join(format_value(kind, v) for v in values[:_MAX_VALUES])
        more = f", ... ({len(values)} values)" if len(values) > _MAX_VALUES else ""
        lines.append(f"  {name:<{width}}  {kind:<5}  [{shown}{more}]")
    return "\n".join(lines)
