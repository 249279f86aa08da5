"""The columns the engine adds to every flow's rows, named once: the decoder makes them, the
table schema stores some of them, deduplication and quarantine read them, and no message field
may take one of these names (FlowSpec checks)."""

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

ENGINE_COLUMNS = (
    *KAFKA_COLUMNS,
    INGEST_TIME_COLUMN,
    ERROR_COLUMN,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
)
