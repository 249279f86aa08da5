"""Protobuf bytes from Kafka to typed Arrow columns, a batch at a time.

`ProtobufDecoder` is built from a FlowSpec on the driver and travels to executors as a small
JSON document (the message's FileDescriptorSet plus the flow's field roles), so any declared
flow decodes on any worker without importing the flow's Python module. Parsing uses upb one
message at a time (there is no columnar protobuf parser), but every other step (enum names, time
conversion, validity checks, partition values) is vectorised over the batch.

A record that does not parse, or lacks a required field, keeps its raw key and value and gets a
non-null `_error`: the Delta sink routes such rows to the flow's quarantine table.
"""

from __future__ import annotations

import base64
import dataclasses
import gc
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from operator import attrgetter
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor

from tidelake.streaming.flow_spec import FlowSpec

ERROR_COLUMN = "_error"
RAW_KEY_COLUMN = "_key"
RAW_VALUE_COLUMN = "_value"
KAFKA_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp")
INGEST_TIME_COLUMN = "ingest_time"
QUARANTINE_SOURCE_COLUMNS = (
    *KAFKA_COLUMNS,
    INGEST_TIME_COLUMN,
    ERROR_COLUMN,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
)
"""Columns of a decoded batch that the quarantine table keeps (with the partition column)."""

TIMESTAMP = pa.timestamp("us", tz="UTC")
_UNIT_TO_US = {"s": 1_000_000, "ms": 1_000, "us": 1}
_MAX_EPOCH_US = 7_258_118_400_000_000  # 2200-01-01: later event times are treated as corrupt
_US_PER_DAY = 86_400_000_000
_INT64_MAX = np.uint64(2**63 - 1)
_UNSIGNED_64 = {FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64}

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
    FieldDescriptor.TYPE_UINT64: pa.int64(),
    FieldDescriptor.TYPE_FIXED64: pa.int64(),
    FieldDescriptor.TYPE_ENUM: pa.string(),  # enum values are stored by name
}


class KafkaRecord(Protocol):
    """What the decoder needs of a consumed message (confluent_kafka.Message has it)."""

    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def offset(self) -> int: ...
    def timestamp(self) -> tuple[int, int]: ...


@dataclass(frozen=True)
class ProtobufDecoder:
    """Decodes one flow's messages; picklable and JSON-serialisable."""

    descriptor_set: bytes
    message_name: str
    event_time_field: str
    event_time_unit: str
    validity_fields: tuple[str, ...]
    partition_column: str
    allowed_lateness_us: int
    max_clock_skew_us: int

    @classmethod
    def for_flow(cls, flow: FlowSpec) -> ProtobufDecoder:
        return cls(
            descriptor_set=_descriptor_set(flow.message.DESCRIPTOR.file),
            message_name=flow.message.DESCRIPTOR.full_name,
            event_time_field=flow.event_time_field,
            event_time_unit=flow.event_time_unit,
            validity_fields=flow.validity_fields,
            partition_column=flow.partition_column,
            allowed_lateness_us=flow.allowed_lateness // timedelta(microseconds=1),
            max_clock_skew_us=flow.max_clock_skew // timedelta(microseconds=1),
        )

    def to_json(self) -> str:
        doc = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        doc["descriptor_set"] = base64.b64encode(self.descriptor_set).decode()
        doc["validity_fields"] = list(self.validity_fields)
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ProtobufDecoder:
        doc = json.loads(text)
        doc["descriptor_set"] = base64.b64decode(doc["descriptor_set"])
        doc["validity_fields"] = tuple(doc["validity_fields"])
        return cls(**doc)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k in self.__dataclass_fields__}

    @cached_property
    def _descriptor(self) -> Descriptor:
        pool = descriptor_pool.DescriptorPool()
        for file_proto in descriptor_pb2.FileDescriptorSet.FromString(self.descriptor_set).file:
            pool.Add(file_proto)
        return pool.FindMessageTypeByName(self.message_name)

    @cached_property
    def _message_class(self) -> type:
        return message_factory.GetMessageClass(self._descriptor)

    @cached_property
    def _fields(self) -> list[FieldDescriptor]:
        return list(self._descriptor.fields)

    @cached_property
    def schema(self) -> pa.Schema:
        """The Arrow schema of decoded batches (every field nullable, as Spark requires)."""
        fields = [
            pa.field(f.name, TIMESTAMP if f.name == self.event_time_field else _ARROW_TYPES[f.type])
            for f in self._fields
        ]
        fields += [
            pa.field(self.partition_column, pa.date32()),
            pa.field("kafka_topic", pa.string()),
            pa.field("kafka_partition", pa.int32()),
            pa.field("kafka_offset", pa.int64()),
            pa.field("kafka_timestamp", TIMESTAMP),
            pa.field(INGEST_TIME_COLUMN, TIMESTAMP),
            pa.field(ERROR_COLUMN, pa.string()),
            pa.field(RAW_KEY_COLUMN, pa.binary()),
            pa.field(RAW_VALUE_COLUMN, pa.binary()),
        ]
        return pa.schema(fields)

    @cached_property
    def _default_row(self) -> tuple:
        return self._getter(self._message_class())

    @cached_property
    def _getter(self) -> attrgetter:
        names = [f.name for f in self._fields]
        # attrgetter of one name returns the bare value; keep rows as tuples either way
        return attrgetter(*names) if len(names) > 1 else (lambda m: (getattr(m, names[0]),))

    @cached_property
    def _enum_lookups(self) -> dict[str, tuple[pa.Array, pa.Array]]:
        return {
            f.name: (
                pa.array([v.number for v in f.enum_type.values], pa.int64()),
                pa.array([v.name for v in f.enum_type.values], pa.string()),
            )
            for f in self._fields
            if f.type == FieldDescriptor.TYPE_ENUM
        }

    def decode(
        self,
        topic: str,
        partition: int,
        records: Sequence[KafkaRecord],
        first_offset_after: Callable[[int], int | None] | None = None,
    ) -> pa.RecordBatch:
        """Decode consumed records of one topic-partition into one RecordBatch.

        first_offset_after(ms) is the partition's first offset stamped after that time, from
        Kafka's time index (None: none yet); the arrival rule needs it (see _check_arrival).
        Without it only a record's own timestamp is judged.

        The cyclic garbage collector is paused meanwhile: decoding allocates two objects per
        record and no cycles, and the collector's passes cost ~30% of decode time (measured).
        """
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._decode(topic, partition, records, first_offset_after)
        finally:
            if collecting:
                gc.enable()

    def _decode(
        self,
        topic: str,
        partition: int,
        records: Sequence[KafkaRecord],
        first_offset_after: Callable[[int], int | None] | None,
    ) -> pa.RecordBatch:
        n = len(records)
        parse = self._message_class.FromString
        getter = self._getter
        default = self._default_row
        rows: list[tuple] = []
        append = rows.append
        errors: dict[int, str] = {}
        values = [r.value() for r in records]
        for i, value in enumerate(values):
            try:
                append(getter(parse(value)))
            except Exception as exc:  # DecodeError, or a tombstone (None value)
                errors[i] = f"undecodable: {type(exc).__name__}: {exc}" if value else "empty value"
                append(default)
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in self._fields]

        offsets = np.fromiter((r.offset() for r in records), dtype=np.int64, count=n)
        kafka_ms = np.fromiter((r.timestamp()[1] for r in records), dtype=np.int64, count=n)
        now_us = time.time_ns() // 1000
        kafka_us = np.where(kafka_ms >= 0, kafka_ms * 1000, now_us)

        arrays: list[pa.Array] = []
        unset: dict[str, pa.Array] = {}  # enum fields: raw number 0 means "not set"
        event_us = np.zeros(n, dtype=np.int64)
        for f, column in zip(self._fields, columns, strict=True):
            if f.name == self.event_time_field:
                # float64: uint64-safe, and exact for any plausible epoch value (< 2**53)
                raw = np.fromiter(column, dtype=np.float64, count=n)
                scaled = raw * _UNIT_TO_US[self.event_time_unit]
                bad = (scaled <= 0) | (scaled >= _MAX_EPOCH_US)
                event_us = np.where(bad, 0, scaled).astype(np.int64)
                for i in np.flatnonzero(bad & (raw != 0)):
                    errors.setdefault(int(i), f"{f.name} out of range: {int(raw[i])}")
                arrays.append(pa.array(event_us, TIMESTAMP))
            elif f.type == FieldDescriptor.TYPE_ENUM:
                numbers, names = self._enum_lookups[f.name]
                ints = pa.array(column, pa.int64())
                unset[f.name] = pc.equal(ints, 0)
                arrays.append(names.take(pc.index_in(ints, value_set=numbers)))
            elif f.type in _UNSIGNED_64:
                raw = np.fromiter(column, dtype=np.uint64, count=n)
                # Delta has no unsigned type: values past int64 go to quarantine
                too_big = raw > _INT64_MAX
                for i in np.flatnonzero(too_big):
                    errors.setdefault(int(i), f"{f.name} out of range: {int(raw[i])}")
                arrays.append(pa.array(np.where(too_big, 0, raw).astype(np.int64), pa.int64()))
            else:
                arrays.append(pa.array(column, _ARROW_TYPES[f.type]))

        for name in self.validity_fields:
            array = arrays[self._field_index[name]]
            if name in unset:
                missing = unset[name]
            else:
                missing = pc.fill_null(pc.equal(array, _empty_value(array.type)), True)
            for i in np.flatnonzero(missing.to_numpy(zero_copy_only=False)):
                errors.setdefault(int(i), f"missing {name}")

        self._check_arrival(
            event_us, np.where(kafka_ms >= 0, kafka_us, -1), offsets, errors, first_offset_after
        )
        bad_mask = np.zeros(n, dtype=bool)
        if errors:
            bad_mask[list(errors)] = True
        day_us = np.where(bad_mask, kafka_us, event_us)
        arrays.append(pa.array((day_us // _US_PER_DAY).astype(np.int32), pa.date32()))
        arrays.append(pa.array(np.full(n, topic, dtype=object), pa.string()))
        arrays.append(pa.array(np.full(n, partition, dtype=np.int32), pa.int32()))
        arrays.append(pa.array(offsets, pa.int64()))
        arrays.append(pa.array(kafka_us, TIMESTAMP))
        arrays.append(pa.array(np.full(n, now_us, dtype=np.int64), TIMESTAMP))
        if errors:
            error_col = [None] * n
            keys: list[bytes | None] = [None] * n
            raw_values: list[bytes | None] = [None] * n
            for i, message in errors.items():
                error_col[i] = message
                keys[i] = records[i].key()
                raw_values[i] = values[i]
            arrays += [
                pa.array(error_col, pa.string()),
                pa.array(keys, pa.binary()),
                pa.array(raw_values, pa.binary()),
            ]
        else:
            arrays += [pa.nulls(n, pa.string()), pa.nulls(n, pa.binary()), pa.nulls(n, pa.binary())]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _check_arrival(
        self,
        event_us: np.ndarray,
        kafka_us: np.ndarray,
        offsets: np.ndarray,
        errors: dict[int, str],
        first_offset_after: Callable[[int], int | None] | None,
    ) -> None:
        """Quarantine records whose place in Kafka does not fit their event time.

        A date D closes at the end of D (UTC) plus the allowed lateness. A record of D is too
        late when its partition had passed that time where it stands: its own Kafka timestamp,
        or that of any record before it in the partition, is after D closed. Kafka's time index
        answers that exactly ("the first offset stamped after T"), whatever the timestamp type:
        with LogAppendTime or producers stamping send time it is plain arrival time; a producer
        that stamps event times and sends hours late lands behind newer records and is caught;
        history replayed in order still lands. Ahead: more than max_clock_skew before the event
        time. Both rules bound where a date's records sit in Kafka, which is what lets a backfill
        read exactly the offsets the stream accepted for a date (backfill.plan_backfill).
        """
        known = (event_us > 0) & (kafka_us >= 0)  # -1: the record carries no timestamp
        closes_us = (event_us // _US_PER_DAY + 1) * _US_PER_DAY + self.allowed_lateness_us
        late = known & (kafka_us > closes_us)
        if first_offset_after is not None:
            for close_us in np.unique(closes_us[known & ~late]):
                bound = first_offset_after(int(close_us) // 1000)
                if bound is not None:
                    late |= known & (closes_us == close_us) & (offsets >= bound)
        for i in np.flatnonzero(late):
            day = np.datetime64(int(event_us[i] // _US_PER_DAY), "D")
            errors.setdefault(int(i), f"too late: arrived after {day} closed")
        for i in np.flatnonzero(known & (event_us > kafka_us + self.max_clock_skew_us)):
            errors.setdefault(int(i), f"{self.event_time_field} ahead of the Kafka timestamp")

    @cached_property
    def _field_index(self) -> dict[str, int]:
        return {f.name: i for i, f in enumerate(self._fields)}


def _empty_value(arrow_type: pa.DataType) -> Any:
    """Proto3's "unset" value of a scalar field, as an Arrow scalar to compare against."""
    if pa.types.is_string(arrow_type):
        return pa.scalar("", arrow_type)
    if pa.types.is_binary(arrow_type):
        return pa.scalar(b"", arrow_type)
    if pa.types.is_timestamp(arrow_type):
        return pa.scalar(0, arrow_type)
    if pa.types.is_boolean(arrow_type):
        return pa.scalar(False)
    return pa.scalar(0, arrow_type)


def _descriptor_set(file: FileDescriptor) -> bytes:
    """Serialise a .proto file and its imports, dependencies first."""
    ordered: list[FileDescriptor] = []

    def visit(f: FileDescriptor) -> None:
        if f in ordered:
            return
        for dep in f.dependencies:
            visit(dep)
        ordered.append(f)

    visit(file)
    fds = descriptor_pb2.FileDescriptorSet()
    for f in ordered:
        f.CopyToProto(fds.file.add())
    return fds.SerializeToString()
