"""The ingest service's Kafka producer: sends that resolve, on the service's event loop, when Kafka
acknowledges them (idempotent producer, acks=all).

librdkafka calls its delivery reports from `poll()`. A thread polls and hands each poll's reports
to the event loop in one call: one loop wake-up per poll, not per event, which is what lets a
batch of 500 events cost one hand-over instead of 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from tidelake.platform.produce import producer_config
from tidelake.streaming.kafka_admin import KafkaAdminError, check_reachable

log = logging.getLogger("tidelake.ingest")

RETRY_IS_SAFE = "Retrying is safe: the stream drops repeats of a call_sid."

Delivery = tuple[Callable[[KafkaError | None, Any], None], KafkaError | None, Any]


class BrokerUnavailable(Exception):
    """Kafka cannot take events now; the message says why."""


def not_acknowledged(error: KafkaError) -> str:
    return f"Kafka did not acknowledge the event: {error.str()}. {RETRY_IS_SAFE}"


class AckingProducer:
    """An idempotent acks=all producer for one topic, used from one asyncio event loop."""

    def __init__(
        self,
        kafka_conf: Mapping[str, Any],
        topic: str,
        probe_interval_s: float,
        loop: asyncio.AbstractEventLoop,
        unreachable: str | None = None,
    ):
        """unreachable: why Kafka could not be reached just now, if the caller already knows
        (the first probe is then skipped: it would wait for the same timeout again)."""
        self.topic = topic
        self._loop = loop
        self._kafka_conf = dict(kafka_conf)
        # records wait for Kafka up to message.timeout.ms (60 s): a short outage delays them
        # instead of failing them; RPCs stop waiting at the (shorter) ack timeout
        self._config = producer_config(kafka_conf)
        self._config["error_cb"] = self._on_client_error
        self._config["linger.ms"] = 2
        self._producer = Producer(self._config)
        self._lock = threading.Lock()
        self._reports: deque[Delivery] = deque()
        self._fatal: str | None = None
        self._down: str | None = None
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="kafka-poll", daemon=True)
        self._prober = threading.Thread(
            target=self._probe, args=(probe_interval_s,), name="kafka-probe", daemon=True
        )
        if unreachable is None:
            self._probe_once()
        else:
            self._mark_down(unreachable)
        self._poller.start()
        self._prober.start()

    @property
    def unavailable_reason(self) -> str | None:
        """Why Kafka is unreachable, as last seen; None while it answers."""
        return self._down

    def send(self, key: bytes, value: bytes, timestamp_ms: int) -> asyncio.Future[str | None]:
        """Hand one record to Kafka. The future resolves to None once Kafka acknowledged it, or
        to the reason it was not stored (within message.timeout.ms). Raises BrokerUnavailable at
        once if the broker is known to be down or the local queue is full."""
        # the Kafka timestamp is the time the event was validated at, so the stream's arrival
        # rules (too late, ahead) judge it exactly as the service did
        future: asyncio.Future[str | None] = self._loop.create_future()

        def on_delivery(error: KafkaError | None, _message: Any) -> None:
            if not future.done():
                future.set_result(None if error is None else not_acknowledged(error))

        self._check_usable()
        try:
            self._producer.produce(
                self.topic,
                value,
                key,
                timestamp=timestamp_ms,
                on_delivery=self._report(on_delivery),
            )
        except BufferError:
            raise BrokerUnavailable(_QUEUE_FULL) from None
        except KafkaException as exc:
            raise BrokerUnavailable(f"Kafka refused the event: {exc}") from None
        return future

    def send_batch(
        self,
        records: Sequence[tuple[bytes, bytes]],
        timestamp_ms: int,
        on_delivery: Callable[[KafkaError | None, Any], None],
    ) -> list[tuple[int, str]]:
        """Hand (key, value) records to Kafka; on_delivery(error, message) runs on the event loop
        once per record Kafka answered. Returns (position, reason) of the records it did not
        take (those get no delivery report).

        One produce() a record: produce_batch() cannot set timestamps, and the Kafka timestamp
        must be the time the service validated the event at (see send)."""
        self._check_usable()
        produce, topic, report = self._producer.produce, self.topic, self._report(on_delivery)
        for position, (key, value) in enumerate(records):
            try:
                produce(topic, value, key, timestamp=timestamp_ms, on_delivery=report)
            except BufferError:
                return [(n, _QUEUE_FULL) for n in range(position, len(records))]
            except KafkaException as exc:
                reason = f"Kafka refused the event: {exc}. {RETRY_IS_SAFE}"
                return [(n, reason) for n in range(position, len(records))]
        return []

    def close(self, timeout_s: float) -> int:
        """Flush what is queued; returns the number of events Kafka never acknowledged."""
        self._stop.set()
        self._poller.join(timeout=5)
        left = self._producer.flush(timeout_s)
        if left:
            log.error("%d events were not acknowledged by Kafka before shutdown", left)
        return left

    def _report(
        self, on_delivery: Callable[[KafkaError | None, Any], None]
    ) -> Callable[[KafkaError | None, Any], None]:
        """A delivery callback for the poll thread: it only queues the report for the loop."""
        reports = self._reports

        def queue_report(error: KafkaError | None, message: Any) -> None:
            reports.append((on_delivery, error, message))

        return queue_report

    def _check_usable(self) -> None:
        if self._down is not None:
            raise BrokerUnavailable(f"Kafka is unreachable: {self._down}")
        if self._fatal is not None:
            self._replace_producer()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)
            reports = []
            with contextlib.suppress(IndexError):
                while True:
                    reports.append(self._reports.popleft())
            if reports:
                if any(error is None for _, error, _ in reports):
                    self._down = None
                self._loop.call_soon_threadsafe(_deliver, reports)

    def _probe(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self._probe_once()

    def _probe_once(self) -> None:
        try:
            check_reachable(self._kafka_conf, timeout_s=5.0)
        except KafkaAdminError as exc:
            self._mark_down(str(exc))
        else:
            if self._down is not None:
                log.info("Kafka reachable again")
            self._down = None

    def _mark_down(self, reason: str) -> None:
        if self._down is None:
            log.warning("%s; health NOT_SERVING until it answers", reason)
        self._down = reason

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


_QUEUE_FULL = "the service's Kafka queue is full (Kafka is slow or down); retry later"


def _deliver(reports: list[Delivery]) -> None:
    for on_delivery, error, message in reports:
        on_delivery(error, message)
