"""One flow's always-on query: Kafka -> protobuf decode -> Delta table (+ quarantine)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from tidelake.streaming.arrival import TimeIndex
from tidelake.streaming.checkpoint_upgrade import (
    lacks_state,
    pinned_start,
    recover_upgrade,
    start_new_checkpoint,
)
from tidelake.streaming.decode import decode_records
from tidelake.streaming.dedup import drop_repeats_in_stream
from tidelake.streaming.delta_write import MicroBatchWriter, ensure_flow_tables
from tidelake.streaming.flow_spec import FlowSpec
from tidelake.streaming.kafka_admin import require_topic
from tidelake.streaming.kafka_offsets import PartitionEnds
from tidelake.streaming.kafka_read import stream_records
from tidelake.streaming.settings import EngineSettings, redact

log = logging.getLogger(__name__)

KAFKA_TIMEOUT_S = 30.0
"""How long the driver waits for Kafka's time index before the batch fails."""


@dataclass
class FlowStream:
    """Builds and runs the streaming query of one declared flow: Spark's Kafka source, the JVM
    decoder and rules (decode), Spark's deduplication (dedup), then foreachBatch into Delta
    (delta_write)."""

    flow: FlowSpec
    settings: EngineSettings
    kafka_conf: Mapping[str, str]

    @property
    def query_name(self) -> str:
        return f"{self.flow.name}_stream"

    @property
    def table_uri(self) -> str:
        return str(self.settings.table_path(self.flow.table))

    @property
    def quarantine_uri(self) -> str:
        return str(self.settings.table_path(self.flow.quarantine_table))

    @property
    def checkpoint(self) -> str:
        return str(self.settings.checkpoint_path(self.flow.name))

    def preflight(self) -> None:
        """Fail fast, before Spark starts, if the broker or the topic is missing."""
        require_topic(self.kafka_conf, self.flow.topic)

    def start(self, spark: SparkSession, *, available_now: bool = False) -> StreamingQuery:
        log.info(
            "starting %s: topic %s -> %s (kafka %s)",
            self.query_name,
            self.flow.topic,
            self.table_uri,
            redact(self.kafka_conf),
        )
        recover_upgrade(self.checkpoint)
        if self.flow.dedup_key is not None and lacks_state(self.checkpoint):
            start_new_checkpoint(self.checkpoint, self.table_uri, self.quarantine_uri)
        records = stream_records(
            spark,
            self.flow,
            self.kafka_conf,
            starting_offsets=pinned_start(self.checkpoint) or "earliest",
            max_offsets_per_trigger=self.settings.max_offsets_per_trigger,
            fail_on_data_loss=self.settings.fail_on_data_loss,
        )
        decoded = decode_records(records, self.flow)
        ensure_flow_tables(decoded, self.flow, self.table_uri, self.quarantine_uri)
        index = TimeIndex(
            PartitionEnds(self.kafka_conf, f"tidelake-{self.flow.name}-index", KAFKA_TIMEOUT_S)
        )
        writer = (
            drop_repeats_in_stream(decoded, self.flow)
            .writeStream.foreachBatch(
                MicroBatchWriter(
                    self.flow, self.table_uri, self.quarantine_uri, self.checkpoint, index
                )
            )
            .queryName(self.query_name)
            .option("checkpointLocation", self.checkpoint)
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=self.settings.trigger_interval)
        return writer.start()


ProgressHandler = Callable[[StreamingQuery, dict[str, Any] | None], None]
"""Called every progress interval with the query and its newest progress (None before any)."""


def log_progress(query: StreamingQuery, progress: dict[str, Any] | None) -> None:
    if progress is None:
        log.info("%s: waiting for the first batch", query.name)
        return
    log.info(
        "%s batch %s: %s rows, %.0f rows/s in, %.0f rows/s processed",
        query.name,
        progress["batchId"],
        progress["numInputRows"],
        progress.get("inputRowsPerSecond") or 0.0,
        progress.get("processedRowsPerSecond") or 0.0,
    )


def await_query(
    query: StreamingQuery,
    stop: threading.Event,
    progress_interval_s: float = 10.0,
    on_progress: ProgressHandler = log_progress,
) -> None:
    """Block until the query ends or `stop` is set (then stop it gracefully).

    Reports progress every `progress_interval_s`, also while idle, so that a watcher can tell a
    quiet stream from a dead one. Raises the query's exception if it failed.
    """
    next_report = time.monotonic() + progress_interval_s
    while query.isActive and not stop.is_set():
        query.awaitTermination(0.25)
        if time.monotonic() >= next_report and query.isActive:
            next_report = time.monotonic() + progress_interval_s
            on_progress(query, query.lastProgress)
    if query.isActive:
        log.info("stopping %s", query.name)
        query.stop()
    exc = query.exception()
    if exc is not None:
        raise RuntimeError(f"{query.name} failed: {exc}")
