"""A flow's contract: what a record must hold to be stored, one rule for every way in.

The same declaration is checked in three places, so that they cannot drift apart: by the ingest
service before it acknowledges an event (`service_contract`, the rules as data for the service on
the JVM), by the stream and
the backfill on the JVM (`contract_error`, a Spark column; the decoder already refuses bytes that
do not parse, unknown enum numbers and unsigned values past a long), and by the quality suite
(`contract_expectations`). A broken rule reads the same everywhere: "<field>: <what is wrong>".

Rules: the key, the event time and every `required_fields` entry must be set (proto3: a zero
value, the empty string or an enum's zero entry counts as unset; a field with presence, such as
a message, must be present; a repeated field must hold a value); an enum holds one of its
declared numbers; a `FieldCheck` bounds a number or matches a string against a pattern.
"""

from __future__ import annotations

import re
from datetime import timedelta
from functools import reduce
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from pyspark.sql import Column
from pyspark.sql import functions as F

from tidelake.streaming.flow.spec import (
    DAY_MS,
    EVENT_TIME_UNITS_PER_SECOND,
    FieldCheck,
    FlowSpec,
)

WORDING: dict[str, str] = {
    "required": "is required",
    "unknown_enum": "unknown value {number}; one of {choices}",
    "pattern": "does not match {pattern}",
    "out_of_range": "{field} out of range: {value}",
    "ahead_of_kafka": "{field} ahead of the Kafka timestamp",
    "too_late": "too late: arrived after {date} closed",
    "ahead_of_service": "{time} is more than {skew} ahead of the service's clock ({now}); is it "
    "in {unit}?",
    "closed_for_service": "{time} is on {date}, which closed at {closes}: the table accepts no "
    "more events of that day",
    "frame_truncated": "undecodable: a Confluent frame (magic byte 0) too short for its schema id "
    "and message indexes",
    "frame_other_message": "{schema} names message {message}, not the flow's {flow_message}",
    "frame_no_message": "{schema}: message index [{path}] names no message of its schema",
    "schema_pending": "schema id {id} is not yet read from the schema registry",
    "schema_not_registered": "schema id {id} is not in the schema registry at {registry}",
    "schema_unreadable": "{schema} cannot be read: {problem}",
    "schema_breaks_contract": "{schema} breaks the flow's contract: {problems}",
    "check_constraint": "violates the table's CHECK constraint {name}: {expression}",
}
"""Every reason the contract and the arrival rule give, once: the stream builds its Spark SQL
from these (`reason_column`), and they are exported to the JVM (`service_contract` for the
ingest service, `WORDING["unknown_enum"]` for the decoder), which fills the {placeholders}."""
REQUIRED = WORDING["required"]
UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def reason_column(key: str, **values: Column | str) -> Column:
    """WORDING[key] as a Spark string column, its placeholders filled from `values` (columns,
    or plain strings)."""
    parts: list[Column] = []
    for i, piece in enumerate(_PLACEHOLDER.split(WORDING[key])):
        if i % 2 == 0:
            if piece:
                parts.append(F.lit(piece))
            continue
        value = values[piece]
        parts.append(F.lit(value) if isinstance(value, str) else value.cast("string"))
    return F.concat(*parts) if len(parts) > 1 else parts[0]


def service_contract(flow: FlowSpec) -> dict[str, Any]:
    """The contract as data, for the ingest service on the JVM (jvm/ingest-service's
    FlowContract), with the wording of every problem, so that it says what the stream says.

    Rules in declaration order: `required`, an enum's declared numbers and its known names, a
    check's pattern or bounds. Also the key and event-time fields, the event time's unit, the
    data of the service's clock rules (max_clock_skew ahead; FlowSpec.closes_at_ms's day length
    and lateness) and WORDING. scripts/export_jvm_test_data.py writes it for the JUnit tests."""
    required = set(flow.validity_fields)
    rules: list[dict[str, Any]] = []
    for f in flow.message.DESCRIPTOR.fields:
        enum = f.type == FieldDescriptor.TYPE_ENUM and not f.is_repeated
        check = flow.field_checks.get(f.name)
        if not (enum or f.name in required or check is not None):
            continue
        rule: dict[str, Any] = {"field": f.name, "required": f.name in required}
        if enum:
            rule["enum_numbers"] = sorted(f.enum_type.values_by_number)
            rule["enum_choices"] = enum_choices(f)
        if check is not None and check.pattern is not None:
            rule["pattern"] = check.pattern
            rule["pattern_problem"] = _pattern_problem(check.pattern)
        if check is not None and (check.min_value is not None or check.max_value is not None):
            rule |= {"min": check.min_value, "max": check.max_value}
            rule["range_text"] = _range_text(check)
            rule = {k: v for k, v in rule.items() if v is not None}
        rules.append(rule)
    one_ms = timedelta(milliseconds=1)
    return {
        "message": flow.message.DESCRIPTOR.full_name,
        "key_field": flow.key_field,
        "event_time_field": flow.event_time_field,
        "event_time_units_per_second": EVENT_TIME_UNITS_PER_SECOND[flow.event_time_unit],
        "event_time_unit_name": UNIT_NAMES[flow.event_time_unit],
        "max_clock_skew_ms": flow.max_clock_skew // one_ms,
        "max_clock_skew_text": str(flow.max_clock_skew),
        "day_ms": DAY_MS,
        "allowed_lateness_ms": flow.allowed_lateness // one_ms,
        "wording": WORDING,
        "rules": rules,
    }


def contract_error(flow: FlowSpec, row: Column) -> Column:
    """The first broken rule of a decoded row (a struct of the message's fields) as
    "<field>: <problem>", or null. Rows the decoder refused are not judged again."""
    required = set(flow.validity_fields)
    conditions: list[tuple[Column, Column]] = []
    for f in flow.message.DESCRIPTOR.fields:
        value = row[f.name]
        if f.name in required:
            conditions.append((_unset_column(f, value), F.lit(f"{f.name}: {REQUIRED}")))
        check = flow.field_checks.get(f.name)
        if check is None:
            continue
        if check.pattern is not None:
            pattern = f"^(?:{check.pattern})$"
            conditions.append(
                (
                    ~value.rlike(pattern) & ~_unset_column(f, value),
                    F.lit(f"{f.name}: {_pattern_problem(check.pattern)}"),
                )
            )
        if check.min_value is not None or check.max_value is not None:
            low = value < check.min_value if check.min_value is not None else F.lit(False)
            high = value > check.max_value if check.max_value is not None else F.lit(False)
            conditions.append(
                (
                    low | high,
                    F.concat(
                        F.lit(f"{f.name}: "),
                        value.cast("string"),
                        F.lit(f" {_range_text(check)}"),
                    ),
                )
            )
    if not conditions:
        return F.lit(None).cast("string")
    return reduce(
        lambda chain, rule: chain.when(F.coalesce(rule[0], F.lit(False)), rule[1]),
        conditions[1:],
        F.when(F.coalesce(conditions[0][0], F.lit(False)), conditions[0][1]),
    )


def contract_expectations(flow: FlowSpec) -> list[Any]:
    """Great Expectations 1.x expectations that say the contract of the table's columns: a
    required column has no null (a stored required enum outside its known names fails too)."""
    import great_expectations.expectations as gxe

    out: list[Any] = []
    required = set(flow.validity_fields)
    for f in flow.message.DESCRIPTOR.fields:
        if f.name == flow.event_time_field:
            out.append(gxe.ExpectColumnValuesToNotBeNull(column=f.name))
            continue
        if f.name in required:
            out.append(gxe.ExpectColumnValuesToNotBeNull(column=f.name))
        if f.type == FieldDescriptor.TYPE_ENUM and not f.is_repeated:
            names = known_enum_names(f) if f.name in required else enum_names(f)
            out.append(gxe.ExpectColumnValuesToBeInSet(column=f.name, value_set=names))
        check = flow.field_checks.get(f.name)
        if check is None:
            continue
        if check.pattern is not None:
            out.append(gxe.ExpectColumnValuesToMatchRegex(column=f.name, regex=check.pattern))
        if check.min_value is not None or check.max_value is not None:
            out.append(
                gxe.ExpectColumnValuesToBeBetween(
                    column=f.name, min_value=check.min_value, max_value=check.max_value
                )
            )
    return out


def enum_names(f: FieldDescriptor) -> list[str]:
    return [v.name for v in f.enum_type.values]


def known_enum_names(f: FieldDescriptor) -> list[str]:
    """An enum's names without its zero entry (proto3's "not set")."""
    return [v.name for v in f.enum_type.values if v.number != 0]


def enum_choices(f: FieldDescriptor) -> str:
    """The {choices} of WORDING["unknown_enum"]: the known names as the JVM lists them."""
    return f"[{', '.join(known_enum_names(f))}]"


def _unset_column(f: FieldDescriptor, value: Column) -> Column:
    if f.is_repeated:
        return value.isNull() | (F.size(value) == 0)
    if f.has_presence:
        return value.isNull()
    if f.type == FieldDescriptor.TYPE_ENUM:
        zero = f.enum_type.values_by_number[0].name
        return value.isNull() | (value == F.lit(zero))
    if f.type == FieldDescriptor.TYPE_BYTES:
        return value.isNull() | (F.length(value) == 0)
    return value.isNull() | (value == F.lit(f.default_value))


def _pattern_problem(pattern: str) -> str:
    return WORDING["pattern"].format(pattern=pattern)


def _range_text(check: FieldCheck) -> str:
    if check.min_value is None:
        return f"is above the maximum {check.max_value:g}"
    if check.max_value is None:
        return f"is below the minimum {check.min_value:g}"
    return f"is outside [{check.min_value:g}, {check.max_value:g}]"
