"""The streaming anomaly detector: call events from Kafka -> minute windows per key -> scored
against the newest model -> anomalies in a Delta table and as CallAnomaly alerts on Kafka.

It always starts at the topic's latest offsets with a fresh checkpoint and fresh window state:
anomalies of a lagging stream are old news, so a restart skips what arrived while it was down.
Each micro-batch asks the model store for the newest version (one small Delta log read), so a
retrained model is used from the next batch on, without a restart. Windows are emitted once the
watermark (event time minus `watermark`) has passed their end.

Only minutes that start at or after `scores_from_ms` (default: the first whole minute after the
start) are scored: the minute the detector starts in is partly missed, and before its first
batch there is no watermark to keep late events from opening windows in the past. Either would
look like a volume drop.

Alerts are produced (idempotent, acks=all) before the anomalies are committed to Delta (one
commit per batch, tagged with the query's app id). A crash between the two leaves alerts whose
rows are missing from the table; the restart does not repeat them, as it begins afresh.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from tidelake.protos.anomaly_pb2 import CallAnomaly
from tidelake.streaming.calls.anomaly.model import (
    Thresholds,
    minute_windows,
    score_windows,
    with_silent_keys,
)
from tidelake.streaming.calls.anomaly.store import ModelCache
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.commit import append_rows_once
from tidelake.streaming.delta.write import app_id
from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.flow.engine_columns import ERROR_COLUMN
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.acls import READS, WRITES
from tidelake.streaming.kafka.admin import (
    ensure_topic,
    quiet_client_config,
    require_access,
    require_topic,
)
from tidelake.streaming.kafka.read import explain_query_failure, stream_records
from tidelake.streaming.records.decode import decode_records
from tidelake.streaming.schemas.writer_schemas import WriterSchemas
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.storage.location import Location
from tidelake.streaming.stream.query import StreamFailedError

log = logging.getLogger(__name__)

DETECTOR_NAME = "call_anomaly_detector"
ANOMALIES_TABLE = "call_anomalies"
ANOMALIES_PARTITION_COLUMN = "date"
"""The anomalies' partition column: the UTC date of the window (the lake's retention expires
by it)."""
ALERTS_TOPIC = "call-anomalies"
ANOMALY_SCHEMA = pa.schema(
    [
        ("key_kind", pa.string()),
        ("key", pa.string()),
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("metric", pa.string()),
        ("observed", pa.float64()),
        ("expected", pa.float64()),
        ("score", pa.float64()),
        ("model_version", pa.int64()),
        ("detected_at", pa.timestamp("us", tz="UTC")),
        ("date", pa.date32()),
    ]
)


@dataclass
class AnomalyDetector:
    settings: EngineSettings
    kafka_conf: Mapping[str, str]
    flow: FlowSpec = CALL_EVENTS
    alerts_topic: str = ALERTS_TOPIC
    watermark: str = "10 seconds"
    trigger_interval: str = "5 seconds"
    thresholds: Thresholds = field(default_factory=Thresholds)
    scores_from_ms: int | None = None

    def __post_init__(self) -> None:
        self._models = ModelCache(self.settings.lake)
        self._producer: Producer | None = None
        self._app_id = ""
        self.batches_scored = 0
        self.last_model_version: int | None = None
        # the writer schemas of the topic's subject, read at start; a schema id first met later
        # is refused as pending and its records are not scored until the detector restarts
        self.schemas = WriterSchemas.from_env(self.flow)

    @property
    def checkpoint(self) -> str:
        return self.settings.checkpoint_uri(DETECTOR_NAME)

    @property
    def table_uri(self) -> str:
        return self.settings.table_uri(ANOMALIES_TABLE)

    def preflight(self) -> None:
        require_topic(self.kafka_conf, self.flow.topic)
        require_access(self.kafka_conf, self.flow.topic, READS)
        self.schemas.prefetch()
        ensure_topic(self.kafka_conf, self.alerts_topic, 1)
        require_access(self.kafka_conf, self.alerts_topic, WRITES)

    def batch_error(self) -> TidelakeError | None:
        """None: the detector's batches raise nothing of tidelake's own to report instead."""
        return None

    def explain_failure(self, message: str) -> str:
        return explain_query_failure(message, self.kafka_conf)

    def start(self, spark: SparkSession) -> StreamingQuery:
        Location(self.checkpoint).delete_tree()  # fresh state, latest offsets
        if self.scores_from_ms is None:
            self.scores_from_ms = (time.time_ns() // 60_000_000_000 + 1) * 60_000
        records = stream_records(
            spark,
            self.flow,
            self.kafka_conf,
            starting_offsets="latest",
            max_offsets_per_trigger=self.settings.max_offsets_per_trigger,
            fail_on_data_loss=self.settings.fail_on_data_loss,
        )
        # the same decode and rules as the flow's stream: it scores what the table accepts
        decoded = decode_records(records, self.flow, self.kafka_conf, self.schemas)
        events = decoded.where(F.col(ERROR_COLUMN).isNull())
        self._producer = Producer(_alert_producer_config(self.kafka_conf))
        log.info(
            "starting %s: %s -> %s and topic %s",
            DETECTOR_NAME,
            self.flow.topic,
            self.table_uri,
            self.alerts_topic,
        )
        query = (
            minute_windows(events, self.watermark)
            .writeStream.queryName(DETECTOR_NAME)
            .outputMode("append")
            .foreachBatch(self._score_batch)
            .option("checkpointLocation", self.checkpoint)
            .trigger(processingTime=self.trigger_interval)
            .start()
        )
        self._app_id = app_id(str(query.id), writer="detector")
        return query

    def _score_batch(self, batch: DataFrame, batch_id: int) -> None:
        windows: pd.DataFrame = batch.toPandas()
        if not windows.empty:
            first = pd.Timestamp(self.scores_from_ms, unit="ms", tz="UTC")
            windows = windows[pd.to_datetime(windows["window_start"], utc=True) >= first]
        if windows.empty:
            return
        model = self._models.current()
        if model is None:
            log.warning("no anomaly model yet: %d windows not scored (train one)", len(windows))
            return
        info, baselines = model
        if info.version != self.last_model_version:
            log.info("scoring with model version %d", info.version)
            self.last_model_version = info.version
        windows = with_silent_keys(windows, baselines, self.thresholds)
        anomalies = score_windows(windows, baselines, self.thresholds)
        self.batches_scored += 1
        if anomalies.empty:
            return
        rows = _anomaly_rows(anomalies, info.version)
        self._alert(rows)
        self._commit(rows, batch_id)
        log.warning("%d anomalies in batch %d: %s", len(rows), batch_id, _summary(rows))

    def _alert(self, rows: pa.Table) -> None:
        assert self._producer is not None
        for r in rows.to_pylist():
            alert = CallAnomaly(
                key_kind=r["key_kind"],
                key=r["key"],
                window_start=_ms(r["window_start"]),
                window_end=_ms(r["window_end"]),
                metric=r["metric"],
                observed=r["observed"],
                expected=r["expected"],
                score=r["score"],
                model_version=r["model_version"],
            )
            self._producer.produce(
                self.alerts_topic, alert.SerializeToString(), f"{r['key_kind']}:{r['key']}"
            )
        left = self._producer.flush(30)
        if left:
            raise StreamFailedError(f"{left} anomaly alerts were not acknowledged by Kafka")

    def _commit(self, rows: pa.Table, batch_id: int) -> None:
        append_rows_once(
            self.table_uri,
            rows,
            partition_by=[ANOMALIES_PARTITION_COLUMN],
            app_id=self._app_id,
            version=batch_id,
        )


def _anomaly_rows(anomalies: pd.DataFrame, version: int) -> pa.Table:
    start = pd.to_datetime(anomalies["window_start"], utc=True)
    frame = anomalies.assign(
        window_start=start,
        window_end=start + pd.Timedelta(minutes=1),
        model_version=version,
        detected_at=pd.Timestamp.now(tz="UTC"),
        date=start.dt.date,
    )
    return pa.Table.from_pandas(frame[ANOMALY_SCHEMA.names], ANOMALY_SCHEMA, preserve_index=False)


def _summary(rows: pa.Table) -> str:
    return ", ".join(
        f"{r['key_kind']} {r['key'][:10]} {r['metric']} {r['observed']:.3g} vs {r['expected']:.3g}"
        for r in rows.to_pylist()[:5]
    )


def _ms(ts: Any) -> int:
    return int(pd.Timestamp(ts).timestamp() * 1000)


def _alert_producer_config(conf: Mapping[str, str]) -> dict[str, Any]:
    config = quiet_client_config(conf)
    config.update({"enable.idempotence": True, "acks": "all", "linger.ms": 5})
    return config
