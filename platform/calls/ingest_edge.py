"""call_events' ingest edge (CALL_EVENTS.ingest_edge): the gRPC ingest service, run by
`tidelake serve` until SIGTERM/Ctrl-C, and the demo producer's client of it."""

from __future__ import annotations

import dataclasses
import logging

from tidelake.platform.calls.ingest_client import IngestServiceDelivery
from tidelake.platform.calls.ingest_launcher import (
    IngestSettings,
    ServiceStopped,
    check_can_serve,
    start_ingest_server,
)
from tidelake.platform.calls.ingest_listen import ServiceSecurity
from tidelake.platform.ingest_edge import IngestEdge, ServeOptions
from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.admin import KafkaUnreachableError, check_reachable, ensure_topic
from tidelake.streaming.settings import host_settings, kafka_client_config, load_engine_settings
from tidelake.streaming.stream.stop_signals import graceful_stop_signals

log = logging.getLogger("tidelake.ingest")


class IngestServiceError(TidelakeError, RuntimeError):
    """The ingest service ended on its own, or left events unacknowledged at shutdown."""


def serve_call_events(flow: FlowSpec, options: ServeOptions) -> None:
    """CallEventService (trackCall, trackCalls, getCallInfo), grpc.health.v1 and reflection,
    until SIGTERM/Ctrl-C. An RPC answers OK only once Kafka acknowledged the event. On
    SIGTERM/Ctrl-C it stops taking calls, finishes those in flight and flushes the producer.
    With TIDELAKE_INGEST_TOKEN set, every CallEventService call must carry `authorization:
    Bearer <token>` (kept out of the command line, where other users could read it)."""
    security = ServiceSecurity(
        tls_cert=options.tls_cert,
        tls_key=options.tls_key,
        client_ca=options.client_ca,
        token=host_settings().ingest_token,
        allow_plaintext=options.allow_plaintext,
    )
    ingest = IngestSettings(
        host=options.host, port=options.port, security=security, framed_values=options.framed_values
    )
    if options.ack_timeout_s is not None:
        ingest = dataclasses.replace(ingest, ack_timeout_s=options.ack_timeout_s)
    check_can_serve(ingest)  # before Kafka: a taken port fails at once (ListenError, exit 2)
    conf = kafka_client_config()
    unreachable = None
    try:
        check_reachable(conf, timeout_s=5.0)
        ensure_topic(conf, flow.topic, flow.topic_partitions)
    except KafkaUnreachableError as exc:  # the service logs it and serves NOT_SERVING
        unreachable = str(exc)
    uri = load_engine_settings().table_uri(flow.table)
    with graceful_stop_signals(log, "stopping: calls in flight finish, Kafka is flushed") as stop:
        try:
            server = start_ingest_server(conf, uri, ingest, flow, kafka_unreachable=unreachable)
        except ServiceStopped:
            return  # a Ctrl-C while it started: stopped, as asked
        while not stop.wait(timeout=1.0):
            # a Ctrl-C reaches the service's JVM too, and it may end before our handler runs
            if server.exit_code is not None and not stop.wait(timeout=0.5):
                raise IngestServiceError(
                    f"the ingest service exited unexpectedly (exit code {server.exit_code}); "
                    "its log above says why"
                )
        left = server.stop()
    if left:
        raise IngestServiceError(
            f"{left} events were still waiting for Kafka at shutdown; their senders were not "
            "told OK, so nothing acknowledged was lost"
        )


INGEST_EDGE = IngestEdge(serve=serve_call_events, demo_delivery=IngestServiceDelivery)
