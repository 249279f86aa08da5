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

from tidelake.streaming.checkpoint_upgrade import (
    lacks_state,
    pinned_start,
    recover_upgrade,
    start_new_checkpoint,
)
from tidelake.streaming.decode import ProtobufDecoder
from tidelake.streaming.dedup import drop_repeats_in_stream
from tidelake.streaming.delta_commit import ensure_table
from tidelake.streaming.delta_sink import SinkPlan
from tidelake.streaming.flow_spec import FlowSpec
from tidelake.streaming.kafka_admin import require_topic
from tidelake.streaming.settings import EngineSettings, redact

log = logging.getLogger(__name__)


@dataclass
class FlowStream:
    """Builds and runs the streaming query of one declared flow."""

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

    def source_options(self) -> dict[str, str]:
        options = flow_source_options(self.flow, self.kafka_conf)
        options.update(
            startingOffsets=pinned_start(self.checkpoint) or "earliest",
            maxOffsetsPerTrigger=str(self.settings.max_offsets_per_trigger),
            failOnDataLoss=str(self.settings.fail_on_data_loss).lower(),
        )
        return options

    def sink_options(self) -> dict[str, str]:
        return {
            "path": self.table_uri,
            "partitionBy": self.flow.partition_column,
            "quarantine.path": self.quarantine_uri,
        }

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
        stream = spark.readStream.format("tidelake-kafka").options(**self.source_options()).load()
        plan = SinkPlan.from_options(self.sink_options(), stream.schema)
        for layout in (plan.main, plan.quarantine):
            if layout is not None:
                ensure_table(layout.uri, layout.schema, layout.partition_by)
        writer = (
            drop_repeats_in_stream(stream, self.flow)
            .writeStream.format("tidelake-delta")
            .queryName(self.query_name)
            .options(**self.sink_options())
            .option("checkpointLocation", self.checkpoint)
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=self.settings.trigger_interval)
        return writer.start()


def flow_source_options(flow: FlowSpec, kafka_conf: Mapping[str, str]) -> dict[str, str]:
    """Options of `format("tidelake-kafka")` that read and decode a flow's topic."""
    options = {f"kafka.{k}": v for k, v in kafka_conf.items()}
    options.update(
        subscribe=flow.topic,
        failOnDataLoss="true",
        groupIdPrefix=f"tidelake-{flow.name}",
    )
    options["tidelake.decoder"] = ProtobufDecoder.for_flow(flow).to_json()
    return options


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
