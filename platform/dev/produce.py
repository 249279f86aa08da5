"""The demo producer: realistic traffic for a flow, including the messages that break pipelines.

Besides well-formed events it sends late arrivals (event time 1-3 hours back, possibly on the
previous date), producer retries (the same message again within seconds) and poison messages
(bytes that are not protobuf, or protobuf lacking a field the engine requires), so that
quarantine, deduplication and late-data handling are exercised. The returned report is exact, so
tests can compare the resulting tables with it.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypedDict, Unpack

from confluent_kafka import KafkaError, Message, Producer
from google.protobuf.message import DecodeError
from tqdm import tqdm

from tidelake.platform.ingest_edge import DemoDelivery, ingest_edge
from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.flow.spec import DemoEventChange, FlowSpec
from tidelake.streaming.kafka.acls import WRITES
from tidelake.streaming.kafka.admin import quiet_client_config, require_access, require_topic

_DAY_MS = 86_400_000
_HOUR_MS = 3_600_000
_POLL_EVERY = 1_000  # messages between poll(0) calls and progress-bar updates
UNDECODABLE = "undecodable"
"""Kind of poison message whose bytes are not protobuf at all."""
TOO_LATE = "too_late"
"""Kind of poison: a valid event that arrives after its date closed."""


class ProduceError(TidelakeError, RuntimeError):
    """Messages were not delivered; the message says how many and why."""


@dataclass
class ProduceReport:
    """What was sent, exactly: good + malformed + duplicates == produced, late is a subset of
    good."""

    topic: str
    produced: int
    good: int
    malformed: int
    late: int
    by_date: dict[str, int]
    """UTC date (YYYY-MM-DD) of the event time -> number of good events."""
    elapsed_s: float
    duplicates: int = 0
    """Repeats of good events (same key and bytes), as a producer retrying after a timeout sends."""
    malformed_kinds: dict[str, int] = field(default_factory=dict)
    """"undecodable" or "missing_<field>" -> number of poison messages of that kind."""
    keys: list[str] | None = None
    """Keys of the good events in production order, if collect_keys was set."""

    @property
    def rate(self) -> float:
        """Messages per second over the whole run, flush included."""
        return self.produced / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> str:
        dates = ", ".join(f"{date} {n:,}" for date, n in sorted(self.by_date.items()))
        return (
            f"produced {self.produced:,} messages to {self.topic} in {self.elapsed_s:.1f}s "
            f"({self.rate:,.0f}/s): {self.good:,} good ({self.late:,} late), "
            f"{self.duplicates:,} retried duplicates, {self.malformed:,} malformed; good by date: "
            f"{dates or '-'}"
        )


def producer_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Client config for a fast producer whose report can be trusted.

    Idempotence and acks=all are forced (no duplicates, no silent loss); auto-creation is off so
    a missing topic is an error rather than a topic with the broker's default partition count.
    Throughput settings are defaults that conf may override.
    """
    config = quiet_client_config(conf)
    config.setdefault("linger.ms", 5)
    config.setdefault("compression.type", "lz4")
    config.setdefault("batch.size", 1_000_000)
    config.setdefault("queue.buffering.max.messages", 500_000)
    config.setdefault("message.timeout.ms", 60_000)
    config.update({"enable.idempotence": True, "acks": "all", "allow.auto.create.topics": False})
    return config


class DemoTraffic(TypedDict, total=False):
    """How many demo events, how fast, and which mix of them (see produce_demo_events)."""

    count: int | None
    rate: float | None
    duration_s: float | None
    malformed_share: float
    """Of all messages, poison (default 0.01)."""
    late_share: float
    """Of the good events, 1-3 hours late (default 0.05)."""
    duplicate_share: float
    """Of the good events, sent twice (default 0)."""
    days: int
    seed: int | None
    change_event: DemoEventChange | None


def produce_demo_events(
    flow: FlowSpec,
    conf: Mapping[str, Any],
    *,
    progress: bool = True,
    collect_keys: bool = False,
    **traffic: Unpack[DemoTraffic],
) -> ProduceReport:
    """Produce demo events of flow straight to flow.topic and report exactly what was sent.

    Size the run with `count`, or `duration_s`; `rate` (events/s) paces either, otherwise
    messages go as fast as possible. `days` > 1 spreads event times over the last `days` UTC
    dates (equal shares; today's up to now). Of all messages `malformed_share` are poison; of
    the good ones `late_share` are 1-3 hours late (none dated before the first date), and
    `duplicate_share` are sent twice, the repeat 0-5 s after the original. The same seed gives
    the same messages apart from event times, which follow the clock. `change_event` changes
    or drops the good events it touches.
    """
    total, generator = _demo_messages(flow, traffic, typed_poison=False)
    require_topic(conf, flow.topic)
    require_access(conf, flow.topic, WRITES)
    delivery = _KafkaDelivery(conf, flow.topic)
    return _send(flow, generator, delivery, total, traffic, progress, collect_keys)


def send_demo_events_to_service(
    flow: FlowSpec,
    conf: Mapping[str, Any],
    address: str,
    *,
    progress: bool = True,
    collect_keys: bool = False,
    **traffic: Unpack[DemoTraffic],
) -> ProduceReport:
    """Send demo events of flow through its ingest edge at address ("host:port"), as
    produce_demo_events does to Kafka. The poison is events missing a field (the edge refuses
    them, and the report checks it did), and Kafka's timestamps are the edge's clock, so `days`
    must be 1. conf (the Kafka cluster behind the edge) checks the topic."""
    if traffic.get("days", 1) != 1:
        raise ValueError("the ingest service needs days=1: it stamps arrival with its clock")
    total, generator = _demo_messages(flow, traffic, typed_poison=True)
    require_topic(conf, flow.topic)
    require_access(conf, flow.topic, WRITES)
    delivery = ingest_edge(flow).demo_delivery(address)
    report = _send(flow, generator, delivery, total, traffic, progress, collect_keys)
    if delivery.rejected != generator.malformed:
        raise ProduceError(
            f"the ingest service refused {delivery.rejected} events, but {generator.malformed} "
            "were meant to be invalid"
        )
    return report


def _demo_messages(
    flow: FlowSpec, traffic: DemoTraffic, *, typed_poison: bool
) -> tuple[int | None, _DemoMessages]:
    """The planned count (None: until duration_s) and the message generator; bad arguments
    fail here, before any client connects."""
    total = _planned_count(traffic.get("count"), traffic.get("rate"), traffic.get("duration_s"))
    malformed_share = traffic.get("malformed_share", 0.01)
    late_share = traffic.get("late_share", 0.05)
    duplicate_share = traffic.get("duplicate_share", 0.0)
    _check_share("malformed_share", malformed_share)
    _check_share("late_share", late_share)
    _check_share("duplicate_share", duplicate_share)
    days = traffic.get("days", 1)
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ValueError(f"days must be an integer >= 1, got {days!r}")
    if flow.demo_event is None:
        raise ValueError(f"flow {flow.name} declares no demo_event factory to produce from")
    generator = _DemoMessages(
        flow,
        random.Random(traffic.get("seed")),
        malformed_share,
        late_share,
        days,
        total,
        duplicate_share,
        typed_poison=typed_poison,
        change_event=traffic.get("change_event"),
    )
    return total, generator


def _send(
    flow: FlowSpec,
    generator: _DemoMessages,
    delivery: DemoDelivery,
    total: int | None,
    traffic: DemoTraffic,
    progress: bool,
    collect_keys: bool,
) -> ProduceReport:
    """Send the generator's messages through delivery (paced to `rate`, until `total` or
    `duration_s`) and report them once all are delivered."""
    rate, duration_s = traffic.get("rate"), traffic.get("duration_s")
    keys: list[str] | None = [] if collect_keys else None
    # Poll (serve callbacks, update the bar, check the clock) about ten times a second.
    poll_every = _POLL_EVERY if rate is None else max(1, min(_POLL_EVERY, int(rate / 10)))
    started = time.perf_counter()
    stop_at = started + duration_s if duration_s is not None and total is None else math.inf
    bar = tqdm(
        total=total,
        desc=flow.topic,
        unit="msg",
        unit_scale=True,
        file=sys.stderr,
        disable=not progress,
    )
    produced = 0
    try:
        while total is None or produced < total:
            if produced % poll_every == 0:
                delivery.poll(0)
                bar.update(produced - bar.n)
                delivery.raise_if_failing()
                if time.perf_counter() >= stop_at:
                    break
            if rate is not None:
                _wait_until(delivery, started + produced / rate)
            key, value, good_key, arrival_ms = generator.next_message()
            delivery.send(key, value, arrival_ms)
            produced += 1
            if keys is not None and good_key is not None:
                keys.append(good_key)
        bar.update(produced - bar.n)
    except BaseException:
        bar.close()
        delivery.abort()  # deliver what is queued, but exit promptly
        raise
    bar.close()
    undelivered = delivery.finish()
    elapsed_s = time.perf_counter() - started
    delivery.raise_if_failing(produced=produced)
    if undelivered:
        raise ProduceError(
            f"{undelivered} of {produced} messages to {flow.topic} were still queued after flush"
        )
    return generator.report(flow.topic, produced, elapsed_s, keys)


class _DemoMessages:
    """Draws every decision from one rng, so a seed fixes the messages (not the clock)."""

    def __init__(
        self,
        flow: FlowSpec,
        rng: random.Random,
        malformed_share: float,
        late_share: float,
        days: int,
        planned: int | None = None,
        duplicate_share: float = 0.0,
        typed_poison: bool = False,
        change_event: DemoEventChange | None = None,
    ) -> None:
        assert flow.demo_event is not None
        self._flow = flow
        self._make_event = flow.demo_event
        self._rng = rng
        self._malformed_share = malformed_share
        self._late_share = late_share
        self._days = days
        self._planned = planned
        self._duplicate_share = duplicate_share
        self._typed_poison = typed_poison
        self._change_event = change_event
        self._retry: tuple[bytes | None, bytes, None, int] | None = None
        self._sent = 0
        self._validity = [
            (name, flow.message.DESCRIPTOR.fields_by_name[name].default_value)
            for name in flow.validity_fields
        ]
        self._missing_kinds = [f"missing_{name}" for name in flow.validity_fields]
        self.good = 0
        self.late = 0
        self.duplicates = 0
        self.good_by_day: Counter[int] = Counter()
        self.malformed_kinds: Counter[str] = Counter()

    def next_message(self) -> tuple[bytes | None, bytes, str | None, int]:
        """(Kafka key, value, key if the message is a good event else None, Kafka timestamp).

        The Kafka timestamp is the simulated arrival: the event time itself, or 1-3 hours after
        it for late events. A late event that arrives after its date closed (end of date plus
        the flow's allowed lateness) is counted as poison of kind "too_late", as the engine
        quarantines it.
        """
        rng = self._rng
        if self._retry is not None:
            retry, self._retry = self._retry, None
            self.duplicates += 1
            return retry
        arrival_ms = self._arrival()
        self._sent += 1
        if rng.random() < self._malformed_share:
            return (*self._poison(arrival_ms), arrival_ms)
        late = rng.random() < self._late_share
        event_time_ms = arrival_ms - rng.randint(_HOUR_MS, 3 * _HOUR_MS) if late else arrival_ms
        if (
            late
            and self._days > 1
            and event_time_ms < self._span_start(time.time_ns() // 1_000_000)
        ):
            # history starts on its first day: no event from the day before it
            late, event_time_ms = False, arrival_ms
        event = self._make_event(rng, event_time_ms)
        if self._change_event is not None and self._change_event(event, rng) is None:
            return self.next_message()  # the change means this event never happened
        for name, default in self._validity:
            if getattr(event, name) == default:
                raise ValueError(
                    f"demo_event of flow {self._flow.name} made an event without {name!r}"
                )
        key = str(getattr(event, self._flow.key_field))
        if arrival_ms > self._flow.closes_at_ms(event_time_ms):
            self.malformed_kinds[TOO_LATE] += 1
            return key.encode(), event.SerializeToString(), None, arrival_ms
        self.good += 1
        self.late += late
        self.good_by_day[event_time_ms // _DAY_MS] += 1
        value = event.SerializeToString()
        if self._duplicate_share and rng.random() < self._duplicate_share:
            # a producer's retry resends the record as it was, timestamp included; so the demo's
            # timestamps never decrease and the arrival rule is each record's own timestamp
            self._retry = (key.encode(), value, None, arrival_ms)
        return key.encode(), value, key, arrival_ms

    @property
    def malformed(self) -> int:
        return sum(self.malformed_kinds.values())

    def report(
        self, topic: str, produced: int, elapsed_s: float, keys: list[str] | None
    ) -> ProduceReport:
        by_date = {
            datetime.fromtimestamp(day * _DAY_MS / 1000, UTC).date().isoformat(): n
            for day, n in sorted(self.good_by_day.items())
        }
        return ProduceReport(
            topic=topic,
            produced=produced,
            good=self.good,
            malformed=self.malformed,
            late=self.late,
            by_date=by_date,
            duplicates=self.duplicates,
            elapsed_s=elapsed_s,
            malformed_kinds=dict(sorted(self.malformed_kinds.items())),
            keys=keys,
        )

    def _arrival(self) -> int:
        """Now; with `days` > 1 a moment of the last `days` UTC dates, in order if the count is
        known (a replay of history, as Kafka would have stored it), else at random."""
        now_ms = time.time_ns() // 1_000_000
        if self._days == 1:
            return now_ms
        span_start = self._span_start(now_ms)
        share = self._rng.random()
        if self._planned:
            share = (self._sent + share) / self._planned
        return span_start + int(share * (now_ms - span_start))

    def _span_start(self, now_ms: int) -> int:
        """Midnight UTC starting the first of the last `days` dates."""
        return now_ms - now_ms % _DAY_MS - (self._days - 1) * _DAY_MS

    def _poison(self, arrival_ms: int) -> tuple[bytes | None, bytes, None]:
        rng = self._rng
        if rng.random() < 0.5 and not self._typed_poison:
            self.malformed_kinds[UNDECODABLE] += 1
            return None, self._undecodable(), None
        missing = rng.randrange(len(self._validity))
        event = self._make_event(rng, arrival_ms)
        event.ClearField(self._validity[missing][0])
        self.malformed_kinds[self._missing_kinds[missing]] += 1
        key = getattr(event, self._flow.key_field)
        return (str(key).encode() if key else None), event.SerializeToString(), None

    def _undecodable(self) -> bytes:
        """Bytes that make ParseFromString raise, in the shapes seen in practice."""
        rng = self._rng
        shape = rng.randrange(4)
        if shape == 0:  # a varint that never ends
            value = b"\xff" * rng.randint(3, 12)
        elif shape == 1:  # a length-delimited field longer than the message
            value = bytes([(1 << 3) | 2, rng.randint(40, 127)]) + rng.randbytes(rng.randint(0, 30))
        elif shape == 2:  # an invalid wire type
            value = bytes([(rng.randint(1, 15) << 3) | rng.choice((6, 7))]) + rng.randbytes(8)
        else:  # somebody sent JSON to a protobuf topic
            value = json.dumps({self._flow.key_field: f"{rng.getrandbits(64):016x}"}).encode()
        try:
            self._flow.message.FromString(value)
        except DecodeError:
            return value
        return b"\xff\xff\xff"  # the shape happened to parse for this message type


class _KafkaDelivery:
    """Straight to Kafka: an idempotent acks=all producer; delivery failures are collected."""

    rejected = 0

    def __init__(self, conf: Mapping[str, Any], topic: str):
        self.topic = topic
        self.failed = 0
        self.first_error: str | None = None
        self.fatal_error: str | None = None
        config = producer_config(conf)
        config.setdefault("error_cb", self._on_client_error)
        config["on_delivery"] = self._on_delivery
        config["delivery.report.only.error"] = True  # successes need no callback: flush proves
        self._flush_timeout_s = float(config["message.timeout.ms"]) / 1000 + 10
        self._producer = Producer(config)

    def send(self, key: bytes | None, value: bytes, timestamp_ms: int) -> None:
        while True:
            try:
                self._producer.produce(self.topic, value, key, timestamp=timestamp_ms)
                return
            except BufferError:  # local queue full: serve delivery reports until there is room
                self._producer.poll(0.05)

    def poll(self, timeout_s: float) -> None:
        self._producer.poll(timeout_s)

    def finish(self) -> int:
        return self._producer.flush(self._flush_timeout_s)

    def abort(self) -> None:
        self._producer.flush(min(5.0, self._flush_timeout_s))

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.failed += 1
            self.first_error = self.first_error or error.str()

    def _on_client_error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal_error = self.fatal_error or error.str()

    def raise_if_failing(self, produced: int | None = None) -> None:
        if self.fatal_error is not None:
            raise ProduceError(f"producer to {self.topic} hit a fatal error: {self.fatal_error}")
        if self.failed:
            of = f" of {produced}" if produced is not None else ""
            raise ProduceError(
                f"{self.failed}{of} messages to {self.topic} were not delivered "
                f"(first error: {self.first_error})"
            )


def _wait_until(delivery: DemoDelivery, due: float) -> None:
    """Pace to a rate: wait (serving callbacks) only when more than 2 ms ahead of schedule."""
    ahead = due - time.perf_counter()
    if ahead <= 0.002:
        return
    while ahead > 0:
        delivery.poll(ahead)
        ahead = due - time.perf_counter()


def _planned_count(count: int | None, rate: float | None, duration_s: float | None) -> int | None:
    """Number of messages to send, or None when only a duration bounds the run."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be a number > 0 (events per second), got {rate!r}")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration_s must be a number > 0 (seconds), got {duration_s!r}")
    if count is not None and duration_s is not None:
        raise ValueError("give count or duration_s, not both")
    if count is None and duration_s is None:
        raise ValueError("give count, or duration_s (with or without rate)")
    if count is not None:
        return count
    if rate is not None:
        assert duration_s is not None
        return max(1, round(rate * duration_s))
    return None


def _check_share(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be between 0 and 1, got {value!r}")
