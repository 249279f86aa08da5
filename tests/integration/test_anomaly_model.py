"""The anomaly model: baselines trained with Spark from a Delta table, scoring, evaluation."""

from __future__ import annotations

import collections
import uuid
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pandas as pd
import pytest
from confluent_kafka import Consumer, TopicPartition
from demo_days import write_days

from tidelake.assets.calls.anomaly_model_asset import MODEL_KEY, SKIPPED
from tidelake.assets.definitions import build_definitions
from tidelake.platform.dev.produce import produce_demo_events
from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.calls.anomaly.model import (
    ALL_HOURS,
    IncidentTruth,
    Thresholds,
    evaluate,
    inject_incidents,
    score_windows,
    with_silent_keys,
)
from tidelake.streaming.calls.anomaly.store import latest_model
from tidelake.streaming.calls.anomaly.training import TrainingError, baseline_plot, train_model
from tidelake.streaming.calls.demo_events import ACCOUNTS, Incident, incident_schedule
from tidelake.streaming.calls.flow import CALL_EVENTS
from tidelake.streaming.settings import EngineSettings

HELD_OUT = "2026-11-18"


def read_regions(kafka_conf: Any, topic: str) -> list[str]:
    """Region of every event on the topic (read to each partition's end)."""
    consumer = Consumer(
        {**kafka_conf, "group.id": f"t-{uuid.uuid4().hex}", "enable.partition.eof": True}
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    regions, ended = [], set()
    try:
        while len(ended) < len(partitions):
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error() is not None:
                ended.add(message.partition())
                continue
            regions.append(CallEvent.Region.Name(CallEvent.FromString(message.value()).region))
    finally:
        consumer.close()
    return regions


@pytest.fixture(scope="module")
def trained(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("anomaly")
    settings = EngineSettings(lake=root / "lake", checkpoints=root / "cp")
    write_days(settings, ["2026-11-17", HELD_OUT])
    return settings, train_model(spark, CALL_EVENTS, settings, HELD_OUT)


def test_injected_incidents_are_found_and_normal_minutes_stay_quiet(trained: Any) -> None:
    settings, model = trained
    evaluation = model.evaluation
    assert evaluation.incident_windows == 90  # three incidents of 30 minutes
    assert evaluation.recall >= 0.9
    assert evaluation.false_alert_share <= 0.01
    assert evaluation.precision >= 0.75
    stored, baselines = latest_model(settings.lake)
    assert stored == model.info
    assert stored.days_used == ["2026-11-17"] and stored.metrics["recall"] >= 0.9
    assert len(baselines) == len(model.baselines)
    assert baseline_plot(model).startswith(b"\x89PNG")


def test_training_needs_days_before_the_held_out_one(spark: Any, trained: Any) -> None:
    settings, _ = trained
    with pytest.raises(TrainingError, match="no day of call_events"):
        train_model(spark, CALL_EVENTS, settings, HELD_OUT, excluded=frozenset({"2026-11-17"}))
    with pytest.raises(TrainingError, match="2026-11-25 has no rows"):
        train_model(spark, CALL_EVENTS, settings, "2026-11-25")


def test_a_date_without_history_is_skipped_not_failed(spark: Any, trained: Any) -> None:
    settings, _ = trained
    defs = build_definitions({CALL_EVENTS.name: CALL_EVENTS}, settings)
    model = defs.resolve_assets_def(MODEL_KEY)
    with dg.instance_for_test() as instance:
        for day, reason in [("2026-11-17", "no day of call_events"), ("2026-11-10", "has no rows")]:
            result = dg.materialize([model], partition_key=day, instance=instance)
            assert result.success  # a green run: nothing is broken, there is nothing to learn
            assert not result.asset_materializations_for_node(model.node_def.name)
            (observation,) = result.asset_observations_for_node(model.node_def.name)
            assert observation.partition == day
            assert reason in observation.metadata[SKIPPED].value
        assert not instance.get_materialized_partitions(MODEL_KEY)


def baselines_for(calls_per_minute: dict[tuple[str, str], float]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "key_kind": kind,
                "key": key,
                "hour_of_week": ALL_HOURS,
                "expected_calls": rate,
                "calls_spread": 0.0,
                "failure_rate": 0.04,
                "log_duration_mean": 4.0,
                "log_duration_sd": 1.0,
            }
            for (kind, key), rate in calls_per_minute.items()
        ]
    )


def window(key: tuple[str, str], minute: int, calls: int, failed: int = 0, shift: float = 0.0):
    completed = calls - failed
    mean = 4.0 + shift
    return {
        "window_start": pd.Timestamp("2026-11-18", tz="UTC") + pd.Timedelta(minutes=minute),
        "key_kind": key[0],
        "key": key[1],
        "calls": calls,
        "failed": failed,
        "completed": completed,
        "log_duration_sum": completed * mean,
        "log_duration_sq_sum": completed * (mean**2 + 1.0),
    }


BUSY = ("account", ACCOUNTS[0])
REGION = ("region", "us1")


def test_each_metric_alerts_only_when_the_effect_is_large_and_significant() -> None:
    baselines = baselines_for({BUSY: 100.0, REGION: 50.0, ("account", "ACquiet"): 1.0})
    windows = pd.DataFrame(
        [
            window(BUSY, 0, 100, failed=4),  # normal
            window(BUSY, 1, 100, failed=40),  # failure spike
            window(BUSY, 2, 100, failed=4, shift=1.1),  # 3x longer calls
            window(BUSY, 3, 130, failed=5),  # +30%: significant, but not 2x: no alert
            window(REGION, 0, 50, failed=2),
        ]
    )
    windows = with_silent_keys(windows, baselines, Thresholds())
    found = score_windows(windows, baselines)
    hits = {(r.key, r.window_start.minute, r.metric) for r in found.itertuples()}
    assert hits == {
        (BUSY[1], 1, "failure_rate"),
        (BUSY[1], 2, "log_duration"),
        ("us1", 1, "volume"),  # silent in minutes 1-3: a drop to zero
        ("us1", 2, "volume"),
        ("us1", 3, "volume"),
    }
    quiet = found[found["key"] == "ACquiet"]
    assert quiet.empty  # too small to judge its volume


def test_injected_incidents_change_the_sums_as_the_demo_producer_would() -> None:
    start = pd.Timestamp("2026-11-18", tz="UTC")
    start_ms = int(start.timestamp() * 1000)
    windows = pd.DataFrame([window(BUSY, m, 100, failed=4) for m in range(4)])
    spike = Incident("failure_spike", BUSY[1], start_ms + 60_000, start_ms + 180_000)
    changed = inject_incidents(windows, [spike], seed=1)
    assert changed["failed"].tolist()[0] == 4 and changed["failed"].tolist()[3] == 4
    assert all(40 <= f <= 60 for f in changed["failed"].tolist()[1:3])
    assert (changed["calls"] == 100).all()
    truth = IncidentTruth.of([spike], {BUSY[1]: "account"})
    found = score_windows(changed, baselines_for({BUSY: 100.0}))
    assert evaluate(found, changed, truth).recall == 1.0


def test_incident_kinds_are_checked() -> None:
    with pytest.raises(ValueError, match="incident kind"):
        Incident("meltdown", "us1", 0, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="end after"):
        Incident("volume_drop", "us1", 5, 5)
    assert Incident("volume_drop", "us1", 0, 1).metric == "volume"


def test_incident_schedule_cycles_through_the_three_kinds() -> None:
    schedule = incident_schedule(0, 4 * 900_000, every_s=900, length_s=300)
    assert [(i.kind, i.key, i.start_ms, i.end_ms) for i in schedule] == [
        ("failure_spike", ACCOUNTS[0], 900_000, 1_200_000),
        ("volume_drop", "us1", 1_800_000, 2_100_000),
        ("duration_shift", ACCOUNTS[1], 2_700_000, 3_000_000),
    ]


def test_the_demo_producer_applies_incidents(kafka_conf: Any, flow: Any) -> None:
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    drop = Incident("volume_drop", "us1", now_ms - 60_000, now_ms + 3_600_000)
    report = produce_demo_events(
        flow,
        kafka_conf,
        count=2000,
        malformed_share=0,
        late_share=0,
        seed=4,
        progress=False,
        incidents=[drop],
    )
    assert report.good == 2000
    regions = collections.Counter(read_regions(kafka_conf, flow.topic))
    assert regions["us1"] < 0.5 * regions["us2"]  # usually 5/3 of it; a fifth kept: 1/3
