"""Producers as they are: values written by Confluent's own ProtobufSerializer (framed: magic byte,
schema id, message indexes) beside bare protobuf, in one partition, through the stream and a
backfill, on real Kafka and Spark; read back by delta-rs."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pyarrow.compute as pc
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from lake_readers import read_delta
from live_stream import run_available_now

from tidelake.protos import call_pb2
from tidelake.streaming.batch.backfill import plan_backfill, run_backfill
from tidelake.streaming.kafka.admin import quiet_client_config

COUNT = 2000


def call_event(i: int, now_ms: int) -> call_pb2.CallEvent:
    return call_pb2.CallEvent(
        call_sid=f"CA{i:032d}",
        account_sid=f"AC{i % 7:032d}",
        duration=i % 600 + 1,
        call_state=call_pb2.CallEvent.completed,
        region=call_pb2.CallEvent.de1,
        event_time=now_ms - 60_000 + i,
    )


def test_framed_and_bare_records_in_one_partition_all_land_once(
    spark: Any, kafka_conf: dict[str, Any], kafka_as: Any, flow: Any, engine_settings: Any
) -> None:
    """Half framed by confluent_kafka's serializer (its mock:// registry on the producer side;
    the stream has no registry, so it reads the frames with the flow's own .proto), half bare,
    interleaved; plus a frame naming the .proto's other message and a cut-off frame."""
    registry = SchemaRegistryClient.new_client({"url": "mock://framed"})
    serialize = ProtobufSerializer(call_pb2.CallEvent, registry)
    context = SerializationContext(flow.topic, MessageField.VALUE)
    now_ms = time.time_ns() // 1_000_000
    producer = Producer(quiet_client_config(kafka_as("ingest", [flow.topic])))
    reader = kafka_as("stream", [flow.topic])
    framed_ids = []
    for i in range(COUNT):
        event = call_event(i, now_ms)
        value = serialize(event, context) if i % 2 else event.SerializeToString()
        if i % 2:
            framed_ids.append(int.from_bytes(value[1:5], "big"))
            assert value[0] == 0 and value[5] == 0  # magic byte, message index [0]
        producer.produce(flow.topic, value, event.call_sid.encode(), partition=0)
    # call.proto's second message: the same schema id, message index [1]
    sid = ProtobufSerializer(call_pb2.CallSid, registry)(call_pb2.CallSid(call_sid="x"), context)
    producer.produce(flow.topic, sid, b"sid", partition=0)
    producer.produce(flow.topic, b"\x00\x00\x01", b"cut", partition=0)
    assert producer.flush(30) == 0

    stream = run_available_now(spark, flow, engine_settings, reader)
    table = read_delta(stream.table_uri)
    keys = table.column("call_sid").to_pylist()
    assert len(keys) == COUNT == len(set(keys))
    assert sorted(table.column("duration").to_pylist()) == sorted(i % 600 + 1 for i in range(COUNT))
    quarantine = read_delta(stream.quarantine_uri).sort_by("kafka_offset")
    (schema_id,) = set(framed_ids)
    assert sid[1:5] == schema_id.to_bytes(4, "big")
    assert quarantine.column("error").to_pylist() == [
        f"schema id {schema_id} names message tidelake.v1.CallSid, not the flow's "
        "tidelake.v1.CallEvent",
        "undecodable: a Confluent frame (magic byte 0) too short for its schema id and message "
        "indexes",
    ]
    assert stream.schemas.seen == {schema_id: f"schema id {schema_id}"}

    today = datetime.now(UTC).date().isoformat()
    before = table.filter(pc.equal(table["date"], datetime.now(UTC).date()))
    result = run_backfill(
        spark,
        plan_backfill(flow, [today], engine_settings, reader),
        engine_settings,
        reader,
    )
    assert result.rows_by_date == {today: before.num_rows}
    after = read_delta(stream.table_uri)
    assert sorted(after.column("call_sid").to_pylist()) == sorted(keys)
