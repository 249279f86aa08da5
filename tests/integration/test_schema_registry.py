"""Writer schemas from a real schema registry (Apicurio Registry's Confluent API, installed by
`make schema-registry`): producers' schemas checked against the flow, learned while the stream
runs, a registry that does not answer, `tidelake schemas register` and the ingest service's
framed values read by Confluent's own deserializer."""

from __future__ import annotations

import base64
import http.client
import http.server
import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import grpc
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pool, message_factory
from kafka_topics import read_values
from lake_readers import read_delta
from live_stream import cli_available_now, run_available_now

from tidelake.assets.stream.job import writer_schemas_metadata
from tidelake.platform.calls.ingest_launcher import IngestSettings, start_ingest_server
from tidelake.platform.local.certificates import make_certificates
from tidelake.protos import call_pb2, service_pb2_grpc
from tidelake.streaming.batch.backfill import plan_backfill, run_backfill
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.descriptor_set import proto_source
from tidelake.streaming.kafka.admin import quiet_client_config
from tidelake.streaming.schemas.registry_client import (
    SchemaRegistrationError,
    SchemaRegistry,
    _protoc,
    value_subject,
)
from tidelake.streaming.settings import EngineSettings, kafka_client_env

CALL_PROTO = proto_source(CALL_EVENTS).read_text()


def producer_message(proto: str, name: str) -> Any:
    """A producer's CallEvent class, generated from its own .proto at run time."""
    pool = descriptor_pool.DescriptorPool()
    for file in _protoc({name: proto}, name).file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tidelake.v1.CallEvent"))


def event_fields(i: int, now_ms: int) -> dict[str, Any]:
    return {
        "call_sid": f"CA{i:032d}",
        "account_sid": f"AC{i % 5:032d}",
        "call_state": 1,
        "region": 3,
        "event_time": now_ms - 30_000 + i,
    }


def test_writer_schemas_from_a_registry_land_or_are_quarantined_by_the_contract(
    spark: Any,
    kafka_conf: dict[str, Any],
    flow: Any,
    engine_settings: Any,
    schema_registry: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three producers using confluent_kafka's serializer, interleaved in one partition: the
    flow's schema under the topic's subject (read at start), one with a field the flow does not
    have and one that changed a field's type, each under a subject of its own (met in a batch:
    the stream learns them and starts its query again)."""
    monkeypatch.setenv("TIDELAKE_SCHEMA_REGISTRY_URL", schema_registry.url)
    client = SchemaRegistryClient({"url": schema_registry.url})
    context = SerializationContext(flow.topic, MessageField.VALUE)
    added = producer_message(
        CALL_PROTO.replace(
            "uint64 event_time = 6;", "uint64 event_time = 6;\n  string carrier = 7;"
        ),
        "producers/added.proto",
    )
    changed = producer_message(
        CALL_PROTO.replace("uint32 duration = 3;", "string duration = 3;"),
        "producers/changed.proto",
    )
    writers = [
        (ProtobufSerializer(call_pb2.CallEvent, client), lambda i: {"duration": i % 600 + 1}),
        (
            ProtobufSerializer(
                added, client, {"subject.name.strategy": lambda c, _: f"{c.topic}-added"}
            ),
            lambda i: {"duration": i % 600 + 1, "carrier": "acme"},
        ),
        (
            ProtobufSerializer(
                changed, client, {"subject.name.strategy": lambda c, _: f"{c.topic}-changed"}
            ),
            lambda i: {"duration": f"{i} seconds"},
        ),
    ]
    classes = [call_pb2.CallEvent, added, changed]
    producer = Producer(quiet_client_config(kafka_conf))
    now_ms = time.time_ns() // 1_000_000
    ids: dict[int, set[int]] = {0: set(), 1: set(), 2: set()}
    for i in range(1500):
        kind = i % 3
        serialize, fields = writers[kind]
        value = serialize(classes[kind](**event_fields(i, now_ms), **fields(i)), context)
        ids[kind].add(int.from_bytes(value[1:5], "big"))
        producer.produce(flow.topic, value, f"CA{i:032d}".encode(), partition=0)
    assert producer.flush(30) == 0
    (flows_id,), (added_id,), (changed_id,) = ids.values()

    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    table = read_delta(stream.table_uri)
    keys = table.column("call_sid").to_pylist()
    assert len(keys) == 1000 == len(set(keys))
    assert "carrier" not in table.column_names  # the flow does not have it (yet)
    reasons = read_delta(stream.quarantine_uri).column("error").to_pylist()
    assert (
        reasons
        == [
            f"schema id {changed_id} ({flow.topic}-changed v1) breaks the flow's contract: field "
            "duration is string there and uint32 in the flow"
        ]
        * 500
    )
    assert set(stream.schemas.seen) == {flows_id, added_id, changed_id}
    shown = writer_schemas_metadata(stream.schemas)
    assert shown["writer_schema_ids"].value == ", ".join(
        map(str, sorted([flows_id, added_id, changed_id]))
    )
    table_md = shown["writer_schemas"].value
    assert f"| {flows_id} | {value_subject(flow)} v1 | land |" in table_md
    assert f"| {changed_id} | {flow.topic}-changed v1 | quarantined: schema id" in table_md

    today = datetime.now(UTC).date().isoformat()
    monkeypatch.setenv("TIDELAKE_SCHEMA_REGISTRY_URL", schema_registry.url)
    result = run_backfill(
        spark,
        plan_backfill(flow, [today], engine_settings, kafka_conf),
        engine_settings,
        kafka_conf,
    )
    assert sum(result.rows_by_date.values()) == sum(
        1 for d in table.column("date").to_pylist() if d.isoformat() == today
    )
    assert sorted(read_delta(stream.table_uri).column("call_sid").to_pylist()) == sorted(keys)


def test_a_registry_that_does_not_answer_stops_the_stream_until_it_is_back(
    spark: Any,
    kafka_conf: dict[str, Any],
    call_events_topic: str,
    schema_registry: Any,
    closed_port: int,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`tidelake stream` stops with one line naming the registry and the schema id, having
    written nothing; once the registry answers, the next run (this process's Spark) lands
    every record."""
    client = SchemaRegistryClient({"url": schema_registry.url})
    serialize = ProtobufSerializer(
        call_pb2.CallEvent, client, {"subject.name.strategy": lambda c, _: "down-test"}
    )
    context = SerializationContext(call_events_topic, MessageField.VALUE)
    producer = Producer(quiet_client_config(kafka_conf))
    now_ms = time.time_ns() // 1_000_000
    for i in range(300):
        event = call_pb2.CallEvent(**event_fields(i, now_ms), duration=5)
        value = serialize(event, context)
        producer.produce(call_events_topic, value, event.call_sid.encode())
    assert producer.flush(30) == 0
    schema_id = int.from_bytes(value[1:5], "big")
    down = f"http://127.0.0.1:{closed_port}/apis/ccompat/v7"
    env = {
        **os.environ,
        **kafka_client_env(kafka_conf),
        "TIDELAKE_HOME": str(tmp_path / "home"),
        "TIDELAKE_LAKE": str(tmp_path / "lake"),
        "TIDELAKE_CHECKPOINTS": str(tmp_path / "checkpoints"),
        "SPARK_LOCAL_DIRS": str(tmp_path / "spark-local"),
        "TIDELAKE_SCHEMA_REGISTRY_URL": down,
    }
    failed = cli_available_now(env, cwd=tmp_path)
    assert failed.returncode == 2, failed.stderr[-3000:]
    errors = [line for line in failed.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, failed.stderr[-3000:]
    assert errors[0].startswith(
        f"Error: the schema registry at {down} did not answer for schema id {schema_id}: "
    )
    lake = tmp_path / "lake"
    assert read_delta(lake / "call_events").num_rows == 0
    assert read_delta(lake / "call_events_quarantine").num_rows == 0

    monkeypatch.setenv("TIDELAKE_SCHEMA_REGISTRY_URL", schema_registry.url)
    settings = EngineSettings(lake=lake, checkpoints=tmp_path / "checkpoints")
    run_available_now(spark, CALL_EVENTS, settings, kafka_conf)
    assert read_delta(lake / "call_events").num_rows == 300
    assert read_delta(lake / "call_events_quarantine").num_rows == 0


def test_registered_flow_schema_and_framed_ingest_values(
    spark: Any,
    kafka_conf: dict[str, Any],
    flow: Any,
    engine_settings: Any,
    schema_registry: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`tidelake schemas register` puts call.proto (text, as Java and Go serializers register)
    under the topic's value subject; the ingest service writes framed values with its id, which
    Confluent's deserializer reads and the stream decodes (the schema compiled by protoc)."""
    env = {**os.environ, "TIDELAKE_SCHEMA_REGISTRY_URL": schema_registry.url}
    register = [sys.executable, "-m", "tidelake.platform.cli", "schemas", "register", "call_events"]
    first = subprocess.run(register, env=env, capture_output=True, text=True, timeout=120)
    again = subprocess.run(register, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 == again.returncode, first.stderr[-2000:]
    assert first.stdout.startswith(f"{value_subject(CALL_EVENTS)}: call.proto is schema id ")
    assert first.stdout == again.stdout  # the same schema keeps its id and version

    monkeypatch.setenv("TIDELAKE_SCHEMA_REGISTRY_URL", schema_registry.url)
    registry = SchemaRegistry.from_env()
    assert registry is not None
    subject = value_subject(flow)
    SchemaRegistryClient({"url": schema_registry.url}).set_compatibility(subject, "BACKWARD")
    breaking = tmp_path / "call.proto"
    breaking.write_text(CALL_PROTO.replace("uint32 duration = 3;", "string duration = 3;"))
    registry.register(subject, proto_source(flow))
    with pytest.raises(SchemaRegistrationError, match="nothing was registered"):
        registry.register(subject, breaking)

    settings = IngestSettings(port=0, ack_timeout_s=5.0, framed_values=True)
    server = start_ingest_server(kafka_conf, engine_settings.table_uri(flow.table), settings, flow)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            calls = service_pb2_grpc.CallEventServiceStub(channel)
            now_ms = time.time_ns() // 1_000_000
            sent = [call_pb2.CallEvent(**event_fields(i, now_ms), duration=7) for i in range(50)]
            for event in sent:
                calls.trackCall(event, timeout=10)
    finally:
        assert server.stop() == 0

    deserialize = ProtobufDeserializer(call_pb2.CallEvent)
    values = read_values(kafka_conf, flow.topic)
    assert all(value[0] == 0 for value in values)  # framed
    context = SerializationContext(flow.topic, MessageField.VALUE)
    read = [deserialize(value, context) for value in values]
    assert sorted(e.call_sid for e in read) == sorted(e.call_sid for e in sent)

    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    assert read_delta(stream.table_uri).num_rows == 50
    assert read_delta(stream.quarantine_uri).num_rows == 0
    ((schema_id, label),) = stream.schemas.seen.items()
    assert label.startswith(f"schema id {schema_id} (") and f"{subject} v1" in label


class _GuardedRegistry(http.server.BaseHTTPRequestHandler):
    """TLS and basic auth in front of the registry, as a reverse proxy gives them in production
    (Apicurio 2.4's own auth needs an OIDC server)."""

    upstream: tuple[str, int] = ("127.0.0.1", 0)
    credentials = ""
    protocol_version = "HTTP/1.1"

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        expected = "Basic " + base64.b64encode(self.credentials.encode()).decode()
        if self.headers.get("Authorization") != expected:
            data, status, headers = b'{"error_code":40101,"message":"Unauthorized"}', 401, []
        else:
            upstream = http.client.HTTPConnection(*self.upstream, timeout=30)
            forwarded = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}
            upstream.request(self.command, self.path, body=body, headers=forwarded)
            answer = upstream.getresponse()
            data, status, headers = answer.read(), answer.status, answer.getheaders()
            upstream.close()
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _forward

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def guarded_registry(schema_registry: Any, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(https URL of the registry behind TLS and basic auth "reader:<PASSWORD>", its CA file)."""
    (tmp_path / "certs").mkdir()
    certs = make_certificates(tmp_path / "certs")
    parsed = urlparse(schema_registry.url)
    handler = type(
        "Guard",
        (_GuardedRegistry,),
        {"upstream": (parsed.hostname, parsed.port), "credentials": f"reader:{PASSWORD}"},
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.server_cert, certs.server_key)
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        server.socket = context.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"https://127.0.0.1:{server.server_address[1]}{parsed.path}", certs.client_ca
        server.shutdown()


PASSWORD = "regi5try-Pa55-for-the-grep"


def test_a_registry_behind_tls_and_basic_auth(
    guarded_registry: tuple[str, Path], tmp_path: Path
) -> None:
    """The registry client's settings in the Kafka style reach a TLS, basic-auth registry; a
    wrong password or a missing CA is one line naming what to fix; no password in any output,
    at DEBUG."""
    url, ca = guarded_registry
    env = {
        **os.environ,
        "TIDELAKE_LOG_LEVEL": "DEBUG",
        "TIDELAKE_SCHEMA_REGISTRY_URL": url,
        "TIDELAKE_SCHEMA_REGISTRY_SSL_CA_LOCATION": str(ca),
        "TIDELAKE_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": f"reader:{PASSWORD}",
        "TIDELAKE_SCHEMA_REGISTRY_MAX_RETRIES": "0",
    }
    register = [sys.executable, "-m", "tidelake.platform.cli", "schemas", "register"]

    def run(**changes: str | None) -> subprocess.CompletedProcess[str]:
        changed = {k: v for k, v in {**env, **changes}.items() if v is not None}
        done = subprocess.run(
            register, env=changed, capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        assert PASSWORD not in done.stdout + done.stderr
        return done

    registered = run()
    assert registered.returncode == 0, registered.stderr[-2000:]
    assert f"registry {url})" in registered.stdout
    wrong = run(TIDELAKE_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO="reader:guess")
    assert wrong.returncode == 2
    assert (
        wrong.stderr.strip()
        .splitlines()[-1]
        .startswith(f"Error: the schema registry at {url} failed for subject ")
    )
    assert "HTTP 401" in wrong.stderr and "BASIC_AUTH_USER_INFO" in wrong.stderr
    untrusted = run(TIDELAKE_SCHEMA_REGISTRY_SSL_CA_LOCATION=None)
    assert untrusted.returncode == 2
    (line,) = [x for x in untrusted.stderr.splitlines() if x.startswith("Error:")]
    assert line.startswith(f"Error: the schema registry at {url} did not answer for subject ")
    assert "CERTIFICATE_VERIFY_FAILED" in line
