"""The gRPC ingest service (`tidelake serve`): CallEvents in through a typed API, onto Kafka.

The service itself runs on the JVM (jvm/ingest-service: grpc-java on Netty, Kafka's Java
producer, delta-kernel for getCallInfo): Python's gRPC alone cost more CPU per call than 10,000
calls a second on two cores allows. This module is its launcher: it checks the address and the
security settings (one line naming what is wrong, before anything starts), hands the service its
settings, the Kafka client's properties and the flow's contract as exported from the FlowSpec, and
relays the service's log lines into Python's logging under `tidelake.ingest`.

An RPC answers OK only after Kafka acknowledged the event (idempotent producer, acks=all), so an
acknowledged event is never lost. Kafka down or slower than the ack timeout gives UNAVAILABLE,
never a hang; retrying is safe because the stream drops repeats of a call_sid.
"""

from __future__ import annotations

import base64
import json
import logging
import signal
import subprocess
import tempfile
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tidelake.platform.calls.ingest_listen import (
    INGEST_MAIN_CLASS,
    ListenError,
    ServiceSecurity,
    check_listen_address,
    check_security,
)
from tidelake.protos import service_pb2
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.contract import service_contract
from tidelake.streaming.flow.descriptor_set import load_descriptor_set, proto_source
from tidelake.streaming.flow.engine_columns import KAFKA_OFFSET
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.read import java_client_options
from tidelake.streaming.schemas.framing import flow_frame_prefix
from tidelake.streaming.schemas.registry_client import require_registry, value_subject
from tidelake.streaming.spark.jars import ingest_classpath, java_executable
from tidelake.streaming.storage.s3_settings import s3_settings

log = logging.getLogger("tidelake.ingest")

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["CallEventService"].full_name


@dataclass(frozen=True)
class IngestSettings:
    host: str = "127.0.0.1"
    port: int = 50051
    ack_timeout_s: float = 30.0
    """Longest an RPC waits for Kafka's acknowledgement before answering UNAVAILABLE. Longer
    than a partition leader's failover: after a broker crash the controller waits out
    broker.session.timeout.ms (9 s by default) before it elects a new leader; with 10 s, 857
    events of a steady 400 a second were refused while a three-node cluster failed over."""
    max_in_flight: int = 20_000
    """Events of one trackCalls stream waiting for Kafka at once (back-pressure beyond)."""
    max_in_flight_total: int = 100_000
    """Events of all trackCalls streams waiting for Kafka at once (back-pressure beyond)."""
    streams_per_client: int = 128
    """Open trackCalls streams from one client address; RESOURCE_EXHAUSTED beyond."""
    streams_total: int = 1024
    """Open trackCalls streams in all; RESOURCE_EXHAUSTED beyond."""
    health_interval_s: float = 5.0
    shutdown_grace_s: float = 10.0
    heap_mb: int = 512
    """The service JVM's heap, all of it taken at its start: 100 concurrent streams at their
    in-flight caps fit."""
    framed_values: bool = False
    """Write values in Confluent's wire format (the flow's .proto registered under the topic's
    value subject), so that consumers using Confluent's deserializers read them; the stream
    reads both forms."""
    security: ServiceSecurity = field(default_factory=ServiceSecurity)


class ServiceStopped(Exception):
    """The service was told to stop (SIGINT, SIGTERM: a Ctrl-C reaches its JVM too) before it
    listened: not a failure."""


_STOPPED = {-signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM}
"""Exit codes of a JVM ended by SIGINT/SIGTERM (128 + n once its shutdown hooks ran)."""


class IngestServer:
    """A running ingest service (a JVM child process); stop() is the graceful shutdown."""

    def __init__(self, process: subprocess.Popen[str], port: int, relay: threading.Thread):
        self.port = port
        self._process = process
        self._relay = relay

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def exit_code(self) -> int | None:
        """None while the service runs."""
        return self._process.poll()

    def stop(self, timeout_s: float = 60.0) -> int:
        """Stop taking calls, let calls in flight finish, flush; returns unacknowledged events."""
        if self._process.poll() is None:
            self._process.terminate()
        out, _ = self._process.communicate(timeout=timeout_s)
        self._relay.join(timeout=5)
        for line in out.splitlines():
            if line.startswith("unacknowledged "):
                return int(line.split()[1])
        raise RuntimeError(
            f"the ingest service ended (exit code {self._process.returncode}) without saying "
            "what it flushed; its log says why"
        )


def check_can_serve(settings: IngestSettings) -> None:
    """ListenError unless the address and the security settings can work. Cheap: a command
    checks this before it reaches for Kafka."""
    check_listen_address(settings.host, settings.port)
    check_security(settings.security, settings.host)


def start_ingest_server(
    kafka_conf: Mapping[str, Any],
    table_uri: str,
    settings: IngestSettings | None = None,
    flow: FlowSpec = CALL_EVENTS,
    kafka_unreachable: str | None = None,
) -> IngestServer:
    """Start serving on settings.host:settings.port (port 0 picks a free one) and return once
    the service listens. Raises ListenError, before anything starts, when the address or the
    security settings cannot work. kafka_unreachable: why Kafka did not answer the caller just
    now, if it did not (the service then starts NOT_SERVING without asking again)."""
    settings = settings or IngestSettings()
    check_can_serve(settings)
    config = Path(tempfile.mkdtemp(prefix="tidelake-ingest-")) / "service.json"
    # may hold the token and Kafka's password: the service reads it and deletes it
    config.touch(mode=0o600)
    config.write_text(
        json.dumps(_service_config(settings, kafka_conf, table_uri, flow, kafka_unreachable))
    )
    process = subprocess.Popen(
        [
            java_executable(),
            f"-Xmx{settings.heap_mb}m",
            f"-Xms{settings.heap_mb}m",  # a fixed heap, touched at the start: what the memory
            "-XX:+AlwaysPreTouch",  # of a months-long process still does is off the heap
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:+UseParallelGC",
            "-cp",
            ingest_classpath(),
            INGEST_MAIN_CLASS,
            str(config),
        ],
        stdin=subprocess.PIPE,  # the service stops when this closes: it never outlives us
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    # the service's last plain (non-JSON) stderr line: a start-up failure says why there
    started_error: deque[str] = deque(maxlen=1)
    relay = threading.Thread(
        target=_relay_log, args=(process.stderr, started_error), name="ingest-log", daemon=True
    )
    relay.start()
    try:
        port = _wait_until_listening(process.stdout)
    finally:
        config.unlink(missing_ok=True)
        config.parent.rmdir()
    if port is None:
        process.wait(timeout=30)
        relay.join(timeout=5)
        if process.returncode in _STOPPED:
            raise ServiceStopped("the ingest service was stopped before it listened")
        reason = started_error[-1] if started_error else f"exit code {process.returncode}"
        if "the address is taken" in reason:
            check_listen_address(settings.host, settings.port)  # names the holder
        raise ListenError(reason)
    return IngestServer(process, port, relay)


def _service_config(
    settings: IngestSettings,
    kafka_conf: Mapping[str, Any],
    table_uri: str,
    flow: FlowSpec,
    kafka_unreachable: str | None,
) -> dict[str, Any]:
    """What IngestConfig.java reads: the one place the service's settings come from."""
    security = settings.security
    descriptors = load_descriptor_set(
        Path(service_pb2.__file__).with_name("service.binpb"), service_pb2.DESCRIPTOR
    )
    return {
        "host": settings.host,
        "port": settings.port,
        "ack_timeout_ms": round(settings.ack_timeout_s * 1000),
        "max_in_flight": settings.max_in_flight,
        "max_in_flight_total": settings.max_in_flight_total,
        "streams_per_client": settings.streams_per_client,
        "streams_total": settings.streams_total,
        "health_interval_ms": round(settings.health_interval_s * 1000),
        "shutdown_grace_ms": round(settings.shutdown_grace_s * 1000),
        "tls_cert": _path(security.tls_cert),
        "tls_key": _path(security.tls_key),
        "client_ca": _path(security.client_ca),
        "token": security.token,
        "kafka": java_client_options({k: str(v) for k, v in kafka_conf.items()}),
        "kafka_unreachable": kafka_unreachable,
        "topic": flow.topic,
        "value_prefix": _value_prefix(flow) if settings.framed_values else None,
        "table_uri": table_uri,
        "hadoop": _hadoop_conf(),
        "table": flow.table,
        "offset_column": KAFKA_OFFSET,
        "contract": service_contract(flow)
        | {"descriptor_set": base64.b64encode(descriptors).decode()},
    }


def _value_prefix(flow: FlowSpec) -> str:
    """The Confluent frame of the flow's message, base64: its .proto registered (or found
    registered) under the topic's value subject, and the message's index path in it."""
    registry = require_registry()
    schema_id, version = registry.register(value_subject(flow), proto_source(flow))
    log.info("values framed with schema id %s (%s v%s)", schema_id, value_subject(flow), version)
    return base64.b64encode(flow_frame_prefix(flow, schema_id)).decode()


def _hadoop_conf() -> dict[str, str]:
    """The Configuration getCallInfo reads the table through: what Spark's sessions are given
    as spark.hadoop.*, so that an s3:// table is read by s3a with the same endpoint and region.
    No secret: s3a's credential chain reads AWS_* from the environment the JVM inherits."""
    spark = s3_settings().hadoop_conf()
    return {name.removeprefix("spark.hadoop."): value for name, value in spark.items()}


def _path(path: Path | None) -> str | None:
    return None if path is None else str(path.resolve())


def _wait_until_listening(stdout: IO[str]) -> int | None:
    """The port from the service's `listening <port>` line; None if it ended first."""
    for line in stdout:
        if line.startswith("listening "):
            return int(line.split()[1])
    return None


_LEVELS = {
    "SEVERE": logging.ERROR,
    "WARNING": logging.WARNING,
    "INFO": logging.INFO,
    "CONFIG": logging.DEBUG,
    "FINE": logging.DEBUG,
}


def _relay_log(stderr: IO[str], plain_lines: deque[str]) -> None:
    """The service's JSON log lines into Python's logging; other lines (a start-up failure,
    the JVM's own) are kept and logged as warnings of the service."""
    for line in stderr:
        line = line.rstrip("\n")
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            if line:
                plain_lines.append(line)
                log.warning("%s", line)
            continue
        name = str(record.get("logger") or "")
        logger = log if name.startswith(log.name) else log.getChild(name or "jvm")
        logger.log(
            _LEVELS.get(str(record.get("level")), logging.WARNING), "%s", record.get("message")
        )
