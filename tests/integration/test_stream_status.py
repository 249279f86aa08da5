"""Reading a stream's position from outside: checkpoint, Kafka ends, lag, closed dates."""

from __future__ import annotations

import dataclasses
from typing import Any

from kafka_topics import ON_BOTH_KAFKAS
from live_stream import run_available_now

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.progress import table_progress
from tidelake.streaming.kafka.admin import ensure_topic
from tidelake.streaming.stream.status import committed_batch, kafka_ends, stream_lag


@ON_BOTH_KAFKAS
def test_status_of_a_real_stream(
    spark: Any, kafka_conf: dict[str, Any], kafka_as: Any, topic_name: str, engine_settings: Any
) -> None:
    """On the secured broker the lag is read as the stream's user (READ and DESCRIBE only)."""
    flow = dataclasses.replace(CALL_EVENTS, topic=topic_name)
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    reader = kafka_as("stream", [flow.topic])
    report = produce_demo_events(flow, kafka_conf, count=200, days=2, progress=False, seed=3)
    stream = run_available_now(spark, flow, engine_settings, reader)

    batch = committed_batch(stream.checkpoint, flow.topic)
    ends = kafka_ends(reader, flow.topic)
    assert batch is not None and batch.offsets == ends and sum(ends.values()) == 200
    assert stream_lag(ends, batch.offsets).total == 0
    produce_demo_events(flow, kafka_conf, count=25, progress=False, seed=4)
    assert stream_lag(kafka_ends(reader, flow.topic), batch.offsets).total == 25

    progress = table_progress(stream.table_uri, flow)
    assert progress is not None and progress.rows_by_date == report.by_date
    assert progress.files >= len(report.by_date)
