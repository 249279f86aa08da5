"""Tables that other engines write to beside the stream: their owners delete rows with deletion
vectors in delta-spark, and tidelake's own compaction and vacuum keep the table readable and
right, judged by delta-spark.

The stream runs in the test's SparkSession (live_stream.running_stream), as in
test_delta_spark_judge: only the log arbitrates between the stream and delta-spark either way.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lake_readers import delta_properties, read_delta, read_delta_spark
from live_stream import BackgroundProducer, RestartingStream, running_stream, wait_for_rows

from tidelake.platform.dev.dagster_web import wait_for
from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.maintenance import (
    UnsafeVacuumError,
    compact_partition,
    default_vacuum_retention_hours,
    vacuum_table,
)

KEY = CALL_EVENTS.key_field
PRODUCE = {"malformed_share": 0.0, "late_share": 0.0, "progress": False, "collect_keys": True}


def test_rows_deleted_with_deletion_vectors_stay_deleted_through_compaction_and_vacuum(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    """delta-spark enables deletion vectors and deletes an account's rows from two closed days
    while the stream appends today's; tidelake compacts one of the days; the deletion vectors'
    files are made older than the vacuum's retention. delta-rs's vacuum would delete the live
    one of the other day (delta-spark could no longer read the table): tidelake's vacuum refuses
    without a Spark session and vacuums through delta-spark with one, and delta-spark then reads
    exactly the rows expected."""
    small_batches = engine_settings.model_copy(update={"max_offsets_per_trigger": 200})
    history = produce_demo_events(flow, kafka_conf, count=900, days=3, seed=81, **PRODUCE)
    with running_stream(spark, flow, small_batches, kafka_conf) as stream:
        table = stream.table_uri
        assert wait_for_rows(table, history.good, 300) == history.good
        rows = read_delta(table).select([KEY, "account_sid", "date"]).to_pylist()
        today = dt.datetime.now(dt.UTC).date()
        closed = sorted({r["date"] for r in rows} - {today})[-2:]
        assert len(closed) == 2, closed
        per_account = Counter(r["account_sid"] for r in rows if r["date"] in closed)
        account = next(
            a
            for a, _ in per_account.most_common()
            if {r["date"] for r in rows if r["account_sid"] == a} >= set(closed)
        )
        deleted = {r[KEY] for r in rows if r["account_sid"] == account and r["date"] in closed}

        live = BackgroundProducer(flow, kafka_conf, count=600, rate=60, seed=82, **PRODUCE)
        live.start()
        spark.sql(
            f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)"
        )
        days = ", ".join(f"DATE'{d}'" for d in closed)
        spark.sql(
            f"DELETE FROM delta.`{table}` WHERE account_sid = '{account}' AND date IN ({days})"
        )
        vectors = sorted(Path(table).glob("deletion_vector_*.bin"))
        assert vectors, "delta-spark deleted without deletion vectors"

        compact_partition(table, "date", closed[1].isoformat())  # applies its vector
        orphan = Path(table, f"date={closed[0]}", "part-of-a-failed-batch.parquet")
        orphan.write_bytes(b"not committed")
        long_ago = time.time() - (default_vacuum_retention_hours() + 24) * 3600
        for old in (*vectors, orphan):
            os.utime(old, (long_ago, long_ago))

        with pytest.raises(UnsafeVacuumError, match="deletionVectors") as refused:
            vacuum_table(table)
        assert "\n" not in str(refused.value)
        assert all(v.exists() for v in vectors)  # refused, never damaged
        vacuumed = vacuum_table(table, spark=lambda: spark)
        assert vacuumed.removed_files == 1 and not orphan.exists()  # a full vacuum

        report = live.join(timeout=300)
        produced = set(history.keys or []) | set(report.keys or [])
        expected = sorted(produced - deleted)

        def caught_up() -> list[str] | None:
            keys = sorted(read_delta_spark(spark, table, KEY).column(KEY).to_pylist())
            return keys if len(keys) >= len(expected) else None

        keys = wait_for(caught_up, 300, "the live events in the table", 1.0)
    assert keys == expected
    assert any(v.exists() for v in vectors)  # the other day's, still read


def test_a_check_constraint_added_beside_the_stream_quarantines_the_rows_that_violate_it(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    """delta-spark adds a CHECK constraint while the stream runs: from the next batch every row
    that violates it is in the quarantine naming it, with its bytes, and every other row is in
    the table once; once the constraint is dropped its rows are accepted again. delta-spark
    reads the table throughout."""
    first = produce_demo_events(flow, kafka_conf, count=300, seed=91, **PRODUCE)
    with RestartingStream(spark, flow, engine_settings, kafka_conf) as running:
        table, quarantine = running.stream.table_uri, running.stream.quarantine_uri

        def landed(count: int) -> Callable[[], int | None]:
            def probe() -> int | None:
                assert not running.failures, running.failures
                held = read_delta(table).num_rows + len(_violations(quarantine))
                return held if held >= count else None

            return probe

        wait_for(landed(first.good), 300, "the first events", 0.5)
        newest_us = max(
            int(t.timestamp() * 1_000_000)
            for t in read_delta(table).column("event_time").to_pylist()
        )
        rule = f"duration < 100 OR unix_micros(event_time) <= {newest_us}"
        spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT short_new_calls CHECK ({rule})")
        stored = delta_properties(table)["delta.constraints.short_new_calls"]  # as delta-spark

        second = produce_demo_events(flow, kafka_conf, count=300, seed=92, **PRODUCE)
        wait_for(landed(first.good + second.good), 300, "the constrained events", 0.5)
        refused = _violations(quarantine)
        assert {r["error"] for r in refused} == {
            f"violates the table's CHECK constraint short_new_calls: {stored}"
        }
        refused_keys = set()
        for row in refused:
            event = CALL_EVENTS.message.FromString(row["value"])
            assert event.duration >= 100
            refused_keys.add(getattr(event, KEY))
        assert refused_keys and refused_keys <= set(second.keys or [])
        table_rows = read_delta(table).select([KEY, "duration"]).to_pylist()
        admitted = {r[KEY] for r in table_rows} - set(first.keys or [])
        assert admitted | refused_keys == set(second.keys or [])
        assert all(r["duration"] < 100 for r in table_rows if r[KEY] in admitted)

        spark.sql(f"ALTER TABLE delta.`{table}` DROP CONSTRAINT short_new_calls")
        third = produce_demo_events(flow, kafka_conf, count=200, seed=93, **PRODUCE)
        total = first.good + second.good + third.good
        wait_for(landed(total), 300, "the events after the drop", 0.5)
        assert len(_violations(quarantine)) == len(refused)

    keys = read_delta_spark(spark, table, KEY).column(KEY).to_pylist()
    assert len(keys) == len(set(keys)) == total - len(refused)
    assert set(third.keys or []) <= set(keys)  # long calls too, once the constraint went


def _violations(quarantine: str) -> list[dict[str, Any]]:
    """The quarantine's rows refused for a CHECK constraint."""
    if not Path(quarantine, "_delta_log").exists():
        return []
    rows = read_delta(quarantine).select(["error", "value"]).to_pylist()
    return [r for r in rows if "CHECK constraint" in (r["error"] or "")]
