"""The stream refuses to start on a table that does not match its checkpoint (Kafka secrets in
no log or file: test_secured_kafka)."""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from lake_readers import read_delta
from live_stream import produce_and_stream, run_available_now
from stores import ON_BOTH_STORES, copy_tree, files_under

from tidelake.platform.dev.dagster_web import wait_for
from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.commit import TableReplacedError
from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.kafka.admin import ensure_topic
from tidelake.streaming.storage.location import Location, filesystem
from tidelake.streaming.stream.guard import StreamGuardError
from tidelake.streaming.stream.query import FlowStream, await_query


def _flow(topic: str) -> Any:
    return dataclasses.replace(CALL_EVENTS, topic=topic)


def _restore_an_older_table_copy(
    spark: Any, flow: Any, settings: Any, kafka_conf: dict[str, Any]
) -> tuple[Any, Any, FlowStream]:
    """Stream twice, then put back the table as it was after the first: the checkpoint is now
    ahead of the table. Returns the two producer reports and the stream."""
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    run = produce_and_stream(spark, flow, settings, kafka_conf, count=400, seed=51)
    first, stream = run.report, run.stream
    copy = Location(stream.table_uri).with_name("table-copy")
    copy_tree(stream.table_uri, copy.uri)
    run = produce_and_stream(spark, flow, settings, kafka_conf, count=300, seed=52)
    second = run.report
    assert run.table.num_rows == first.good + second.good
    Location(stream.table_uri).delete_tree()  # "restore" the older copy
    copy_tree(copy.uri, stream.table_uri)
    return first, second, stream


def _assert_refused(
    flow: Any, settings: Any, kafka_conf: dict[str, Any], table_uri: str, rows: int
) -> None:
    with pytest.raises(StreamGuardError) as refused:
        FlowStream(flow, settings, kafka_conf).preflight()
    message = str(refused.value)
    assert "has committed batch" in message and "holds its batches only up to" in message
    assert "--restart-from-table" in message
    assert read_delta(table_uri).num_rows == rows  # nothing was written


@ON_BOTH_STORES
def test_an_older_table_copy_under_a_newer_checkpoint_is_refused_then_replayed(
    spark: Any, kafka_conf: dict[str, Any], topic_name: str, engine_settings: Any
) -> None:
    flow = _flow(topic_name)
    first, second, stream = _restore_an_older_table_copy(spark, flow, engine_settings, kafka_conf)
    _assert_refused(flow, engine_settings, kafka_conf, stream.table_uri, first.good)

    # the documented way forward: replay from the table's own position
    FlowStream(flow, engine_settings, kafka_conf).preflight(restart_from_table=True)
    run_available_now(spark, flow, engine_settings, kafka_conf)
    keys = read_delta(stream.table_uri).column("call_sid").to_pylist()
    assert len(keys) == first.good + second.good == len(set(keys))
    checkpoints = Location(stream.checkpoint).parent
    assert [n for n in checkpoints.names() if n.startswith(f"{flow.name}.retired-")]


@ON_BOTH_STORES
def test_a_deleted_data_file_is_refused_with_its_dates(
    spark: Any, kafka_conf: dict[str, Any], topic_name: str, engine_settings: Any
) -> None:
    flow = _flow(topic_name)
    ensure_topic(kafka_conf, topic_name, flow.topic_partitions)
    stream = produce_and_stream(
        spark, flow, engine_settings, kafka_conf, count=200, days=2, seed=53
    ).stream
    victim = files_under(stream.table_uri, ".parquet")[0]
    fs, path = filesystem(victim)
    fs.delete_file(path)
    with pytest.raises(StreamGuardError) as refused:
        FlowStream(flow, engine_settings, kafka_conf).preflight()
    message = str(refused.value)
    assert "names 1 data file(s) that do not exist" in message
    assert victim.split("/")[-2].removeprefix("date=") in message
    assert "repair()" in message


def test_a_table_replaced_by_an_older_copy_under_a_running_stream_stops_it_without_a_gap(
    spark: Any, kafka_conf: dict[str, Any], topic_name: str, engine_settings: Any
) -> None:
    """The table's folder is swapped for a copy taken earlier while the stream runs: its next
    batch does not put the version after its own (a gap after the copy's latest) but stops the
    stream with one line naming both versions; started again, the start-up guard refuses as it
    does for any table behind its checkpoint."""
    flow = _flow(topic_name)
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    produce = {"malformed_share": 0.0, "progress": False}
    first = produce_demo_events(flow, kafka_conf, count=300, seed=71, **produce)
    stream = FlowStream(flow, engine_settings, kafka_conf)
    stream.preflight()
    stop, failures = threading.Event(), []

    query = stream.start(spark)  # in this thread: the session is active here

    def run() -> None:
        try:
            await_query(query, stop)
        except Exception as exc:  # the one line the stream's process ends with (run_query)
            failures.append(stream.batch_error() or exc)

    def rows(count: int) -> int:
        def landed() -> int | None:
            assert not failures, failures
            return count if read_delta(str(table)).num_rows >= count else None

        return int(wait_for(landed, 300, f"{count} rows in the table", 0.5))

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    table = Path(stream.table_uri)
    try:
        rows(first.good)
        copy = table.with_name("table-copy")
        copy_tree(str(table), str(copy))
        copied_at = open_table(str(copy)).version()
        second = produce_demo_events(flow, kafka_conf, count=200, seed=72, **produce)
        rows(first.good + second.good)
        streamed_to = open_table(str(table)).version()
        assert streamed_to > copied_at
        os.rename(table, table.with_name("table-aside"))  # the restore: the copy in its place
        os.rename(copy, table)

        produce_demo_events(flow, kafka_conf, count=100, seed=73, **produce)
        wait_for(lambda: failures or None, 180, "the stream to stop on the replaced table", 0.5)
    finally:
        stop.set()
        runner.join(timeout=60)
    (failure,) = failures
    assert isinstance(failure, TableReplacedError), repr(failure)
    message = str(failure)
    assert "\n" not in message
    assert f"latest version is {copied_at}, older than version {streamed_to}" in message
    versions = sorted(int(p.stem) for p in (table / "_delta_log").glob("*.json"))
    assert versions == list(range(versions[0], copied_at + 1))  # nothing after the copy's latest
    assert read_delta(str(table)).num_rows == first.good
    _assert_refused(flow, engine_settings, kafka_conf, str(table), first.good)
