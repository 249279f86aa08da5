"""A flow is one event type end to end, declared as data.

A `FlowSpec` names the protobuf message, the Kafka topic, the Delta tables and the event-time
field. The engine (Kafka source, decoder, Delta sink, runner) and the Dagster platform are
generated from these specs; nothing downstream is written per flow.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, overload

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from tidelake.streaming.errors import SetupError
from tidelake.streaming.flow.engine_columns import ENGINE_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import Column

EventTimeUnit = Literal["s", "ms", "us"]
ExpectationsFactory = Callable[[], list[Any]]
"""() -> great_expectations Expectation objects; a function, so that only code that validates
pays for importing Great Expectations (seconds)."""
DemoEventFactory = Callable[[random.Random, int], Message]
"""(rng, event_time_ms) -> a realistic message of the flow's type, for the demo producer."""
DemoEventChange = Callable[[Any, random.Random], Message | None]
"""(event, rng) -> the demo event changed in place, or None if it never happened."""
DemoIncidents = Callable[[int, int, float, float], DemoEventChange]
"""(start_ms, end_ms, every_s, length_s) -> the change to the flow's demo events that injects an
incident every every_s seconds, length_s long, between start_ms and end_ms."""

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class FlowSpecError(SetupError, ValueError):
    """A flow declaration that cannot work, named with the field at fault."""


@dataclass(frozen=True)
class FieldCheck:
    """A bound on one field's values, part of the flow's contract (see flow/contract.py)."""

    pattern: str | None = None
    """Strings: the whole value must match this regular expression (Python and Java syntax)."""
    min_value: float | None = None
    max_value: float | None = None


@dataclass(frozen=True)
class FlowSpec:
    """Everything the platform needs to know about one event type."""

    name: str
    message: type[Message]
    topic: str
    key_field: str
    event_time_field: str
    event_time_unit: EventTimeUnit = "ms"
    required_fields: tuple[str, ...] = ()
    """Fields that must be set, besides the key and the event time (see flow/contract.py)."""
    field_checks: Mapping[str, FieldCheck] = field(default_factory=dict, compare=False)
    """Bounds on field values, checked by the ingest service, the stream and the quality suite."""
    topic_partitions: int = 4
    allowed_lateness: timedelta = timedelta(hours=2)
    """How long after the end of a UTC date its events are still accepted (by Kafka timestamp);
    later ones go to quarantine, so a closed date never changes."""
    max_clock_skew: timedelta = timedelta(hours=1)
    """How far an event time may lie ahead of its Kafka timestamp before it is quarantined."""
    partition_column: str = "date"
    first_date: date = date(2026, 1, 1)
    """First UTC date of the table's daily partitions (backfills start no earlier)."""
    max_lag: int = 100_000
    """Records waiting on Kafka above which the stream's lag check fails."""
    volume_tolerance: float = 0.5
    """A day with fewer than (1 - tolerance) x the median rows of the 7 days before fails."""
    max_quarantine_share: float = 0.05
    """A day whose quarantined share of records is higher fails its quarantine check."""
    dedup_key: str | None = None
    """Field whose repeats (producer retries) the stream drops when they arrive within
    allowed_lateness of the first; None keeps every record."""
    description: str = ""
    owners: tuple[str, ...] = ()
    expectations: ExpectationsFactory | None = field(default=None, compare=False, repr=False)
    """Great Expectations 1.x expectations every date partition of the table must meet, run on
    GX's Spark engine (types by Spark's names: "LongType")."""
    expectations_since: Mapping[date, ExpectationsFactory] = field(
        default_factory=dict, compare=False, repr=False
    )
    """Expectations that date partitions from the given date on must meet: for a field added
    later, whose column is null on the days before it existed."""
    demo_event: DemoEventFactory | None = field(default=None, compare=False, repr=False)
    demo_incidents: DemoIncidents | None = field(default=None, compare=False, repr=False)
    """Incidents in the demo events, for the flow's anomaly detection to find (`tidelake
    produce --incident-every`, `tidelake dev`)."""
    ingest_edge: str | None = None
    """The module of the service in front of the topic, where the flow's events enter, if it
    has one (platform/ingest_edge.py: `tidelake serve`, and `tidelake dev` sends the demo
    events through it)."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise FlowSpecError(f"flow name {self.name!r} must match {_NAME.pattern}")
        if not _TOPIC.match(self.topic):
            raise FlowSpecError(
                f"flow {self.name}: topic {self.topic!r} is not a valid Kafka topic"
            )
        fields = self.message.DESCRIPTOR.fields_by_name
        for role, name in [
            ("key_field", self.key_field),
            ("event_time_field", self.event_time_field),
        ]:
            if name not in fields:
                raise FlowSpecError(
                    f"flow {self.name}: {role} {name!r} is not a field of "
                    f"{self.message.DESCRIPTOR.full_name}"
                )
        if self.dedup_key is not None and self.dedup_key not in fields:
            raise FlowSpecError(
                f"flow {self.name}: dedup_key {self.dedup_key!r} is not a field of "
                f"{self.message.DESCRIPTOR.full_name}"
            )
        for name in self.required_fields:
            if name not in fields:
                raise FlowSpecError(f"flow {self.name}: required field {name!r} does not exist")
        for name, check in self.field_checks.items():
            _check_field_check(self.name, fields, name, check)
        time_field = fields[self.event_time_field]
        if time_field.type not in _INTEGER_TYPES:
            raise FlowSpecError(
                f"flow {self.name}: event_time_field {self.event_time_field!r} must be an integer "
                "epoch field"
            )
        if self.event_time_unit not in EVENT_TIME_UNITS_PER_SECOND:
            raise FlowSpecError(f"flow {self.name}: event_time_unit must be s, ms or us")
        if self.allowed_lateness < timedelta(0) or self.max_clock_skew < timedelta(0):
            raise FlowSpecError(
                f"flow {self.name}: allowed_lateness and max_clock_skew must be >= 0"
            )
        if not 0 < self.volume_tolerance < 1 or not 0 <= self.max_quarantine_share <= 1:
            raise FlowSpecError(
                f"flow {self.name}: volume_tolerance must be in (0, 1) and max_quarantine_share "
                "in [0, 1]"
            )
        if self.max_lag < 0:
            raise FlowSpecError(f"flow {self.name}: max_lag must be >= 0")
        if self.topic_partitions < 1:
            raise FlowSpecError(f"flow {self.name}: topic_partitions must be >= 1")
        checked: list[tuple[str, str | None]] = [
            ("key_field", self.key_field),
            ("event_time_field", self.event_time_field),
            ("dedup_key", self.dedup_key),
            *[(f"field_checks[{n!r}]", n) for n in self.field_checks],
        ]
        for role, field_name in checked:
            if field_name is not None and not _single_value(fields[field_name]):
                raise FlowSpecError(
                    f"flow {self.name}: {role} {field_name!r} must be a single scalar or enum "
                    "field, not a repeated field or a message"
                )
        _check_nesting(self.name, self.message.DESCRIPTOR, ())
        if self.topic in (".", ".."):
            raise FlowSpecError(f"flow {self.name}: topic {self.topic!r} is not allowed by Kafka")
        if self.partition_column in fields:
            raise FlowSpecError(
                f"flow {self.name}: partition_column {self.partition_column!r} clashes with a field"
            )
        for name in fields:
            if name in ENGINE_COLUMNS:
                raise FlowSpecError(
                    f"flow {self.name}: field {name!r} clashes with a column the engine adds"
                )
        if self.partition_column in ENGINE_COLUMNS:
            raise FlowSpecError(
                f"flow {self.name}: partition_column {self.partition_column!r} clashes with a "
                "column the engine adds"
            )

    @property
    def table(self) -> str:
        """Name of the Delta table (a folder under the lake root)."""
        return self.name

    @property
    def quarantine_table(self) -> str:
        return f"{self.name}_quarantine"

    @overload
    def closes_at_ms(self, event_time_ms: int) -> int: ...
    @overload
    def closes_at_ms(self, event_time_ms: Column, floor: Callable[[Column], Column]) -> Column: ...
    def closes_at_ms(self, event_time_ms: Any, floor: Callable[[Any], Any] = math.floor) -> Any:
        """When the UTC date of an event time closes, in epoch ms: the date's end plus
        allowed_lateness. Records that reach Kafka later go to quarantine, and from then on the
        date's partition is final.

        The one statement of the day-close rule: on a number here, on a Spark column in the
        stream's decoder (given `F.floor`); exported as `day_ms` and `allowed_lateness_ms` to the
        ingest service (flow/contract.py's service_contract), whose JUnit test holds it to this."""
        return (floor(event_time_ms / DAY_MS) + 1) * DAY_MS + self.allowed_lateness // _ONE_MS

    def closes_at(self, day: date) -> datetime:
        """closes_at_ms of a date, as a UTC datetime."""
        start_ms = (day - _EPOCH).days * DAY_MS
        return datetime.fromtimestamp(self.closes_at_ms(start_ms) / 1000, UTC)

    def oldest_open_date(self, at: datetime) -> date:
        """The oldest date that has not closed at `at` (closes_at)."""
        day = (at - self.allowed_lateness).date() - timedelta(days=1)
        while self.closes_at(day) <= at:
            day += timedelta(days=1)
        return day

    def open_dates(self, at: datetime) -> list[date]:
        """The dates a record that reaches Kafka at `at` may land in: from the oldest open date
        to the date of the latest event time accepted then (max_clock_skew ahead), the first
        flow date at the earliest. A stream behind its topic still writes records that reached
        Kafka earlier, into dates that have closed by the clock since."""
        at = at.astimezone(UTC)
        day = max(self.oldest_open_date(at), self.first_date)
        last = (at + self.max_clock_skew).date()
        return [day + timedelta(days=n) for n in range((last - day).days + 1)]

    @property
    def validity_fields(self) -> tuple[str, ...]:
        """Fields that must be set (non-default) for a record to be accepted."""
        return tuple(dict.fromkeys((self.key_field, self.event_time_field, *self.required_fields)))


_ONE_MS = timedelta(milliseconds=1)
_EPOCH = date(1970, 1, 1)
DAY_MS = 86_400_000
EVENT_TIME_UNITS_PER_SECOND: dict[str, int] = {"s": 1, "ms": 1_000, "us": 1_000_000}
_INTEGER_TYPES = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64,
}


_NUMBER_TYPES = _INTEGER_TYPES | {FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE}


def _check_field_check(
    flow: str, fields: Mapping[str, FieldDescriptor], name: str, check: FieldCheck
) -> None:
    if name not in fields:
        raise FlowSpecError(f"flow {flow}: field_checks names {name!r}, which is not a field")
    kind = fields[name].type
    if check.pattern is not None:
        if kind != FieldDescriptor.TYPE_STRING:
            raise FlowSpecError(f"flow {flow}: field_checks[{name!r}].pattern needs a string field")
        try:
            re.compile(check.pattern)
        except re.error as exc:
            raise FlowSpecError(
                f"flow {flow}: field_checks[{name!r}].pattern is not a regex: {exc}"
            ) from None
    bounded = check.min_value is not None or check.max_value is not None
    if bounded and kind not in _NUMBER_TYPES:
        raise FlowSpecError(f"flow {flow}: field_checks[{name!r}] bounds need a numeric field")


def _single_value(f: FieldDescriptor) -> bool:
    return not f.is_repeated and f.type not in (
        FieldDescriptor.TYPE_MESSAGE,
        FieldDescriptor.TYPE_GROUP,
    )


def _check_nesting(flow: str, message: Descriptor, enclosing: tuple[str, ...]) -> None:
    """Nested messages become struct columns: refuse groups and messages that contain
    themselves (a column type is finite)."""
    if message.full_name in enclosing:
        chain = " > ".join((*enclosing, message.full_name))
        raise FlowSpecError(
            f"flow {flow}: message {message.full_name} contains itself ({chain}); a recursive "
            "message cannot be stored as columns"
        )
    for f in message.fields:
        if f.type == FieldDescriptor.TYPE_GROUP:
            raise FlowSpecError(f"flow {flow}: field {f.name!r} is a proto2 group; use a message")
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            _check_nesting(flow, f.message_type, (*enclosing, message.full_name))
