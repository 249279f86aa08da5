"""The gRPC ingest service (`tidelake serve`): CallEvents in through a typed API, onto Kafka.

An RPC answers OK only after Kafka acknowledged the event (idempotent producer, acks=all), so an
acknowledged event is never lost. Kafka down or slower than the ack timeout gives UNAVAILABLE,
never a hang; retrying is safe because the stream drops repeats of a call_sid. Health
(grpc.health.v1) follows the broker; reflection lists the services; SIGTERM/SIGINT stop taking
calls, let those in flight finish and flush the producer.
"""

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import grpc
import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer
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
from tidelake.platform.produce import producer_config
from tidelake.protos import service_pb2, service_pb2_grpc
from tidelake.protos.call_pb2 import CallEvent, CallSid
from tidelake.streaming.flow_spec import FlowSpec
from tidelake.streaming.flows import CALL_EVENTS
from tidelake.streaming.kafka_admin import KafkaAdminError, check_reachable

log = logging.getLogger(__name__)

_NOTHING = object()
RETRY_IS_SAFE = "Retrying is safe: the stream drops repeats of a call_sid."

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["CallEventService"].full_name


@dataclass(frozen=True)
class IngestSettings:
    host: str = "127.0.0.1"
    port: int = 50051
    ack_timeout_s: float = 10.0
    """Longest an RPC waits for Kafka's acknowledgement before answering UNAVAILABLE."""
    max_in_flight: int = 20_000
    """Events of one trackCalls stream waiting for Kafka at once (back-pressure beyond)."""
    workers: int = 32
    health_interval_s: float = 5.0
    shutdown_grace_s: float = 10.0


class BrokerUnavailable(Exception):
    """Kafka cannot take events now; the message says why."""


class AckingProducer:
    """An idempotent acks=all producer whose sends resolve when Kafka acknowledges them."""

    def __init__(self, kafka_conf: Mapping[str, Any], topic: str, probe_interval_s: float):
        self.topic = topic
        self._kafka_conf = dict(kafka_conf)
        # records wait for Kafka up to message.timeout.ms (60 s): a short outage delays them
        # instead of failing them; RPCs stop waiting at the (shorter) ack timeout
        self._config = producer_config(kafka_conf)
        self._config["error_cb"] = self._on_client_error
        self._config["linger.ms"] = 1
        self._producer = Producer(self._config)
        self._lock = threading.Lock()
        self._fatal: str | None = None
        self._down: str | None = None
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="kafka-poll", daemon=True)
        self._prober = threading.Thread(
            target=self._probe, args=(probe_interval_s,), name="kafka-probe", daemon=True
        )
        self._probe_once()
        self._poller.start()
        self._prober.start()

    @property
    def unavailable_reason(self) -> str | None:
        """Why Kafka is unreachable, as last seen; None while it answers."""
        return self._down

    def send(
        self, key: str, value: bytes, timestamp_ms: int, on_done: Callable[[str | None], None]
    ) -> None:
        """Hand one record to Kafka; on_done(None) once Kafka acknowledged it, on_done(reason)
        if it was not stored (within message.timeout.ms). Raises BrokerUnavailable at once if
        the broker is known to be down or the local queue is full."""
        if self._down is not None:
            raise BrokerUnavailable(f"Kafka is unreachable: {self._down}")
        if self._fatal is not None:
            self._replace_producer()

        def on_delivery(error: KafkaError | None, _message: Any) -> None:
            if error is None:
                self._down = None
                on_done(None)
            else:
                on_done(f"Kafka did not acknowledge the event: {error.str()}. {RETRY_IS_SAFE}")

        try:
            # the Kafka timestamp is the time the event was validated at, so the stream's arrival
            # rules (too late, ahead) judge it exactly as the service did
            self._producer.produce(
                self.topic, value, key.encode(), timestamp=timestamp_ms, on_delivery=on_delivery
            )
        except BufferError:
            raise BrokerUnavailable(
                "the service's Kafka queue is full (Kafka is slow or down); retry later"
            ) from None
        except KafkaException as exc:
            raise BrokerUnavailable(f"Kafka refused the event: {exc}") from None

    def close(self, timeout_s: float) -> int:
        """Flush what is queued; returns the number of events Kafka never acknowledged."""
        self._stop.set()
        self._poller.join(timeout=5)
        left = self._producer.flush(timeout_s)
        if left:
            log.error("%d events were not acknowledged by Kafka before shutdown", left)
        return left

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)

    def _probe(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self._probe_once()

    def _probe_once(self) -> None:
        try:
            check_reachable(self._kafka_conf, timeout_s=5.0)
        except KafkaAdminError as exc:
            if self._down is None:
                log.warning("Kafka unreachable: %s", exc)
            self._down = str(exc)
        else:
            if self._down is not None:
                log.info("Kafka reachable again")
            self._down = None

    def _on_client_error(self, error: KafkaError) -> None:
        if error.fatal():  # e.g. the idempotent producer was fenced: this client is done
            self._fatal = error.str()
        elif error.code() == KafkaError._ALL_BROKERS_DOWN:
            self._down = error.str()

    def _replace_producer(self) -> None:
        """After a fatal error: fail what the old client still holds, continue with a new one."""
        with self._lock:
            if self._fatal is None:
                return
            log.error("Kafka producer failed (%s); starting a new one", self._fatal)
            old, self._producer = self._producer, Producer(self._config)
            self._fatal = None
        old.purge()
        deadline = time.monotonic() + 5
        while len(old) and time.monotonic() < deadline:  # delivery reports for what it held
            old.poll(0.1)


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
    for field in flow.message.DESCRIPTOR.fields:
        value = row.get(field.name)
        if value is None:
            continue
        if field.enum_type is not None:
            value = field.enum_type.values_by_name[value].number
        elif field.name == flow.event_time_field:
            value = int(value.astimezone(UTC).timestamp() * 1000)
        setattr(event, field.name, value)
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

    def trackCall(self, request: CallEvent, context: grpc.ServicerContext) -> CallSid:
        now_ms = _now_ms()
        problems = validate_call_event(request, now_ms, self._flow)
        if problems:
            context.abort_with_status(_invalid_argument(problems))
        answer: futures.Future[str | None] = futures.Future()
        try:
            self._producer.send(
                request.call_sid, request.SerializeToString(), now_ms, answer.set_result
            )
        except BrokerUnavailable as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        wait_s = self._settings.ack_timeout_s
        remaining = context.time_remaining()
        if remaining is not None:
            wait_s = min(wait_s, max(remaining - 0.05, 0.0))
        try:
            failure = answer.result(wait_s)
        except futures.TimeoutError:
            failure = f"Kafka did not acknowledge the event within {wait_s:g} s. {RETRY_IS_SAFE}"
        if failure is not None:
            context.abort(grpc.StatusCode.UNAVAILABLE, failure)
        return CallSid(call_sid=request.call_sid)

    def trackCalls(
        self, request_iterator: Iterator[service_pb2.CallEventBatch], context: grpc.ServicerContext
    ) -> Iterator[service_pb2.TrackBatchResult]:
        results: queue.Queue[service_pb2.TrackBatchResult | None] = queue.Queue()
        open_batches = _OpenBatches(self._settings.ack_timeout_s)
        failure: list[str] = []
        reader = threading.Thread(
            target=self._read_batches,
            args=(request_iterator, results, open_batches, context, failure),
            name="track-calls-reader",
            daemon=True,
        )
        reader.start()
        next_expiry = time.monotonic() + 0.25
        while True:
            try:
                result = results.get(timeout=0.25)
            except queue.Empty:
                result = _NOTHING
            if time.monotonic() >= next_expiry:  # also under steady traffic
                open_batches.expire(time.monotonic())
                next_expiry = time.monotonic() + 0.25
            if result is None:
                break
            if result is not _NOTHING:
                yield result
        if failure:
            context.abort(grpc.StatusCode.INTERNAL, failure[0])

    def _read_batches(
        self,
        batches: Iterator[service_pb2.CallEventBatch],
        results: "queue.Queue[service_pb2.TrackBatchResult | None]",
        open_batches: "_OpenBatches",
        context: grpc.ServicerContext,
        failure: list[str],
    ) -> None:
        slots = threading.BoundedSemaphore(self._settings.max_in_flight)
        try:
            for batch in batches:
                self._track_batch(batch, results, slots, open_batches, context)
        except grpc.RpcError:
            pass  # the client went away; nothing left to answer
        except Exception as exc:  # a bug: answer what is open, then fail the call visibly
            log.exception("trackCalls failed")
            failure.append(f"the ingest service failed: {exc!r}")
        finally:
            open_batches.wait_until_closed()
            results.put(None)

    def _track_batch(
        self,
        batch: service_pb2.CallEventBatch,
        results: "queue.Queue[service_pb2.TrackBatchResult | None]",
        slots: threading.BoundedSemaphore,
        open_batches: "_OpenBatches",
        context: grpc.ServicerContext,
    ) -> None:
        now_ms = _now_ms()
        refused = []
        valid = []
        for index, event in enumerate(batch.events):
            problems = validate_call_event(event, now_ms, self._flow)
            if problems:
                refused.append(_refusal(index, event, code_pb2.INVALID_ARGUMENT, _joined(problems)))
            else:
                valid.append((index, event))
        tracker = _BatchTracker(batch.batch, valid, refused, results, open_batches)
        for index, event in valid:
            while not slots.acquire(timeout=0.5):  # back-pressure: Kafka is behind
                if not context.is_active():
                    raise grpc.RpcError("the client cancelled the stream")
            if not tracker.waiting_for(index):  # answered UNAVAILABLE already: do not send
                slots.release()
                continue

            def settle(failure: str | None, index: int = index) -> None:
                slots.release()
                tracker.settle(index, failure)

            try:
                self._producer.send(event.call_sid, event.SerializeToString(), now_ms, settle)
            except BrokerUnavailable as exc:
                settle(str(exc))

    def getCallInfo(self, request: CallSid, context: grpc.ServicerContext) -> CallEvent:
        problems = call_sid_problems(request.call_sid)
        if problems:
            context.abort_with_status(_invalid_argument(problems))
        event = self._lookup.latest(request.call_sid)
        if event is None:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no stored event for call_sid {request.call_sid} (events reach the lake "
                "seconds after they are acknowledged)",
            )
        return event


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _joined(problems: list[FieldViolation]) -> str:
    return "; ".join(str(p) for p in problems)


def _refusal(index: int, event: CallEvent, code: int, message: str) -> service_pb2.TrackResult:
    return service_pb2.TrackResult(index=index, call_sid=event.call_sid, code=code, message=message)


class _OpenBatches:
    """Batches of one stream still waiting for Kafka. A batch not answered within the ack
    timeout is answered UNAVAILABLE for the rest (Kafka may still store them: retry is safe)."""

    def __init__(self, ack_timeout_s: float):
        self.ack_timeout_s = ack_timeout_s
        self._open: dict[int, _BatchTracker] = {}
        self._changed = threading.Condition()

    def opened(self, tracker: "_BatchTracker") -> None:
        with self._changed:
            self._open[id(tracker)] = tracker

    def closed(self, tracker: "_BatchTracker") -> None:
        with self._changed:
            self._open.pop(id(tracker), None)
            self._changed.notify_all()

    def expire(self, now: float) -> None:
        with self._changed:
            overdue = [t for t in self._open.values() if t.deadline <= now]
        for tracker in overdue:
            tracker.give_up(
                f"Kafka did not acknowledge the event within {self.ack_timeout_s:g} s. "
                + RETRY_IS_SAFE
            )

    def wait_until_closed(self) -> None:
        """Block until every batch is answered, by Kafka or by expiring."""
        while True:
            with self._changed:
                if not self._open:
                    return
                self._changed.wait(0.25)
            self.expire(time.monotonic())


class _BatchTracker:
    """Counts one batch's answers from Kafka and sends its result after the last one."""

    def __init__(
        self,
        batch: int,
        expected: list[tuple[int, CallEvent]],
        refused: list[service_pb2.TrackResult],
        results: "queue.Queue[service_pb2.TrackBatchResult | None]",
        open_batches: _OpenBatches,
    ):
        self.deadline = time.monotonic() + open_batches.ack_timeout_s
        self._result = service_pb2.TrackBatchResult(batch=batch, refused=refused)
        self._waiting = dict(expected)
        self._results = results
        self._open = open_batches
        self._lock = threading.Lock()
        if expected:
            open_batches.opened(self)
        else:
            results.put(self._result)

    def waiting_for(self, index: int) -> bool:
        with self._lock:
            return index in self._waiting

    def settle(self, index: int, failure: str | None) -> None:
        with self._lock:
            event = self._waiting.pop(index, None)
            if event is None:  # answered already (given up on)
                return
            if failure is None:
                self._result.accepted += 1
            else:
                self._result.refused.append(_refusal(index, event, code_pb2.UNAVAILABLE, failure))
            if self._waiting:
                return
        self._finish()

    def give_up(self, reason: str) -> None:
        with self._lock:
            if not self._waiting:
                return
            for index, event in sorted(self._waiting.items()):
                self._result.refused.append(_refusal(index, event, code_pb2.UNAVAILABLE, reason))
            self._waiting.clear()
        self._finish()

    def _finish(self) -> None:
        self._results.put(self._result)
        self._open.closed(self)


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
    """A running ingest server; stop() is the graceful shutdown."""

    server: grpc.Server
    producer: AckingProducer
    health: health.HealthServicer
    port: int
    settings: IngestSettings
    _watcher: threading.Thread | None = None
    _stopped: threading.Event | None = None

    def stop(self) -> int:
        """Stop taking calls, let calls in flight finish, flush; returns unacknowledged events."""
        assert self._stopped is not None
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        self.server.stop(self.settings.shutdown_grace_s).wait()
        return self.producer.close(self.settings.shutdown_grace_s)

    def wait(self) -> None:
        self.server.wait_for_termination()


def start_ingest_server(
    kafka_conf: Mapping[str, Any],
    table_uri: str,
    settings: IngestSettings | None = None,
    flow: FlowSpec = CALL_EVENTS,
) -> IngestServer:
    """Start serving on settings.host:settings.port (port 0 picks a free one)."""
    settings = settings or IngestSettings()
    producer = AckingProducer(kafka_conf, flow.topic, settings.health_interval_s)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=settings.workers))
    servicer = CallEventServicer(producer, CallEventLookup(table_uri, flow), settings, flow)
    service_pb2_grpc.add_CallEventServiceServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    port = server.add_insecure_port(f"{settings.host}:{settings.port}")
    if port == 0:
        raise OSError(f"cannot listen on {settings.host}:{settings.port}")
    server.start()
    stopped = threading.Event()
    watcher = threading.Thread(
        target=_follow_broker,
        args=(producer, health_servicer, settings.health_interval_s, stopped),
        name="health",
        daemon=True,
    )
    watcher.start()
    log.info("ingest service on %s:%d -> topic %s", settings.host, port, flow.topic)
    return IngestServer(server, producer, health_servicer, port, settings, watcher, stopped)


def _follow_broker(
    producer: AckingProducer,
    health_servicer: health.HealthServicer,
    interval_s: float,
    stopped: threading.Event,
) -> None:
    """Health is SERVING while Kafka answers, NOT_SERVING while it does not."""
    while True:
        status = (
            health_pb2.HealthCheckResponse.NOT_SERVING
            if producer.unavailable_reason
            else health_pb2.HealthCheckResponse.SERVING
        )
        for name in ("", SERVICE_NAME):
            health_servicer.set(name, status)
        if stopped.wait(min(interval_s, 1.0)):
            return
