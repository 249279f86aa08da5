"""A lake and checkpoint written by the first (jar-free) engine carry on under this one, with no
command: the checkpoint's offsets are Spark's Kafka layout and the tables' application transactions
use the same id. Its deduplication state is the earlier operator's (dropDuplicatesWithinWatermark):
the stream moves onto a new checkpoint that starts where the tables end and remembers its keys.

The fixture (tests/fixtures/old_engine, made by make_fixture.py there) holds what the first
engine wrote after reading phase 1 of records.jsonl; the test puts the same records at the same
offsets of a fresh topic, then lets this engine read phase 2.
"""

from __future__ import annotations

import dataclasses
import json
import tarfile
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from kafka_topics import KEEP_FOREVER, set_retention
from lake_readers import delta_properties, read_delta
from live_stream import run_available_now

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.commit import table_properties
from tidelake.streaming.kafka.admin import delete_topic, ensure_topic
from tidelake.streaming.settings import EngineSettings

FIXTURE = Path(__file__).parents[1] / "fixtures" / "old_engine"
TOPIC = "tidelake-continuity"


def _produce(kafka_conf: dict[str, Any], records: list[dict[str, Any]]) -> None:
    producer = Producer({**kafka_conf, "enable.idempotence": True})
    for r in records:
        producer.produce(
            TOPIC,
            bytes.fromhex(r["value"]),
            r["key"].encode(),
            r["partition"],
            timestamp=r["ts"],
        )
    assert producer.flush(30) == 0


def test_the_first_engines_lake_and_checkpoint_carry_on(
    spark: Any, kafka_conf: dict[str, Any], tmp_path: Path
) -> None:
    records = [json.loads(line) for line in (FIXTURE / "records.jsonl").read_text().splitlines()]
    delete_topic(kafka_conf, TOPIC)
    ensure_topic(kafka_conf, TOPIC, 4)
    set_retention(kafka_conf, TOPIC, KEEP_FOREVER)  # the records carry November 2026 stamps
    _produce(kafka_conf, [r for r in records if r["phase"] == 1])
    with tarfile.open(FIXTURE / "old_engine.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    settings = EngineSettings(lake=tmp_path / "lake", checkpoints=tmp_path / "checkpoints")
    flow = dataclasses.replace(CALL_EVENTS, topic=TOPIC)
    table = tmp_path / "lake" / flow.table
    quarantine = tmp_path / "lake" / flow.quarantine_table
    before = (read_delta(table).num_rows, read_delta(quarantine).num_rows)
    assert delta_properties(quarantine).get("delta.checkpointInterval") is None

    # nothing new: no row written (Spark runs one empty batch, because the first engine wrote
    # its offsets as JSON with spaces and Spark compares them as text). The one commit each
    # table gets sets the log retention the first engine's tables lacked.
    run_available_now(spark, flow, settings, kafka_conf)
    assert (read_delta(table).num_rows, read_delta(quarantine).num_rows) == before
    shipped = table_properties()
    for kept in (table, quarantine):
        assert {k: delta_properties(kept).get(k) for k in shipped} == shipped

    _produce(kafka_conf, [r for r in records if r["phase"] == 2])
    run_available_now(spark, flow, settings, kafka_conf)
    keys = read_delta(table).column("call_sid").to_pylist()
    good = {r["key"] for r in records if r["key"] != "poison"}
    assert len(keys) == len(good) == len(set(keys))  # retries dropped, nothing lost or repeated
    assert set(keys) == good
    assert read_delta(quarantine).num_rows == 2  # one poison record per phase
    (retired,) = (tmp_path / "checkpoints").glob("*.retired-*")  # kept, once
    assert (retired / "state").is_dir()
    delete_topic(kafka_conf, TOPIC)
