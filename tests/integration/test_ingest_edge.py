"""The ingest service under abuse: idle streams, a taken port, damaged tables, TLS and tokens.

Real gRPC clients and servers on loopback, the session's Kafka broker; what reaches the topic is
counted from Kafka's own end offsets.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kafka_topics import topic_records

from tidelake.platform.calls.ingest_launcher import (
    IngestServer,
    IngestSettings,
    start_ingest_server,
)
from tidelake.platform.calls.ingest_listen import ListenError, ServiceSecurity, check_security
from tidelake.platform.local.certificates import Certificates, make_certificates
from tidelake.protos import service_pb2, service_pb2_grpc
from tidelake.protos.call_pb2 import CallEvent, CallSid
from tidelake.streaming.polling import poll_until
from tidelake.streaming.settings import kafka_client_env

SETTINGS = IngestSettings(port=0, ack_timeout_s=3.0, health_interval_s=0.5, shutdown_grace_s=5)
TIDELAKE = Path(sys.executable).with_name("tidelake")


def call() -> CallEvent:
    return CallEvent(
        call_sid=f"CA{uuid.uuid4().hex}",
        account_sid=f"AC{'1' * 32}",
        duration=42,
        call_state=CallEvent.completed,
        region=CallEvent.de1,
        event_time=time.time_ns() // 1_000_000,
    )


@pytest.fixture
def serve(kafka_conf: dict[str, Any], flow: Any, engine_settings: Any) -> Iterator[Any]:
    """Starts ingest servers with given settings; stops them all at the end."""
    started: list[IngestServer] = []

    def start(settings: IngestSettings = SETTINGS) -> IngestServer:
        uri = engine_settings.table_uri(flow.table)
        server = start_ingest_server(kafka_conf, uri, settings, flow)
        started.append(server)
        return server

    yield start
    for server in started:
        assert server.stop() == 0


class IdleStream:
    """A trackCalls stream that is opened and then sends nothing until closed."""

    def __init__(self, stub: service_pb2_grpc.CallEventServiceStub):
        self._release = threading.Event()
        self.call = stub.trackCalls(self._requests(), timeout=120)

    def _requests(self) -> Iterator[service_pb2.CallEventBatch]:
        self._release.wait()
        return
        yield  # a generator that yields nothing

    def wait_open(self) -> None:
        """Until the server has taken the stream: it sends the headers once it holds a slot."""
        self.call.initial_metadata()

    def close(self) -> None:
        self._release.set()
        self.call.cancel()


def test_a_hundred_idle_streams_do_not_starve_calls_or_health(
    serve: Any, kafka_conf: dict[str, Any], flow: Any
) -> None:
    server = serve()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    stub = service_pb2_grpc.CallEventServiceStub(channel)
    health = health_pb2_grpc.HealthStub(channel)
    idle = [IdleStream(stub) for _ in range(100)]
    try:
        for stream in idle:
            stream.wait_open()
        for _ in range(50):
            assert stub.trackCall(call(), timeout=5).call_sid
            status = health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
            assert status == health_pb2.HealthCheckResponse.SERVING
        batch = service_pb2.CallEventBatch(batch=1, events=[call() for _ in range(20)])
        (result,) = stub.trackCalls(iter([batch]), timeout=10)
        assert result.accepted == 20
    finally:
        for stream in idle:
            stream.close()
        channel.close()
    assert topic_records(kafka_conf, flow.topic) == 70


def test_streams_beyond_the_cap_are_refused_with_resource_exhausted(serve: Any) -> None:
    server = serve(dataclasses.replace(SETTINGS, streams_per_client=3))
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    stub = service_pb2_grpc.CallEventServiceStub(channel)
    idle = [IdleStream(stub) for _ in range(3)]
    try:
        for stream in idle:
            stream.wait_open()
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.trackCalls(iter([]), timeout=10))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused.value.details() == (
            "this client has 3 trackCalls streams open, the limit per client: close idle "
            "streams or send on one you already have open"
        )
        idle.pop().close()
        batch = service_pb2.CallEventBatch(batch=7, events=[call()])

        def answered_once_the_slot_is_back() -> list[int] | None:
            try:
                return [r.batch for r in stub.trackCalls(iter([batch]), timeout=10)]
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                return None  # the server has not yet seen the cancel

        answered = poll_until(
            answered_once_the_slot_is_back,
            timeout_s=30,
            interval_s=0.05,
            timeout_error=lambda _: AssertionError("the closed stream's slot never came back"),
        )
        assert answered == [7]
    finally:
        for stream in idle:
            stream.close()
        channel.close()


def _serve_command(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(TIDELAKE), "serve", *args],
        env={**os.environ, "TIDELAKE_LOG_LEVEL": "WARNING", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _one_line_error(*args: str) -> str:
    process = _serve_command(*args)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 2, out
    assert "Traceback" not in out
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    return lines[0]


def test_a_taken_port_fails_at_once_naming_its_holder(
    serve: Any, kafka_conf: dict[str, Any]
) -> None:
    server = serve()
    said = _one_line_error("--port", str(server.port))
    assert said.startswith(
        f"Error: port {server.port} on 127.0.0.1 is already taken by pid {server.pid} (the "
        f"tidelake ingest service, started by pid {os.getpid()}: "
    ), said
    assert said.endswith("): stop it or choose another --port")
    with socket.socket() as other:  # a port held by something that is not gRPC
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        assert f"port {port} on 127.0.0.1 is already taken" in _one_line_error("--port", str(port))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--host", "256.1.1.1"],
            "Error: cannot listen on '256.1.1.1': not an IP address or a host name this "
            "machine resolves",
        ),
        (
            ["--host", "192.0.2.1", "--allow-plaintext"],  # TEST-NET-1: on no interface here
            "Error: cannot listen on 192.0.2.1: no network interface of this machine has that "
            "address",
        ),
        (
            ["--host", "0.0.0.0"],
            "Error: refusing to serve plaintext on 0.0.0.0, which is not a loopback address: set "
            "TIDELAKE_INGEST_TLS_CERT and TIDELAKE_INGEST_TLS_KEY, or pass --allow-plaintext to "
            "accept that anyone on the network can read and send",
        ),
        (
            ["--tls-cert", "/nonexistent/cert.pem"],
            "Error: TIDELAKE_INGEST_TLS_CERT and TIDELAKE_INGEST_TLS_KEY go together: set both "
            "or neither",
        ),
    ],
    ids=["invalid host", "foreign address", "plaintext on all interfaces", "cert without key"],
)
def test_start_up_errors_are_one_line(args: list[str], message: str) -> None:
    assert _one_line_error(*args) == message


def test_logs_and_a_broker_mismatch_are_the_services_own_and_named(
    kafka_conf: dict[str, Any], closed_port: int, tmp_path: Path
) -> None:
    """SASL settings against a PLAINTEXT listener: named as such, once, and the service says in
    its own words why it stops."""
    process = _serve_command(
        "--port",
        str(closed_port),
        env={
            "TIDELAKE_LOG_LEVEL": "INFO",
            "TIDELAKE_LAKE": str(tmp_path / "lake"),
            **kafka_client_env(kafka_conf),
            "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "KAFKA_SASL_MECHANISM": "PLAIN",
            "KAFKA_SASL_USERNAME": "tidelake",
            "KAFKA_SASL_PASSWORD": "not-a-real-secret",
        },
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{closed_port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=120)
        status = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert status.status == health_pb2.HealthCheckResponse.NOT_SERVING
        # librdkafka retries the handshake about once a second, each time on a new connection:
        # three of them give the log repeats to leave out
        broker_port = int(kafka_conf["bootstrap.servers"].rsplit(":", 1)[1])
        attempts: set[int] = set()

        def retried() -> bool | None:
            attempts.update(_local_ports_to(process.pid, broker_port))
            return True if len(attempts) >= 3 else None

        poll_until(
            retried,
            timeout_s=60,
            interval_s=0.002,  # a refused connection is open for milliseconds
            timeout_error=lambda _: AssertionError(
                f"{len(attempts)} connections to Kafka from `tidelake serve` in 60 s"
            ),
        )
    finally:
        channel.close()
        process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out
    assert "Traceback" not in out
    assert "the client speaks KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT" in out
    assert out.count("SASL PLAIN mechanism handshake failed") <= 1, out
    assert "tidelake.ingest: received SIGTERM: stopping: calls in flight finish" in out
    assert "tidelake.streaming.stream.runner" not in out
    assert "not-a-real-secret" not in out


def _local_ports_to(pid: int, port: int) -> set[int]:
    """The local ports of the process's TCP connections to `port` open now."""
    connections = psutil.Process(pid).net_connections("tcp")
    return {c.laddr.port for c in connections if c.raddr and c.raddr.port == port}


def test_serve_ends_with_an_error_when_the_service_dies(
    kafka_conf: dict[str, Any], closed_port: int, tmp_path: Path
) -> None:
    """The service is a JVM that `tidelake serve` started: if it dies, serve says so and ends,
    rather than waiting on with nothing listening."""
    process = _serve_command(
        "--port",
        str(closed_port),
        env={
            "TIDELAKE_LAKE": str(tmp_path / "lake"),
            **kafka_client_env(kafka_conf),
        },
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{closed_port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=30)
    finally:
        channel.close()
    (service,) = psutil.Process(process.pid).children()
    service.kill()
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 1, out
    assert "Traceback" not in out
    assert out.strip().endswith(
        "Error: the ingest service exited unexpectedly (exit code -9); its log above says why"
    ), out


def test_a_damaged_table_is_internal_without_the_servers_paths(
    serve: Any, flow: Any, engine_settings: Any
) -> None:
    table = Path(engine_settings.table_uri(flow.table))
    (table / "_delta_log").mkdir(parents=True)
    (table / "_delta_log" / "00000000000000000000.json").write_text("{not json\n")
    server = serve()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        with pytest.raises(grpc.RpcError) as failed:
            service_pb2_grpc.CallEventServiceStub(channel).getCallInfo(
                CallSid(call_sid=f"CA{'0' * 32}"), timeout=10
            )
    finally:
        channel.close()
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    assert failed.value.details() == (
        f"the service cannot read its {flow.table} table now; it logged why. Retry later; if it "
        "persists, tell the service's operators"
    )
    assert "/" not in failed.value.details()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def _tls_stub(
    port: int, certs: Certificates, cert: bytes | None = None, key: bytes | None = None
) -> tuple[grpc.Channel, service_pb2_grpc.CallEventServiceStub]:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=certs.ca, private_key=key, certificate_chain=cert
    )
    channel = grpc.secure_channel(f"127.0.0.1:{port}", credentials)
    return channel, service_pb2_grpc.CallEventServiceStub(channel)


def _refused(stub: service_pb2_grpc.CallEventServiceStub, **kwargs: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        stub.trackCall(call(), timeout=5, **kwargs)
    return refused.value


def test_mutual_tls_lets_only_clients_with_a_certificate_of_its_ca_through(
    serve: Any, certificates: Certificates, kafka_conf: dict[str, Any], flow: Any
) -> None:
    security = ServiceSecurity(
        tls_cert=certificates.server_cert,
        tls_key=certificates.server_key,
        client_ca=certificates.client_ca,
    )
    server = serve(dataclasses.replace(SETTINGS, security=security))
    channel, stub = _tls_stub(
        server.port, certificates, certificates.client_cert, certificates.client_key
    )
    assert stub.trackCall(call(), timeout=10).call_sid
    channel.close()
    for cert, key in [(None, None), (certificates.stranger_cert, certificates.stranger_key)]:
        channel, stub = _tls_stub(server.port, certificates, cert, key)
        assert _refused(stub).code() == grpc.StatusCode.UNAVAILABLE
        channel.close()
    plain = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    assert _refused(service_pb2_grpc.CallEventServiceStub(plain)).code() in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.INTERNAL,
    )
    plain.close()
    assert topic_records(kafka_conf, flow.topic) == 1


def test_a_bearer_token_is_checked_on_every_call(
    serve: Any, certificates: Certificates, kafka_conf: dict[str, Any], flow: Any
) -> None:
    security = ServiceSecurity(
        tls_cert=certificates.server_cert, tls_key=certificates.server_key, token="s3cret-token"
    )
    server = serve(dataclasses.replace(SETTINGS, security=security))
    channel, stub = _tls_stub(server.port, certificates)
    try:
        refused = _refused(stub)
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
        assert refused.details() == (
            "this service needs a bearer token: send the metadata 'authorization: Bearer "
            "<token>' with the token its operators gave you"
        )
        wrong = _refused(stub, metadata=[("authorization", "Bearer guessed")])
        assert wrong.code() == grpc.StatusCode.UNAUTHENTICATED
        batch = service_pb2.CallEventBatch(batch=1, events=[call(), call()])
        with pytest.raises(grpc.RpcError) as streamed:
            list(stub.trackCalls(iter([batch]), timeout=10))
        assert streamed.value.code() == grpc.StatusCode.UNAUTHENTICATED
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING  # open to probes

        token = [("authorization", "Bearer s3cret-token")]
        assert stub.trackCall(call(), timeout=10, metadata=token).call_sid
        (result,) = stub.trackCalls(iter([batch]), timeout=10, metadata=token)
        assert result.accepted == 2
    finally:
        channel.close()
    assert topic_records(kafka_conf, flow.topic) == 3  # nothing unauthenticated got through


def test_plaintext_beyond_loopback_needs_an_explicit_opt_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(ListenError, match=r"refusing to serve plaintext on 0\.0\.0\.0"):
        check_security(ServiceSecurity(), "0.0.0.0")
    assert check_security(ServiceSecurity(), "localhost") is None
    with caplog.at_level("WARNING", logger="tidelake.ingest"):
        assert check_security(ServiceSecurity(allow_plaintext=True), "0.0.0.0") is None
    assert "serving plaintext on 0.0.0.0 (--allow-plaintext): no TLS" in caplog.text
