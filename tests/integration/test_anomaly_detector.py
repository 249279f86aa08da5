"""The streaming anomaly detector against the local Kafka broker, Spark and Delta."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pytest
from confluent_kafka import Producer
from kafka_topics import ON_SECURED_S3, read_values, topic_records
from lake_readers import read_delta
from pyspark.sql import functions as F

from tidelake.platform.dev.dagster_web import wait_for
from tidelake.protos.anomaly_pb2 import CallAnomaly
from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.calls.anomaly.detector import AnomalyDetector
from tidelake.streaming.calls.anomaly.incidents import Incident
from tidelake.streaming.calls.anomaly.model import minute_windows, train_baselines
from tidelake.streaming.calls.anomaly.store import ModelInfo, save_model
from tidelake.streaming.calls.demo_events import ACCOUNTS, scenario_events
from tidelake.streaming.kafka.admin import delete_topic, ensure_topic
from tidelake.streaming.kafka.offsets import from_json_offsets
from tidelake.streaming.stream.query import await_query

RATE = 600  # calls per minute
MINUTE_MS = 60_000


def send(kafka_conf: dict[str, Any], topic: str, rows: list[dict]) -> None:
    producer = Producer({**kafka_conf, "enable.idempotence": True, "linger.ms": 5})
    for r in rows:
        event = CallEvent(
            call_sid=f"CA{uuid.uuid4().hex}",
            account_sid=r["account_sid"],
            duration=r["duration"],
            call_state=CallEvent.CallState.Value(r["call_state"]),
            region=CallEvent.Region.Value(r["region"]),
            event_time=r["event_time"],
        )
        producer.produce(topic, event.SerializeToString(), event.call_sid.encode())
    assert producer.flush(30) == 0


def save_version(spark: Any, settings: Any, version: int, start_ms: int) -> None:
    rows = pd.DataFrame(scenario_events(version, start_ms, 60, RATE))
    events = spark.createDataFrame(rows).withColumn("event_time", F.timestamp_millis("event_time"))
    baselines = train_baselines(minute_windows(events)).toPandas()
    info = ModelInfo(version, "-", "-", ["-"], day="2026-11-20")
    save_model(settings.lake, baselines, info)


class RunningDetector:
    def __init__(self, spark: Any, detector: AnomalyDetector):
        self.detector = detector
        self.query = detector.start(spark)
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=await_query, args=(self.query, self.stop), daemon=True
        )
        self.thread.start()
        wait_for(lambda: self.query.lastProgress, 60, "the detector's first batch", 0.2)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


@pytest.fixture
def alerts_topic(kafka_conf: dict[str, Any]) -> Iterator[str]:
    name = f"tidelake-test-alerts-{uuid.uuid4().hex[:8]}"
    yield name
    delete_topic(kafka_conf, name)


def anomalies(detector: AnomalyDetector) -> pd.DataFrame:
    try:
        return read_delta(detector.table_uri).to_pandas()
    except Exception:  # not created until the first anomaly
        return pd.DataFrame(columns=["key", "metric", "window_start", "model_version"])


def until(check: Callable[[], bool], what: str) -> None:
    wait_for(lambda: True if check() else None, 90, what, 0.5)


def wait_caught_up(running: RunningDetector, kafka_conf: dict[str, Any], topic: str) -> None:
    """Until a finished micro-batch has read every record now on the topic, so that what is sent
    next makes a batch of its own."""
    sent = topic_records(kafka_conf, topic)

    def read_all() -> bool | None:
        progress = running.query.lastProgress
        ends = from_json_offsets(progress["sources"][0]["endOffset"]) if progress else {}
        return True if sum(ends.values()) >= sent else None

    wait_for(read_all, 90, f"the detector to read the {sent} records of {topic}", 0.2)


def send_burst(
    running: RunningDetector,
    kafka_conf: dict[str, Any],
    topic: str,
    start_ms: int,
    minutes: int,
    seed: int,
    incidents: list[Incident] | None = None,
) -> None:
    """Demo calls for whole minutes, then calls past them in two later micro-batches: the first
    moves the watermark past the minutes, the second makes a batch that emits them."""
    send(kafka_conf, topic, scenario_events(seed, start_ms, minutes, RATE, incidents))
    for n in range(2):
        wait_caught_up(running, kafka_conf, topic)
        send(
            kafka_conf, topic, scenario_events(seed + n, start_ms + (minutes + 1) * MINUTE_MS, 1, 2)
        )


@ON_SECURED_S3
def test_finds_incidents_reloads_models_and_restarts_at_the_latest_offsets(
    spark: Any,
    kafka_conf: dict[str, Any],
    kafka_as: Any,
    flow: Any,
    engine_settings: Any,
    alerts_topic: str,
) -> None:
    """On the secured broker the detector is its own user: it reads the flow's topic and writes
    the alerts topic (made by an admin beforehand), nothing else."""
    t0 = (time.time_ns() // 1_000_000 // MINUTE_MS - 30) * MINUTE_MS
    save_version(spark, engine_settings, 1, t0 - 120 * MINUTE_MS)
    ensure_topic(kafka_conf, alerts_topic, 1)
    detector = AnomalyDetector(
        engine_settings,
        kafka_as("detector", [flow.topic], alerts_topic),
        flow=flow,
        alerts_topic=alerts_topic,
        watermark="5 seconds",
        trigger_interval="1 second",
        scores_from_ms=t0,  # the test replays recent minutes instead of waiting for new ones
    )
    detector.preflight()
    running = RunningDetector(spark, detector)
    try:
        spike = Incident("failure_spike", ACCOUNTS[0], t0 + 2 * MINUTE_MS, t0 + 4 * MINUTE_MS)
        send_burst(running, kafka_conf, flow.topic, t0, 6, seed=10, incidents=[spike])
        until(
            lambda: (anomalies(detector)["metric"] == "failure_rate").sum() >= 2, "2 spike minutes"
        )
        found = anomalies(detector)
        spikes = found[(found["key"] == ACCOUNTS[0]) & (found["metric"] == "failure_rate")]
        minutes = {int(ts.timestamp() * 1000) for ts in spikes["window_start"]}
        assert minutes == {t0 + 2 * MINUTE_MS, t0 + 3 * MINUTE_MS}
        assert set(found["model_version"]) == {1}
        normal = found[
            found["window_start"].map(lambda ts: ts.timestamp() * 1000) < t0 + 2 * MINUTE_MS
        ]
        assert normal.empty

        save_version(spark, engine_settings, 2, t0 - 240 * MINUTE_MS)  # a retrained model
        spike2 = Incident("failure_spike", ACCOUNTS[0], t0 + 9 * MINUTE_MS, t0 + 10 * MINUTE_MS)
        later = t0 + 8 * MINUTE_MS
        send_burst(running, kafka_conf, flow.topic, later, 3, seed=20, incidents=[spike2])
        until(lambda: (anomalies(detector)["model_version"] == 2).any(), "model 2's anomalies")
        newer = anomalies(detector)
        assert set(newer[newer["model_version"] == 2]["key"]) >= {ACCOUNTS[0]}
    finally:
        running.close()

    # while the detector is down, an incident happens; after the restart it is not reported
    missed = Incident("failure_spike", ACCOUNTS[0], t0 + 14 * MINUTE_MS, t0 + 16 * MINUTE_MS)
    send(kafka_conf, flow.topic, scenario_events(30, t0 + 13 * MINUTE_MS, 4, RATE, [missed]))
    before = len(anomalies(detector))
    scored = detector.batches_scored
    running = RunningDetector(spark, detector)
    try:
        send_burst(running, kafka_conf, flow.topic, t0 + 18 * MINUTE_MS, 3, seed=40)
        wait_caught_up(running, kafka_conf, flow.topic)
        assert detector.batches_scored > scored
    finally:
        running.close()
    assert len(anomalies(detector)) == before

    values = read_values(kafka_conf, alerts_topic, partitions=[0])
    alerts = [CallAnomaly.FromString(v) for v in values]
    assert len(alerts) == before
    assert {(a.key, a.metric) for a in alerts} >= {(ACCOUNTS[0], "failure_rate")}
