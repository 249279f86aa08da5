"""Great Expectations on a date partition, on the shared Spark session: clean days pass, each
defect fails its expectation."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import great_expectations.expectations as gxe
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from flows import PAGE_VIEWS
from flows.page_view_changes_pb2 import PageViewWithCountry

from tidelake.assets.quality.expectations import validate_partition
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.evolution import evolve_table
from tidelake.streaming.flow.contract import contract_expectations
from tidelake.streaming.flow.table_schema import table_schema

DAY = "2026-11-20"
START = datetime(2026, 11, 20, tzinfo=UTC)
SCHEMA = pa.schema([f for f in table_schema(CALL_EVENTS) if not f.name.startswith("_")])


def clean_rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "call_sid": f"CA{i:032x}",
            "account_sid": f"AC{i % 7:032x}",
            "duration": 60 + i,
            "call_state": "completed" if i % 5 else "failed",
            "region": ("us1", "us2", "de1")[i % 3],
            "event_time": START + timedelta(seconds=37 * i),
            "date": date.fromisoformat(DAY),
            "kafka_topic": "call-events",
            "kafka_partition": i % 4,
            "kafka_offset": i,
            "kafka_timestamp": START + timedelta(seconds=37 * i + 1),
            "ingest_time": START + timedelta(seconds=37 * i + 2),
        }
        for i in range(n)
    ]


def write(tmp_path: Path, rows: list[dict[str, Any]]) -> str:
    uri = str(tmp_path / "call_events")
    write_deltalake(uri, pa.Table.from_pylist(rows, SCHEMA), partition_by=["date"])
    return uri


def test_a_clean_partition_passes_every_expectation(spark: Any, tmp_path: Path) -> None:
    result = validate_partition(spark, write(tmp_path, clean_rows(200)), CALL_EVENTS, DAY)
    assert result.success, [o for o in result.failures]
    assert result.rows == 200
    # the generic two, the contract's (flow_contract.contract_expectations), the flow's own
    assert len(result.outcomes) == 2 + len(contract_expectations(CALL_EVENTS)) + 2


def test_each_defect_fails_exactly_its_expectation_with_counts(spark: Any, tmp_path: Path) -> None:
    rows = clean_rows(200)
    rows[1]["call_sid"] = "CAxyz"  # malformed
    rows[2]["call_sid"] = rows[3]["call_sid"]  # a duplicate pair
    rows[4]["account_sid"] = None
    rows[5]["region"] = "unknown_region"
    rows[6]["call_state"] = "unknown_state"
    rows[7]["duration"] = 90_000
    rows[8]["event_time"] = START - timedelta(minutes=1)  # the day before
    result = validate_partition(spark, write(tmp_path, rows), CALL_EVENTS, DAY)
    failed = {o.name: (o.unexpected_count, o.sample) for o in result.failures}
    assert failed == {
        "expect_column_values_to_match_regex(call_sid)": (1, ["CAxyz"]),
        "expect_column_values_to_be_unique(call_sid)": (2, [rows[3]["call_sid"]] * 2),
        "expect_column_values_to_not_be_null(account_sid)": (1, [None]),
        "expect_column_values_to_be_in_set(region)": (1, ["unknown_region"]),
        "expect_column_values_to_be_in_set(call_state)": (1, ["unknown_state"]),
        "expect_column_values_to_be_between(duration)": (1, [90_000]),
        "expect_column_values_to_be_between(event_time)": (
            1,
            [(START - timedelta(minutes=1)).isoformat()],
        ),
    }
    (between,) = [o for o in result.failures if o.column == "duration"]
    assert between.unexpected_percent == pytest.approx(0.5)


def test_a_missing_column_fails_the_column_set(spark: Any, tmp_path: Path) -> None:
    rows = [{k: v for k, v in r.items() if k != "region"} for r in clean_rows(20)]
    uri = str(tmp_path / "t")
    write_deltalake(
        uri,
        pa.Table.from_pylist(rows, pa.schema([f for f in SCHEMA if f.name != "region"])),
        partition_by=["date"],
    )
    result = validate_partition(spark, uri, CALL_EVENTS, DAY)
    names = {o.name for o in result.failures}
    assert "expect_table_columns_to_match_set" in names
    region = [o for o in result.outcomes if o.column == "region"]
    assert region and all(not o.success and o.error for o in region)


def test_the_suite_follows_the_schema_as_the_flow_changes(spark: Any, tmp_path: Path) -> None:
    """Old days pass with a new column (null there), expectations for it start on their date,
    and the column of a removed field does not fail anything."""
    uri = str(tmp_path / "page_views")
    evolve_table(PAGE_VIEWS, uri)
    old_day, new_day = date(2026, 11, 20), date(2026, 11, 21)

    def rows(day: date, n: int, **extra: Any) -> list[dict[str, Any]]:
        start = datetime.combine(day, datetime.min.time(), UTC)
        return [
            {
                "view_id": f"PV{day:%d}{i:04d}",
                "user": "u",
                "url": "https://example.test/",
                "viewed_at_s": start + timedelta(seconds=i),
                "device": "MOBILE",
                "date": day,
                "kafka_topic": "page-views",
                "kafka_partition": 0,
                "kafka_offset": i,
                "kafka_timestamp": start + timedelta(seconds=i),
                "ingest_time": start + timedelta(seconds=i),
                **extra,
            }
            for i in range(n)
        ]

    v1_schema = table_schema(PAGE_VIEWS)
    write_deltalake(uri, pa.Table.from_pylist(rows(old_day, 20), v1_schema), mode="append")
    v2 = dataclasses.replace(
        PAGE_VIEWS,
        message=PageViewWithCountry,
        expectations_since={new_day: lambda: [gxe.ExpectColumnValuesToNotBeNull(column="country")]},
    )
    not_evolved = validate_partition(spark, uri, v2, old_day.isoformat())
    assert [o.expectation for o in not_evolved.failures] == [
        "expect_table_columns_to_match_set"  # the table lacks the flow's new columns
    ]
    evolve_table(v2, uri)
    v2_schema = table_schema(v2)
    with_country = rows(new_day, 20, country="DE")
    write_deltalake(uri, pa.Table.from_pylist(with_country, v2_schema), mode="append")

    old = validate_partition(spark, uri, v2, old_day.isoformat())
    assert old.success, old.failures
    assert "expect_column_values_to_not_be_null" not in {
        (o.expectation, o.column) for o in old.outcomes if o.column == "country"
    }
    new = validate_partition(spark, uri, v2, new_day.isoformat())
    assert new.success, new.failures
    assert ("expect_column_values_to_not_be_null", "country") in {
        (o.expectation, o.column) for o in new.outcomes
    }

    with_country[3]["country"] = None
    write_deltalake(
        uri,
        pa.Table.from_pylist(with_country, v2_schema),
        mode="overwrite",
        predicate=f"date = '{new_day}'",
    )
    failed = validate_partition(spark, uri, v2, new_day.isoformat())
    assert [(o.column, o.unexpected_count) for o in failed.failures] == [("country", 1)]
