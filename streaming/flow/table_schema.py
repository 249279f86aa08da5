"""The columns of a flow's Delta tables, from its protobuf message alone (no Spark needed).

The decoder (decode, on the JVM) produces exactly these types; a test holds the two together.
Nested messages are structs, repeated fields lists.
Dagster's asset metadata and the quality checks read the schema from here.

Each column carries its doc in its metadata under `comment`, the key Spark and Delta read column
comments from: a message field's comments in the .proto (descriptor_set.field_comments), an
engine column's description (engine_columns). The table takes them when it is created, gains a
column or sees them change (delta/evolution.py); the Dagster UI lists them
(assets/tables/asset_specs.py).
"""

from __future__ import annotations

import pyarrow as pa
from google.protobuf.descriptor import FieldDescriptor

from tidelake.streaming.flow.descriptor_set import field_comments
from tidelake.streaming.flow.engine_columns import (
    ENGINE_COLUMN_DESCRIPTIONS,
    ERROR_COLUMN,
    INGEST_TIME_COLUMN,
    KAFKA_COLUMNS,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    PARTITION_COLUMN_DESCRIPTION,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    SCHEMA_ID_COLUMN,
)
from tidelake.streaming.flow.spec import FlowSpec

TIMESTAMP = pa.timestamp("us", tz="UTC")
COMMENT_KEY = "comment"
"""The column metadata key of a column's doc, as Spark and Delta name it."""

_ARROW_TYPES = {
    FieldDescriptor.TYPE_STRING: pa.string(),
    FieldDescriptor.TYPE_BYTES: pa.binary(),
    FieldDescriptor.TYPE_BOOL: pa.bool_(),
    FieldDescriptor.TYPE_FLOAT: pa.float32(),
    FieldDescriptor.TYPE_DOUBLE: pa.float64(),
    FieldDescriptor.TYPE_INT32: pa.int32(),
    FieldDescriptor.TYPE_SINT32: pa.int32(),
    FieldDescriptor.TYPE_SFIXED32: pa.int32(),
    FieldDescriptor.TYPE_UINT32: pa.int64(),  # Delta has no unsigned types
    FieldDescriptor.TYPE_FIXED32: pa.int64(),
    FieldDescriptor.TYPE_INT64: pa.int64(),
    FieldDescriptor.TYPE_SINT64: pa.int64(),
    FieldDescriptor.TYPE_SFIXED64: pa.int64(),
    FieldDescriptor.TYPE_UINT64: pa.int64(),  # values past a long are quarantined
    FieldDescriptor.TYPE_FIXED64: pa.int64(),
    FieldDescriptor.TYPE_ENUM: pa.string(),  # enum values are stored by name
}


def table_schema(flow: FlowSpec) -> pa.Schema:
    """The flow's table: its message's fields (the event time as a UTC timestamp), the date,
    then the Kafka position and time, and when the engine read the record; each column with its
    doc (see the module docstring)."""
    fields = [
        pa.field(f.name, TIMESTAMP if f.name == flow.event_time_field else field_type(f))
        for f in flow.message.DESCRIPTOR.fields
    ]
    docs = {
        **ENGINE_COLUMN_DESCRIPTIONS,
        flow.partition_column: PARTITION_COLUMN_DESCRIPTION,
        **field_comments(flow.message),
    }
    columns = [
        *fields,
        pa.field(flow.partition_column, pa.date32()),
        pa.field(KAFKA_TOPIC, pa.string()),
        pa.field(KAFKA_PARTITION, pa.int32()),
        pa.field(KAFKA_OFFSET, pa.int64()),
        pa.field(KAFKA_TIMESTAMP, TIMESTAMP),
        pa.field(INGEST_TIME_COLUMN, TIMESTAMP),
    ]
    return pa.schema(
        [c.with_metadata({COMMENT_KEY: docs[c.name]}) if docs.get(c.name) else c for c in columns]
    )


def column_doc(column: pa.Field) -> str:
    """A column's doc (table_schema), "" if it has none."""
    doc: bytes = (column.metadata or {}).get(COMMENT_KEY.encode(), b"")
    return doc.decode()


def field_type(f: FieldDescriptor) -> pa.DataType:
    """A message field's column type: a nested message is a struct, a repeated field a list
    (a map a list of key/value structs)."""
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        single: pa.DataType = pa.struct(
            [pa.field(c.name, field_type(c)) for c in f.message_type.fields]
        )
    else:
        single = _ARROW_TYPES[f.type]
    return pa.list_(single) if f.is_repeated else single


QUARANTINE_SOURCE_COLUMNS = (
    *KAFKA_COLUMNS,
    INGEST_TIME_COLUMN,
    ERROR_COLUMN,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
)
"""Columns of decoded rows that the quarantine table keeps (with the partition column)."""


def decoded_columns(flow: FlowSpec) -> list[str]:
    """Columns of decode_records' output, in order."""
    return [
        *table_columns(flow),
        ERROR_COLUMN,
        RAW_KEY_COLUMN,
        RAW_VALUE_COLUMN,
        SCHEMA_ID_COLUMN,
    ]


def table_columns(flow: FlowSpec) -> list[str]:
    """Columns of the flow's Delta table (table_schema.table_schema)."""
    return list(table_schema(flow).names)


def quarantine_columns(flow: FlowSpec) -> list[str]:
    """Columns of decoded rows stored in the quarantine table (names without the leading _)."""
    return [flow.partition_column, *QUARANTINE_SOURCE_COLUMNS]
