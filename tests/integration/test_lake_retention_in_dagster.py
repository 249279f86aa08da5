"""The lake's retention as Dagster shows it: a date the daily expiry deleted is no partition of
the table (Dagster OSS cannot wipe a partition), and the detector's anomalies expire like every
table tidelake writes."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg
import pyarrow as pa
from deltalake import write_deltalake
from lake_readers import rows_by_date

from tidelake.assets.calls.detector_job import ANOMALIES_KEY
from tidelake.assets.definitions import build_definitions
from tidelake.assets.tables.keys import table_key
from tidelake.streaming.calls.anomaly.detector import ANOMALIES_TABLE, ANOMALY_SCHEMA
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.use_cases import CALLS_BY_REGION_DAILY
from tidelake.streaming.settings import EngineSettings


def test_a_date_the_retention_deleted_is_no_partition_of_the_table(tmp_path: Path) -> None:
    """Dagster OSS cannot wipe a partition: a date the supervisor marked materialized before the
    lake's retention deleted it is, once the definitions load after, no partition of the table,
    so the asset's status (the UI's) counts only the dates the lake keeps."""
    today = datetime.now(UTC).date()
    expired, kept = (today - timedelta(days=4)).isoformat(), (today - timedelta(days=2)).isoformat()
    settings = EngineSettings(lake=tmp_path / "lake", checkpoints=tmp_path / "cp")
    key = table_key(CALL_EVENTS)

    def table_partitions(retention_days: int) -> dg.PartitionsDefinition:
        defs = build_definitions(
            {CALL_EVENTS.name: CALL_EVENTS},
            settings.model_copy(update={"lake_retention_days": retention_days}),
        )
        partitions = defs.resolve_assets_def(key).partitions_def
        assert partitions is not None
        return partitions

    with dg.instance_for_test() as instance:
        for day in (expired, kept):  # as the supervisor closes them
            instance.report_runless_asset_event(
                dg.AssetMaterialization(key, partition=day, metadata={"dagster/row_count": 10})
            )
        before = table_partitions(60)
        status = instance.get_status_by_partition(key, [expired, kept], before)
        assert status == {
            expired: dg.AssetPartitionStatus.MATERIALIZED,
            kept: dg.AssetPartitionStatus.MATERIALIZED,
        }
        after = table_partitions(3)  # today - 3: the first date kept
        keys = after.get_partition_keys()
        assert keys[0] == (today - timedelta(days=3)).isoformat()
        assert expired not in keys
        status = instance.get_status_by_partition(key, keys, after)
        assert status is not None
        materialized = [k for k, s in status.items() if s == dg.AssetPartitionStatus.MATERIALIZED]
        assert materialized == [kept]


def test_the_detectors_anomalies_keep_the_lakes_retention(tmp_path: Path) -> None:
    """The call_anomalies_vacuum job deletes the anomalies' dates older than the lake's
    retention, like a flow's own tables', and keeps the others; a second run finds none."""
    settings = EngineSettings(lake=tmp_path / "lake", checkpoints=tmp_path / "cp")
    uri = settings.table_uri(ANOMALIES_TABLE)
    today = datetime.now(UTC).date()
    days = [today - timedelta(days=n) for n in (5, 4, 1, 0)]
    write_deltalake(uri, _anomalies(days), partition_by=["date"])
    defs = build_definitions({CALL_EVENTS.name: CALL_EVENTS}, settings)
    job = defs.resolve_job_def(f"{ANOMALIES_TABLE}_vacuum")
    assert {s.job_name for s in defs.schedules or []} >= {job.name}  # type: ignore[union-attr]
    config = {"ops": {f"expire_dates_{ANOMALIES_TABLE}": {"config": {"days": 3}}}}
    with dg.instance_for_test() as instance:
        first, again = (job.execute_in_process(instance=instance, run_config=config) for _ in "12")
    assert first.success and again.success
    assert _expired(first) == 2 and _expired(again) == 0
    assert rows_by_date(uri) == {d.isoformat(): 2 for d in days[2:]}


def _anomalies(days: list[date]) -> pa.Table:
    rows = []
    for day in days:
        at = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
        for key in ("acct-1", "acct-2"):
            rows.append(
                {
                    "key_kind": "account",
                    "key": key,
                    "window_start": at,
                    "window_end": at + timedelta(minutes=1),
                    "metric": "calls",
                    "observed": 1.0,
                    "expected": 9.0,
                    "score": 4.0,
                    "model_version": 1,
                    "detected_at": at,
                    "date": day,
                }
            )
    return pa.Table.from_pylist(rows, schema=ANOMALY_SCHEMA)


def _expired(run: dg.ExecuteInProcessResult) -> int:
    (observation,) = [
        e.event_specific_data.asset_observation
        for e in run.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
        and e.event_specific_data.asset_observation.asset_key == ANOMALIES_KEY
        and "expired_dates" in e.event_specific_data.asset_observation.metadata
    ]
    return int(observation.metadata["expired_dates"].value)


def test_a_flows_expiry_deletes_the_same_dates_of_its_use_cases_tables(tmp_path: Path) -> None:
    """A daily use case's day outlives its input's day by no more than the flow's next expiry:
    call_events_vacuum deletes the dates of calls_by_region_daily with call_events' own."""
    settings = EngineSettings(lake=tmp_path / "lake", checkpoints=tmp_path / "cp")
    today = datetime.now(UTC).date()
    days = [today - timedelta(days=n) for n in (5, 4, 1)]
    daily = pa.table({"region": ["us1"] * 3, "calls": [1, 2, 3], "date": days})
    write_deltalake(settings.table_uri(CALLS_BY_REGION_DAILY.table), daily, partition_by=["date"])
    defs = build_definitions({CALL_EVENTS.name: CALL_EVENTS}, settings)
    job = defs.resolve_job_def(f"{CALL_EVENTS.name}_vacuum")
    config = {"ops": {f"expire_dates_{CALL_EVENTS.name}": {"config": {"days": 3}}}}
    with dg.instance_for_test() as instance:
        assert job.execute_in_process(instance=instance, run_config=config).success
    assert rows_by_date(settings.table_uri(CALLS_BY_REGION_DAILY.table)) == {days[2].isoformat(): 1}
