"""Delta's reference implementation judges the stream's own commits.

Since issue 38 the stream writes its Delta log itself (delta/log_append.py). Here delta-spark
does to the stream's table what Delta's readers and writers do while the stream appends to it:
reads it (batch, time travel, history, a streaming source from version 0), compacts it with
OPTIMIZE racing the stream's commits, vacuums it, and the stream goes on. Every reader
(delta-spark, delta-rs, DuckDB) sees exactly the keys produced.

The stream runs in the test's SparkSession (live_stream.running_stream), as the compaction races
of test_table_maintenance do: a second driver JVM would double the test's time on 2 cores, and
only the log arbitrates either way. The stream commits from Python (log_append's put-if-absent),
delta-spark through its log store (AtomicLocalLogStore's hard link): no lock of one covers the
other, as with two processes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from lake_readers import delta_version, duckdb_query, read_delta, read_delta_spark
from live_stream import BackgroundProducer, running_stream

from tidelake.platform.dev.dagster_web import wait_for
from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.log_append import read_entry
from tidelake.streaming.stream.query import FlowStream

KEY = CALL_EVENTS.key_field
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"


def test_delta_spark_reads_compacts_and_vacuums_the_streams_table_while_it_appends(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any, tmp_path: Path
) -> None:
    small_batches = engine_settings.model_copy(update={"max_offsets_per_trigger": 100})
    produce = {"malformed_share": 0.0, "progress": False, "collect_keys": True}
    first = produce_demo_events(flow, kafka_conf, count=300, seed=61, **produce)
    with running_stream(spark, flow, small_batches, kafka_conf) as stream:
        table = stream.table_uri
        wait_for_exact_rows(spark, stream, first.good)

        # the stream's table as delta-spark reads it: now, at an earlier version, its history
        read_at = delta_version(table)
        assert keys(read_delta_spark(spark, table, KEY)) == sorted(first.keys or [])
        batches = stream_commits(table, read_at)
        assert len(batches) >= 2, f"one batch only: {batches}"
        earlier = batches[len(batches) // 2 - 1]
        at_earlier = keys(read_delta_spark(spark, table, KEY, versionAsOf=str(earlier)))
        assert at_earlier == keys(read_delta(table, earlier))
        assert 0 < len(at_earlier) < first.good
        history = {row.version: row for row in describe_history(spark, table)}
        assert set(history) == set(range(read_at + 1))
        assert {v for v, row in history.items() if row.engineInfo == "tidelake"} == set(batches)
        assert all(history[v].operation == "WRITE" and history[v].isBlindAppend for v in batches)

        # OPTIMIZE while the stream appends, until a stream commit lands inside its transaction
        live = BackgroundProducer(flow, kafka_conf, count=1500, rate=75, seed=62, **produce)
        live.start()
        optimized = optimize_during_stream_commits(spark, stream, live)
        compacted_away = removed_paths(table, optimized)
        assert len(compacted_away) >= len(batches)

        # a streaming source from version 0 delivers each row once (OPTIMIZE's rewrites change
        # no data) and stops at a version whose rows it holds exactly
        copy = StreamedKeys(spark, table, str(tmp_path / "copy-checkpoint"))
        stopped_at = copy.catch_up()
        assert len(copy.keys) == len(set(copy.keys)) >= first.good
        versions = range(max(stopped_at - 1, 0), min(stopped_at, delta_version(table)) + 1)
        assert any(sorted(copy.keys) == keys(read_delta(table, v)) for v in versions), stopped_at

        # VACUUM while the stream appends (see vacuum_compacted_away), then the stream goes on
        assert all(Path(table, p).exists() for p in compacted_away)
        vacuumed_at = vacuum_compacted_away(spark, table)
        assert not any(Path(table, p).exists() for p in compacted_away)
        report = live.join(timeout=120)
        last = produce_demo_events(flow, kafka_conf, count=200, seed=63, **produce)
        produced = sorted([*(first.keys or []), *(report.keys or []), *(last.keys or [])])
        wait_for_exact_rows(spark, stream, len(produced))
        assert stream_commits(table, delta_version(table))[-1] > vacuumed_at

    # every reader sees exactly the keys produced; the streaming source resumes past the vacuum
    copy.catch_up()
    assert sorted(copy.keys) == produced
    assert keys(read_delta_spark(spark, table)) == produced  # every column decodes
    assert keys(read_delta(table)) == produced
    duckdb_keys = duckdb_query(f"SELECT {KEY} FROM delta_scan('{table}') ORDER BY 1")
    assert [k for (k,) in duckdb_keys] == produced
    for version in range(delta_version(table) + 1):
        assert read_entry(table, version) is not None, f"version {version} is missing"


def keys(rows: pa.Table) -> list[str]:
    return sorted(rows.column(KEY).to_pylist())


def require_running(spark: Any, stream: FlowStream) -> None:
    """The stream's query still runs in the session (a commit it fails on stops it)."""
    assert any(q.name == stream.query_name for q in spark.streams.active), "the stream stopped"


def wait_for_exact_rows(spark: Any, stream: FlowStream, rows: int) -> None:
    """Wait until the stream's table holds `rows` rows, then see that it holds no more."""

    def reached() -> bool | None:
        require_running(spark, stream)
        return True if read_delta(stream.table_uri).num_rows >= rows else None

    wait_for(reached, 240, f"{rows} rows in {stream.table_uri}", 0.5)
    assert read_delta(stream.table_uri).num_rows == rows


def stream_commits(table: str, up_to: int) -> list[int]:
    """Versions up to `up_to` that hold a batch of a stream (an application transaction)."""
    return [
        v for v in range(up_to + 1) if any("txn" in action for action in read_entry(table, v) or [])
    ]


def describe_history(spark: Any, table: str) -> list[Any]:
    """DESCRIBE HISTORY's rows, newest first."""
    return spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()


def optimize_during_stream_commits(spark: Any, stream: FlowStream, live: BackgroundProducer) -> int:
    """OPTIMIZE the table with delta-spark while the stream appends, again until one OPTIMIZE
    had a stream commit land between the snapshot it read and its own commit (delta-spark then
    checks the winner and commits after it); that OPTIMIZE's version."""
    table = stream.table_uri
    before = delta_version(table)
    wait_for(lambda: True if delta_version(table) > before else None, 120, "a new batch", 0.2)

    def raced_optimize() -> int | None:
        require_running(spark, stream)
        assert live.is_alive(), "the producer ended before an OPTIMIZE met a stream commit"
        metrics = spark.sql(f"OPTIMIZE delta.`{table}`").collect()[0].metrics
        assert metrics.numFilesRemoved > metrics.numFilesAdded >= 1, metrics
        history = describe_history(spark, table)
        optimize = next(row for row in history if row.operation == "OPTIMIZE")
        return optimize.version if optimize.version > optimize.readVersion + 1 else None

    return wait_for(raced_optimize, 120, "an OPTIMIZE that a stream commit raced", 0.2)


def removed_paths(table: str, up_to: int) -> set[str]:
    """Data files the log's remove actions name (their paths are URIs), up to version `up_to`."""
    return {
        unquote(action["remove"]["path"])
        for v in range(up_to + 1)
        for action in read_entry(table, v) or []
        if "remove" in action
    }


class StreamedKeys:
    """The table's keys as delta-spark's streaming source delivers them from version 0, taken
    into this process (foreachBatch), with a checkpoint of its own."""

    def __init__(self, spark: Any, table: str, checkpoint: str) -> None:
        self.spark, self.table, self.checkpoint = spark, table, checkpoint
        self.keys: list[str] = []

    def catch_up(self) -> int:
        """Take what the table holds as this starts, from the checkpoint on (availableNow);
        the table version its last offset names."""
        query = (
            self.spark.readStream.format("delta")
            .option("startingVersion", "0")
            .load(self.table)
            .select(KEY)
            .writeStream.foreachBatch(self._take)
            .option("checkpointLocation", self.checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert not query.isActive, "the streaming read did not finish in 300 s"
        assert query.exception() is None, query.exception()
        offset = query.lastProgress["sources"][0]["endOffset"]
        return int((json.loads(offset) if isinstance(offset, str) else offset)["reservoirVersion"])

    def _take(self, batch: Any, batch_id: int) -> None:
        self.keys += batch.toArrow().column(KEY).to_pylist()


def vacuum_compacted_away(spark: Any, table: str) -> int:
    """VACUUM LITE RETAIN 0 HOURS with delta-spark; the version of its VACUUM END commit.

    FULL (the default) lists the table's folders and deletes every file the snapshot does not
    name that is older than the retention: at 0 hours, the files a running stream has written
    and not yet committed (and those of commits after the vacuum's snapshot), whose later commit
    would then name missing files. LITE deletes only the files the log's remove actions name
    (here, what OPTIMIZE compacted away), never a file no commit has named yet, so it is safe
    against a stream that only appends. RETAIN 0 HOURS (below the table's
    deletedFileRetentionDuration, hence the check turned off for this one statement) still
    breaks readers of older snapshots: time travel before the OPTIMIZE, a streaming source
    behind it; nothing here reads them afterwards."""
    before = spark.conf.get(RETENTION_CHECK, None)
    spark.conf.set(RETENTION_CHECK, "false")
    try:
        spark.sql(f"VACUUM delta.`{table}` LITE RETAIN 0 HOURS").collect()
    finally:
        if before is None:
            spark.conf.unset(RETENTION_CHECK)
        else:
            spark.conf.set(RETENTION_CHECK, before)
    newest = describe_history(spark, table)
    return next(row.version for row in newest if row.operation == "VACUUM END")
