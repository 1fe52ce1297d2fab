"""The ``tf.train.Example`` message classes, built at run time.

Generated ``_pb2.py`` files load only on a protobuf runtime as new as their protoc; a descriptor
built in code works with every runtime from 3.20 to 6.x. The layout mirrors
``transforms/example/example.proto``. A private descriptor pool keeps the messages apart from
TensorFlow's own ``tensorflow.Example``.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["FILE_DESCRIPTOR", "Example", "Features", "Feature", "BytesList", "FloatList", "Int64List",
           "SequenceExample"]

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "tensorflow"


def _field(name: str, number: int, ftype: int, label: int = _F.LABEL_OPTIONAL,
           type_name: str | None = None, packed: bool = False,
           oneof_index: int | None = None) -> descriptor_pb2.FieldDescriptorProto:
    field = _F(name=name, number=number, type=ftype, label=label)
    if type_name:
        field.type_name = f".{_PACKAGE}.{type_name}"
    if packed:
        field.options.packed = True
    if oneof_index is not None:
        field.oneof_index = oneof_index
    field.json_name = "".join(
        part if i == 0 else part.capitalize() for i, part in enumerate(name.split("_")))
    return field


def _list_message(name: str, ftype: int, packed: bool) -> descriptor_pb2.DescriptorProto:
    msg = descriptor_pb2.DescriptorProto(name=name)
    msg.field.append(_field("value", 1, ftype, _F.LABEL_REPEATED, packed=packed))
    return msg


def _map_message(name: str, entry: str, field_name: str, value_type: str) -> descriptor_pb2.DescriptorProto:
    msg = descriptor_pb2.DescriptorProto(name=name)
    entry_msg = msg.nested_type.add(name=entry)
    entry_msg.options.map_entry = True
    entry_msg.field.append(_field("key", 1, _F.TYPE_STRING))
    entry_msg.field.append(_field("value", 2, _F.TYPE_MESSAGE, type_name=value_type))
    msg.field.append(_field(field_name, 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED,
                            type_name=f"{name}.{entry}"))
    return msg


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="tensorflow/core/example/example.proto", package=_PACKAGE, syntax="proto3")
    fdp.message_type.append(_list_message("BytesList", _F.TYPE_BYTES, packed=False))
    fdp.message_type.append(_list_message("FloatList", _F.TYPE_FLOAT, packed=True))
    fdp.message_type.append(_list_message("Int64List", _F.TYPE_INT64, packed=True))

    feature = descriptor_pb2.DescriptorProto(name="Feature")
    feature.oneof_decl.add(name="kind")
    feature.field.append(_field("bytes_list", 1, _F.TYPE_MESSAGE, type_name="BytesList", oneof_index=0))
    feature.field.append(_field("float_list", 2, _F.TYPE_MESSAGE, type_name="FloatList", oneof_index=0))
    feature.field.append(_field("int64_list", 3, _F.TYPE_MESSAGE, type_name="Int64List", oneof_index=0))
    fdp.message_type.append(feature)

    fdp.message_type.append(_map_message("Features", "FeatureEntry", "feature", "Feature"))
    feature_list = descriptor_pb2.DescriptorProto(name="FeatureList")
    feature_list.field.append(_field("feature", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, type_name="Feature"))
    fdp.message_type.append(feature_list)
    fdp.message_type.append(_map_message("FeatureLists", "FeatureListEntry", "feature_list", "FeatureList"))

    example = descriptor_pb2.DescriptorProto(name="Example")
    example.field.append(_field("features", 1, _F.TYPE_MESSAGE, type_name="Features"))
    fdp.message_type.append(example)

    seq = descriptor_pb2.DescriptorProto(name="SequenceExample")
    seq.field.append(_field("context", 1, _F.TYPE_MESSAGE, type_name="Features"))
    seq.field.append(_field("feature_lists", 2, _F.TYPE_MESSAGE, type_name="FeatureLists"))
    fdp.message_type.append(seq)
    return fdp


FILE_DESCRIPTOR = _build_file()
_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(FILE_DESCRIPTOR)


def _message_class(name: str):
    descriptor = _POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}")
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is not None:  # protobuf >= 4.21
        return get_class(descriptor)
    return message_factory.MessageFactory(_POOL).GetPrototype(descriptor)  # protobuf 3.20


# The messages an Example is built from, for those who build one without TensorFlow (the plain
# pipeline of benchmarks/throughput.py).
BytesList = _message_class("BytesList")
FloatList = _message_class("FloatList")
Int64List = _message_class("Int64List")
Feature = _message_class("Feature")
Features = _message_class("Features")
Example = _message_class("Example")
SequenceExample = _message_class("SequenceExample")
