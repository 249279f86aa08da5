"""A flow's ingest edge: the service in front of its topic, where its events enter.

A flow that has one names the module in FlowSpec.ingest_edge; that module defines INGEST_EDGE.
`tidelake serve [FLOW]` runs it, `tidelake dev` starts it and sends the flow's demo events
through it, `tidelake produce --via-service` too. call_events' edge is the gRPC ingest service
(platform/calls/ingest_edge.py); a second flow's edge lives with that flow, and nothing here
changes for it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.flow.spec import FlowSpec


@dataclass(frozen=True)
class ServeOptions:
    """`tidelake serve`'s options: where the edge listens and how securely."""

    host: str
    port: int
    """0 picks a free one."""
    ack_timeout_s: float | None
    """Longest a call waits for Kafka's acknowledgement; None: the edge's default."""
    tls_cert: Path | None
    tls_key: Path | None
    client_ca: Path | None
    allow_plaintext: bool
    framed_values: bool


class DemoDelivery(Protocol):
    """Where the demo producer's messages go (platform/dev/produce.py): Kafka itself, or a
    flow's ingest edge."""

    rejected: int

    def send(self, key: bytes | None, value: bytes, timestamp_ms: int) -> None: ...
    def poll(self, timeout_s: float) -> None: ...
    def raise_if_failing(self, produced: int | None = None) -> None: ...
    def finish(self) -> int: ...
    def abort(self) -> None: ...


@dataclass(frozen=True)
class IngestEdge:
    """What a flow's edge module gives the platform."""

    serve: Callable[[FlowSpec, ServeOptions], None]
    """Run the edge until SIGTERM/Ctrl-C (the body of `tidelake serve`)."""
    demo_delivery: Callable[[str], DemoDelivery]
    """A client of the edge at "host:port", for the demo producer."""


def ingest_edge(flow: FlowSpec) -> IngestEdge:
    """The flow's ingest edge; ConfigError if it has none or its module does not define one."""
    if flow.ingest_edge is None:
        raise ConfigError(f"flow {flow.name} has no ingest edge (FlowSpec.ingest_edge)")
    try:
        edge = importlib.import_module(flow.ingest_edge).INGEST_EDGE
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"flow {flow.name}: ingest_edge {flow.ingest_edge!r} must be a module defining "
            f"INGEST_EDGE: {exc}"
        ) from exc
    if not isinstance(edge, IngestEdge):
        raise ConfigError(f"flow {flow.name}: {flow.ingest_edge}.INGEST_EDGE is not an IngestEdge")
    return edge


def flows_with_edges(flows: Iterable[FlowSpec]) -> list[FlowSpec]:
    """The flows that declare an ingest edge, in order."""
    return [flow for flow in flows if flow.ingest_edge is not None]
