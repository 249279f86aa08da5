"""The gRPC ingest service (`tidelake serve`): CallEvents in through a typed API, onto Kafka.

An RPC answers OK only after Kafka acknowledged the event (idempotent producer, acks=all), so an
acknowledged event is never lost. Kafka down or slower than the ack timeout gives UNAVAILABLE,
never a hang; retrying is safe because the stream drops repeats of a call_sid. Health
(grpc.health.v1) follows the broker; reflection lists the services; stop() stops taking calls,
lets those in flight finish and flushes the producer.

The server is gRPC's asyncio one, on its own event loop thread: an idle trackCalls stream costs
a little memory, not a worker thread (32 idle streams used to take every thread of the pool, and
the health check with them). Streams are capped per client and in all (RESOURCE_EXHAUSTED
beyond), and so are the events waiting for Kafka, per stream and in all: memory stays bounded
whatever clients do.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

import grpc
import pyarrow as pa
import uvloop
from confluent_kafka import KafkaError
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

from tidelake.platform.call_validation import (
    FieldViolation,
    call_sid_problems,
    validate_call_event,
)
from tidelake.platform.ingest_listen import (
    BearerToken,
    ListenError,
    ServiceSecurity,
    check_listen_address,
    check_security,
)
from tidelake.platform.ingest_producer import (
    RETRY_IS_SAFE,
    AckingProducer,
    BrokerUnavailable,
    not_acknowledged,
)
from tidelake.protos import service_pb2, service_pb2_grpc
from tidelake.protos.call_pb2 import CallEvent, CallSid
from tidelake.streaming.flow_spec import FlowSpec
from tidelake.streaming.flows import CALL_EVENTS

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
    security: ServiceSecurity = field(default_factory=ServiceSecurity)


class CallEventLookup:
    """The newest stored event of a call, from the flow's Delta table (delta-rs)."""

    def __init__(self, table_uri: str, flow: FlowSpec):
        self._uri = table_uri
        self._flow = flow
        self._table: DeltaTable | None = None
        self._lock = threading.Lock()

    def latest(self, call_sid: str) -> CallEvent | None:
        """call_sid must be validated: it is put into SQL."""
        table = self._current()
        if table is None:
            return None
        # DataFusion inside delta-rs: to_pyarrow_dataset's filter drops files whose call_sid
        # has no min/max statistics (our writer omits them for strings over 32 characters)
        key, time_field = self._flow.key_field, self._flow.event_time_field
        found = (
            QueryBuilder()
            .register("events", table)
            .execute(
                f"select * from events where {key} = '{call_sid}' "
                f"order by {time_field} desc, kafka_offset desc limit 1"
            )
        )
        rows = pa.table(found.read_all()).to_pylist()
        return _row_to_event(rows[0], self._flow) if rows else None

    def _current(self) -> DeltaTable | None:
        with self._lock:
            try:
                if self._table is None:
                    self._table = DeltaTable(self._uri)
                else:
                    self._table.update_incremental()
            except TableNotFoundError:
                return None
            return self._table


def _row_to_event(row: dict[str, Any], flow: FlowSpec) -> CallEvent:
    event = flow.message()
    for f in flow.message.DESCRIPTOR.fields:
        value = row.get(f.name)
        if value is None:
            continue
        if f.enum_type is not None:
            value = f.enum_type.values_by_name[value].number
        elif f.name == flow.event_time_field:
            value = int(value.astimezone(UTC).timestamp() * 1000)
        setattr(event, f.name, value)
    return event


class CallEventServicer(service_pb2_grpc.CallEventServiceServicer):
    def __init__(
        self,
        producer: AckingProducer,
        lookup: CallEventLookup,
        settings: IngestSettings,
        flow: FlowSpec = CALL_EVENTS,
    ):
        self._producer = producer
        self._lookup = lookup
        self._settings = settings
        self._flow = flow
        self._streams = StreamSlots(settings.streams_per_client, settings.streams_total)
        self._in_flight_total = EventWindow(settings.max_in_flight_total)

    async def trackCall(self, request: CallEvent, context: grpc.aio.ServicerContext) -> CallSid:
        now_ms = _now_ms()
        problems = validate_call_event(request, now_ms, self._flow)
        if problems:
            await context.abort_with_status(_invalid_argument(problems))
        try:
            acked = self._producer.send(
                request.call_sid.encode(), request.SerializeToString(), now_ms
            )
        except BrokerUnavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        wait_s = self._settings.ack_timeout_s
        remaining = context.time_remaining()
        if remaining is not None:
            wait_s = min(wait_s, max(remaining - 0.05, 0.0))
        try:
            async with asyncio.timeout(wait_s):
                failure = await acked
        except TimeoutError:
            failure = f"Kafka did not acknowledge the event within {wait_s:g} s. {RETRY_IS_SAFE}"
        if failure is not None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, failure)
        return CallSid(call_sid=request.call_sid)

    async def trackCalls(
        self,
        request_iterator: AsyncIterator[service_pb2.CallEventBatch],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[service_pb2.TrackBatchResult]:
        client = _client_address(context.peer())
        refusal = self._streams.take(client)
        if refusal is not None:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        try:
            results: asyncio.Queue[service_pb2.TrackBatchResult | None] = asyncio.Queue()
            reader = asyncio.create_task(self._read_batches(request_iterator, results))
            try:
                while (result := await results.get()) is not None:
                    yield result
                await reader  # its failure, if it failed
            except Exception:
                log.exception("trackCalls from %s failed", client)
                await context.abort(
                    grpc.StatusCode.INTERNAL,
                    "the ingest service failed on this stream; it logged why. The results you "
                    "received stand: send the batches without a result again (retrying is safe)",
                )
            finally:
                reader.cancel()
        finally:
            self._streams.give_back(client)

    async def _read_batches(
        self,
        batches: AsyncIterator[service_pb2.CallEventBatch],
        results: asyncio.Queue[service_pb2.TrackBatchResult | None],
    ) -> None:
        window = EventWindow(self._settings.max_in_flight)
        open_batches: set[_BatchTracker] = set()
        try:
            async for batch in batches:
                await self._track_batch(batch, results, window, open_batches)
            while open_batches:  # answered by Kafka or by their deadline
                await next(iter(open_batches)).finished.wait()
        finally:
            results.put_nowait(None)

    async def _track_batch(
        self,
        batch: service_pb2.CallEventBatch,
        results: asyncio.Queue[service_pb2.TrackBatchResult | None],
        window: EventWindow,
        open_batches: set[_BatchTracker],
    ) -> None:
        now_ms = _now_ms()
        refused = []
        positions = []
        records = []
        for index, event in enumerate(batch.events):
            problems = validate_call_event(event, now_ms, self._flow)
            if problems:
                refused.append(_refusal(index, event, code_pb2.INVALID_ARGUMENT, _joined(problems)))
            else:
                positions.append(index)
                records.append((event.call_sid.encode(), event.SerializeToString()))
        count = len(records)
        # back-pressure: stop reading the stream (HTTP/2 flow control slows the client) while
        # this stream, or all of them, have as many events waiting for Kafka as allowed
        await window.take(count)
        await self._in_flight_total.take(count)

        def finish(result: service_pb2.TrackBatchResult) -> None:
            window.give_back(count)
            self._in_flight_total.give_back(count)
            open_batches.discard(tracker)
            results.put_nowait(result)

        tracker = _BatchTracker(batch, positions, refused, finish)
        if not records:
            tracker.finish()
            return
        open_batches.add(tracker)
        try:
            not_taken = self._producer.send_batch(records, now_ms, tracker.on_delivery)
        except BrokerUnavailable as exc:
            not_taken = [(n, str(exc)) for n in range(count)]
        for position, reason in not_taken:
            tracker.not_taken(position, reason)
        tracker.expire_after(
            self._settings.ack_timeout_s,
            f"Kafka did not acknowledge the event within {self._settings.ack_timeout_s:g} s. "
            + RETRY_IS_SAFE,
        )

    async def getCallInfo(self, request: CallSid, context: grpc.aio.ServicerContext) -> CallEvent:
        problems = call_sid_problems(request.call_sid)
        if problems:
            await context.abort_with_status(_invalid_argument(problems))
        try:
            event = await asyncio.to_thread(self._lookup.latest, request.call_sid)
        except Exception:
            # the details (file paths, the storage's error) are the operators' business
            log.exception("getCallInfo: cannot read the %s table", self._flow.table)
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"the service cannot read its {self._flow.table} table now; it logged why. "
                "Retry later; if it persists, tell the service's operators",
            )
        if event is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no stored event for call_sid {request.call_sid} (events reach the lake "
                "seconds after they are acknowledged)",
            )
        return event


def _client_address(peer: str) -> str:
    """'ipv4:127.0.0.1:51234' -> 'ipv4:127.0.0.1' (a client is its address, not its port)."""
    return peer.rsplit(":", 1)[0] if peer.startswith(("ipv4:", "ipv6:")) else peer


class StreamSlots:
    """Open trackCalls streams, counted per client address and in all."""

    def __init__(self, per_client: int, total: int):
        self._per_client = per_client
        self._total = total
        self._open: dict[str, int] = {}

    def take(self, client: str) -> str | None:
        """None if the client may open one more stream; else why not."""
        if sum(self._open.values()) >= self._total:
            return (
                f"the service has {self._total} trackCalls streams open, its limit: retry later, "
                "or send on a stream you already have open"
            )
        if self._open.get(client, 0) >= self._per_client:
            return (
                f"this client has {self._per_client} trackCalls streams open, the limit per "
                "client: close idle streams or send on one you already have open"
            )
        self._open[client] = self._open.get(client, 0) + 1
        return None

    def give_back(self, client: str) -> None:
        left = self._open[client] - 1
        if left:
            self._open[client] = left
        else:
            del self._open[client]


class EventWindow:
    """Events waiting for Kafka, up to a limit; one batch larger than the whole window is let
    through alone, so a sender's batch size never deadlocks it."""

    def __init__(self, limit: int):
        self._limit = limit
        self._used = 0
        self._room = asyncio.Event()

    async def take(self, count: int) -> None:
        while self._used and self._used + count > self._limit:
            self._room.clear()
            await self._room.wait()
        self._used += count

    def give_back(self, count: int) -> None:
        self._used -= count
        self._room.set()


class _BatchTracker:
    """Counts one batch's answers from Kafka and hands its result over after the last one. A
    batch not answered within the ack timeout is answered UNAVAILABLE for the rest (Kafka may
    still store them: retrying is safe).

    Which record an answer is for is worked out only when some record failed: on the hot path
    an answer costs a count and the record's key."""

    def __init__(
        self,
        batch: service_pb2.CallEventBatch,
        positions: list[int],
        refused: list[service_pb2.TrackResult],
        on_finish: Callable[[service_pb2.TrackBatchResult], None],
    ):
        self._events = batch.events
        self._positions = positions
        """The batch index of each record sent, in the order sent."""
        self._waiting = len(positions)
        self._acked: list[bytes] = []
        self._failed: list[tuple[bytes, str]] = []
        self._not_taken: list[tuple[int, str]] = []
        self._result = service_pb2.TrackBatchResult(batch=batch.batch, refused=refused)
        self._on_finish = on_finish
        self._expiry: asyncio.TimerHandle | None = None
        self.finished = asyncio.Event()

    def on_delivery(self, error: KafkaError | None, message: Any) -> None:
        if self.finished.is_set():
            return  # answered already (given up on)
        if error is None:
            self._acked.append(message.key())
        else:
            self._failed.append((message.key(), not_acknowledged(error)))
        self._answered_one()

    def not_taken(self, position: int, reason: str) -> None:
        """The record at `position` (of those sent) was refused before it reached Kafka."""
        self._not_taken.append((position, reason))
        self._answered_one()

    def expire_after(self, seconds: float, reason: str) -> None:
        if not self.finished.is_set():
            self._expiry = asyncio.get_running_loop().call_later(seconds, self.finish, reason)

    def finish(self, unanswered: str | None = None) -> None:
        """Hand the result over; records still without an answer are refused with `unanswered`."""
        if self.finished.is_set():
            return
        if self._expiry is not None:
            self._expiry.cancel()
        self.finished.set()
        self._result.accepted = len(self._acked)
        if self._failed or self._not_taken or unanswered:
            self._refuse_the_rest(unanswered)
        self._on_finish(self._result)

    def _answered_one(self) -> None:
        self._waiting -= 1
        if not self._waiting:
            self.finish()

    def _refuse_the_rest(self, unanswered: str | None) -> None:
        refused = [(self._positions[p], reason) for p, reason in self._not_taken]
        skipped = {p for p, _ in self._not_taken}
        by_key: dict[bytes, list[int]] = defaultdict(list)
        for position, index in enumerate(self._positions):
            if position not in skipped:
                by_key[self._events[index].call_sid.encode()].append(index)
        for key in self._acked:
            by_key[key].pop()
        refused += [(by_key[key].pop(), reason) for key, reason in self._failed]
        if unanswered:
            refused += [(index, unanswered) for rest in by_key.values() for index in rest]
        self._result.refused.extend(
            _refusal(index, self._events[index], code_pb2.UNAVAILABLE, reason)
            for index, reason in refused
        )
        self._result.refused.sort(key=lambda r: r.index)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _joined(problems: list[FieldViolation]) -> str:
    return "; ".join(str(p) for p in problems)


def _refusal(index: int, event: CallEvent, code: int, message: str) -> service_pb2.TrackResult:
    return service_pb2.TrackResult(index=index, call_sid=event.call_sid, code=code, message=message)


def _invalid_argument(problems: list[FieldViolation]) -> grpc.Status:
    details = any_pb2.Any()
    details.Pack(
        error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=p.field, description=p.description
                )
                for p in problems
            ]
        )
    )
    return rpc_status.to_status(
        status_pb2.Status(
            code=code_pb2.INVALID_ARGUMENT, message=_joined(problems), details=[details]
        )
    )


@dataclass
class IngestServer:
    """A running ingest server on its own event loop thread; stop() is the graceful shutdown."""

    port: int
    settings: IngestSettings
    _loop: asyncio.AbstractEventLoop
    _thread: threading.Thread
    _server: grpc.aio.Server
    _producer: AckingProducer
    _health: health.aio.HealthServicer
    _watcher: asyncio.Task[None]

    def stop(self) -> int:
        """Stop taking calls, let calls in flight finish, flush; returns unacknowledged events."""
        asyncio.run_coroutine_threadsafe(self._shut_down(), self._loop).result()
        left = self._producer.close(self.settings.shutdown_grace_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        return left

    async def _shut_down(self) -> None:
        self._watcher.cancel()
        await self._health.enter_graceful_shutdown()
        await self._server.stop(self.settings.shutdown_grace_s)


def check_can_serve(settings: IngestSettings) -> grpc.ServerCredentials | None:
    """ListenError unless the address and the security settings can work; the server
    credentials (None: plaintext). Cheap: a command checks this before it reaches for Kafka."""
    check_listen_address(settings.host, settings.port)
    return check_security(settings.security, settings.host)


def start_ingest_server(
    kafka_conf: Mapping[str, Any],
    table_uri: str,
    settings: IngestSettings | None = None,
    flow: FlowSpec = CALL_EVENTS,
    kafka_unreachable: str | None = None,
) -> IngestServer:
    """Start serving on settings.host:settings.port (port 0 picks a free one). Raises
    ListenError, before anything starts, when the address or the security settings cannot
    work. kafka_unreachable: why Kafka did not answer the caller just now, if it did not."""
    settings = settings or IngestSettings()
    credentials = check_can_serve(settings)
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="ingest-service", daemon=True)
    thread.start()
    producer = AckingProducer(
        kafka_conf, flow.topic, settings.health_interval_s, loop, kafka_unreachable
    )
    try:
        started = asyncio.run_coroutine_threadsafe(
            _serve(producer, table_uri, settings, flow, credentials), loop
        ).result()
    except BaseException:
        producer.close(0)
        loop.call_soon_threadsafe(loop.stop)
        raise
    server, port, health_servicer, watcher = started
    log.info(
        "ingest service listening on %s:%d (%s%s) -> topic %s",
        settings.host,
        port,
        "TLS" if credentials is not None else "plaintext",
        ", bearer token" if settings.security.token else "",
        flow.topic,
    )
    return IngestServer(port, settings, loop, thread, server, producer, health_servicer, watcher)


async def _serve(
    producer: AckingProducer,
    table_uri: str,
    settings: IngestSettings,
    flow: FlowSpec,
    credentials: grpc.ServerCredentials | None,
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer, asyncio.Task[None]]:
    token = settings.security.token
    server = grpc.aio.server(
        # without it, a second server on a taken port binds it too and shares the connections
        options=[("grpc.so_reuseport", 0)],
        interceptors=[BearerToken(token, SERVICE_NAME)] if token else None,
    )
    servicer = CallEventServicer(producer, CallEventLookup(table_uri, flow), settings, flow)
    service_pb2_grpc.add_CallEventServiceServicer_to_server(servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    address = f"{settings.host}:{settings.port}"
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError:
        port = 0
    if port == 0:  # taken between the check and now
        raise ListenError(f"cannot listen on {address}: the address is taken")
    await server.start()
    await _set_health(health_servicer, producer)
    watcher = asyncio.create_task(
        _follow_broker(producer, health_servicer, settings.health_interval_s)
    )
    return server, port, health_servicer, watcher


async def _set_health(health_servicer: health.aio.HealthServicer, producer: AckingProducer) -> None:
    status = (
        health_pb2.HealthCheckResponse.NOT_SERVING
        if producer.unavailable_reason
        else health_pb2.HealthCheckResponse.SERVING
    )
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, status)


async def _follow_broker(
    producer: AckingProducer, health_servicer: health.aio.HealthServicer, interval_s: float
) -> None:
    """Health is SERVING while Kafka answers, NOT_SERVING while it does not."""
    while True:
        await asyncio.sleep(min(interval_s, 1.0))
        await _set_health(health_servicer, producer)
