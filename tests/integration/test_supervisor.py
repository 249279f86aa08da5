"""The supervisor: its pure decision, and the sensor built on it, evaluated with Dagster's helpers.

Sensor tests use a real instance (instance_for_test) on SQLite and on PostgreSQL, the local Kafka
broker for the lag probe and a real Delta table for partition closing; runs are recorded in the
instance with given statuses, except where a real run of the stream job fails (refused by the
secured broker) so that its own error line is what the supervisor reads.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer
from dagster._core.test_utils import create_run_for_test
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from kafka_topics import KEEP_FOREVER, set_retention
from lake_readers import read_delta
from live_stream import run_available_now

from tidelake.assets.definitions import build_definitions
from tidelake.assets.resources import KafkaResource
from tidelake.assets.stream import always_on
from tidelake.assets.stream.always_on import STREAM_TAG
from tidelake.assets.stream.health import HEALTH_HEARTBEAT_S
from tidelake.assets.stream.restart_pause import pause_restarts, resume_restarts
from tidelake.assets.stream.supervisor_decision import SupervisorPolicy
from tidelake.assets.tables.asset_specs import LAG_BELOW_THRESHOLD, STREAM_ALIVE
from tidelake.assets.tables.keys import table_key
from tidelake.platform.local.kafka_broker import LocalKafkaBroker
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.demo_events import call_event
from tidelake.streaming.kafka.admin import delete_topic, ensure_topic, quiet_client_config
from tidelake.streaming.settings import kafka_client_env
from tidelake.streaming.stream.status import committed_batch

POLICY = SupervisorPolicy(backoff_base_s=30, backoff_cap_s=600, healthy_after_s=300)
REPO = Path(__file__).resolve().parents[2]


# ---- the pure decision -------------------------------------------------------------------------


# ---- the sensor, evaluated against a real instance ----------------------------------------------


@pytest.fixture
def flow(kafka_conf: dict[str, Any], topic_name: str) -> Any:
    flow = dataclasses.replace(CALL_EVENTS, topic=topic_name, max_lag=10)
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    return flow


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


def observations(result: dg.SensorResult) -> list[dg.AssetObservation]:
    return [e for e in result.asset_events if isinstance(e, dg.AssetObservation)]


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


def test_a_pause_of_the_restarts_keeps_a_canceled_stream_stopped_until_it_is_lifted(
    make_instance: Any, defs: Any, kafka_conf: Any
) -> None:
    """What `tidelake dev` sets while it stops the platform: the canceled stream is not
    restarted meanwhile, and is on the first tick after the pause is lifted."""
    with make_instance() as instance:
        (run_id,) = add_runs(instance, dg.DagsterRunStatus.CANCELED)
        pause_restarts(instance, "tidelake dev is stopping")
        paused = evaluate(defs, instance, kafka_conf)
        resume_restarts(instance)
        resumed = evaluate(defs, instance, kafka_conf)
    assert not paused.run_requests
    reason = paused.skip_reason.skip_message
    assert reason.startswith(f"run {run_id} ended CANCELED; restarting; not now: ")
    assert "tidelake dev is stopping (since " in reason
    assert len(resumed.run_requests) == 1


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
    assert observation.metadata["restarts_24h"].value == 2


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
        later = evaluate(defs, instance, kafka_conf)  # now read back from the run's failure
    assert len(result.run_requests) == 1
    for tick in (result, later):
        (request,) = tick.run_requests or []
        reason = request.tags["tidelake/supervisor_reason"]
        assert reason.startswith(f"run {run_id} ended FAILURE: stream run silent for ")
        assert reason.endswith("s: its worker is lost; restarting")


# ---- what the sensor records, and how often (issue 38) ----------------------------------------


def test_unchanged_health_is_recorded_again_only_at_the_heartbeat(
    make_instance: Any, defs: Any, kafka_conf: Any
) -> None:
    with make_instance() as instance:
        add_runs(instance, dg.DagsterRunStatus.STARTED)
        first = evaluate(defs, instance, kafka_conf)
        assert len(observations(first)) == 1 and set(checks(first)) == {
            STREAM_ALIVE,
            LAG_BELOW_THRESHOLD,
        }
        same = evaluate(defs, instance, kafka_conf, first.cursor)
        assert same.asset_events == []  # nothing changed: nothing stored
        assert same.skip_reason is not None and "is STARTED" in same.skip_reason.skip_message
        cursor = json.loads(same.cursor or "{}")
        cursor["health_at"] -= HEALTH_HEARTBEAT_S  # the heartbeat is due
        beat = evaluate(defs, instance, kafka_conf, json.dumps(cursor))
        assert len(observations(beat)) == 1 and set(checks(beat)) == {
            STREAM_ALIVE,
            LAG_BELOW_THRESHOLD,
        }
        after_beat = evaluate(defs, instance, kafka_conf, beat.cursor)
    assert after_beat.asset_events == []


def test_a_changed_verdict_is_recorded_on_the_tick_it_is_seen(
    make_instance: Any, defs: Any, kafka_conf: Any
) -> None:
    with make_instance() as instance:
        (run_id,) = add_runs(instance, dg.DagsterRunStatus.STARTED)
        first = evaluate(defs, instance, kafka_conf)
        assert checks(first)[STREAM_ALIVE].passed
        run = instance.get_run_by_id(run_id)
        assert run is not None
        instance.report_run_failed(run, message="the worker died")
        changed = evaluate(defs, instance, kafka_conf, first.cursor)
    assert len(changed.run_requests or []) == 1
    alive = checks(changed)[STREAM_ALIVE]
    assert not alive.passed and alive.severity == dg.AssetCheckSeverity.ERROR
    (observation,) = observations(changed)
    assert observation.metadata["consecutive_failures"].value == 1


def test_lag_is_recorded_when_it_crosses_a_band_not_when_it_moves_within_one(
    make_instance: Any, defs: Any, flow: Any, kafka_conf: dict[str, Any]
) -> None:
    from tidelake.platform.dev.produce import produce_demo_events

    with make_instance() as instance:
        add_runs(instance, dg.DagsterRunStatus.STARTED)
        first = evaluate(defs, instance, kafka_conf)  # empty topic: lag 0
        produce_demo_events(flow, kafka_conf, count=1, malformed_share=0, progress=False)
        within = evaluate(defs, instance, kafka_conf, first.cursor)  # 1 of max_lag 10
        assert within.asset_events == []
        produce_demo_events(flow, kafka_conf, count=40, malformed_share=0, progress=False)
        crossed = evaluate(defs, instance, kafka_conf, within.cursor)
    lag = checks(crossed)[LAG_BELOW_THRESHOLD]
    assert not lag.passed and "41 records behind" in (lag.description or "")
    (observation,) = observations(crossed)
    assert observation.metadata["lag_total"].value == 41


def test_the_runs_progress_is_logged_each_report_and_observed_at_the_heartbeat(
    flow: Any, kafka_conf: dict[str, Any]
) -> None:
    from tidelake.assets.stream.job import ProgressReporter
    from tidelake.streaming.schemas.writer_schemas import WriterSchemas

    class Query:
        name = flow.name
        recentProgress: list[dict[str, Any]] = []  # Spark's name

    now = [0.0]
    progress = {"batchId": 1, "numInputRows": 10, "durationMs": {"triggerExecution": 5}}

    @dg.op
    def report(context) -> None:  # type: ignore[no-untyped-def]  # dagster reads the hint
        schemas = WriterSchemas(flow, None)
        reporter = ProgressReporter(context, flow, kafka_conf, schemas, clock=lambda: now[0])
        for at in (0.0, 30.0, HEALTH_HEARTBEAT_S - 1, HEALTH_HEARTBEAT_S, HEALTH_HEARTBEAT_S + 30):
            now[0] = at
            reporter(Query(), progress)  # type: ignore[arg-type]

    context = dg.build_op_context()
    report(context)
    observed = [e for e in context.get_events() if isinstance(e, dg.AssetObservation)]
    assert len(observed) == 2  # at 0 s and at the heartbeat
    assert observed[0].metadata["batch_rows"].value == 10


def test_the_dev_instance_settings_keep_sensor_ticks_as_documented(tmp_path: Path) -> None:
    """platform/dev/dagster.yaml, loaded by a real instance: SKIPPED ticks for a day, SUCCESS
    and FAILURE for 30 days (Dagster's defaults: 7 days, forever, forever)."""
    from dagster._core.scheduler.instigation import InstigatorType, TickStatus

    shutil.copy(REPO / "platform/dev/dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        kept = instance.get_tick_retention_settings(InstigatorType.SENSOR)
    assert kept[TickStatus.SKIPPED] == 1
    assert kept[TickStatus.SUCCESS] == 30
    assert kept[TickStatus.FAILURE] == 30


def _closed(result: dg.SensorResult) -> dict[str, int]:
    return {
        e.partition: e.metadata["dagster/row_count"].value
        for e in result.asset_events
        if isinstance(e, dg.AssetMaterialization)
    }


def test_a_day_closes_on_the_streams_clock_even_when_event_time_runs_ahead(
    spark: Any, defs: Any, flow: Any, engine_settings: Any, kafka_conf: Any
) -> None:
    """A producer whose event clock runs 50 minutes ahead of its Kafka timestamps: by event
    time day D looks over before the stream stops accepting D's records. The supervisor closes D
    only once the stream has passed a record stamped after D closed in every partition, and a
    day it closed never gains a row."""
    set_retention(kafka_conf, flow.topic, KEEP_FOREVER)
    day = (datetime.now(UTC) - timedelta(days=3)).date()
    closes = flow.closes_at(day)
    ahead = timedelta(minutes=50)
    producer = Producer(quiet_client_config(kafka_conf))
    rng = random.Random(11)

    def send(stamp: datetime, event: datetime, partition: int) -> None:
        e = call_event(rng, int(event.timestamp() * 1000))
        ts = int(stamp.timestamp() * 1000)
        producer.produce(flow.topic, e.SerializeToString(), partition=partition, timestamp=ts)

    def stream_then_evaluate(cursor: str | None) -> dg.SensorResult:
        assert producer.flush(30) == 0
        run_available_now(spark, flow, engine_settings, kafka_conf)
        with dg.instance_for_test() as instance:
            return evaluate(defs, instance, kafka_conf, cursor)

    partitions = range(flow.topic_partitions)
    for p in partitions:  # D's events, stamped as sent; then the skewed clock's, 40 min before
        send(closes - timedelta(hours=5), closes - timedelta(hours=5), p)  # D closes
        stamp = closes - timedelta(minutes=40)
        send(stamp, stamp + ahead, p)
    first = stream_then_evaluate(None)
    # event time has reached closes + 10 min, yet the stream still accepts D: D stays open
    assert _closed(first) == {}
    late_on_d = closes - flow.allowed_lateness - timedelta(minutes=1)  # 23:59 on D
    for p in partitions:
        send(closes - timedelta(minutes=30), late_on_d, p)
    second = stream_then_evaluate(first.cursor)
    assert _closed(second) == {}
    rows = read_delta(engine_settings.table_uri(flow.table))
    kept = pc.sum(pc.equal(rows["date"], day)).as_py()
    assert kept == 2 * flow.topic_partitions

    # a record stamped after D closed in all but one partition: still open
    for p in partitions:
        if p:
            send(closes + timedelta(minutes=5), closes + timedelta(minutes=5) + ahead, p)
    third = stream_then_evaluate(second.cursor)
    assert _closed(third) == {}
    send(closes + timedelta(minutes=5), closes + timedelta(minutes=5) + ahead, 0)
    fourth = stream_then_evaluate(third.cursor)
    assert _closed(fourth) == {day.isoformat(): kept}

    # from now on the stream quarantines D's records: the closed day never changes
    for p in partitions:
        send(closes - timedelta(minutes=20), late_on_d, p)
    fifth = stream_then_evaluate(fourth.cursor)
    assert _closed(fifth) == {}
    rows = read_delta(engine_settings.table_uri(flow.table))
    assert pc.sum(pc.equal(rows["date"], day)).as_py() == kept


def test_the_table_is_not_read_on_ticks_before_a_date_can_close(
    spark: Any, defs: Any, flow: Any, engine_settings: Any, kafka_conf: Any
) -> None:
    """A stream on its first day: the first tick reads the table for its oldest date; later
    ticks, while no date can have closed by the clock, read neither the table's log nor Kafka
    for it (a read costs what the open date's files cost, which grow all day). A table whose
    log no longer reads shows it: those ticks still succeed, close nothing, and keep the
    cursor."""
    producer = Producer(quiet_client_config(kafka_conf))
    rng = random.Random(5)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    for p in range(flow.topic_partitions):
        event = call_event(rng, now_ms - 60_000)
        producer.produce(flow.topic, event.SerializeToString(), partition=p, timestamp=now_ms)
    assert producer.flush(30) == 0
    run_available_now(spark, flow, engine_settings, kafka_conf)
    with dg.instance_for_test() as instance:
        first = evaluate(defs, instance, kafka_conf)
        assert _closed(first) == {}
        watch_from = json.loads(first.cursor or "{}")["watch_from"]
        assert flow.closes_at(datetime.fromisoformat(watch_from).date()) > datetime.now(UTC)

        log = Path(engine_settings.table_uri(flow.table)) / "_delta_log"
        newest = max(log.glob("*.json"))
        (log / f"{int(newest.stem) + 1:020d}.json").write_text("not a Delta commit\n")
        with pytest.raises(DeltaError, match="Json error"):
            DeltaTable(str(log.parent))
        for _ in range(2):
            later = evaluate(defs, instance, kafka_conf, first.cursor)
            assert _closed(later) == {}
            assert json.loads(later.cursor or "{}")["watch_from"] == watch_from


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


@pytest.mark.parametrize("make_instance", ["sqlite"], indirect=True)  # Kafka's line is the subject
def test_a_stream_refused_by_kafka_shows_kafkas_line_not_a_silent_restart_loop(
    make_instance: Any,
    secured_local_broker: LocalKafkaBroker,
    engine_settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 31: real runs of the stream job, refused by the secured broker (a wrong password),
    fail with Kafka's one line; the supervisor's reason, its stream_alive check and the check
    executed on demand all name that line, first on the restart, then in the crash loop."""
    admin = secured_local_broker.client_config()
    flow = dataclasses.replace(CALL_EVENTS, topic=f"tidelake-test-refused-{uuid.uuid4().hex[:8]}")
    ensure_topic(admin, flow.topic, flow.topic_partitions)  # only the password is wrong
    wrong = secured_local_broker.client_config("stream") | {"sasl.password": "not-it"}
    for name, value in kafka_client_env(wrong).items():
        monkeypatch.setenv(name, value)  # the engine and KafkaResource read KAFKA_*
    key = table_key(flow)
    health = dg.define_asset_job(
        "stream_health_now",
        dg.AssetSelection.checks(
            dg.AssetCheckKey(key, STREAM_ALIVE), dg.AssetCheckKey(key, LAG_BELOW_THRESHOLD)
        ),
    )
    defs = dg.Definitions.merge(
        build_definitions({flow.name: flow}, engine_settings, POLICY), dg.Definitions(jobs=[health])
    )
    stream_job = defs.resolve_job_def("call_events_stream")
    conf = {"bootstrap.servers": wrong["bootstrap.servers"]}
    try:
        with make_instance() as instance:

            def fail_once() -> tuple[str, str]:
                result = stream_job.execute_in_process(instance=instance, raise_on_error=False)
                assert not result.success
                (failure,) = result.get_step_failure_events()
                user_failure = failure.step_failure_data.user_failure_data
                assert user_failure is not None and user_failure.description
                return result.run_id, user_failure.description

            refused = (
                f"Kafka at bootstrap.servers={wrong['bootstrap.servers']} refused user 'stream' "
                "(SCRAM-SHA-512): "
            )
            run_id, line = fail_once()
            assert line.startswith(refused) and "\n" not in line and "not-it" not in line

            restart = evaluate(defs, instance, conf)
            (request,) = restart.run_requests or []
            reason = f"run {run_id} ended FAILURE: {line}; restarting"
            assert request.tags["tidelake/supervisor_reason"] == reason
            alive = checks(restart)[STREAM_ALIVE]
            assert not alive.passed and alive.severity == dg.AssetCheckSeverity.ERROR
            assert alive.description == f"no stream run: {reason}"
            assert alive.metadata["last_error"].value == line

            for _ in range(2):  # the line differs in librdkafka's timing: the newest one counts
                run_id, line = fail_once()
            assert line.startswith(refused)
            backing_off = evaluate(defs, instance, conf)
            assert not backing_off.run_requests
            assert backing_off.skip_reason is not None
            skip = backing_off.skip_reason.skip_message or ""
            assert skip.startswith(f"backing off after 3 failed runs in a row (newest {run_id})")
            assert skip.endswith(f"; last error: {line}")
            alive = checks(backing_off)[STREAM_ALIVE]
            assert not alive.passed and alive.severity == dg.AssetCheckSeverity.ERROR
            description = alive.description or ""
            assert description.startswith("crash loop: 3 failed runs in a row; next attempt at ")
            assert description.endswith(f"; last error: {line}")
            assert alive.metadata["last_error"].value == line

            executed = defs.resolve_job_def(health.name).execute_in_process(instance=instance)
            on_demand = {
                e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
                for e in executed.all_events
                if e.event_type_value == "ASSET_CHECK_EVALUATION"
            }
            assert (on_demand[STREAM_ALIVE].description or "").endswith(f"; last error: {line}")
            assert on_demand[STREAM_ALIVE].metadata["last_error"].value == line
    finally:
        delete_topic(admin, flow.topic)
    # refused before Spark started: no table, no checkpoint commit, nothing written
    assert not DeltaTable.is_deltatable(engine_settings.table_uri(flow.table))
    assert committed_batch(engine_settings.checkpoint_uri(flow.name), flow.topic) is None
