"""Detector latency: from the start of an injected incident to its alert on the alerts topic.

Trains a model on an hour of demo traffic, starts the streaming anomaly detector (default
watermark 10 s, trigger 5 s), produces live demo traffic at --rate events/s with a failure spike
on the busiest account starting --lead seconds in, and reads the alerts topic until the first
alert for it arrives. With one-minute windows the floor is the rest of the incident's first
minute plus the watermark delay plus a trigger.

    python bench/anomaly_latency.py --rate 20 --lead 90
"""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from pathlib import Path

import click
import pandas as pd
from common import kafka, wait_for, write_figures
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import functions as F

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.protos.anomaly_pb2 import CallAnomaly
from tidelake.streaming.calls.anomaly.detector import AnomalyDetector
from tidelake.streaming.calls.anomaly.incidents import Incident
from tidelake.streaming.calls.anomaly.model import minute_windows, train_baselines
from tidelake.streaming.calls.anomaly.store import ModelInfo, save_model
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.demo_events import ACCOUNTS, scenario_events
from tidelake.streaming.kafka.admin import ensure_topic
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.spark.session import build_spark_session
from tidelake.streaming.stream.query import await_query


@click.command()
@click.option("--rate", type=float, default=20.0, show_default=True, help="Events per second.")
@click.option(
    "--lead", type=float, default=90.0, show_default=True, help="Seconds before the incident."
)
@click.option("--length", type=float, default=120.0, show_default=True, help="Incident seconds.")
@click.option("--out", type=click.Path(path_type=Path))
def main(rate: float, lead: float, length: float, out: Path | None) -> None:
    with kafka() as conf, tempfile.TemporaryDirectory() as tmp:
        ensure_topic(conf, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
        settings = EngineSettings(lake=Path(tmp) / "lake", checkpoints=Path(tmp) / "cp")
        spark = build_spark_session("local[2]")
        now_ms = time.time_ns() // 1_000_000
        history = pd.DataFrame(scenario_events(1, now_ms - 3_600_000 * 2, 60, rate * 60))
        events = spark.createDataFrame(history).withColumn(
            "event_time", F.timestamp_millis("event_time")
        )
        baselines = train_baselines(minute_windows(events)).toPandas()
        save_model(settings.lake, baselines, ModelInfo(1, "-", "-", ["-"], day="-"))

        alerts_topic = f"bench-alerts-{uuid.uuid4().hex[:6]}"
        detector = AnomalyDetector(settings, conf, alerts_topic=alerts_topic)
        detector.preflight()
        query = detector.start(spark)
        stop = threading.Event()
        runner = threading.Thread(target=await_query, args=(query, stop), daemon=True)
        runner.start()
        wait_for(lambda: query.lastProgress, 600, "the detector's first micro-batch", poll_s=0.2)

        started_ms = time.time_ns() // 1_000_000
        incident = Incident(
            "failure_spike",
            ACCOUNTS[0],
            started_ms + int(lead * 1000),
            started_ms + int((lead + length) * 1000),
        )
        producer = threading.Thread(
            target=produce_demo_events,
            args=(CALL_EVENTS, conf),
            kwargs={
                "rate": rate,
                "duration_s": lead + length + 90,
                "malformed_share": 0.0,
                "late_share": 0.0,
                "progress": False,
                "incidents": [incident],
            },
            daemon=True,
        )
        producer.start()
        consumer = Consumer({**conf, "group.id": f"bench-{uuid.uuid4().hex}"})
        consumer.assign([TopicPartition(alerts_topic, 0, 0)])
        false_alerts = 0

        def first_alert_ms() -> int | None:
            """When the incident's alert arrived, if it is the next message; counts the alerts
            of windows before the incident on the way."""
            nonlocal false_alerts
            message = consumer.poll(0.5)
            if message is None or message.error():
                return None
            alert = CallAnomaly.FromString(message.value())
            if alert.key == incident.key and alert.metric == "failure_rate":
                return time.time_ns() // 1_000_000
            if alert.window_start < incident.start_ms:
                false_alerts += 1
            return None

        try:
            alerted_ms = wait_for(first_alert_ms, lead + length + 120, "the alert", poll_s=0)
        except TimeoutError:
            alerted_ms = None
        consumer.close()
        stop.set()
        runner.join(60)
        producer.join(lead + length + 120)
        spark.stop()
    if alerted_ms is None:
        raise SystemExit("no alert for the incident")
    latency_s = (alerted_ms - incident.start_ms) / 1000
    into_minute_s = (incident.start_ms % 60_000) / 1000
    print(f"detector latency {latency_s:.1f} s from incident start to alert on {alerts_topic}")
    print(
        f"  (the incident began {into_minute_s:.0f} s into its minute; window 60 s, "
        f"watermark 10 s, trigger 5 s; alerts before the incident: {false_alerts})"
    )
    write_figures(
        out,
        {
            "latency_s": latency_s,
            "into_minute_s": into_minute_s,
            "false_alerts_before": false_alerts,
            "rate": rate,
        },
    )


if __name__ == "__main__":
    main()
