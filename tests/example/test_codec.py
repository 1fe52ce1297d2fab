"""Unit tests for transforms.example.codec and the run-time tf.train.Example descriptor."""

from __future__ import annotations

import itertools
import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from transforms.example import messages as example_proto
from transforms.errors import ExampleError
from transforms.example.codec import decode_example
from tests.helpers import feature_kind
from tests.helpers import encode_example
from transforms.example.schema import IMAGE_FEATURES, IMAGE_FORMATS, record_problems, schema_problems

_PROTO = Path(__file__).resolve().parents[2] / "transforms" / "example" / "example.proto"

# --- A tiny independent protobuf wire encoder for golden bytes -----------------------


def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF  # int64 is encoded as its two's complement
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _bytes_feature(*values: bytes) -> bytes:
    return _ld(1, b"".join(_ld(1, v) for v in values))


def _int64_feature(*values: int) -> bytes:
    return _ld(3, _ld(1, b"".join(_varint(v) for v in values)))


def _float_feature(*values: float) -> bytes:
    return _ld(2, _ld(1, b"".join(struct.pack("<f", v) for v in values)))


def _example(entries: dict[str, bytes]) -> bytes:
    """Example{features{feature: map}} with entries in the given (sorted) order."""
    features = b"".join(_ld(1, _ld(1, k.encode()) + _ld(2, v)) for k, v in entries.items())
    return _ld(1, features)


# --- Golden bytes ----------------------------------------------------------------------

_SMALL = {"image/height": 2, "image/format": b"png", "score": 0.5}
_SMALL_HEX = (
    "0a430a170a0c696d6167652f666f726d617412070a050a03706e67"
    "0a150a0c696d6167652f68656967687412051a030a0102"
    "0a110a0573636f7265120812060a040000003f"
)


def test_small_example_golden_hex() -> None:
    assert encode_example(_SMALL).hex() == _SMALL_HEX


def test_small_example_matches_hand_encoded_wire_format() -> None:
    expected = _example({
        "image/format": _bytes_feature(b"png"),
        "image/height": _int64_feature(2),
        "score": _float_feature(0.5),
    })
    assert encode_example(_SMALL) == expected == bytes.fromhex(_SMALL_HEX)


@pytest.mark.parametrize(
    "features, kinds, entries",
    [
        ({"n": -1}, None, {"n": _int64_feature(-1)}),  # ten-byte varint
        ({"n": [1, -2**63, 2**63 - 1]}, None, {"n": _int64_feature(1, -2**63, 2**63 - 1)}),
        ({"s": "é"}, None, {"s": _bytes_feature("é".encode())}),
        ({"b": [b"", b"x"]}, None, {"b": _bytes_feature(b"", b"x")}),
        ({"e": []}, {"e": "int64"}, {"e": _ld(3, b"")}),
        ({"e": []}, {"e": "bytes"}, {"e": _ld(1, b"")}),
        ({"e": []}, {"e": "float"}, {"e": _ld(2, b"")}),
        ({"z": 1, "a": 2}, None, {"a": _int64_feature(2), "z": _int64_feature(1)}),  # sorted
    ],
)
def test_wire_format_table(features: dict, kinds: dict | None, entries: dict[str, bytes]) -> None:
    assert encode_example(features, kinds) == _example(entries)


def test_empty_example_is_empty_bytes() -> None:
    assert encode_example({}) == b""
    assert decode_example(b"") == {}


# --- Round trips -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "features, kinds, decoded",
    [
        ({"b": b"\x00\xff"}, None, {"b": ("bytes", [b"\x00\xff"])}),
        ({"s": "naïve"}, None, {"s": ("bytes", ["naïve".encode("utf-8")])}),
        ({"i": 7}, None, {"i": ("int64", [7])}),
        ({"i": -7}, None, {"i": ("int64", [-7])}),
        ({"i": [2**63 - 1, -2**63, 0]}, None, {"i": ("int64", [2**63 - 1, -2**63, 0])}),
        ({"f": 0.5}, None, {"f": ("float", [0.5])}),
        ({"f": [-2.25, 1e30, 0.0]}, None, {"f": ("float", [-2.25, float(np.float32(1e30)), 0.0])}),
        ({"f": [1.0, 2]}, None, {"f": ("float", [1.0, 2.0])}),  # ints after a float are floats
        ({"l": [b"a", "b", b""]}, None, {"l": ("bytes", [b"a", b"b", b""])}),
        ({"l": (1, 2, 3)}, None, {"l": ("int64", [1, 2, 3])}),
        ({"e": []}, {"e": "bytes"}, {"e": ("bytes", [])}),
        ({"e": []}, {"e": "int64"}, {"e": ("int64", [])}),
        ({"e": ()}, {"e": "float"}, {"e": ("float", [])}),
        ({"x": [3]}, {"x": "float"}, {"x": ("float", [3.0])}),  # kinds override inference
        ({"x": 1, "y": b"2", "z": 3.5}, None,
         {"x": ("int64", [1]), "y": ("bytes", [b"2"]), "z": ("float", [3.5])}),
    ],
)
def test_round_trip(features: dict, kinds: dict | None, decoded: dict) -> None:
    assert decode_example(encode_example(features, kinds)) == decoded


def test_float_values_are_stored_as_float32() -> None:
    (kind, values), = decode_example(encode_example({"f": 0.1})).values()
    assert kind == "float"
    assert values == [float(np.float32(0.1))] and values != [0.1]


def test_nan_and_infinities_round_trip() -> None:
    (_, values), = decode_example(encode_example({"f": [math.nan, math.inf, -math.inf]})).values()
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf]


def test_large_bytes_value_round_trips() -> None:
    blob = bytes(range(256)) * 4096  # 1 MiB
    assert decode_example(encode_example({"image/encoded": blob})) == {"image/encoded": ("bytes", [blob])}


def test_feature_without_a_list_decodes_as_none() -> None:
    data = _example({"x": b""})  # a Feature with no kind set
    assert decode_example(data) == {"x": ("none", [])}


# --- Determinism -------------------------------------------------------------------------


def test_serialization_ignores_insertion_order() -> None:
    features = {"image/encoded": b"\x89PNG", "image/height": 3, "image/width": 4,
                "image/class/text": "cat", "score": [0.25, 0.5]}
    outputs = {encode_example(dict(order)) for order in itertools.permutations(features.items())}
    assert len(outputs) == 1
    assert outputs.pop() == encode_example(dict(sorted(features.items())))


# --- Errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "features, kinds",
    [
        ({"e": []}, None),  # empty list, kind unknown
        ({"e": []}, {"e": "string"}),  # unknown kind
        ({"x": True}, None),  # bool is not an int64 here
        ({"x": [None]}, None),
        ({"x": None}, None),
        ({"x": {"k": 1}}, None),  # a mapping is not a list of values
        ({"x": bytearray(b"ab")}, None),  # would otherwise become int64 [97, 98]
        ({"x": memoryview(b"ab")}, None),
        ({"x": [bytearray(b"ab")]}, None),
        ({"x": np.int64(3)}, None),
        ({"x": object()}, None),
        ({"x": [1, 2.5]}, None),  # int64 list with a float
        ({"x": [b"a", 1]}, None),
        ({"x": [1.5, "a"]}, None),
        ({"x": 2**63}, None),
        ({"x": -2**63 - 1}, None),
        ({"x": [b"a"]}, {"x": "int64"}),
        ({"x": 2.5}, {"x": "int64"}),
        ({"x": "\ud800"}, None),  # lone surrogate is not UTF-8
        ({"\ud800": 1}, None),
        ({1: 1}, None),  # feature names are strings
    ],
)
def test_encode_rejects_bad_values_with_example_error(features: dict, kinds: dict | None) -> None:
    with pytest.raises(ExampleError):
        encode_example(features, kinds)


def test_encode_error_names_the_feature() -> None:
    with pytest.raises(ExampleError, match="'image/width'"):
        encode_example({"image/width": [1, 2.5]})
    with pytest.raises(ExampleError, match="'e'.*kind must be given"):
        encode_example({"e": []})


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff",
        b"\x0a",  # field 1, length missing
        b"\x0a\x05ab",  # length beyond the end
        b"\x0a\x03\x0a\x01\xff",  # nested length beyond the end
        b"garbage!",
        b"\x0b",  # start-group wire type without an end
        _ld(1, _ld(1, _ld(1, b"\xc3\x28") + _ld(2, b""))),  # feature name is not UTF-8
        bytes.fromhex(_SMALL_HEX)[:-1],  # golden Example minus its last byte
        b"\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # over-long varint
    ],
)
def test_decode_rejects_garbage(garbage: bytes) -> None:
    with pytest.raises(ExampleError, match=f"not a tf.train.Example \\({len(garbage)} bytes\\)"):
        decode_example(garbage)


@pytest.mark.parametrize(
    "values, kind",
    [([b"x"], "bytes"), (["x"], "bytes"), ([1], "int64"), ([-1, 2.0], "int64"),
     ([1.5], "float"), ([np.float64(1.5)], "float")],
)
def test_feature_kind(values: list, kind: str) -> None:
    assert feature_kind(values) == kind


@pytest.mark.parametrize("values", [[True], [None], [bytearray(b"x")], [np.int32(1)]])
def test_feature_kind_rejects(values: list) -> None:
    with pytest.raises(ExampleError):
        feature_kind(values)


# --- The run-time descriptor against TensorFlow's .proto ----------------------------------


def _field_summary(field: descriptor_pb2.FieldDescriptorProto) -> tuple:
    return (
        field.name, field.number,
        descriptor_pb2.FieldDescriptorProto.Type.Name(field.type),
        descriptor_pb2.FieldDescriptorProto.Label.Name(field.label),
        field.type_name,
        field.options.packed if field.options.HasField("packed") else None,
        field.oneof_index if field.HasField("oneof_index") else None,
        field.json_name,
        field.HasField("default_value"), field.proto3_optional,
    )


def _message_summary(msg: descriptor_pb2.DescriptorProto) -> dict:
    return {
        "name": msg.name,
        "fields": [_field_summary(f) for f in msg.field],
        "oneofs": [o.name for o in msg.oneof_decl],
        "map_entry": msg.options.map_entry,
        "nested": [_message_summary(n) for n in msg.nested_type],
        "enums": [e.name for e in msg.enum_type],
        "extensions": len(msg.extension),
        "reserved": [(r.start, r.end) for r in msg.reserved_range] + list(msg.reserved_name),
    }


def _file_summary(fdp: descriptor_pb2.FileDescriptorProto) -> dict:
    return {
        "package": fdp.package,
        "syntax": fdp.syntax,
        "dependencies": list(fdp.dependency),
        "enums": [e.name for e in fdp.enum_type],
        "messages": [_message_summary(m) for m in fdp.message_type],
    }


@pytest.fixture(scope="module")
def compiled_proto(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    pytest.importorskip("grpc_tools.protoc")
    out = tmp_path_factory.mktemp("protoc") / "example.desc"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{_PROTO.parent}",
         f"--descriptor_set_out={out}", str(_PROTO)],
        check=True, capture_output=True,
    )
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    assert [f.name for f in files.file] == ["example.proto"]
    return files.file[0]


def test_runtime_descriptor_matches_the_proto_file(compiled_proto) -> None:
    assert _file_summary(example_proto.FILE_DESCRIPTOR) == _file_summary(compiled_proto)
    # The summary covers every field protoc sets here; the protos should agree outright.
    assert list(example_proto.FILE_DESCRIPTOR.message_type) == list(compiled_proto.message_type)


def test_proto_file_describes_tensorflows_layout(compiled_proto) -> None:
    # Pin the facts TensorFlow compatibility rests on, independent of both sources.
    messages = {m.name: m for m in compiled_proto.message_type}
    assert compiled_proto.package == "tensorflow"
    assert [(f.name, f.number) for f in messages["Feature"].field] == [
        ("bytes_list", 1), ("float_list", 2), ("int64_list", 3)]
    assert [f.options.packed for f in (messages["FloatList"].field[0], messages["Int64List"].field[0])] == [True, True]
    entry = messages["Features"].nested_type[0]
    assert entry.options.map_entry and entry.name == "FeatureEntry"
    assert [(f.name, f.number, f.type_name) for f in entry.field] == [
        ("key", 1, ""), ("value", 2, ".tensorflow.Feature")]
    assert [(f.name, f.number) for f in messages["Example"].field] == [("features", 1)]
    assert [(f.name, f.number) for f in messages["SequenceExample"].field] == [
        ("context", 1), ("feature_lists", 2)]


def _class_in_fresh_pool(fdp: descriptor_pb2.FileDescriptorProto, name: str):
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def test_messages_live_in_a_private_pool() -> None:
    assert example_proto.Example.DESCRIPTOR.full_name == "tensorflow.Example"
    assert example_proto.Example.DESCRIPTOR.file.pool is not descriptor_pool.Default()


def test_same_file_in_another_pool_does_not_clash_and_reads_our_bytes(compiled_proto) -> None:
    data = encode_example(_SMALL)
    for fdp in (example_proto.FILE_DESCRIPTOR, compiled_proto):
        other = _class_in_fresh_pool(fdp, "tensorflow.Example")
        assert other is not example_proto.Example
        parsed = other.FromString(data)
        assert not isinstance(parsed, example_proto.Example)
        assert parsed.features.feature["image/height"].int64_list.value == [2]
        assert parsed.features.feature["score"].float_list.value == [0.5]
        assert parsed.SerializeToString(deterministic=True) == data
    # Our own classes still work after the same names were registered elsewhere.
    assert encode_example(_SMALL) == data


def test_sequence_example_class_round_trips() -> None:
    seq = example_proto.SequenceExample()
    seq.context.feature["id"].bytes_list.value.append(b"x")
    seq.feature_lists.feature_list["frames"].feature.add().int64_list.value.extend([1, 2])
    back = example_proto.SequenceExample.FromString(seq.SerializeToString())
    assert back.feature_lists.feature_list["frames"].feature[0].int64_list.value == [1, 2]
    assert back.context.feature["id"].bytes_list.value == [b"x"]


# --- The image schema, checked on decoded Examples -------------------------------------------

_GOOD_IMAGE = {
    "image/encoded": b"\xff\xd8\xff",
    "image/format": "jpeg",
    "image/height": 24,
    "image/width": 32,
    "image/channels": 3,
    "image/class/label": 0,
    "image/class/text": "cat",
    "image/filename": "cat/001.jpg",
    "image/key/sha256": "0123456789abcdef" * 4,
    "image/source_format": "jpeg",
}


def test_schema_accepts_a_good_image_record() -> None:
    assert set(_GOOD_IMAGE) == set(IMAGE_FEATURES)
    assert schema_problems(decode_example(encode_example(_GOOD_IMAGE))) == []


@pytest.mark.parametrize(
    "changes, kinds, problem",
    [
        ({"image/width": None}, None, "missing feature image/width"),
        ({"image/height": "24"}, None, "feature image/height is bytes, expected int64"),
        ({"image/encoded": 5}, None, "feature image/encoded is int64, expected bytes"),
        ({"image/channels": []}, {"image/channels": "int64"}, "feature image/channels has 0 values, expected 1"),
        ({"image/class/label": [1, 2]}, None, "feature image/class/label has 2 values, expected 1"),
        ({"image/format": "svg"}, None, "image/format b'svg' is not one of"),
        ({"image/height": 0}, None, "image/height is 0, expected > 0"),
        ({"image/width": -4}, None, "image/width is -4, expected > 0"),
        ({"image/class/label": -1}, None, "image/class/label is negative"),
        ({"image/key/sha256": "abc"}, None, "image/key/sha256 is not 64 lowercase hex characters"),
        ({"image/key/sha256": "z" * 64}, None, "image/key/sha256 is not 64 lowercase hex characters"),
        ({"image/key/sha256": "ABCDEF0123456789" * 4}, None, "image/key/sha256 is not 64 lowercase hex characters"),
    ],
)
def test_schema_problems_table(changes: dict, kinds: dict | None, problem: str) -> None:
    features = {k: v for k, v in {**_GOOD_IMAGE, **changes}.items() if v is not None}
    problems = schema_problems(decode_example(encode_example(features, kinds)))
    assert len(problems) == 1 and problems[0].startswith(problem), problems


@pytest.mark.parametrize("fmt", IMAGE_FORMATS)
def test_schema_accepts_every_image_format(fmt: str) -> None:
    assert schema_problems(decode_example(encode_example({**_GOOD_IMAGE, "image/format": fmt}))) == []


def test_schema_reports_every_missing_feature() -> None:
    assert schema_problems({}) == [f"missing feature {name}" for name in IMAGE_FEATURES
                                   if name != "image/source_format"]


def test_source_format_is_required_by_specs_that_list_it() -> None:
    """Shard sets built before ``image/source_format`` existed still get the image checks."""
    older = {k: v for k, v in _GOOD_IMAGE.items() if k != "image/source_format"}
    decoded = decode_example(encode_example(older))
    assert schema_problems(decoded) == []
    assert record_problems(decoded, {k: v for k, v in IMAGE_FEATURES.items()
                                     if k != "image/source_format"}) == []
    assert record_problems(decoded, IMAGE_FEATURES) == ["missing feature image/source_format"]
