"""The Dagster definitions are generated from flow declarations, with what the UI needs."""

from __future__ import annotations

import tomllib
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml
from flows import PAGE_VIEWS

from tidelake.assets.definitions import build_definitions, defs
from tidelake.assets.quality.partition_checks import EXPECTATIONS, QUARANTINE_SHARE, VOLUME
from tidelake.assets.stream.always_on import STREAM_TAG
from tidelake.assets.tables.asset_specs import LAG_BELOW_THRESHOLD, STREAM_ALIVE
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.declared import FLOWS
from tidelake.streaming.flow.engine_columns import (
    ENGINE_COLUMN_DESCRIPTIONS,
    ENGINE_COLUMNS,
    PARTITION_COLUMN_DESCRIPTION,
)
from tidelake.streaming.settings import EngineSettings

REPO = Path(__file__).resolve().parents[2]


def test_defs_load_and_workspace_and_pyproject_name_the_same_module() -> None:
    dg.Definitions.validate_loadable(defs)
    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text())
    (entry,) = workspace["load_from"]
    module = entry["python_module"]["module_name"]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert module == pyproject["tool"]["dagster"]["module_name"] == "tidelake.assets.definitions"


@pytest.fixture
def two_flows(tmp_path: Path) -> dg.Definitions:
    settings = EngineSettings(lake=tmp_path / "lake", checkpoints=tmp_path / "cp")
    return build_definitions({**FLOWS, PAGE_VIEWS.name: PAGE_VIEWS}, settings)


@pytest.mark.parametrize("flow", [CALL_EVENTS, PAGE_VIEWS], ids=lambda f: f.name)
def test_every_flow_gets_assets_job_sensor_and_checks(
    two_flows: dg.Definitions, flow: object, tmp_path: Path
) -> None:
    graph = two_flows.resolve_asset_graph()
    table = dg.AssetKey(["lake", flow.name])
    topic = dg.AssetKey(["kafka", flow.topic])
    node = graph.get(table)
    assert node.group_name == flow.name
    assert node.kinds == {"spark", "delta", "protobuf"}
    assert graph.get(topic).kinds == {"kafka", "protobuf"}
    assert node.parent_keys == {topic}
    assert isinstance(node.partitions_def, dg.DailyPartitionsDefinition)
    assert node.partitions_def.timezone == "UTC"
    metadata = node.metadata
    assert metadata["dagster/uri"] == str(tmp_path / "lake" / flow.name)
    assert metadata["partition_column"] == flow.partition_column
    columns = [c.name for c in metadata["dagster/column_schema"].columns]
    assert flow.key_field in columns and "date" in columns and "_error" not in columns
    assert dg.AssetKey(["lake", f"{flow.name}_quarantine"]) in graph.get_all_asset_keys()
    checks = {k.name for k in graph.get_check_keys_for_assets({table})}
    assert checks == {STREAM_ALIVE, LAG_BELOW_THRESHOLD, EXPECTATIONS, VOLUME, QUARANTINE_SHARE}

    job = two_flows.resolve_job_def(f"{flow.name}_stream")
    assert job.tags[STREAM_TAG] == flow.name
    assert job.tags["dagster/max_retries"] == "0"
    sensor = two_flows.resolve_sensor_def(f"{flow.name}_stream_supervisor")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert sensor.job_name == job.name


def test_the_column_list_has_the_protos_words_and_a_description_of_every_engine_column(
    two_flows: dg.Definitions,
) -> None:
    node = two_flows.resolve_asset_graph().get(dg.AssetKey(["lake", CALL_EVENTS.name]))
    columns = {c.name: c.description for c in node.metadata["dagster/column_schema"].columns}
    assert columns["duration"] == "seconds"  # protos/call.proto: `uint32 duration = 3;  // seconds`
    assert columns["event_time"] == "epoch milliseconds, UTC"
    assert columns["call_sid"] is None  # no comment in the .proto: no description
    shown = [c for c in ENGINE_COLUMNS if not c.startswith("_")]
    assert shown and {c: columns[c] for c in shown} == {
        c: ENGINE_COLUMN_DESCRIPTIONS[c] for c in shown
    }
    assert columns[CALL_EVENTS.partition_column] == PARTITION_COLUMN_DESCRIPTION
    assert set(ENGINE_COLUMN_DESCRIPTIONS) == set(ENGINE_COLUMNS)
    assert all(ENGINE_COLUMN_DESCRIPTIONS.values())


def test_spark_comes_from_one_lazy_dagster_pyspark_resource() -> None:
    from dagster_pyspark import LazyPySparkResource

    resources = defs.resources
    assert isinstance(resources["spark"], LazyPySparkResource)
    conf = resources["spark"].spark_config
    assert conf["spark.delta.logStore.file.impl"] == "dev.tidelake.delta.AtomicLocalLogStore"
    assert conf["spark.sql.session.timeZone"] == "UTC"


def test_instance_config_limits_each_stream_to_one_run_and_sets_no_max_runtime() -> None:
    config = yaml.safe_load((REPO / "platform" / "dev" / "dagster.yaml").read_text())
    assert config["run_monitoring"]["enabled"] is True
    assert "max_runtime_seconds" not in config["run_monitoring"]
    assert config["run_retries"]["enabled"] is True
    (limit,) = config["concurrency"]["runs"]["tag_concurrency_limits"]
    assert limit == {"key": STREAM_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1}


def test_instance_config_is_valid_for_dagster(tmp_path: Path) -> None:
    (tmp_path / "dagster.yaml").write_text((REPO / "platform" / "dev" / "dagster.yaml").read_text())
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.run_monitoring_enabled and instance.run_retries_enabled
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert limits[0]["key"] == STREAM_TAG


def test_call_events_get_the_anomaly_model_and_a_supervised_detector(
    two_flows: dg.Definitions,
) -> None:
    graph = two_flows.resolve_asset_graph()
    model = graph.get(dg.AssetKey(["models", "call_anomaly_model"]))
    assert model.parent_keys == {dg.AssetKey(["lake", "call_events"])}
    assert isinstance(model.partitions_def, dg.DailyPartitionsDefinition)
    assert model.automation_condition is not None
    for key in (["lake", "call_anomalies"], ["kafka", "call-anomalies"]):
        assert graph.get(dg.AssetKey(key)).parent_keys == {
            dg.AssetKey(["kafka", "call-events"]),
            model.key,
        }
    job = two_flows.resolve_job_def("call_anomaly_detector")
    assert job.tags[STREAM_TAG] == "call_anomaly_detector"
    sensor = two_flows.resolve_sensor_def("call_anomaly_detector_supervisor")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert sensor.job_name == job.name


def test_partitions_start_at_the_deployments_first_date(tmp_path: Path) -> None:
    """TIDELAKE_FIRST_DATE moves every partitioned asset's first day; no setting keeps the
    flow's declared first_date (with a lake retention that keeps every date)."""
    settings = EngineSettings(
        lake=tmp_path / "lake", checkpoints=tmp_path / "cp", lake_retention_days=0
    )
    default = build_definitions(FLOWS, settings).resolve_asset_graph()
    first = dg.AssetKey(["lake", CALL_EVENTS.name])
    assert default.get(first).partitions_def.start.date() == CALL_EVENTS.first_date

    moved = settings.model_copy(update={"first_date": date(2026, 11, 20)})
    graph = build_definitions(FLOWS, moved).resolve_asset_graph()
    starts = {
        node.partitions_def.start.date()
        for node in graph.asset_nodes
        if isinstance(node.partitions_def, dg.DailyPartitionsDefinition)
    }
    assert starts == {date(2026, 11, 20)}
    assert CALL_EVENTS.first_date == date(2026, 1, 1)  # the declaration itself is unchanged


def test_partitions_start_at_the_oldest_date_the_lake_keeps(tmp_path: Path) -> None:
    """Every partitioned asset starts at the oldest date TIDELAKE_LAKE_RETENTION_DAYS keeps when
    the definitions load (the dates the daily expiry deleted are no partitions), or at the
    flow's first date if that is later."""
    today = datetime.now(UTC).date()
    settings = EngineSettings(lake=tmp_path / "lake", checkpoints=tmp_path / "cp")
    for days, first_date, start in [
        (60, date(2026, 1, 1), max(date(2026, 1, 1), today - timedelta(days=60))),
        (3, date(2026, 1, 1), today - timedelta(days=3)),
        (3, today - timedelta(days=1), today - timedelta(days=1)),
    ]:
        chosen = settings.model_copy(update={"lake_retention_days": days, "first_date": first_date})
        graph = build_definitions(FLOWS, chosen).resolve_asset_graph()
        starts = {
            node.key: node.partitions_def.start.date()
            for node in graph.asset_nodes
            if isinstance(node.partitions_def, dg.DailyPartitionsDefinition)
        }
        assert len(starts) == 4 and set(starts.values()) == {start}, (days, starts)


def test_every_job_runs_its_steps_in_the_runs_own_process() -> None:
    """One process per run, so one Spark session per run: a process per step started a JVM per
    Spark step of a date's run."""
    jobs = [defs.resolve_implicit_global_asset_job_def(), *defs.resolve_all_job_defs()]
    assert {job.executor_def.name for job in jobs} == {dg.in_process_executor.name}


def test_sensor_intervals_are_the_settings(tmp_path: Path) -> None:
    """TIDELAKE_SUPERVISOR_INTERVAL sets every supervisor's tick (the streams' and the
    detector's), TIDELAKE_AUTOMATION_INTERVAL that of tidelake_automation."""
    settings = EngineSettings(
        lake=tmp_path / "lake",
        checkpoints=tmp_path / "checkpoints",
        supervisor_interval=7,
        automation_interval=9,
    )
    built = build_definitions(settings=settings)
    intervals = {s.name: s.minimum_interval_seconds for s in built.sensors or []}
    assert intervals.pop("tidelake_automation") == 9
    supervisors = {name for name in intervals if name.endswith("_supervisor")}
    assert {"call_events_stream_supervisor", "call_anomaly_detector_supervisor"} <= supervisors
    assert {intervals[name] for name in supervisors} == {7}


def test_the_hourly_table_upkeep_skips_while_a_run_of_it_is_unfinished() -> None:
    """A run waits for the table's pool slot behind a backfill: the next hour's is not queued
    behind it."""
    schedule = defs.resolve_schedule_def(f"{CALL_EVENTS.name}_table_upkeep_hourly")
    job = defs.resolve_job_def(f"{CALL_EVENTS.name}_table_upkeep")
    with dg.instance_for_test() as instance:
        idle = schedule.evaluate_tick(dg.build_schedule_context(instance=instance))
        assert idle.run_requests is not None and len(idle.run_requests) == 1
        instance.create_run_for_job(job_def=job, status=dg.DagsterRunStatus.STARTED)
        busy = schedule.evaluate_tick(dg.build_schedule_context(instance=instance))
        assert not busy.run_requests
        assert busy.skip_message
