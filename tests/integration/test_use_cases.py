"""Use cases' streams land exactly once: an upsert (account_activity) and an append, each its
own query in the test's SparkSession, over a call_events table appended to by delta-rs (one
commit per batch, as the flow's stream would) and compacted meanwhile. Each output is read back
by delta-rs and compared with a recomputation in pandas over the whole input; a micro-batch
replayed after its output was committed (Spark's checkpoint losing its commit, as a SIGKILL
between the two does) changes nothing. Bad functions and outputs stop with one line naming the
use case, their table untouched.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from failed_calls_use_case import FAILED_CALLS
from lake_readers import read_delta, read_delta_spark
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from use_case_tables import activity_differences, stored_activity

from tidelake.assets.definitions import build_definitions
from tidelake.assets.tables.keys import use_case_key
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.use_cases import ACCOUNT_ACTIVITY, CALLS_BY_REGION_DAILY
from tidelake.streaming.flow.table_schema import table_schema
from tidelake.streaming.polling import poll_until
from tidelake.streaming.spark.extensions import tidelake_jvm
from tidelake.streaming.stream.application import run_application
from tidelake.streaming.stream.backoff import Backoff
from tidelake.streaming.stream.query import StreamFailedError, run_query
from tidelake.streaming.usecase import planned_schema
from tidelake.streaming.usecase.daily import DaySource, build_day
from tidelake.streaming.usecase.freshness import FreshnessWindow
from tidelake.streaming.usecase.inputs import MAX_FILES_PER_TRIGGER
from tidelake.streaming.usecase.position import (
    commit_time_ms,
    committed_input_version,
    measure_lag,
)
from tidelake.streaming.usecase.refresh import refresh_marker, request_refresh
from tidelake.streaming.usecase.spec import Append, FlowTable, Upsert, UseCaseError, UseCaseSpec
from tidelake.streaming.usecase.stream import UseCaseStream

START_MS = int(datetime(2026, 12, 1, 23, 50, tzinfo=UTC).timestamp() * 1000)
ACCOUNTS = [f"AC{n:032x}" for n in range(12)]


def call_rows(seed: int, count: int, start_ms: int, span_ms: int) -> pa.Table:
    """Calls of a few accounts in random event-time order (older events arrive after newer)."""
    rng = random.Random(seed)
    times = [start_ms + rng.randrange(span_ms) for _ in range(count)]
    failed = [rng.random() < 0.2 for _ in range(count)]
    event_time = pa.array(
        [datetime.fromtimestamp(t / 1000, UTC) for t in times], pa.timestamp("us", tz="UTC")
    )
    columns = {
        "call_sid": [f"CA{rng.getrandbits(128):032x}" for _ in range(count)],
        "account_sid": [rng.choice(ACCOUNTS) for _ in range(count)],
        "duration": [0 if f else rng.randrange(1, 600) for f in failed],
        "call_state": ["failed" if f else "completed" for f in failed],
        "region": [rng.choice(["us1", "eu1", "ap1"]) for _ in range(count)],
        "event_time": event_time,
        "date": pa.compute.cast(event_time, pa.date32()),
    }
    schema = table_schema(CALL_EVENTS)
    return pa.table(
        {
            name: pa.array(values, schema.field(name).type)
            if not isinstance(values, pa.Array)
            else values
            for name, values in columns.items()
        }
    )


def land(settings: Any, rows: pa.Table) -> None:
    """Append one commit to call_events, as the flow's stream would."""
    write_deltalake(
        settings.table_uri(CALL_EVENTS.table), rows, mode="append", partition_by=["date"]
    )


def forget_last_commit(checkpoint: str) -> int:
    """Drop the checkpoint's record of its last batch's commit, as a SIGKILL after the output's
    commit and before Spark's does: the restarted query runs that batch again."""
    commits = Path(checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    crc = commits / f".{last}.crc"
    crc.unlink(missing_ok=True)
    return last


@contextmanager
def streaming(spark: Any, settings: Any, use_case: UseCaseSpec) -> Iterator[UseCaseStream]:
    """The use case's query running in the test's session until the block ends."""
    stream = UseCaseStream(use_case, CALL_EVENTS, settings)
    stream.preflight()
    query = stream.start(spark)
    try:
        yield stream
    finally:
        query.stop()


def caught_up(stream: UseCaseStream, input_version: int) -> None:
    def probe() -> bool | None:
        read = committed_input_version(stream.checkpoint)
        return True if read is not None and read >= input_version else None

    poll_until(
        probe,
        timeout_s=240,
        interval_s=0.5,
        timeout_error=lambda _: AssertionError(
            f"{stream.query_name} did not read input version {input_version}"
        ),
    )


@pytest.mark.timeout(900)
def test_append_and_upsert_land_exactly_once_through_replays_and_compaction(
    spark: Any, engine_settings: Any
) -> None:
    settings = engine_settings
    table = settings.table_uri(CALL_EVENTS.table)
    for n in range(3):  # three commits of calls around midnight, each out of event-time order
        land(settings, call_rows(n, 400, START_MS, 20 * 60_000))
    with (
        streaming(spark, settings, ACCOUNT_ACTIVITY) as activity,
        streaming(spark, settings, FAILED_CALLS) as failed,
    ):
        caught_up(activity, 2)
        caught_up(failed, 2)
        lag = measure_lag(table, activity.checkpoint, datetime.now(UTC).timestamp())
        assert (lag.versions, lag.waiting_s) == (0, 0.0)
        # a compaction of the input rewrites its files: no new data for a use case
        DeltaTable(table).optimize.compact()
        land(settings, call_rows(3, 300, START_MS, 20 * 60_000))
        caught_up(activity, 4)
        caught_up(failed, 4)
    # a SIGKILL between each output's commit and Spark's: each query runs its last batch again
    for use_case in (ACCOUNT_ACTIVITY, FAILED_CALLS):
        forget_last_commit(settings.checkpoint_uri(use_case.checkpoint_name))
    before_activity = stored_activity(settings)
    land(settings, call_rows(4, 200, START_MS, 20 * 60_000))
    with (
        streaming(spark, settings, ACCOUNT_ACTIVITY) as activity,
        streaming(spark, settings, FAILED_CALLS) as failed,
    ):
        caught_up(activity, 5)
        caught_up(failed, 5)

    calls = read_delta(table).to_pandas()
    assert len(calls) == 1700
    stored = stored_activity(settings)
    assert stored["calls"].sum() == 1700 and before_activity["calls"].sum() == 1500
    assert activity_differences(settings, calls) == {}
    assert (stored["last_call_state"] != "").all()

    # the declared expectations, executed as Dagster executes the check on demand
    key = dg.AssetKey(["lake", ACCOUNT_ACTIVITY.name])
    check_now = dg.define_asset_job(
        "check_now", dg.AssetSelection.checks(dg.AssetCheckKey(key, "expectations"))
    )
    defs = dg.Definitions.merge(
        build_definitions({CALL_EVENTS.name: CALL_EVENTS}, settings),
        dg.Definitions(jobs=[check_now]),
    )
    with dg.instance_for_test() as instance:
        run = defs.resolve_job_def("check_now").execute_in_process(instance=instance)
    (evaluation,) = run.get_asset_check_evaluations()
    assert evaluation.passed, evaluation.description
    assert evaluation.metadata["rows"].value == len(ACCOUNTS)
    assert evaluation.metadata["expectations"].value == 4

    landed = read_delta(settings.table_uri(FAILED_CALLS.table)).to_pandas()
    assert landed["call_sid"].is_unique
    assert set(landed["call_sid"]) == set(calls[calls["call_state"] == "failed"]["call_sid"])
    assert {d.isoformat() for d in landed["date"]} == {"2026-12-01", "2026-12-02"}


def fails_while(poison: Path) -> Any:
    """A use case function whose batches raise while the file `poison` exists (a bad deploy,
    a bug met by some input), as an always-on query meets it: mid-run, on data."""

    def check(account_sid):  # no hints: Spark would try to infer a UDF kind from them
        if os.path.exists(poison):
            raise ValueError(f"poisoned: {poison}")
        return account_sid

    def fragile_calls(call_events: DataFrame) -> DataFrame:
        tidelake_jvm("fragile_calls")  # planned in its query's thread: the session is active
        checked = F.udf(check, "string")(F.col("account_sid")).alias("account_sid")
        return call_events.select("call_sid", checked, "event_timestamp")

    return fragile_calls


@pytest.mark.timeout(900)
def test_a_flows_use_cases_share_one_application_and_fail_alone(
    spark: Any, engine_settings: Any, tmp_path: Path
) -> None:
    """Two use cases as queries of one Spark application (stream/application.py), each in its
    FAIR pool: one's function raising mid-run fails that query alone, started again with
    back-off while the other's commits go on; once the cause is gone it catches up, and both
    tables are exact."""
    settings = engine_settings
    land(settings, call_rows(21, 300, START_MS, 20 * 60_000))
    poison = tmp_path / "poison"
    fragile = declared("fragile_calls", fails_while(poison), Append())
    hosted = [
        UseCaseStream(ACCOUNT_ACTIVITY, CALL_EVENTS, settings),
        UseCaseStream(fragile, CALL_EVENTS, settings),
    ]
    activity, fragile_stream = hosted
    failures: list[tuple[str, float]] = []
    stop = threading.Event()
    runs: dict[str, Any] = {}
    application = threading.Thread(
        target=lambda: runs.update(
            run_application(
                spark,
                hosted,
                stop,
                progress_interval_s=1.0,
                backoff=Backoff(first_s=1.0, max_s=4.0),
                on_failure=lambda name, _, delay: failures.append((name, delay)),
            )
        )
    )
    application.start()
    try:
        caught_up(activity, 0)
        caught_up(fragile_stream, 0)
        poison.touch()
        land(settings, call_rows(22, 300, START_MS, 20 * 60_000))
        poll_until(
            lambda: len(failures) >= 3 or None,
            timeout_s=240,
            interval_s=0.5,
            timeout_error=lambda _: AssertionError(f"the poisoned query failed {failures}"),
        )
        land(settings, call_rows(23, 300, START_MS, 20 * 60_000))
        caught_up(activity, 2)  # its commits go on beside the failing query
        assert committed_input_version(fragile_stream.checkpoint) == 0
        poison.unlink()
        caught_up(fragile_stream, 2)
    finally:
        stop.set()
        application.join(180)
    assert not application.is_alive()
    assert {name for name, _ in failures} == {fragile_stream.query_name}
    assert [delay for _, delay in failures[:3]] == [1.0, 2.0, 4.0]
    assert runs[activity.query_name].failures == 0 and runs[activity.query_name].starts == 1
    assert runs[fragile_stream.query_name].starts == len(failures) + 1
    calls = read_delta(settings.table_uri(CALL_EVENTS.table)).to_pandas()
    assert activity_differences(settings, calls) == {}
    landed = read_delta(settings.table_uri(fragile.table)).to_pandas()
    assert landed["call_sid"].is_unique and set(landed["call_sid"]) == set(calls["call_sid"])
    scheduler = spark.sparkContext._jsc.sc()
    for stream in hosted:  # each query's jobs ran in its own pool
        assert scheduler.getPoolForName(stream.query_name).isDefined(), stream.query_name


def raises(call_events: DataFrame) -> DataFrame:
    return call_events.select(F.col("no_such_column"))


def keyless(call_events: DataFrame) -> DataFrame:
    return call_events.select("call_sid", "event_timestamp")


def divides_by_zero(call_events: DataFrame) -> DataFrame:
    @F.udf("long")
    def broken(duration: int) -> int:
        return duration // 0

    return call_events.select(broken("duration").alias("d"), "event_timestamp")


def declared(name: str, function: Any, output: Any) -> UseCaseSpec:
    return UseCaseSpec(
        name=name,
        inputs={"call_events": FlowTable("call_events")},
        function=function,
        output=output,
    )


def test_bad_functions_and_outputs_stop_with_one_line_naming_the_use_case(
    spark: Any, engine_settings: Any
) -> None:
    settings = engine_settings
    land(settings, call_rows(7, 50, START_MS, 60_000))
    upsert = Upsert(("account_sid",), "event_timestamp")
    cases = [
        (declared("raising", raises, Append()), "use case raising: its function raised"),
        (
            declared("keyless", keyless, upsert),
            "use case keyless: its function's output lacks its key column(s) ['account_sid']",
        ),
    ]
    for use_case, message in cases:
        with pytest.raises(UseCaseError, match=f"^{re.escape(message)}"):
            UseCaseStream(use_case, CALL_EVENTS, settings).start(spark)

    # a failure inside a batch: one line naming the use case, nothing landed
    failing = declared("divides_by_zero", divides_by_zero, Append())
    stream = UseCaseStream(failing, CALL_EVENTS, settings)
    with pytest.raises(StreamFailedError) as failed:
        run_query(lambda: stream.start(spark), threading.Event(), explain=stream.explain_failure)
    line = str(failed.value)
    assert "use case divides_by_zero: ZeroDivisionError: integer division" in line, line
    assert "\n" not in line
    assert read_delta(stream.table_uri).num_rows == 0

    # the declaration's key changed under an existing table: refused, the table untouched
    with streaming(spark, settings, ACCOUNT_ACTIVITY) as activity:
        caught_up(activity, 0)
    version = DeltaTable(activity.table_uri).version()
    rekeyed = UseCaseSpec(
        name="account_activity",
        inputs=ACCOUNT_ACTIVITY.inputs,
        function=ACCOUNT_ACTIVITY.function,
        output=Upsert(("account_sid", "last_region"), "last_event_time"),
    )
    with pytest.raises(UseCaseError, match=r"^use case account_activity: its output does not fit"):
        UseCaseStream(rekeyed, CALL_EVENTS, settings).start(spark)
    assert DeltaTable(activity.table_uri).version() == version

    # a CHECK constraint its owners added: a batch with a row breaking it is not committed
    with streaming(spark, settings, FAILED_CALLS) as failed:
        caught_up(failed, 0)
    spark.sql(
        f"ALTER TABLE delta.`{failed.table_uri}` ADD CONSTRAINT early "
        "CHECK (event_timestamp < '2026-12-02')"
    )
    before = DeltaTable(failed.table_uri).version()
    land(settings, call_rows(8, 50, START_MS + 86_400_000, 60_000))  # the next day's calls
    stream = UseCaseStream(FAILED_CALLS, CALL_EVENTS, settings)
    refused = (
        "use case failed_calls: a row violates the table's CHECK constraint early: "
        "event_timestamp < '2026-12-02'"
    )
    with pytest.raises(UseCaseError, match=f"^{re.escape(refused)}$"):
        run_query(lambda: stream.start(spark), threading.Event(), batch_error=stream.batch_error)
    assert DeltaTable(failed.table_uri).version() == before

    # the function changed (a column more): a full refresh rebuilds the table from the whole
    # input at the next start (the constraint its owners added went with the old table)
    changed = dataclasses.replace(FAILED_CALLS, function=failed_calls_with_region)
    request_refresh(changed, settings)
    with streaming(spark, settings, changed) as failed:
        caught_up(failed, DeltaTable(settings.table_uri(CALL_EVENTS.table)).version())
    assert not refresh_marker(changed, settings).exists()
    calls = read_delta(settings.table_uri(CALL_EVENTS.table)).to_pandas()
    expected = calls[calls["call_state"] == "failed"].set_index("call_sid")["region"]
    landed = read_delta(failed.table_uri).to_pandas().set_index("call_sid")
    assert landed.index.is_unique
    assert landed["region"].sort_index().equals(expected.sort_index())


def failed_calls_with_region(call_events: DataFrame) -> DataFrame:
    return call_events.where(F.col("call_state") == "failed").select(
        "call_sid", "account_sid", "region", "event_timestamp"
    )


def test_an_upsert_table_made_before_deletion_vectors_is_upgraded_in_place_and_merged_with_them(
    spark: Any, engine_settings: Any
) -> None:
    """A MERGE into the upsert table writes the batch's rows and a deletion vector per file it
    touches, never a copy of the other rows (a batch's cost does not grow with the table); a
    table made before (delta-rs's protocol, no vectors) gets them at the query's start, its
    rows untouched. delta-spark and DuckDB (delta-kernel-rs) both read it exactly."""
    settings = engine_settings
    uri = settings.table_uri(ACCOUNT_ACTIVITY.table)
    old = pa.table(
        {
            "account_sid": ["ACold0", "ACold1"],
            "last_event_time": pa.array(
                [datetime(2026, 11, 1, tzinfo=UTC)] * 2, pa.timestamp("us", tz="UTC")
            ),
            "last_call_sid": ["CAold0", "CAold1"],
            "last_call_state": ["completed", "failed"],
            "last_region": ["us1", "eu1"],
            "calls": pa.array([5, 7], pa.int64()),
            "failed_calls": pa.array([0, 7], pa.int64()),
            "duration_s": pa.array([50, 0], pa.int64()),
        }
    )
    keyed = {
        "tidelake.use_case.key": "account_sid",
        "tidelake.use_case.sequence_by": "last_event_time",
    }
    write_deltalake(uri, old)  # and keyed as tidelake recorded it
    DeltaTable(uri).alter.set_table_properties(keyed, raise_if_not_exists=False)
    assert "deletionVectors" not in (DeltaTable(uri).protocol().reader_features or [])
    land(settings, call_rows(21, 300, START_MS, 60_000))
    with streaming(spark, settings, ACCOUNT_ACTIVITY) as activity:
        caught_up(activity, 0)
        protocol = DeltaTable(uri).protocol()
        assert "deletionVectors" in (protocol.reader_features or [])
        configuration = DeltaTable(uri).metadata().configuration
        assert configuration["delta.enableDeletionVectors"] == "true"
        assert configuration["delta.autoOptimize.autoCompact"] == "true"
        later = call_rows(22, 40, START_MS + 120_000, 60_000)  # existing accounts only
        land(settings, later)
        caught_up(activity, 1)
    # the newest MERGE (auto compaction may have followed it)
    merge = next(e for e in DeltaTable(uri).history(3) if e["operation"] == "MERGE")
    metrics = {k: int(v) for k, v in merge["operationMetrics"].items()}
    assert metrics["numTargetRowsCopied"] == 0, metrics
    assert metrics["numTargetRowsUpdated"] == len(set(later["account_sid"].to_pylist())), metrics
    assert (
        metrics["numTargetDeletionVectorsAdded"] + metrics["numTargetDeletionVectorsUpdated"] >= 1
    )

    calls = read_delta(settings.table_uri(CALL_EVENTS.table)).to_pandas()
    stored = stored_activity(settings)
    kept = stored.loc[["ACold0", "ACold1"]].reset_index()
    assert kept[old.column_names].to_dict("list") == old.to_pandas().to_dict("list")
    assert stored.drop(["ACold0", "ACold1"])["calls"].sum() == len(calls) == 340
    by_spark = read_delta_spark(spark, uri, "account_sid", "calls").to_pandas()
    assert dict(zip(by_spark["account_sid"], by_spark["calls"], strict=True)) == dict(
        stored["calls"]
    )
    # every version a reader may load is a consistent table: one row per account, the calls of
    # whole batches (the old rows', then each input commit's in full)
    totals = []
    for version in range(DeltaTable(uri).version() + 1):
        rows = read_delta_spark(spark, uri, "account_sid", "calls", versionAsOf=str(version))
        accounts = rows.column("account_sid").to_pylist()
        assert len(accounts) == len(set(accounts)), version
        totals.append(sum(rows.column("calls").to_pylist()))
    assert set(totals) <= {12, 12 + 300, 12 + 340}, totals


def test_a_backlog_after_a_restart_is_worked_off_in_bounded_batches(
    spark: Any, engine_settings: Any
) -> None:
    """A use case restarted behind its input reads at most MAX_FILES_PER_TRIGGER of its files
    a batch, so its first batch finishes and commits (Delta's default of 1,000 made one batch of
    the whole backlog, which a loaded machine never finished), and then catches up exactly."""
    settings = engine_settings
    land(settings, call_rows(30, 20, START_MS, 60_000))
    with streaming(spark, settings, ACCOUNT_ACTIVITY) as activity:
        caught_up(activity, 0)
    backlog = MAX_FILES_PER_TRIGGER + 20
    for n in range(backlog):  # one file each: the flow's commits while the use case was down
        land(settings, call_rows(100 + n, 3, START_MS, 60_000))
    stream = UseCaseStream(ACCOUNT_ACTIVITY, CALL_EVENTS, settings)
    query = stream.start(spark)
    try:
        caught_up(stream, backlog)
    finally:
        query.stop()
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert batches[0] == MAX_FILES_PER_TRIGGER * 3, batches
    assert sum(batches) == backlog * 3, batches
    calls = read_delta(settings.table_uri(CALL_EVENTS.table)).to_pandas()
    assert activity_differences(settings, calls) == {}


def test_the_run_measures_the_freshness_of_every_input_version_it_reads(
    spark: Any, engine_settings: Any
) -> None:
    """The freshness the run reports on the use case's asset (assets/usecases/stream_job.py):
    every input version read once, from Spark's progress of each batch; its seconds from the
    version's commit (the input's log) to the end of its batch lie between 0 and the moment the
    test saw the use case's checkpoint commit it (plus the end of that trigger)."""
    settings = engine_settings
    land(settings, call_rows(40, 20, START_MS, 60_000))  # version 0: the first batch, no figure
    stream = UseCaseStream(ACCOUNT_ACTIVITY, CALL_EVENTS, settings)
    window = FreshnessWindow(stream.input_uri)
    query = stream.start(spark)
    recorded: dict[int, float] = {}
    seen_at: dict[int, float] = {}
    try:
        caught_up(stream, 0)
        for version in range(1, 5):
            land(settings, call_rows(40 + version, 20, START_MS, 60_000))
            caught_up(stream, version)
            seen_at[version] = time.time()

        def all_recorded() -> bool | None:
            recorded.update(window.record(query.recentProgress))
            return True if 4 in recorded else None

        poll_until(all_recorded, timeout_s=60, interval_s=0.5, timeout_error=AssertionError)
    finally:
        query.stop()
    assert sorted(recorded) == [1, 2, 3, 4]
    for version, seconds in recorded.items():
        committed_ms = commit_time_ms(stream.input_uri, version)
        assert committed_ms is not None
        assert 0 <= seconds <= seen_at[version] - committed_ms / 1000 + 2.0, (version, seconds)
    figures = window.figures(time.time())
    assert figures is not None and figures.samples == 4
    assert figures.p50_s <= figures.p99_s <= figures.max_s == max(recorded.values())


def test_a_use_cases_columns_have_their_types_before_its_table_exists(
    spark: Any, engine_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The code location's first load lists an upsert's and a Daily use case's columns with the
    types their tables get: their functions planned over their input's schema in a Spark
    subprocess (a cold cache here), never run. Once their writers create the tables, the tables'
    own columns are the same."""
    monkeypatch.setenv("TIDELAKE_PLAN_USE_CASE_SCHEMAS", "true")
    monkeypatch.setenv("TIDELAKE_CACHE", str(tmp_path / "cache"))
    settings = engine_settings
    land(settings, call_rows(50, 40, START_MS, 60_000))

    def listed() -> dict[str, list[tuple[str, str]]]:
        graph = build_definitions({CALL_EVENTS.name: CALL_EVENTS}, settings).resolve_asset_graph()
        return {
            use_case.name: [
                (c.name, c.type)
                for c in graph.get(use_case_key(use_case)).metadata["dagster/column_schema"].columns
            ]
            for use_case in (ACCOUNT_ACTIVITY, CALLS_BY_REGION_DAILY)
        }

    planned = listed()
    assert not (tmp_path / "lake" / ACCOUNT_ACTIVITY.table).exists()
    assert all(kind for columns in planned.values() for _, kind in columns), planned
    assert ("last_event_time", "timestamp[us, tz=UTC]") in planned[ACCOUNT_ACTIVITY.name]
    assert len(list((tmp_path / "cache" / "use-case-schemas").iterdir())) == 2

    with streaming(spark, settings, ACCOUNT_ACTIVITY) as activity:
        caught_up(activity, 0)
    day = date(2026, 12, 1)
    build_day(spark, CALLS_BY_REGION_DAILY, DaySource(CALL_EVENTS, None), settings, day)
    assert listed() == planned  # now read from the tables themselves


def test_a_function_that_cannot_be_planned_keeps_untyped_columns_and_is_not_retried_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its planning fails in the subprocess (the function selects a column its input lacks):
    no schema, one line saying why, and a marker so that the next processes to load the
    definitions (every run worker) do not each start a JVM to fail again."""
    monkeypatch.setenv("TIDELAKE_PLAN_USE_CASE_SCHEMAS", "true")
    monkeypatch.setenv("TIDELAKE_CACHE", str(tmp_path / "cache"))
    broken = declared("unplannable", raises, Upsert(key=("call_sid",), sequence_by="event_time"))
    wanted = [(broken, DaySource(CALL_EVENTS, None))]
    assert planned_schema.planned_schemas(wanted, {}) == {}
    (marker,) = (tmp_path / "cache" / "use-case-schemas").glob("*.failed")
    assert "no_such_column" in marker.read_text()

    def no_second_try(*_: Any) -> Any:
        raise AssertionError("planned again")

    monkeypatch.setattr(planned_schema, "_plan_in_subprocess", no_second_try)
    assert planned_schema.planned_schemas(wanted, {}) == {}
