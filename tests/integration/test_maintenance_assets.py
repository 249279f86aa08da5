"""The backfill, compaction and vacuum as Dagster runs them (in process, real instance)."""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable, write_deltalake
from failed_calls_use_case import FAILED_CALLS
from lake_readers import files_by_date, read_delta, rows_by_date
from live_stream import produce_and_stream
from stores import copy_tree

from tidelake.assets.definitions import build_definitions
from tidelake.assets.tables.keys import compaction_key, quarantine_key, table_key, use_case_key
from tidelake.assets.tables.table_backfill import table_pool
from tidelake.assets.tables.table_maintenance import EXPIRED
from tidelake.platform.dev.produce import ProduceReport, produce_demo_events
from tidelake.streaming.batch.backfill import BackfillError, plan_backfill
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.use_cases import ACCOUNT_ACTIVITY
from tidelake.streaming.kafka.admin import delete_topic, ensure_topic, quiet_client_config
from tidelake.streaming.kafka.offsets import PartitionEnds
from tidelake.streaming.settings import EngineSettings

EVENTS: dict[str, Any] = {"count": 2000, "days": 3, "seed": 31}
"""The demo events every test's table holds."""


@pytest.fixture(scope="module")
def streamed(
    spark: Any, kafka_conf: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, ProduceReport, EngineSettings]]:
    """EVENTS streamed once for the module (each test gets a copy)."""
    flow = dataclasses.replace(CALL_EVENTS, topic=f"tidelake-test-maintenance-{uuid.uuid4().hex}")
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    root = tmp_path_factory.mktemp("streamed")
    settings = EngineSettings(
        lake=str(root / "lake"), checkpoints=str(root / "checkpoints"), max_offsets_per_trigger=300
    )
    run = produce_and_stream(spark, flow, settings, kafka_conf, **EVENTS)
    yield flow, run.report, settings
    delete_topic(kafka_conf, flow.topic)


@dataclass
class TableCopy:
    """A test's copy of the module's streamed table and checkpoint, and the definitions over it
    (their own resources: Kafka from the environment, Spark's session of this run)."""

    flow: Any
    report: ProduceReport
    settings: EngineSettings
    defs: dg.Definitions

    @property
    def table_uri(self) -> str:
        return self.settings.table_uri(self.flow.table)


@pytest.fixture
def setup(
    streamed: tuple[Any, ProduceReport, EngineSettings],
    kafka_conf: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> TableCopy:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_conf["bootstrap.servers"])
    flow, report, source = streamed
    settings = source.model_copy(
        update={"lake": str(tmp_path / "lake"), "checkpoints": str(tmp_path / "checkpoints")}
    )
    copy_tree(source.lake, settings.lake)
    copy_tree(source.checkpoints, settings.checkpoints)
    return TableCopy(flow, report, settings, build_definitions({flow.name: flow}, settings))


def _asset(defs: dg.Definitions, key: dg.AssetKey) -> dg.AssetsDefinition:
    return defs.resolve_assets_def(key)


def _failed_backfill(defs: dg.Definitions, flow: Any, day: str) -> str:
    """The error of a backfill of `day` that must fail."""
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [_asset(defs, table_key(flow))],
            instance=instance,
            partition_key=day,
            raise_on_error=False,
        )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return str(failure.event_specific_data.error)


def test_materializing_a_date_range_backfills_in_one_run(setup: TableCopy) -> None:
    flow, report, table_uri, defs = setup.flow, setup.report, setup.table_uri, setup.defs
    days = sorted(report.by_date)[:2]
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [_asset(defs, table_key(flow))],
            instance=instance,
            tags={
                "dagster/asset_partition_range_start": days[0],
                "dagster/asset_partition_range_end": days[1],
            },
        )
        assert result.success
        (materialization,) = result.asset_materializations_for_node(f"backfill_{flow.name}")[:1]
        records = instance.fetch_materializations(table_key(flow), limit=10).records
    assert sorted(r.partition_key for r in records) == days  # one run, both partitions
    assert materialization.metadata["rows_by_date"].value == {d: report.by_date[d] for d in days}
    keys = read_delta(table_uri).column("call_sid").to_pylist()
    assert len(keys) == report.good == len(set(keys))


def test_backfill_failure_names_the_cause_and_keeps_the_table(setup: TableCopy) -> None:
    flow, report, table_uri = setup.flow, setup.report, setup.table_uri
    other = dataclasses.replace(flow, name="call_events_elsewhere")  # no stream ever ran
    defs = build_definitions({other.name: other}, setup.settings)
    message = _failed_backfill(defs, other, sorted(report.by_date)[0])
    assert "start the call_events_elsewhere stream" in message
    assert read_delta(table_uri).num_rows == report.good


def test_backfill_of_a_day_kafka_no_longer_holds_fails_before_spark(
    setup: TableCopy, kafka_conf: dict[str, Any], topic_name: str
) -> None:
    """Records of the first day deleted from Kafka (what retention does): its backfill fails in
    the planning step, which runs before the Spark session is built, and the table is kept.
    The same events on a topic of the test's own: the module's other tests read theirs."""
    table_uri = setup.table_uri
    flow = dataclasses.replace(setup.flow, topic=topic_name)
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    produced = produce_demo_events(flow, kafka_conf, progress=False, **EVENTS)
    defs = build_definitions({flow.name: flow}, setup.settings)  # the copy's lake, this topic
    first, second = sorted(produced.by_date)[:2]  # its own dates: midnight may have passed
    second_ms = int(datetime.fromisoformat(second).replace(tzinfo=UTC).timestamp() * 1000)
    probe = PartitionEnds(kafka_conf, "test", 10)
    try:
        cut = probe.first_records_after(probe.partitions([flow.topic]), second_ms)
    finally:
        probe.close()
    admin = AdminClient(quiet_client_config(kafka_conf))
    deleted = admin.delete_records(
        [TopicPartition(t, p, o) for (t, p), o in cut.items() if o is not None]
    )
    for future in deleted.values():
        future.result(timeout=30)
    before = read_delta(table_uri)
    message = _failed_backfill(defs, flow, first)
    assert f"Kafka topic {flow.topic!r} no longer holds every record" in message
    complete = re.search(r"the earliest date still complete in Kafka is (\S+)\.", message)
    assert complete is not None and complete.group(1) > second  # records of `second` are cut too
    assert read_delta(table_uri).equals(before)


def test_compaction_asset_reports_files_before_and_after(setup: TableCopy) -> None:
    flow, report, table_uri, defs = setup.flow, setup.report, setup.table_uri, setup.defs
    day = sorted(report.by_date)[-2]  # yesterday: today is not a partition yet
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [_asset(defs, compaction_key(flow))],
            instance=instance,
            partition_key=day,
            selection=[compaction_key(flow)],
        )
    (m,) = result.asset_materializations_for_node(f"lake__{flow.table}_compacted")
    assert m.metadata["files_before"].value > m.metadata["files_after"].value == 1
    assert m.metadata["dagster/row_count"].value == report.by_date[day]
    assert m.metadata["quarantine_files_after"].value <= 1  # dated by Kafka's clock: few here
    assert read_delta(table_uri).num_rows == report.good


def test_vacuum_job_observes_what_it_removed(setup: TableCopy) -> None:
    flow, report, table_uri, defs = setup.flow, setup.report, setup.table_uri, setup.defs
    job = defs.resolve_job_def(f"{flow.name}_vacuum")
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(
            instance=instance,
            run_config={"ops": {f"vacuum_{flow.name}": {"config": {"retention_hours": 24}}}},
        )
    assert result.success
    observed = [
        e.event_specific_data.asset_observation
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION" and e.step_key == f"vacuum_{flow.name}"
    ]
    assert {o.asset_key for o in observed} == {
        table_key(flow),
        dg.AssetKey(["lake", flow.quarantine_table]),
    }
    assert all("vacuum_removed_files" in o.metadata for o in observed)
    assert read_delta(table_uri).num_rows == report.good


def test_vacuum_job_vacuums_a_table_with_deletion_vectors_through_delta_spark(
    setup: TableCopy, spark: Any
) -> None:
    """Rows deleted in delta-spark with deletion vectors: the job's vacuum goes through the run's
    Spark session (delta-spark's VACUUM), whose deletion vector stays and whose rows stay gone."""
    flow, report, table_uri, defs = setup.flow, setup.report, setup.table_uri, setup.defs
    one = read_delta(table_uri).column(flow.key_field)[0].as_py()
    spark.sql(
        f"ALTER TABLE delta.`{table_uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)"
    )
    spark.sql(f"DELETE FROM delta.`{table_uri}` WHERE {flow.key_field} = '{one}'")
    (vector,) = Path(table_uri).glob("deletion_vector_*.bin")
    job = defs.resolve_job_def(f"{flow.name}_vacuum")
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance)
    assert result.success
    assert vector.exists()
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table_uri}`").collect()
    assert "VACUUM END" in {row.operation for row in history}
    assert spark.read.format("delta").load(table_uri).count() == report.good - 1


def test_vacuum_job_deletes_the_dates_older_than_the_lake_retention(setup: TableCopy) -> None:
    """The oldest date goes from the table and its quarantine in a commit that rewrites
    nothing; DuckDB reads the rest unchanged; a second run finds nothing to delete."""
    flow, report, table_uri, defs = setup.flow, setup.report, setup.table_uri, setup.defs
    quarantine_uri = setup.settings.table_uri(flow.quarantine_table)
    oldest, kept = sorted(report.by_date)[:2]
    days = (datetime.now(UTC).date() - date.fromisoformat(kept)).days  # the first kept: `kept`
    quarantined = rows_by_date(quarantine_uri)
    job = defs.resolve_job_def(f"{flow.name}_vacuum")
    config = {"ops": {f"expire_dates_{flow.name}": {"config": {"days": days}}}}
    with dg.instance_for_test() as instance:
        runs = [job.execute_in_process(instance=instance, run_config=config) for _ in range(2)]
    first, again = (_expired_dates(run) for run in runs)
    assert first == {
        table_key(flow): 1,
        quarantine_key(flow): len([d for d in quarantined if d < kept]),
    }
    assert again == {table_key(flow): 0, quarantine_key(flow): 0}
    assert _marked_expired(runs[0]) == {oldest}  # still a partition of these definitions
    assert _marked_expired(runs[1]) == set()
    assert rows_by_date(table_uri) == {d: n for d, n in report.by_date.items() if d != oldest}
    assert rows_by_date(quarantine_uri) == {d: n for d, n in quarantined.items() if d >= kept}
    last = DeltaTable(table_uri).history(1)[0]
    assert last["operation"] == "DELETE"
    assert last["operationMetrics"]["num_copied_rows"] == 0


def _expired_dates(run: dg.ExecuteInProcessResult) -> dict[dg.AssetKey, int]:
    observations = [
        e.event_specific_data.asset_observation
        for e in run.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    ]
    return {
        o.asset_key: o.metadata["expired_dates"].value
        for o in observations
        if "expired_dates" in o.metadata
    }


def _marked_expired(run: dg.ExecuteInProcessResult) -> set[str]:
    """The date partitions the run marked deleted by the lake's retention."""
    return {
        e.event_specific_data.asset_observation.partition
        for e in run.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
        and EXPIRED in e.event_specific_data.asset_observation.metadata
    }


def test_backfill_of_a_date_older_than_the_lake_retention_is_refused(
    setup: TableCopy, kafka_conf: dict[str, Any]
) -> None:
    """Definitions loaded after the date expired do not offer it (no partition); a plan made
    under definitions loaded before (or from plain Python) is refused in tidelake's words."""
    flow, report, table_uri = setup.flow, setup.report, setup.table_uri
    oldest = sorted(report.by_date)[0]
    settings = setup.settings.model_copy(update={"lake_retention_days": 1})
    defs = build_definitions({flow.name: flow}, settings)
    partitions = _asset(defs, table_key(flow)).partitions_def
    assert partitions is not None and not partitions.has_partition_key(oldest)
    before = read_delta(table_uri)
    with pytest.raises(BackfillError) as refused:
        plan_backfill(flow, [oldest], settings, kafka_conf)
    assert f"{oldest} is older than the lake's retention (1 days" in str(refused.value)
    assert "TIDELAKE_LAKE_RETENTION_DAYS" in str(refused.value)
    assert read_delta(table_uri).equals(before)


def test_table_upkeep_compacts_the_open_dates_and_checkpoints_the_logs(setup: TableCopy) -> None:
    flow, report, table_uri, defs = setup.flow, setup.report, setup.table_uri, setup.defs
    quarantine_uri = setup.settings.table_uri(flow.quarantine_table)
    job = defs.resolve_job_def(f"{flow.name}_table_upkeep")
    pools = {node.name: node.definition.pool for node in job.graph.nodes}
    assert pools == {  # the log upkeep commits nothing: no table slot
        f"compact_open_dates_{flow.name}": table_pool(flow),
        f"log_upkeep_{flow.name}": None,
    }
    tables = (table_uri, quarantine_uri)
    files = {uri: files_by_date(uri) for uri in tables}
    rows = {uri: rows_by_date(uri) for uri in tables}
    open_before = {d.isoformat() for d in flow.open_dates(datetime.now(UTC))}
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance)
    open_after = {d.isoformat() for d in flow.open_dates(datetime.now(UTC))}
    open_throughout, ever_open = open_before & open_after, open_before | open_after
    assert result.success
    for uri in tables:
        after = files_by_date(uri)
        assert {d: n for d, n in files[uri].items() if d not in ever_open} == {
            d: n for d, n in after.items() if d not in ever_open
        }  # closed dates wait for their own compaction
        assert {d: after[d] for d in files[uri] if d in open_throughout} == {
            d: 1 for d in files[uri] if d in open_throughout
        }
        assert rows_by_date(uri) == rows[uri]
    compacted = [d for d in files[table_uri] if d in open_throughout and files[table_uri][d] > 1]
    assert compacted  # the quarantine's open dates may hold one file: their check is the loop's
    assert sum(rows[table_uri].values()) == report.good
    observed: dict[dg.AssetKey, list[dict[str, Any]]] = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_OBSERVATION":
            observation = event.event_specific_data.asset_observation
            observed.setdefault(observation.asset_key, []).append(observation.metadata)
    assert set(observed) == {table_key(flow), dg.AssetKey(["lake", flow.quarantine_table])}
    table = observed[table_key(flow)]
    assert {m["open_date_compacted"].value for m in table if "open_date_compacted" in m} >= set(
        compacted
    )
    (log,) = [m for m in table if "delta_log_files" in m]
    assert log["delta_log_files"].value > 0
    assert f"{log['table_version'].value:020d}.checkpoint.parquet" in os.listdir(
        f"{table_uri}/_delta_log"
    )
    schedule = defs.resolve_schedule_def(f"{flow.name}_table_upkeep_hourly")
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING


def test_compaction_runs_automatically_and_maintenance_shares_a_pool(setup: TableCopy) -> None:
    flow, defs = setup.flow, setup.defs
    compaction = _asset(defs, compaction_key(flow))
    assert compaction.automation_conditions_by_key[compaction_key(flow)] is not None
    backfill = _asset(defs, table_key(flow))
    assert backfill.backfill_policy == dg.BackfillPolicy.single_run()
    pools = {compaction.op.pool, backfill.op.pool}
    pools.add(defs.resolve_job_def(f"{flow.name}_vacuum").graph.node_defs[0].pool)
    assert pools == {f"tidelake_table_{flow.name}"}
    schedule = defs.resolve_schedule_def(f"{flow.name}_vacuum_daily")
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert defs.resolve_sensor_def("tidelake_automation").default_status == (
        dg.DefaultSensorStatus.RUNNING
    )


def _observed(run: dg.ExecuteInProcessResult, key: dg.AssetKey) -> list[dict[str, Any]]:
    return [
        e.event_specific_data.asset_observation.metadata
        for e in run.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
        and e.event_specific_data.asset_observation.asset_key == key
    ]


def test_the_flows_upkeep_keeps_the_tables_of_its_use_cases(setup: TableCopy) -> None:
    """An Append use case's table gets a file per micro-batch and date, as the flow's does, and a
    Delta log its writer never cuts: the hourly upkeep compacts its open dates and checkpoints
    and cuts its log, the flow's compaction of a closed date compacts that date of it too, and
    the vacuum reaches an upsert use case's table. Rows stay as they were."""
    flow, report = setup.flow, setup.report
    settings = setup.settings.model_copy(update={"use_case_modules": ["failed_calls_use_case"]})
    defs = build_definitions({flow.name: flow}, settings)
    appended = settings.table_uri(FAILED_CALLS.table)
    closed = sorted(report.by_date)[0]
    open_days = [d.isoformat() for d in flow.open_dates(datetime.now(UTC))]
    assert closed not in open_days
    for batch in range(3):  # three micro-batches, each writing every date
        rows = [
            {
                "call_sid": f"CA{batch}{day}",
                "account_sid": "AC1",
                "event_timestamp": datetime.fromisoformat(day).replace(tzinfo=UTC),
                "date": date.fromisoformat(day),
            }
            for day in [closed, *open_days]
        ]
        write_deltalake(appended, pa.Table.from_pylist(rows), mode="append", partition_by=["date"])
    upserted = settings.table_uri(ACCOUNT_ACTIVITY.table)
    for calls in (1, 2):  # as a MERGE does, a rewrite leaves the replaced file to the vacuum
        activity = pa.table({"account_sid": ["AC1"], "calls": [calls]})
        write_deltalake(upserted, activity, mode="overwrite")
    rows = rows_by_date(appended)

    with dg.instance_for_test() as instance:
        upkeep = defs.resolve_job_def(f"{flow.name}_table_upkeep").execute_in_process(
            instance=instance
        )
        assert upkeep.success
        assert files_by_date(appended) == {closed: 3, **dict.fromkeys(open_days, 1)}
        observed = _observed(upkeep, use_case_key(FAILED_CALLS))
        assert {m["open_date_compacted"].value for m in observed if "open_date_compacted" in m} == (
            set(open_days)
        )
        (log,) = [m for m in observed if "delta_log_files" in m]
        assert f"{log['table_version'].value:020d}.checkpoint.parquet" in os.listdir(
            f"{appended}/_delta_log"
        )
        (upsert_state,) = _observed(upkeep, use_case_key(ACCOUNT_ACTIVITY))
        assert upsert_state["live_files"].value == 1
        assert upsert_state["delta_log_files"].value == len(os.listdir(f"{upserted}/_delta_log"))
        assert upsert_state["table_version"].value == 1

        compaction = dg.materialize(
            [_asset(defs, compaction_key(flow))], instance=instance, partition_key=closed
        )
        assert files_by_date(appended)[closed] == 1
        (compacted,) = _observed(compaction, use_case_key(FAILED_CALLS))
        assert compacted["date_compacted"].value == closed
        assert compacted["files_before"].value == 3

        vacuum = defs.resolve_job_def(f"{flow.name}_vacuum").execute_in_process(instance=instance)
        assert vacuum.success
    for key in (use_case_key(FAILED_CALLS), use_case_key(ACCOUNT_ACTIVITY)):
        assert [m for m in _observed(vacuum, key) if "vacuum_removed_files" in m]
    assert rows_by_date(appended) == rows
    assert read_delta(upserted).column("calls").to_pylist() == [2]
