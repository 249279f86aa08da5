"""The gRPC ingest service with a real grpc client, the local Kafka broker, Spark and Delta."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from grpc_status import rpc_status
from kafka_topics import ON_BOTH_KAFKAS, topic_records
from lake_readers import duckdb_query
from live_stream import run_available_now
from process_states import paused
from stores import ON_S3
from test_decode import decode

from tidelake.platform.calls.ingest_launcher import (
    SERVICE_NAME,
    IngestServer,
    IngestSettings,
    _service_config,
    start_ingest_server,
)
from tidelake.platform.dev.dagster_web import wait_for
from tidelake.platform.dev.produce import send_demo_events_to_service
from tidelake.protos import service_pb2, service_pb2_grpc
from tidelake.protos.call_pb2 import CallEvent, CallSid
from tidelake.streaming.calls.call_events import CALL_EVENTS

HOUR_MS = 3_600_000
SETTINGS = IngestSettings(port=0, ack_timeout_s=3.0, health_interval_s=0.5, shutdown_grace_s=5)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def call(**changes: Any) -> CallEvent:
    event = CallEvent(
        call_sid=f"CA{uuid.uuid4().hex}",
        account_sid=f"AC{'1' * 32}",
        duration=42,
        call_state=CallEvent.completed,
        region=CallEvent.de1,
        event_time=now_ms(),
    )
    for name, value in changes.items():
        setattr(event, name, value)
    return event


class Client:
    def __init__(self, port: int):
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.calls = service_pb2_grpc.CallEventServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def status(self) -> int:
        return self.health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME)).status

    def wait_for_status(self, wanted: int, timeout_s: float = 20) -> None:
        wait_for(lambda: self.status() == wanted or None, timeout_s, f"health {wanted}", 0.2)


@pytest.fixture
def server(kafka_as: Any, flow: Any, engine_settings: Any) -> Iterator[IngestServer]:
    """The service, as the ingest user on the secured broker (it may write its topic only)."""
    uri = engine_settings.table_uri(flow.table)
    running = start_ingest_server(kafka_as("ingest", [flow.topic]), uri, SETTINGS, flow)
    yield running
    assert running.stop() == 0  # graceful: every accepted event was flushed


@pytest.fixture
def client(server: IngestServer) -> Iterator[Client]:
    client = Client(server.port)
    yield client
    client.channel.close()


def batches(events: list[CallEvent], size: int) -> Iterator[service_pb2.CallEventBatch]:
    for n, start in enumerate(range(0, len(events), size)):
        yield service_pb2.CallEventBatch(batch=n, events=events[start : start + size])


def violations(error: grpc.RpcError) -> dict[str, str]:
    status = rpc_status.from_call(error)
    assert status is not None
    (detail,) = status.details
    request = error_details_pb2.BadRequest()
    assert detail.Unpack(request)
    return {v.field: v.description for v in request.field_violations}


@ON_BOTH_KAFKAS
def test_valid_events_reach_the_table_exactly_once_and_can_be_read_back(
    spark: Any, kafka_as: Any, flow: Any, engine_settings: Any, client: Client
) -> None:
    unary = [call(duration=n) for n in range(100)]
    for event in unary:
        assert client.calls.trackCall(event, timeout=10).call_sid == event.call_sid
    streamed = [call(region=CallEvent.us2) for _ in range(300)]
    retried = streamed[:20]  # a sender that retries part of a batch
    results = list(client.calls.trackCalls(batches(streamed + retried, size=64), timeout=30))
    assert sorted(r.batch for r in results) == list(range(5))
    assert sum(r.accepted for r in results) == 320 and not any(r.refused for r in results)

    stream = run_available_now(spark, flow, engine_settings, kafka_as("stream", [flow.topic]))
    assert duckdb_query(
        f"select count(*), count(distinct call_sid) from delta_scan('{stream.table_uri}')"
    ) == [(400, 400)]
    for event in (unary[7], streamed[-1]):
        assert client.calls.getCallInfo(CallSid(call_sid=event.call_sid), timeout=10) == event
    with pytest.raises(grpc.RpcError) as missing:
        client.calls.getCallInfo(CallSid(call_sid=f"CA{'0' * 32}"), timeout=10)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as malformed:
        client.calls.getCallInfo(CallSid(call_sid="nope"), timeout=10)
    assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "call_sid" in violations(malformed.value)


@ON_S3
def test_get_call_info_reads_a_table_on_s3(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any, client: Client
) -> None:
    """An s3:// table is read through s3a with the launcher's Hadoop settings (the endpoint and
    region Spark is given) and the credentials of the environment the service inherits: none of
    them is in the service's config file."""
    uri = engine_settings.table_uri(flow.table)
    assert uri.startswith("s3://")
    config = _service_config(SETTINGS, kafka_conf, uri, flow, None)
    assert config["hadoop"]["fs.s3a.endpoint"] == os.environ["AWS_ENDPOINT_URL"]
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in json.dumps(config)
    events = [call(duration=n) for n in range(20)]
    for event in events:
        client.calls.trackCall(event, timeout=10)
    with pytest.raises(grpc.RpcError) as no_table_yet:
        client.calls.getCallInfo(CallSid(call_sid=events[0].call_sid), timeout=30)
    assert no_table_yet.value.code() == grpc.StatusCode.NOT_FOUND

    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    assert stream.table_uri == uri
    for event in (events[0], events[-1]):
        assert client.calls.getCallInfo(CallSid(call_sid=event.call_sid), timeout=30) == event
    with pytest.raises(grpc.RpcError) as missing:
        client.calls.getCallInfo(CallSid(call_sid=f"CA{'0' * 32}"), timeout=30)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


INVALID = [
    ({"call_sid": "CA123"}, "call_sid"),
    ({"call_sid": ""}, "call_sid"),
    ({"account_sid": ""}, "account_sid"),
    ({"account_sid": f"CA{'1' * 32}"}, "account_sid"),
    ({"call_state": 7}, "call_state"),
    ({"call_state": CallEvent.unknown_state}, "call_state"),
    ({"region": CallEvent.unknown_region}, "region"),
    ({"duration": 90_000}, "duration"),
    ({"event_time": 0}, "event_time"),
    ({"event_time": now_ms() + 2 * HOUR_MS}, "event_time"),
    ({"event_time": now_ms() // 1000}, "event_time"),  # seconds: a closed day in 1970
    ({"event_time": now_ms() - 3 * 24 * HOUR_MS}, "event_time"),
    ({"event_time": now_ms() * 1000}, "event_time"),  # microseconds: beyond year 9999
    ({"call_sid": f"CA{'a' * 32}\n"}, "call_sid"),
]


def test_the_service_and_the_stream_give_the_same_reason(spark: Any, client: Client) -> None:
    """One contract: for a message that breaks one rule, the service (its FlowContract, from the
    FlowSpec's export) and the stream's decoder agree word for word."""
    broken = [
        call(call_sid=""),
        call(account_sid="ACxyz"),
        call(call_state=0),
        call(region=99),
        call(duration=90_000),
    ]
    values = [m.SerializeToString() for m in broken]
    rows = decode(spark, CALL_EVENTS, values, kafka_time=datetime.now(UTC))
    said = []
    for event in broken:
        with pytest.raises(grpc.RpcError) as refused:
            client.calls.trackCall(event, timeout=10)
        said.append(refused.value.details())
    assert [r["_error"] for r in rows] == said


def test_the_service_and_the_stream_close_a_day_when_the_flow_spec_says(
    spark: Any, client: Client
) -> None:
    """FlowSpec.closes_at is the rule; the service (Java) and the stream's decoder (Spark SQL)
    are its translations, and refuse an event of a closed day from the same instant on."""
    event = call(event_time=now_ms() - 3 * 24 * HOUR_MS)
    closes = datetime.fromtimestamp(CALL_EVENTS.closes_at_ms(event.event_time) / 1000, UTC)
    with pytest.raises(grpc.RpcError) as refused:
        client.calls.trackCall(event, timeout=10)
    assert f", which closed at {closes:%Y-%m-%dT%H:%M:%S}Z:" in refused.value.details()
    value = event.SerializeToString()
    at_close, after = (
        decode(spark, CALL_EVENTS, [value], kafka_time=at)[0]["_error"]
        for at in (closes, closes + timedelta(milliseconds=1))
    )
    day = (closes - CALL_EVENTS.allowed_lateness - timedelta(days=1)).date()
    assert at_close is None
    assert after == f"too late: arrived after {day} closed"


def test_invalid_events_are_refused_per_field_and_nothing_is_produced(
    kafka_conf: dict[str, Any], flow: Any, client: Client
) -> None:
    for changes, field in INVALID:
        with pytest.raises(grpc.RpcError) as refused:
            client.calls.trackCall(call(**changes), timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert list(violations(refused.value)) == [field], changes
    assert topic_records(kafka_conf, flow.topic) == 0

    mixed = [call(), call(call_sid="bad"), call(), call(region=0, duration=10**6)]
    (result,) = client.calls.trackCalls(batches(mixed, size=10), timeout=30)
    assert result.accepted == 2
    assert [(r.index, r.code) for r in result.refused] == [
        (1, code_pb2.INVALID_ARGUMENT),
        (3, code_pb2.INVALID_ARGUMENT),
    ]
    assert result.refused[0].message == "call_sid: does not match ^CA[0-9a-f]{32}$"
    assert "region: is required" in result.refused[1].message
    assert "duration" in result.refused[1].message
    assert topic_records(kafka_conf, flow.topic) == 2


def test_an_unreachable_broker_is_unavailable_not_a_hang(
    flow: Any, engine_settings: Any, closed_port: int
) -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{closed_port}"}
    server = start_ingest_server(conf, engine_settings.table_uri(flow.table), SETTINGS, flow)
    client = Client(server.port)
    try:
        assert client.status() == health_pb2.HealthCheckResponse.NOT_SERVING
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as refused:
            client.calls.trackCall(call(), timeout=30)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "unreachable" in refused.value.details()
        assert time.monotonic() - started < 1
    finally:
        client.channel.close()
        server.stop()


def test_a_paused_broker_gives_a_bounded_wait_and_loses_no_acknowledged_event(
    spark: Any,
    kafka_conf: dict[str, Any],
    local_broker: Any,
    flow: Any,
    engine_settings: Any,
    client: Client,
) -> None:
    if local_broker is None:
        pytest.skip("pauses the local broker's process")
    acknowledged = [call() for _ in range(50)]
    for event in acknowledged:
        client.calls.trackCall(event, timeout=10)
    unacknowledged = call()
    unacknowledged_batch = [call() for _ in range(5)]
    with paused(local_broker.pid):
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as waited:
            client.calls.trackCall(unacknowledged, timeout=30)
        waited_s = time.monotonic() - started
        assert waited.value.code() == grpc.StatusCode.UNAVAILABLE
        assert waited_s < SETTINGS.ack_timeout_s + 1
        started = time.monotonic()
        (result,) = client.calls.trackCalls(batches(unacknowledged_batch, 10), timeout=30)
        assert time.monotonic() - started < SETTINGS.ack_timeout_s + 2
        assert result.accepted == 0
        assert [r.code for r in result.refused] == [code_pb2.UNAVAILABLE] * 5
    client.wait_for_status(health_pb2.HealthCheckResponse.SERVING)
    client.calls.trackCall(unacknowledged, timeout=10)  # the clients' retries
    (result,) = client.calls.trackCalls(batches(unacknowledged_batch, 10), timeout=30)
    assert result.accepted == 5

    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    stored = {
        sid for (sid,) in duckdb_query(f"select call_sid from delta_scan('{stream.table_uri}')")
    }
    sent = [*acknowledged, unacknowledged, *unacknowledged_batch]
    assert stored == {e.call_sid for e in sent}
    assert duckdb_query(f"select count(*) from delta_scan('{stream.table_uri}')") == [(56,)]


def test_health_and_reflection(client: Client) -> None:
    assert client.status() == health_pb2.HealthCheckResponse.SERVING
    services = ProtoReflectionDescriptorDatabase(client.channel).get_services()
    assert SERVICE_NAME in services and "grpc.health.v1.Health" in services


def test_the_demo_producer_can_send_through_the_service(
    spark: Any,
    kafka_conf: dict[str, Any],
    flow: Any,
    engine_settings: Any,
    server: IngestServer,
) -> None:
    report = send_demo_events_to_service(
        flow,
        kafka_conf,
        f"127.0.0.1:{server.port}",
        count=400,
        malformed_share=0.05,
        duplicate_share=0.05,
        seed=3,
        progress=False,
    )
    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    assert report.malformed > 0 and report.duplicates > 0
    assert set(report.malformed_kinds) <= {
        "missing_call_sid",
        "missing_account_sid",
        "missing_event_time",
        "missing_call_state",
        "missing_region",
        "too_late",
    }
    assert duckdb_query(
        f"select count(*), count(distinct call_sid) from delta_scan('{stream.table_uri}')"
    ) == [(report.good, report.good)]
