"""The supervisor: its pure decision, and the sensor built on it, evaluated with Dagster's helpers.

Sensor tests use a real instance (instance_for_test) on SQLite and on PostgreSQL, the local Kafka
broker for the lag probe and a real Delta table for partition closing; runs are recorded in the
instance with given statuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, date, datetime, timedelta
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from dagster._core.test_utils import create_run_for_test
from deltalake import write_deltalake
from local_postgres import LocalPostgres, local_postgres, postgres_bin

from tidelake.assets.definitions import build_definitions
from tidelake.assets.flow.specs import LAG_BELOW_THRESHOLD, STREAM_ALIVE
from tidelake.assets.resources import KafkaResource
from tidelake.assets.stream import always_on
from tidelake.assets.stream.always_on import STREAM_TAG
from tidelake.assets.stream.supervisor import SupervisorPolicy
from tidelake.streaming.calls.flow import CALL_EVENTS
from tidelake.streaming.kafka.admin import ensure_topic

POLICY = SupervisorPolicy(backoff_base_s=30, backoff_cap_s=600, healthy_after_s=300)


# ---- the pure decision -------------------------------------------------------------------------


# ---- the sensor, evaluated against a real instance ----------------------------------------------


@pytest.fixture
def flow(kafka_conf: dict[str, Any], topic_name: str) -> Any:
    flow = dataclasses.replace(CALL_EVENTS, topic=topic_name, max_lag=10)
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    return flow


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[LocalPostgres]:
    if postgres_bin() is None:
        pytest.skip("needs Debian's postgresql package (.ci/run installs it)")
    with local_postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def make_instance(
    request: pytest.FixtureRequest,
) -> Callable[[], AbstractContextManager[dg.DagsterInstance]]:
    """A fresh instance on SQLite (Dagster's default) or on PostgreSQL (a new database each
    time): the supervisor must decide the same on both storages."""
    if request.param == "sqlite":
        return dg.instance_for_test
    server: LocalPostgres = request.getfixturevalue("postgres_server")

    def on_postgres() -> AbstractContextManager[dg.DagsterInstance]:
        url = server.new_database()
        return dg.instance_for_test(overrides={"storage": {"postgres": {"postgres_url": url}}})

    return on_postgres


@pytest.fixture
def defs(flow: Any, engine_settings: Any) -> dg.Definitions:
    return build_definitions({flow.name: flow}, engine_settings, POLICY)


def evaluate(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    kafka_conf: dict[str, Any],
    cursor: str | None = None,
) -> dg.SensorResult:
    sensor = defs.resolve_sensor_def("call_events_stream_supervisor")
    context = dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        definitions=defs,
        resources={"kafka": KafkaResource(bootstrap_servers=kafka_conf["bootstrap.servers"])},
    )
    return sensor(context)


def checks(result: dg.SensorResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)}


def add_runs(instance: dg.DagsterInstance, *statuses: dg.DagsterRunStatus) -> list[str]:
    """Record runs of the stream job, oldest first."""
    return [
        create_run_for_test(instance, job_name="call_events_stream", status=s).run_id
        for s in statuses
    ]


def test_sensor_requests_a_run_when_none_exists(
    make_instance: Any, defs: Any, kafka_conf: Any
) -> None:
    with make_instance() as instance:
        result = evaluate(defs, instance, kafka_conf)
    (request,) = result.run_requests
    assert request.tags[STREAM_TAG] == "call_events"
    alive = checks(result)[STREAM_ALIVE]  # a first start is not an outage: yellow, not red
    assert not alive.passed and alive.severity == dg.AssetCheckSeverity.WARN
    assert (alive.description or "").startswith("starting the stream")
    assert checks(result)[LAG_BELOW_THRESHOLD].passed  # empty topic: nothing behind
    (observation,) = [e for e in result.asset_events if isinstance(e, dg.AssetObservation)]
    assert observation.metadata["lag_total"].value == 0


def test_a_restart_after_a_failed_run_is_red(
    make_instance: Any, defs: Any, kafka_conf: Any
) -> None:
    with make_instance() as instance:
        add_runs(instance, dg.DagsterRunStatus.FAILURE)
        result = evaluate(defs, instance, kafka_conf)
    assert len(result.run_requests) == 1
    alive = checks(result)[STREAM_ALIVE]
    assert not alive.passed and alive.severity == dg.AssetCheckSeverity.ERROR


def test_run_keys_are_unique_so_restarts_are_not_deduplicated(
    make_instance: Any, defs: Any, kafka_conf: Any
) -> None:
    with make_instance() as instance:
        first = evaluate(defs, instance, kafka_conf).run_requests[0].run_key
        second = evaluate(defs, instance, kafka_conf).run_requests[0].run_key
    assert first != second


def test_sensor_skips_while_a_run_is_live(make_instance: Any, defs: Any, kafka_conf: Any) -> None:
    with make_instance() as instance:
        (run_id,) = add_runs(instance, dg.DagsterRunStatus.STARTED)
        result = evaluate(defs, instance, kafka_conf)
    assert not result.run_requests
    assert f"run {run_id} is STARTED" in result.skip_reason.skip_message
    assert checks(result)[STREAM_ALIVE].passed


def test_sensor_starting_run_counts_as_live(make_instance: Any, defs: Any, kafka_conf: Any) -> None:
    with make_instance() as instance:
        add_runs(instance, dg.DagsterRunStatus.STARTING)
        result = evaluate(defs, instance, kafka_conf)
    assert not result.run_requests
    alive = checks(result)[STREAM_ALIVE]
    assert not alive.passed and alive.severity == dg.AssetCheckSeverity.WARN


def test_crash_loop_backs_off_and_turns_the_alive_check_red(
    make_instance: Any, defs: Any, kafka_conf: Any
) -> None:
    with make_instance() as instance:
        add_runs(instance, *[dg.DagsterRunStatus.FAILURE] * 3)
        result = evaluate(defs, instance, kafka_conf)
    assert not result.run_requests
    assert "backing off after 3 failed runs in a row" in result.skip_reason.skip_message
    alive = checks(result)[STREAM_ALIVE]
    assert not alive.passed and alive.severity == dg.AssetCheckSeverity.ERROR
    assert "crash loop" in (alive.description or "")
    (observation,) = [e for e in result.asset_events if isinstance(e, dg.AssetObservation)]
    assert observation.metadata["consecutive_failures"].value == 3
    assert observation.metadata["restarts"].value == 2


def test_lag_above_threshold_fails_the_lag_check(
    make_instance: Any, defs: Any, flow: Any, kafka_conf: dict[str, Any]
) -> None:
    from tidelake.platform.dev.produce import produce_demo_events

    produce_demo_events(flow, kafka_conf, count=40, malformed_share=0, progress=False)
    with make_instance() as instance:
        result = evaluate(defs, instance, kafka_conf)
    lag = checks(result)[LAG_BELOW_THRESHOLD]
    assert not lag.passed and "40 records behind, above the threshold of 10" in lag.description


def test_unreachable_broker_is_reported_not_swallowed(
    make_instance: Any, defs: Any, closed_port: int
) -> None:
    with make_instance() as instance:
        result = evaluate(defs, instance, {"bootstrap.servers": f"127.0.0.1:{closed_port}"})
    lag = checks(result)[LAG_BELOW_THRESHOLD]
    assert not lag.passed and "lag unknown" in lag.description
    assert result.run_requests  # supervision does not depend on the probe


def test_stale_started_run_is_failed_and_replaced(
    make_instance: Any, defs: Any, kafka_conf: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(always_on, "STALE_RUN_AFTER_S", -1.0)
    with make_instance() as instance:
        (run_id,) = add_runs(instance, dg.DagsterRunStatus.STARTED)
        result = evaluate(defs, instance, kafka_conf)
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
    assert len(result.run_requests) == 1


def test_days_past_event_time_and_lateness_are_materialized_once(
    make_instance: Any, defs: Any, flow: Any, engine_settings: Any, kafka_conf: Any
) -> None:
    # newest event 2026-11-21 03:00; lateness 2 h: 11-19 and 11-20 are closed, 11-21 is not
    times = {
        "2026-11-19": [datetime(2026, 11, 19, 10, tzinfo=UTC)] * 3,
        "2026-11-20": [datetime(2026, 11, 20, 23, 59, tzinfo=UTC)] * 2,
        "2026-11-21": [datetime(2026, 11, 21, 3, tzinfo=UTC)],
    }
    rows = [(t, date.fromisoformat(d)) for d, ts in times.items() for t in ts]
    table = pa.table(
        {
            "call_sid": [f"CA{i}" for i in range(len(rows))],
            "event_time": pa.array([t for t, _ in rows], pa.timestamp("us", "UTC")),
            "date": pa.array([d for _, d in rows], pa.date32()),
        }
    )
    uri = str(engine_settings.table_path(flow.table))
    for day in times:  # one file per date
        write_deltalake(
            uri,
            table.filter(pa.compute.equal(table["date"], date.fromisoformat(day))),
            partition_by=["date"],
            mode="append",
        )
    with make_instance() as instance:
        first = evaluate(defs, instance, kafka_conf)
        second = evaluate(defs, instance, kafka_conf, cursor=first.cursor)
    done = [e for e in first.asset_events if isinstance(e, dg.AssetMaterialization)]
    assert [(m.partition, m.metadata["dagster/row_count"].value) for m in done] == [
        ("2026-11-19", 3),
        ("2026-11-20", 2),
    ]
    assert all(m.metadata["files"].value == 1 for m in done)
    assert not [e for e in second.asset_events if isinstance(e, dg.AssetMaterialization)]
    assert flow.allowed_lateness == timedelta(hours=2)


def test_the_anomaly_detector_is_supervised_like_a_stream(
    make_instance: Any, defs: Any, kafka_conf: Any
) -> None:
    sensor = defs.resolve_sensor_def("call_anomaly_detector_supervisor")
    resources = {"kafka": KafkaResource(bootstrap_servers=kafka_conf["bootstrap.servers"])}
    with make_instance() as instance:
        context = dg.build_sensor_context(instance=instance, definitions=defs, resources=resources)
        (request,) = sensor(context).run_requests
        assert request.tags[STREAM_TAG] == "call_anomaly_detector"
        create_run_for_test(
            instance, job_name="call_anomaly_detector", status=dg.DagsterRunStatus.STARTED
        )
        context = dg.build_sensor_context(instance=instance, definitions=defs, resources=resources)
        result = sensor(context)
    assert not result.run_requests and "is STARTED" in result.skip_reason.skip_message
