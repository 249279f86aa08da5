"""Confluent's wire format for protobuf values, and the message paths its indexes name.

Confluent's serializers (Java, Go, .NET, confluent_kafka's ProtobufSerializer) write a value as
byte 0 (magic), the writer schema's registry id (4 bytes, big-endian), the message-index array
(the path from the .proto file's top level to the message: a zig-zag varint count, then the
zig-zag varint indexes; the first message, [0], as the single byte 0), then the message. A bare
protobuf message never begins with byte 0 (field number 0 does not exist), so the JVM decoder
tells the two apart per record (dev.tidelake.spark.ProtobufDecoder). This module writes frames
(the ingest service's prefix, tests) and names the messages a path can point at.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FileDescriptor

from tidelake.streaming.flow.spec import FlowSpec

MAGIC_BYTE = 0


def frame_prefix(schema_id: int, path: Sequence[int] = (0,)) -> bytes:
    """The bytes before the message of a framed value: magic byte, schema id, message indexes."""
    if not 0 <= schema_id < 2**31:
        raise ValueError(f"schema id {schema_id} is not a registry id (0 .. 2^31-1)")
    return bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big") + message_indexes(path)


def message_indexes(path: Sequence[int]) -> bytes:
    """The message-index array as serializers write it: [0] as the single byte 0."""
    if list(path) == [0]:
        return b"\x00"
    return b"".join(_zigzag_varint(n) for n in (len(path), *path))


def message_paths(file: FileDescriptor) -> Iterator[tuple[str, Descriptor]]:
    """Every message of a .proto file with its index path ("0", "1.0"), as the decoder keys it:
    declaration order, which the descriptor's own maps do not promise."""
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)

    def walk(
        messages: Sequence[descriptor_pb2.DescriptorProto], scope: str, prefix: str
    ) -> Iterator[tuple[str, Descriptor]]:
        for i, message in enumerate(messages):
            path, name = f"{prefix}{i}", f"{scope}{message.name}"
            yield path, file.pool.FindMessageTypeByName(name)
            yield from walk(message.nested_type, f"{name}.", f"{path}.")

    yield from walk(proto.message_type, f"{proto.package}." if proto.package else "", "")


def _zigzag_varint(n: int) -> bytes:
    value = (n << 1) ^ (n >> 31)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def flow_frame_prefix(flow: FlowSpec, schema_id: int) -> bytes:
    """The frame of the flow's message in its own .proto, registered as schema_id."""
    want = flow.message.DESCRIPTOR.full_name
    path = next(p for p, m in message_paths(flow.message.DESCRIPTOR.file) if m.full_name == want)
    return frame_prefix(schema_id, [int(i) for i in path.split(".")])
