"""Confluent framing and the verdicts on writer schemas, as pure logic: frames byte-equal to
Confluent's own serializer, the .proto comparison rules, the registry settings."""

from __future__ import annotations

import base64
import json
import socket
from types import SimpleNamespace

import certifi
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pool

from tidelake.protos import call_pb2
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.errors import ConfigError
from tidelake.streaming.schemas.framing import flow_frame_prefix, frame_prefix, message_indexes
from tidelake.streaming.schemas.registry_client import (
    SchemaRegistry,
    SchemaRegistryUnavailableError,
    WriterSchema,
    _protoc,
    registry_client_config,
    require_registry,
)
from tidelake.streaming.schemas.writer_schemas import (
    WriterSchemas,
    contract_breaks,
    own_verdict,
    writer_verdict,
)

CALL_PROTO = """
syntax = "proto3";
package tidelake.v1;
message CallEvent {
  string call_sid = 1;
  string account_sid = 2;
  %s
  enum CallState { unknown_state = 0; completed = 1; failed = 2; }
  CallState call_state = 4;
  enum Region { unknown_region = 0; us1 = 1; us2 = 2; de1 = 3; }
  Region region = 5;
  uint64 event_time = 6;
  %s
}
message CallSid { string call_sid = 1; }
"""


def writer(duration: str = "uint32 duration = 3;", extra: str = "", schema_id: int = 7):
    """A producer's CallEvent schema, compiled from .proto text as a registry holds it."""
    files = _protoc({"call.proto": CALL_PROTO % (duration, extra)}, "call.proto").file
    pool = descriptor_pool.DescriptorPool()
    for f in files:
        pool.Add(f)
    return WriterSchema(schema_id, pool.FindFileByName("call.proto"), (("call_events-value", 2),))


def test_frames_are_byte_equal_to_confluents_serializer() -> None:
    registry = SchemaRegistryClient.new_client({"url": "mock://framing"})
    context = SerializationContext("call_events", MessageField.VALUE)
    event = call_pb2.CallEvent(call_sid="CA1", duration=3, event_time=1)
    framed = ProtobufSerializer(call_pb2.CallEvent, registry)(event, context)
    schema_id = int.from_bytes(framed[1:5], "big")
    assert framed == frame_prefix(schema_id) + event.SerializeToString()
    assert framed == flow_frame_prefix(CALL_EVENTS, schema_id) + event.SerializeToString()
    sid = call_pb2.CallSid(call_sid="CA1")
    other = ProtobufSerializer(call_pb2.CallSid, registry)(sid, context)
    assert other == frame_prefix(schema_id, [1]) + sid.SerializeToString()


def test_message_indexes_are_counted_zigzag_varints() -> None:
    assert message_indexes([0]) == b"\x00"
    assert message_indexes([1, 0]) == bytes([4, 2, 0])
    assert message_indexes([70]) == bytes([2, 0x8C, 0x01])
    with pytest.raises(ValueError, match="schema id -1"):
        frame_prefix(-1)


def test_without_a_registry_the_flows_own_proto_decides() -> None:
    verdict = own_verdict(CALL_EVENTS)
    assert verdict.paths["0"] is None
    assert verdict.paths["1"] == (
        "schema id {id} names message tidelake.v1.CallSid, not the flow's tidelake.v1.CallEvent"
    )
    assert verdict.other == "schema id {id}: message index [{path}] names no message of its schema"


def test_an_added_field_is_readable_and_a_changed_type_is_named() -> None:
    added = writer(extra="string carrier = 7;")
    assert writer_verdict(CALL_EVENTS, added).paths["0"] is None
    changed = writer_verdict(CALL_EVENTS, writer(duration="string duration = 3;"))
    assert changed.paths["0"] == (
        "schema id 7 (call_events-value v2) breaks the flow's contract: field duration is "
        "string there and uint32 in the flow"
    )
    assert changed.paths["1"].startswith("schema id 7 (call_events-value v2) names message")


def test_reused_and_moved_numbers_and_widenings() -> None:
    flow = call_pb2.CallEvent.DESCRIPTOR
    reused = writer(duration="uint32 seconds = 3;").file.message_types_by_name["CallEvent"]
    assert contract_breaks(reused, flow) == [
        "field number 3 is seconds there and duration in the flow (a reused field number)"
    ]
    moved = writer(duration="uint32 duration = 9;").file.message_types_by_name["CallEvent"]
    assert contract_breaks(moved, flow) == ["field duration is number 9 there and 3 in the flow"]
    narrower = writer(duration="int32 duration = 3;").file.message_types_by_name["CallEvent"]
    assert contract_breaks(narrower, flow) == [
        "field duration is int32 there and uint32 in the flow"
    ]


def test_framing_data_for_the_decoder() -> None:
    schemas = WriterSchemas(CALL_EVENTS, registry=None)
    schemas.verdicts[7] = writer_verdict(CALL_EVENTS, writer())
    data = json.loads(schemas.framing())
    assert data["registry"] is False
    assert data["own"]["paths"]["0"] is None
    assert data["schemas"]["7"]["paths"]["0"] is None
    assert "{id}" in data["unknown"]
    assert schemas.learn([7, 8]) == []  # no registry: nothing to read
    assert schemas.seen == {7: "schema id 7 (call_events-value v2)", 8: "schema id 8"}


def test_registry_settings_in_the_kafka_style() -> None:
    assert registry_client_config({}) is None
    env = {
        "TIDELAKE_SCHEMA_REGISTRY_URL": "https://registry.example:8081/api",
        "TIDELAKE_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "user:pw",
        "TIDELAKE_SCHEMA_REGISTRY_SSL_CA_LOCATION": certifi.where(),
    }
    assert registry_client_config(env) == {
        "url": "https://registry.example:8081/api",
        "basic.auth.user.info": "user:pw",
        "ssl.ca.location": certifi.where(),
    }
    assert SchemaRegistry.from_env(env) is not None
    in_url = {"TIDELAKE_SCHEMA_REGISTRY_URL": "https://user:pw@registry.example:8081/api"}
    registry = SchemaRegistry.from_env(in_url)
    assert registry is not None and registry.url == "https://registry.example:8081/api"
    wrong = {"TIDELAKE_SCHEMA_REGISTRY_URL": "http://r:8081", "TIDELAKE_SCHEMA_REGISTRY_USR": "x"}
    with pytest.raises(ConfigError, match="REGISTRY_USR: not a schema registry setting"):
        SchemaRegistry.from_env(wrong)
    not_a_number = {**env, "TIDELAKE_SCHEMA_REGISTRY_MAX_RETRIES": "often"}
    with pytest.raises(
        ConfigError, match=r"^TIDELAKE_SCHEMA_REGISTRY_MAX_RETRIES: max\.retries must"
    ):
        SchemaRegistry.from_env(not_a_number)
    missing = {**env, "TIDELAKE_SCHEMA_REGISTRY_SSL_CA_LOCATION": "/nowhere/ca.pem"}
    with pytest.raises(ConfigError, match=r"SSL_CA_LOCATION=/nowhere/ca\.pem: no such file"):
        SchemaRegistry.from_env(missing)
    with pytest.raises(ConfigError, match="set TIDELAKE_SCHEMA_REGISTRY_URL"):
        require_registry({})


def test_python_serializers_register_base64_descriptors() -> None:
    """confluent_kafka's ProtobufSerializer registers a base64 FileDescriptorProto, Java's and
    Go's the .proto text: both compile to the same messages."""
    registry = SchemaRegistryClient.new_client({"url": "mock://formats"})
    context = SerializationContext("call_events", MessageField.VALUE)
    ProtobufSerializer(call_pb2.CallEvent, registry)(call_pb2.CallEvent(call_sid="x"), context)
    (schema_id,) = [registry.get_latest_version("call_events-value").schema_id]
    stored = registry.get_schema(schema_id)
    base64.b64decode(stored.schema_str, validate=True)  # base64 indeed
    reader = SchemaRegistry.__new__(SchemaRegistry)
    file = reader._compile(stored, "x.proto")
    text = reader._compile(
        SimpleNamespace(schema_str=CALL_PROTO % ("uint32 duration = 3;", ""), references=[]),
        "y.proto",
    )
    assert [m for m in file.message_types_by_name] == ["CallEvent", "CallSid"]
    assert [m for m in text.message_types_by_name] == ["CallEvent", "CallSid"]
    assert (
        contract_breaks(file.message_types_by_name["CallEvent"], call_pb2.CallEvent.DESCRIPTOR)
        == []
    )


def test_a_registry_that_does_not_answer_is_one_line_without_its_credentials() -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    registry = SchemaRegistry.from_env(
        {
            "TIDELAKE_SCHEMA_REGISTRY_URL": f"http://reader:pa55-word@127.0.0.1:{port}/api",
            "TIDELAKE_SCHEMA_REGISTRY_MAX_RETRIES": "0",
        }
    )
    assert registry is not None
    with pytest.raises(SchemaRegistryUnavailableError) as down:
        registry.writer_schema(42)
    message = str(down.value)
    assert message.startswith(
        f"the schema registry at http://127.0.0.1:{port}/api did not answer for schema id 42: "
    )
    assert "\n" not in message and "pa55-word" not in message and "reader" not in message
