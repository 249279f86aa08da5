"""The quality checks of a date partition, run by Dagster on real Delta tables and Spark."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from test_partition_expectations import SCHEMA, clean_rows

from tidelake.assets.definitions import build_definitions
from tidelake.assets.quality.partition_checks import (
    EXPECTATIONS,
    QUARANTINE_SHARE,
    VOLUME,
    volume_verdict,
)
from tidelake.assets.tables.keys import compaction_key, daily_partitions, table_key
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.settings import EngineSettings

KEY = table_key(CALL_EVENTS)
QUALITY = [dg.AssetCheckKey(KEY, name) for name in (EXPECTATIONS, VOLUME, QUARANTINE_SHARE)]


@pytest.mark.parametrize(
    ("rows", "history", "passed"),
    [
        (100, [100] * 7, True),
        (51, [100] * 7, True),
        (49, [100] * 7, False),  # "a day with 50% fewer rows than usual fails"
        (10, [], True),  # nothing to compare with
        (60, [0, 0, 120, 100, 0, 0, 80], True),  # empty days do not drag the median down
    ],
)
def test_volume_verdict(rows: int, history: list[int], passed: bool) -> None:
    day = date(2026, 11, 20)
    counts = {(day - timedelta(days=n + 1)).isoformat(): c for n, c in enumerate(history)}
    counts[day.isoformat()] = rows
    assert volume_verdict(CALL_EVENTS, counts, day.isoformat())[0] is passed


def rows_on(day: str, n: int, offset: int = 0) -> list[dict[str, Any]]:
    """n clean rows dated `day`, keys unique across days (offset), event times inside the day."""
    start = datetime.combine(date.fromisoformat(day), datetime.min.time(), UTC)
    rows = clean_rows(n + offset)[offset:]
    for k, r in enumerate(rows):
        r["date"] = start.date()
        r["event_time"] = start + timedelta(seconds=37 * k)
        r["kafka_timestamp"] = r["ingest_time"] = r["event_time"] + timedelta(seconds=1)
    return rows


@pytest.fixture
def lake(spark: Any, tmp_path: Path) -> EngineSettings:
    """Ten clean days of 100 rows, then: a day with defects, a thin day, a poisoned day. The
    expectations run on the test session's Spark (the run's resource finds it started)."""
    settings = EngineSettings(lake=tmp_path / "lake", checkpoints=tmp_path / "cp")
    rows = []
    for n in range(10):
        rows += rows_on((date(2026, 11, 1) + timedelta(days=n)).isoformat(), 100, offset=n * 100)
    bad = rows_on("2026-11-11", 100, offset=2000)
    bad[0]["call_sid"] = "CAxyz"
    bad[1]["region"] = "unknown_region"
    rows += bad + rows_on("2026-11-12", 40, offset=3000) + rows_on("2026-11-13", 100, offset=4000)
    write_deltalake(
        settings.table_uri("call_events"),
        pa.Table.from_pylist(rows, SCHEMA),
        partition_by=["date"],
    )
    quarantine = pa.table(
        {"error": ["missing account_sid"] * 15, "date": [date(2026, 11, 13)] * 15}
    )
    write_deltalake(settings.table_uri("call_events_quarantine"), quarantine, partition_by=["date"])
    return settings


def run_quality(
    settings: EngineSettings, days: str | tuple[str, str]
) -> tuple[dict[Any, bool], set[str], Any]:
    """Run the three checks and a downstream asset of the table for one day or a range of days
    (first, last), in one run. Results are keyed by check name, or (check, day) for a range."""

    @dg.asset(deps=[KEY], partitions_def=daily_partitions(CALL_EVENTS, settings))
    def learns_from_calls() -> None:
        """Stands for the anomaly model: must not learn from a failing day."""

    job = dg.define_asset_job(
        "quality",
        selection=dg.AssetSelection.checks(*QUALITY) | dg.AssetSelection.assets(learns_from_calls),
    )
    defs = dg.Definitions.merge(
        build_definitions({"call_events": CALL_EVENTS}, settings),
        dg.Definitions(assets=[learns_from_calls], jobs=[job]),
    )
    with dg.instance_for_test() as instance:
        if isinstance(days, str):
            run = {"partition_key": days}
        else:
            first, last = days
            run = {
                "tags": {
                    "dagster/asset_partition_range_start": first,
                    "dagster/asset_partition_range_end": last,
                }
            }
        result = defs.resolve_job_def("quality").execute_in_process(
            instance=instance, raise_on_error=False, **run
        )
    evaluations = {
        (
            e.asset_check_evaluation_data.check_name
            if isinstance(days, str)
            else (e.asset_check_evaluation_data.check_name, e.asset_check_evaluation_data.partition)
        ): e.asset_check_evaluation_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    materialized = {
        e.asset_key.path[-1]
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
    }
    return {k: v.passed for k, v in evaluations.items()}, materialized, evaluations


def test_a_clean_day_passes_every_check_and_downstream_runs(lake: EngineSettings) -> None:
    passed, materialized, _ = run_quality(lake, "2026-11-10")
    assert passed == {EXPECTATIONS: True, VOLUME: True, QUARANTINE_SHARE: True}
    assert materialized == {"learns_from_calls"}


def test_a_failing_day_blocks_downstream_and_says_what_failed(lake: EngineSettings) -> None:
    passed, materialized, evaluations = run_quality(lake, "2026-11-11")
    assert passed == {EXPECTATIONS: False, VOLUME: True, QUARANTINE_SHARE: True}
    assert materialized == set()  # the blocking check kept the model from this day
    metadata = evaluations[EXPECTATIONS].metadata
    assert metadata["failed"].value == 2
    assert "CAxyz" in metadata["failures"].value and "unknown_region" in metadata["failures"].value


def test_thin_and_poisoned_days_fail_their_checks(lake: EngineSettings) -> None:
    passed, materialized, evaluations = run_quality(lake, "2026-11-12")
    assert passed == {EXPECTATIONS: True, VOLUME: False, QUARANTINE_SHARE: True}
    assert materialized == {"learns_from_calls"}  # warnings do not block
    assert evaluations[VOLUME].metadata["rows"].value == 40
    passed, _, evaluations = run_quality(lake, "2026-11-13")
    assert passed == {EXPECTATIONS: True, VOLUME: True, QUARANTINE_SHARE: False}
    assert evaluations[QUARANTINE_SHARE].metadata["quarantined"].value == 15


def test_a_range_run_records_each_day_and_blocks_on_a_failing_one(lake: EngineSettings) -> None:
    passed, materialized, evaluations = run_quality(lake, ("2026-11-10", "2026-11-12"))
    assert passed == {
        (EXPECTATIONS, "2026-11-10"): True,
        (EXPECTATIONS, "2026-11-11"): False,
        (EXPECTATIONS, "2026-11-12"): True,
        (VOLUME, "2026-11-10"): True,
        (VOLUME, "2026-11-11"): True,
        (VOLUME, "2026-11-12"): False,
        (QUARANTINE_SHARE, "2026-11-10"): True,
        (QUARANTINE_SHARE, "2026-11-11"): True,
        (QUARANTINE_SHARE, "2026-11-12"): True,
    }
    assert materialized == set()  # one run for the range: the failing day stops it all
    assert evaluations[(EXPECTATIONS, "2026-11-11")].metadata["failed"].value == 2


def requested(tick: Any) -> dict[str, set[str]]:
    """What one automation tick requested: asset or check name -> dates."""
    out = {}
    for result in tick.results:
        days = result.true_subset.expensively_compute_partition_keys()
        if days:
            key = result.key
            out[key.name if isinstance(key, dg.AssetCheckKey) else key.path[-1]] = set(days)
    return out


def test_automation_checks_closed_days_and_compacts_only_those_that_pass(
    lake: EngineSettings,
) -> None:
    compaction = compaction_key(CALL_EVENTS)
    by_day = dg.define_asset_job(
        "checks_and_compaction",
        dg.AssetSelection.checks(*QUALITY) | dg.AssetSelection.assets(compaction),
    )
    expectations_only = dg.define_asset_job("expectations", dg.AssetSelection.checks(QUALITY[0]))
    defs = dg.Definitions.merge(
        build_definitions({"call_events": CALL_EVENTS}, lake),
        dg.Definitions(jobs=[by_day, expectations_only]),
    )
    days = {"2026-11-10", "2026-11-11", "2026-11-12"}
    now = datetime(2026, 11, 13, 12, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        tick = dg.evaluate_automation_conditions(defs, instance, evaluation_time=now)
        assert requested(tick) == {}
        for day in sorted(days):  # the supervisor closes three days in one tick
            instance.report_runless_asset_event(dg.AssetMaterialization(KEY, partition=day))

        tick = dg.evaluate_automation_conditions(
            defs, instance, evaluation_time=now, cursor=tick.cursor
        )
        assert requested(tick) == {
            EXPECTATIONS: days,
            VOLUME: days,
            QUARANTINE_SHARE: days,
            compaction.path[-1]: days,
            "call_anomaly_model": days,  # also gated by the blocking check; not run here
            "calls_by_region_daily": days,  # likewise (test_daily_use_cases makes its days)
        }
        for day in sorted(days):  # the runs automation launches: a day's checks + compaction
            defs.resolve_job_def(by_day.name).execute_in_process(
                instance=instance, partition_key=day, raise_on_error=False
            )
        compacted = instance.get_materialized_partitions(compaction)
        assert compacted == days - {"2026-11-11"}

        tick = dg.evaluate_automation_conditions(
            defs, instance, evaluation_time=now, cursor=tick.cursor
        )
        assert requested(tick) == {}  # a failed day stays uncompacted

        clean = rows_on("2026-11-11", 100, offset=2000)  # the day, repaired
        write_deltalake(
            str(lake.table_uri("call_events")),
            pa.Table.from_pylist(clean, SCHEMA),
            mode="overwrite",
            predicate="date = '2026-11-11'",
        )
        defs.resolve_job_def(expectations_only.name).execute_in_process(
            instance=instance, tags={"dagster/partition": "2026-11-11"}
        )
        tick = dg.evaluate_automation_conditions(
            defs, instance, evaluation_time=now, cursor=tick.cursor
        )
        assert requested(tick) == {
            compaction.path[-1]: {"2026-11-11"},
            "call_anomaly_model": {"2026-11-11"},
            "calls_by_region_daily": {"2026-11-11"},
        }
