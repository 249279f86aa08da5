"""The columns the engine adds to every flow's rows, named and described once: the decoder makes
them, the table schema stores some of them (with these descriptions as their column docs),
deduplication and quarantine read them, and no message field may take one of these names
(FlowSpec checks)."""

from __future__ import annotations

KAFKA_TOPIC = "kafka_topic"
KAFKA_PARTITION = "kafka_partition"
KAFKA_OFFSET = "kafka_offset"
KAFKA_TIMESTAMP = "kafka_timestamp"
KAFKA_POSITION = (KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET)
"""Where a record stands in Kafka: its identity across replays."""
KAFKA_COLUMNS = (*KAFKA_POSITION, KAFKA_TIMESTAMP)
INGEST_TIME_COLUMN = "ingest_time"
ERROR_COLUMN = "_error"
RAW_KEY_COLUMN = "_key"
RAW_VALUE_COLUMN = "_value"
SCHEMA_ID_COLUMN = "_schema_id"

ENGINE_COLUMNS = (
    *KAFKA_COLUMNS,
    INGEST_TIME_COLUMN,
    ERROR_COLUMN,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    SCHEMA_ID_COLUMN,
)

ENGINE_COLUMN_DESCRIPTIONS = {
    KAFKA_TOPIC: "Kafka topic the record was read from",
    KAFKA_PARTITION: "Kafka partition of the record",
    KAFKA_OFFSET: "offset of the record in its Kafka partition (topic, partition and offset "
    "identify it across replays)",
    KAFKA_TIMESTAMP: "the record's Kafka timestamp, UTC (its ingest_time if Kafka's was unset)",
    INGEST_TIME_COLUMN: "when the engine read the record from Kafka, UTC",
    ERROR_COLUMN: "why the record was quarantined: the first rule it broke",
    RAW_KEY_COLUMN: "the record's Kafka key as sent",
    RAW_VALUE_COLUMN: "the record's Kafka value as sent (the serialized protobuf message, "
    "framed or bare)",
    SCHEMA_ID_COLUMN: "the writer schema's registry id of a Confluent-framed record, null for a "
    "bare one",
}
"""One line per engine column, shown as its column doc (Delta column comment, Dagster UI)."""
PARTITION_COLUMN_DESCRIPTION = "UTC date of the event time: the table's daily partition"
"""The doc of a flow's partition column (FlowSpec.partition_column, `date` by default)."""
