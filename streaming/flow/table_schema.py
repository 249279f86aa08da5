"""The columns of a flow's Delta tables, from its protobuf message alone (no Spark needed).

The decoder (decode, on the JVM) produces exactly these types; a test holds the two together.
Nested messages are structs, repeated fields lists.
Dagster's asset metadata and the quality checks read the schema from here.
"""

from __future__ import annotations

import pyarrow as pa
from google.protobuf.descriptor import FieldDescriptor

from tidelake.streaming.flow.engine_columns import (
    INGEST_TIME_COLUMN,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
)
from tidelake.streaming.flow.spec import FlowSpec

TIMESTAMP = pa.timestamp("us", tz="UTC")

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
    then the Kafka position and time, and when the engine read the record."""
    fields = [
        pa.field(f.name, TIMESTAMP if f.name == flow.event_time_field else field_type(f))
        for f in flow.message.DESCRIPTOR.fields
    ]
    return pa.schema(
        [
            *fields,
            pa.field(flow.partition_column, pa.date32()),
            pa.field(KAFKA_TOPIC, pa.string()),
            pa.field(KAFKA_PARTITION, pa.int32()),
            pa.field(KAFKA_OFFSET, pa.int64()),
            pa.field(KAFKA_TIMESTAMP, TIMESTAMP),
            pa.field(INGEST_TIME_COLUMN, TIMESTAMP),
        ]
    )


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
