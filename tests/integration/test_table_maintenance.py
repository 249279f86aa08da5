"""Compaction, date expiry and vacuum on tables the stream wrote, read back with delta-rs and
DuckDB."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from lake_readers import duckdb_query, read_delta, rows_by_date
from live_stream import BackgroundProducer, produce_and_stream, running_stream, wait_for_rows

from tidelake.streaming.delta.maintenance import compact_partition, expire_dates, vacuum_table
from tidelake.streaming.errors import ConfigError
from tidelake.streaming.polling import poll_until


@pytest.fixture
def small_batches(engine_settings: Any) -> Any:
    return engine_settings.model_copy(update={"max_offsets_per_trigger": 150})


def sorted_rows(uri: str) -> Any:
    table = read_delta(uri).drop_columns(["ingest_time"])
    return table.sort_by([("kafka_partition", "ascending"), ("kafka_offset", "ascending")])


def test_compaction_shrinks_file_count_and_keeps_content(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, small_batches: Any
) -> None:
    run = produce_and_stream(
        spark, flow, small_batches, kafka_conf, count=1500, late_share=0, seed=21
    )
    report, stream = run.report, run.stream
    (day,) = report.by_date
    before = sorted_rows(stream.table_uri)
    result = compact_partition(stream.table_uri, "date", day)
    assert result.before.files >= 8 and result.after.files == 1
    assert result.before.rows == result.after.rows == report.good
    assert sorted_rows(stream.table_uri).equals(before)
    assert duckdb_query(f"select count(*) from delta_scan('{stream.table_uri}')") == [
        (report.good,)
    ]
    assert compact_partition(stream.table_uri, "date", day).after.files == 1  # nothing to do


def test_compaction_racing_stream_appends_keeps_exact_counts(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, small_batches: Any
) -> None:
    producer = BackgroundProducer(flow, kafka_conf, count=3000, rate=400, late_share=0, seed=22)
    compactions = []
    with running_stream(spark, flow, small_batches, kafka_conf) as stream:
        producer.start()
        day = datetime.now(UTC).date().isoformat()

        def compacted_while_producing() -> bool | None:
            """One compaction of the date, racing the stream; done once the producer is and
            three have run."""
            if Path(stream.table_uri, "_delta_log").exists():
                compactions.append(compact_partition(stream.table_uri, "date", day))
            return True if not producer.is_alive() and len(compactions) >= 3 else None

        poll_until(
            compacted_while_producing,
            timeout_s=300,  # the producer's 3,000 events take 7.5 s
            interval_s=0.3,
            timeout_error=lambda _: AssertionError(
                f"{len(compactions)} compactions in 300 s, producer alive: "
                f"{producer.is_alive()}; the stream wrote no table or stopped"
            ),
        )
        report = producer.join()
        wait_for_rows(stream.table_uri, report.good)
    keys = read_delta(stream.table_uri).column("call_sid").to_pylist()
    assert len(keys) == report.good == len(set(keys))
    assert set(keys) == set(report.keys)
    assert sum(c.before.files > c.after.files for c in compactions) >= 2, compactions[-3:]


def test_forced_concurrent_compactions_never_duplicate(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, small_batches: Any
) -> None:
    run = produce_and_stream(
        spark, flow, small_batches, kafka_conf, count=1200, late_share=0, seed=23
    )
    report, stream = run.report, run.stream
    (day,) = report.by_date
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(
            pool.map(
                lambda _: _try(lambda: compact_partition(stream.table_uri, "date", day)), range(2)
            )
        )
    assert any(not isinstance(o, Exception) for o in outcomes)
    keys = read_delta(stream.table_uri).column("call_sid").to_pylist()
    assert len(keys) == report.good == len(set(keys))


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:  # the losing compaction's commit conflict
        return exc


def test_vacuum_removes_orphans_and_compacted_away_files_only_past_retention(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, small_batches: Any
) -> None:
    run = produce_and_stream(
        spark, flow, small_batches, kafka_conf, count=600, late_share=0, seed=24
    )
    report, stream = run.report, run.stream
    (day,) = report.by_date
    orphan = Path(stream.table_uri, f"date={day}", "part-orphan-of-a-failed-batch.parquet")
    orphan.write_bytes(b"PAR1 not committed")
    week_ago = time.time() - 8 * 86_400
    os.utime(orphan, (week_ago, week_ago))
    compacted = compact_partition(stream.table_uri, "date", day)
    assert compacted.before.files > 1

    default = vacuum_table(stream.table_uri)  # 7 days: only the old orphan goes
    assert default.removed_files == 1 and not orphan.exists()
    assert read_delta(stream.table_uri).num_rows == report.good

    with pytest.raises(ConfigError, match="shorter than TIDELAKE_DELTA_LOG_RETENTION"):
        vacuum_table(stream.table_uri, retention_hours=0)  # would delete files in flight
    before = DeltaTable(stream.table_uri, version=compacted.table_version - 1)
    assert before.to_pyarrow_table().num_rows == report.good  # compacted-away files kept
    assert pc.count_distinct(read_delta(stream.table_uri)["call_sid"]).as_py() == report.good


def test_expiring_old_dates_racing_stream_appends_keeps_every_newer_row(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, small_batches: Any
) -> None:
    """The expiry's delete of the old dates, planned on a snapshot the stream has since appended
    to, commits after the appends and removes only the old dates' files."""
    old = produce_and_stream(
        spark, flow, small_batches, kafka_conf, count=900, days=3, late_share=0, seed=25
    ).report
    oldest, kept = sorted(old.by_date)[:2]
    producer = BackgroundProducer(flow, kafka_conf, count=3000, rate=400, late_share=0, seed=26)
    with running_stream(spark, flow, small_batches, kafka_conf) as stream:
        planned = DeltaTable(stream.table_uri)  # the snapshot a slow expiry would have read
        producer.start()

        def three_batches_later() -> int | None:
            version = DeltaTable(stream.table_uri).version()
            return version if version >= planned.version() + 3 else None

        poll_until(
            three_batches_later,
            timeout_s=300,
            interval_s=0.2,
            timeout_error=lambda _: AssertionError(
                f"the stream did not commit 3 batches after version {planned.version()} in "
                "300 s: it stopped or reads nothing"
            ),
        )
        metrics = planned.delete(f"date < '{kept}'")  # what expire_dates commits, but stale
        again = expire_dates(stream.table_uri, "date", date.fromisoformat(kept))
        live = producer.join()
        expected = {d: n for d, n in old.by_date.items() if d != oldest}
        for day, rows in live.by_date.items():
            expected[day] = expected.get(day, 0) + rows
        wait_for_rows(stream.table_uri, sum(expected.values()))
    assert metrics["num_copied_rows"] == 0 and metrics["num_deleted_rows"] == old.by_date[oldest]
    assert again.dates == ()  # nothing older is left
    assert rows_by_date(stream.table_uri) == expected  # DuckDB: no append lost, none doubled
