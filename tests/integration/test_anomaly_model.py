"""The anomaly model: baselines trained with Spark from a Delta table, scoring, evaluation."""

from __future__ import annotations

import collections
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pytest
from demo_days import write_days
from kafka_topics import read_records

from tidelake.assets.calls.anomaly_model_asset import MODEL_KEY, SKIPPED
from tidelake.assets.definitions import build_definitions
from tidelake.platform.dev.produce import produce_demo_events
from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.calls.anomaly.incidents import Incident
from tidelake.streaming.calls.anomaly.store import latest_model
from tidelake.streaming.calls.anomaly.training import TrainingError, baseline_plot, train_model
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.demo_events import with_incidents
from tidelake.streaming.settings import EngineSettings

HELD_OUT = "2026-11-18"


def read_regions(kafka_conf: Any, topic: str) -> list[str]:
    """Region of every event on the topic (read to each partition's end)."""
    return [
        CallEvent.Region.Name(CallEvent.FromString(record.value).region)
        for record in read_records(kafka_conf, topic)
    ]


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
        change_event=lambda event, rng: with_incidents(event, [drop], rng),
    )
    assert report.good == 2000
    regions = collections.Counter(read_regions(kafka_conf, flow.topic))
    assert regions["us1"] < 0.5 * regions["us2"]  # usually 5/3 of it; a fifth kept: 1/3
