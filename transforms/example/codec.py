"""Decode ``tf.train.Example`` records without TensorFlow, to plain Python values (``wire`` encodes them)."""

from __future__ import annotations

from google.protobuf.message import DecodeError

from transforms.errors import ExampleError
from transforms.example.messages import Example

__all__ = ["decode_example"]

BYTES, INT64, FLOAT = "bytes", "int64", "float"


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
        if which == "bytes_list":
            out[name] = (BYTES, list(feature.bytes_list.value))
        elif which == "int64_list":
            out[name] = (INT64, list(feature.int64_list.value))
        elif which == "float_list":
            out[name] = (FLOAT, list(feature.float_list.value))
        else:
            out[name] = ("none", [])
    return out
