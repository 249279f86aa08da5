"""Kafka records to a flow's rows, on the JVM: protobuf decode, the contract, the arrival rules.

`decode_records` turns the rows of Spark's Kafka source (key, value, topic, partition, offset,
timestamp) into the flow's columns, the UTC date, the Kafka metadata columns and `_error`. It is
one projection of Spark SQL expressions around tidelake's JVM protobuf decoder
(dev.tidelake.spark.ProtobufDecoder, reading the descriptor set `make protos` builds), so neither
the stream nor a backfill starts a Python worker.

A record that does not parse, breaks the flow's contract (flow/contract.py), or sits in Kafka
where its event time says it cannot (the arrival rule, below) gets a non-null `_error`, and keeps
its raw key and value (`_key`, `_value`; null in a good row); the writer routes such rows to
the flow's quarantine table. Rules are tried in that order and the first broken one is the
reason.

The arrival rule. A date D closes at FlowSpec.closes_at (end of D, UTC, plus allowed lateness). A
record of D is too late when its partition had passed that time where it stands: its own Kafka
timestamp, or that of any record before it in the partition, is after D closed. Kafka's time
index answers the second part exactly ("the first offset stamped after T") whatever the
timestamp type: with LogAppendTime or producers stamping send time it is plain arrival time; a
producer that stamps event times and sends hours late lands behind newer records and is caught;
history replayed in order still lands. A record stamped more than max_clock_skew before its event
time is ahead. Both bound where a date's records sit in Kafka, which is what lets a backfill read
exactly the offsets the stream accepted for a date (backfill.plan_backfill).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.classic.column import Column as ClassicColumn
from pyspark.sql.classic.column import _to_java_column

from tidelake.streaming.delta.constraints import violated_constraint
from tidelake.streaming.flow.contract import WORDING, contract_error, reason_column
from tidelake.streaming.flow.descriptor_set import descriptor_set
from tidelake.streaming.flow.engine_columns import (
    ERROR_COLUMN,
    INGEST_TIME_COLUMN,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_POSITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    SCHEMA_ID_COLUMN,
)
from tidelake.streaming.flow.spec import EVENT_TIME_UNITS_PER_SECOND, FlowSpec
from tidelake.streaming.flow.table_schema import decoded_columns
from tidelake.streaming.schemas.writer_schemas import WriterSchemas
from tidelake.streaming.spark.extensions import tidelake_jvm

MAX_EPOCH_US = 7_258_118_400_000_000
"""2200-01-01: later event times are treated as corrupt."""


KAFKA_TIMEOUT_S = 30.0
"""How long a task waits for Kafka's time index before it fails."""


def decode_records(
    records: DataFrame,
    flow: FlowSpec,
    kafka_conf: Mapping[str, str] | None = None,
    schemas: WriterSchemas | None = None,
    constraints: Mapping[str, str] | None = None,
) -> DataFrame:
    """Spark Kafka source rows -> the flow's decoded rows (see the module docstring).

    With kafka_conf the whole arrival rule applies: also a record behind one stamped after its
    date closed is too late (Kafka's time index, asked from the executors; see
    dev.tidelake.spark.KafkaTimeIndex). Without it, only a record's own timestamp is judged.
    `schemas` holds the verdicts on framed records' writer schemas (schemas/writer_schemas.py);
    without it they are read as the flow's own .proto. The `_schema_id` column names each
    framed record's schema id (null for a bare one), for the caller to learn new ones.
    `constraints` are the table's CHECK constraints (delta/constraints.py): a row that passes
    every other rule but violates one is refused naming it, its bytes kept for the quarantine.
    """
    schemas = schemas or WriterSchemas(flow, registry=None)
    message = protobuf_decode(records["value"], flow, schemas).alias("_message")
    fields = [f.name for f in flow.message.DESCRIPTOR.fields]
    rows = records.select(
        message,
        records["key"].alias(RAW_KEY_COLUMN),
        records["value"].alias(RAW_VALUE_COLUMN),
        records["topic"].alias(KAFKA_TOPIC),
        records["partition"].alias(KAFKA_PARTITION),
        records["offset"].alias(KAFKA_OFFSET),
        _ingest_clock().alias(INGEST_TIME_COLUMN),
        records["timestamp"],
    )
    kafka_time = F.when(F.unix_millis("timestamp") >= 0, F.col("timestamp")).otherwise(
        F.col(INGEST_TIME_COLUMN)
    )
    raw_time = F.col(f"_message.{flow.event_time_field}")
    event_us = _event_micros(raw_time, flow)
    rows = rows.select(
        *[F.col(f"_message.{name}").alias(name) for name in fields],
        F.col("_message._error").alias("_decode_error"),
        F.col(f"_message.{SCHEMA_ID_COLUMN}").alias(SCHEMA_ID_COLUMN),
        contract_error(flow, F.col("_message")).alias("_contract_error"),
        raw_time.alias("_raw_time"),
        event_us.alias("_event_us"),
        kafka_time.alias(KAFKA_TIMESTAMP),
        *[F.col(c) for c in KAFKA_POSITION],
        F.col(INGEST_TIME_COLUMN),
        F.col(RAW_KEY_COLUMN),
        F.col(RAW_VALUE_COLUMN),
    )
    checks = [F.col("_decode_error"), F.col("_contract_error"), _time_error(flow)]
    if kafka_conf is not None:
        checks.append(_behind_a_later_record(flow, kafka_conf))
    error = F.coalesce(*checks)
    event_time = F.timestamp_micros(F.col("_event_us"))
    rows = rows.withColumn(ERROR_COLUMN, error).withColumns(
        {
            flow.event_time_field: F.when(F.col("_event_us").isNotNull(), event_time),
            flow.partition_column: F.to_date(
                F.when(F.col(ERROR_COLUMN).isNull(), event_time).otherwise(F.col("kafka_timestamp"))
            ),
        }
    )
    violation = violated_constraint(constraints or {})
    if violation is not None:  # on the row as the table would store it
        rows = rows.withColumn(ERROR_COLUMN, F.coalesce(F.col(ERROR_COLUMN), violation))
    return rows.withColumns(
        {
            # only the quarantine keeps them: a good row does not carry its bytes on
            # (through the deduplication's shuffle: +11% throughput with it)
            RAW_KEY_COLUMN: F.when(F.col(ERROR_COLUMN).isNotNull(), F.col(RAW_KEY_COLUMN)),
            RAW_VALUE_COLUMN: F.when(F.col(ERROR_COLUMN).isNotNull(), F.col(RAW_VALUE_COLUMN)),
        }
    ).select(*decoded_columns(flow))


def protobuf_decode(value: Column, flow: FlowSpec, schemas: WriterSchemas) -> Column:
    """The JVM decoder's struct of the flow's message (its fields, then `_error` and
    `_schema_id`)."""
    decoder = tidelake_jvm("protobuf_decode").ProtobufDecoder
    java_column = decoder.decode(
        _to_java_column(value),
        flow.message.DESCRIPTOR.full_name,
        bytearray(descriptor_set(flow)),
        WORDING["unknown_enum"],
        schemas.framing(),
    )
    return ClassicColumn(java_column)


def _ingest_clock() -> Column:
    """When the engine read the record: the wall clock per row (dev.tidelake.spark.IngestClock).
    Not current_timestamp(), which a stream inlines into each micro-batch's generated code as
    a new literal, so that every batch compiled the decode stage again."""
    clock = tidelake_jvm("decode_records").IngestClock
    return F.timestamp_micros(ClassicColumn(clock.micros()))


def _event_micros(raw: Column, flow: FlowSpec) -> Column:
    """Event time in epoch µs, or null when unset or out of range (no overflow under ANSI)."""
    per_unit = 1_000_000 // EVENT_TIME_UNITS_PER_SECOND[flow.event_time_unit]
    in_range = (raw > 0) & (raw < MAX_EPOCH_US // per_unit)
    return F.when(in_range, raw * F.lit(per_unit))


def _closes_ms(event_us: Column, flow: FlowSpec) -> Column:
    """FlowSpec.closes_at_ms of an event time in µs, as a Spark column."""
    return flow.closes_at_ms(F.floor(event_us / F.lit(1000)), F.floor)


def _too_late(event_us: Column) -> Column:
    return reason_column("too_late", date=F.date_format(F.timestamp_micros(event_us), "yyyy-MM-dd"))


def _behind_a_later_record(flow: FlowSpec, kafka_conf: Mapping[str, str]) -> Column:
    """ "too late" for a record that stands behind one stamped after its date closed."""
    from tidelake.streaming.kafka.read import java_client_options

    index = tidelake_jvm("decode_records").KafkaTimeIndex
    behind = index.behind(
        *(_to_java_column(F.col(c)) for c in KAFKA_POSITION),
        _to_java_column(_closes_ms(F.col("_event_us"), flow)),
        java_client_options(kafka_conf),
        int(KAFKA_TIMEOUT_S * 1000),
    )
    return F.when(ClassicColumn(behind), _too_late(F.col("_event_us")))


def _time_error(flow: FlowSpec) -> Column:
    """Event time out of range, or placed in Kafka where it cannot be by its own timestamp:
    ahead of it by more than max_clock_skew, or stamped after its date closed. The rest of the
    arrival rule (a record behind one stamped after its date closed) needs Kafka's time index:
    _behind_a_later_record."""
    name = flow.event_time_field
    event_us = F.col("_event_us")
    kafka_ms = F.unix_millis("kafka_timestamp")
    skew_ms = flow.max_clock_skew // timedelta(milliseconds=1)
    return (
        F.when(
            event_us.isNull() & (F.col("_raw_time") != 0),
            reason_column("out_of_range", field=name, value=F.col("_raw_time")),
        )
        .when(
            F.floor(event_us / 1000) > kafka_ms + F.lit(skew_ms),
            reason_column("ahead_of_kafka", field=name),
        )
        .when(kafka_ms > _closes_ms(event_us, flow), _too_late(event_us))
    )
