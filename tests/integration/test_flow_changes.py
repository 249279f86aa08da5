"""A flow's message changes under a running platform: the table follows, or the change is refused.

The first version is tests/flows' PageView; tests/flows/page_view_changes.proto holds later
versions, one per kind of change. Each test streams the first version into a table, then starts
the same flow (same topic, checkpoint and table) on a later version, as the supervisor's restart
after `make protos` would. Tables are read back with delta-rs and DuckDB.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable
from flows import PAGE_VIEWS, page_view
from flows.page_view_changes_pb2 import (
    Device,
    PageViewKeyRenamed,
    PageViewLoadAsText,
    PageViewReusedNumber,
    PageViewTimeRenamed,
    PageViewWidened,
    PageViewWithCountry,
    PageViewWithoutUrl,
    PageViewWithoutUser,
)
from kafka_topics import read_records
from lake_readers import duckdb_query, read_delta
from live_stream import produce_and_stream, run_available_now, running_stream, wait_for_rows

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.batch.backfill import BackfillError, backfill_dates
from tidelake.streaming.delta.evolution import (
    FIELD_METADATA_KEY,
    FieldContract,
    SchemaChangeError,
    evolve_table,
)
from tidelake.streaming.kafka.admin import add_partitions, ensure_topic
from tidelake.streaming.stream.query import FlowStream
from tidelake.streaming.stream.status import committed_batch, kafka_ends, stream_lag


def with_country(rng: random.Random, event_time_ms: int) -> PageViewWithCountry:
    """A new producer's event: country set on every other one, clicks always."""
    old = page_view(rng, event_time_ms)
    event = PageViewWithCountry.FromString(old.SerializeToString())
    event.device = rng.choice([Device.TABLET, Device.MOBILE])
    event.clicks = rng.randrange(1, 50)
    if rng.random() < 0.5:
        event.country = rng.choice(["DE", "US", "BR"])
    return event


def widened(rng: random.Random, event_time_ms: int) -> PageViewWidened:
    event = PageViewWidened.FromString(page_view(rng, event_time_ms).SerializeToString())
    event.scroll_percent = 2**40 + rng.randrange(100)
    return event


@pytest.fixture
def v1(kafka_conf, topic_name):
    flow = dataclasses.replace(PAGE_VIEWS, topic=topic_name)
    ensure_topic(kafka_conf, topic_name, flow.topic_partitions)
    return flow


CLEAN = {"malformed_share": 0, "late_share": 0, "collect_keys": True}
"""Demo events that all land (no poison, none late), their keys collected."""


def produce(flow, kafka_conf, count, seed):
    return produce_demo_events(flow, kafka_conf, count=count, seed=seed, progress=False, **CLEAN)


def test_a_new_field_becomes_a_nullable_column_in_one_commit_without_a_reset(
    spark, kafka_conf, v1, engine_settings
):
    v1 = dataclasses.replace(v1, dedup_key="view_id")  # the dedup state survives the switch
    run = produce_and_stream(spark, v1, engine_settings, kafka_conf, count=300, seed=1, **CLEAN)
    first, stream = run.report, run.stream
    version_before = DeltaTable(stream.table_uri).version()

    v2 = dataclasses.replace(v1, message=PageViewWithCountry, demo_event=with_country)
    old_producer = produce(v1, kafka_conf, 200, seed=2)
    new_producer = produce(v2, kafka_conf, 200, seed=3)
    checkpoint_id = (Path(engine_settings.checkpoint_uri(v1.name)) / "metadata").read_text()
    run_available_now(spark, v2, engine_settings, kafka_conf)

    table = DeltaTable(stream.table_uri)
    commits = [c for c in table.history() if c["version"] > version_before]
    schema_commits = [c for c in commits if c.get("tidelake.added_columns")]
    assert [c["tidelake.added_columns"] for c in schema_commits] == ["country,clicks"]
    assert schema_commits[0]["version"] == version_before + 1  # before any row of v2
    assert (Path(engine_settings.checkpoint_uri(v1.name)) / "metadata").read_text() == checkpoint_id

    rows = read_delta(stream.table_uri).to_pylist()
    by_key = {r["view_id"]: r for r in rows}
    keys = first.keys + old_producer.keys + new_producer.keys
    assert len(rows) == len(by_key) == len(keys) == 700  # every record once
    assert set(by_key) == set(keys)
    assert {by_key[k]["country"] for k in first.keys} == {None}  # written before: null
    assert {by_key[k]["clicks"] for k in first.keys} == {None}
    assert {by_key[k]["country"] for k in old_producer.keys} == {None}  # optional, not sent
    assert {by_key[k]["clicks"] for k in old_producer.keys} == {0}  # proto3 zero value
    countries = Counter(by_key[k]["country"] for k in new_producer.keys)
    assert set(countries) == {None, "DE", "US", "BR"} and countries[None] < 150
    assert min(by_key[k]["clicks"] for k in new_producer.keys) >= 1
    assert "TABLET" in {by_key[k]["device"] for k in new_producer.keys}
    assert read_delta(stream.quarantine_uri).num_rows == 0
    assert duckdb_query(
        f"select count(*), count(country), count(clicks) from delta_scan('{stream.table_uri}')"
    ) == [(700, countries.total() - countries[None], 400)]

    contracts = {
        f.name: FieldContract.from_json(f.metadata[FIELD_METADATA_KEY])
        for f in table.schema().fields
        if FIELD_METADATA_KEY in f.metadata
    }
    assert contracts["country"] == FieldContract(10, "string")
    assert contracts["view_id"] == FieldContract(1, "string", "key")

    # a backfill of the day rewrites it with the new message and keeps the column contracts
    day = next(iter(first.by_date))
    result = backfill_dates(spark, v2, [day], engine_settings, kafka_conf)
    assert result.rows_by_date[day] == sum(r["date"].isoformat() == day for r in rows)
    after = DeltaTable(stream.table_uri).schema().fields
    assert {f.name for f in after if FIELD_METADATA_KEY in f.metadata} == set(contracts)


def test_widening_an_int32_field_rewrites_the_column_and_loses_nothing(
    spark, kafka_conf, v1, engine_settings
):
    run = produce_and_stream(spark, v1, engine_settings, kafka_conf, count=200, seed=4, **CLEAN)
    first, stream = run.report, run.stream
    before = {r["view_id"]: r["scroll_percent"] for r in run.table.to_pylist()}

    v2 = dataclasses.replace(v1, message=PageViewWidened, demo_event=widened)
    run = produce_and_stream(spark, v2, engine_settings, kafka_conf, count=100, seed=5, **CLEAN)
    second, table = run.report, run.table

    assert str(table.schema.field("scroll_percent").type) == "int64"
    values = {r["view_id"]: r["scroll_percent"] for r in table.to_pylist()}
    assert len(values) == table.num_rows == 300
    assert {k: values[k] for k in first.keys} == before
    assert min(values[k] for k in second.keys) >= 2**40
    assert duckdb_query(
        f"select count(*), max(scroll_percent) from delta_scan('{stream.table_uri}')"
    ) == [(300, max(values.values()))]


REFUSED = {
    "changed type": (
        PageViewLoadAsText,
        {},
        [
            "'load_ms' changed type from double to string",
            "Keep 'load_ms' as double",
            "an unused number such as 10",
        ],
    ),
    "reused number": (
        PageViewReusedNumber,
        {},
        ["number 5 belonged to 'bounced' and now to 'tabs_open'", "`reserved 5;`"],
    ),
    "removed required field": (
        PageViewWithoutUser,
        {"required_fields": ()},
        ["Required field 'user' was removed", "first stop requiring it"],
    ),
    "renamed key": (
        PageViewKeyRenamed,
        {"key_field": "id"},
        ["The key field was 'view_id' and is now 'id'", "declare a new flow"],
    ),
    "renamed event time": (
        PageViewTimeRenamed,
        {"event_time_field": "seen_at_s"},
        ["The event-time field was 'viewed_at_s' and is now 'seen_at_s'"],
    ),
}


@pytest.mark.parametrize("change", sorted(REFUSED))
def test_a_breaking_change_is_refused_at_start_naming_the_field(
    kafka_conf, v1, engine_settings, change
):
    message, spec_changes, expected = REFUSED[change]
    FlowStream(v1, engine_settings, kafka_conf).preflight()  # creates the table of version 1
    uri = engine_settings.table_uri(v1.table)
    version = DeltaTable(uri).version()
    changed = dataclasses.replace(v1, message=message, **spec_changes)

    with pytest.raises(SchemaChangeError) as refused:
        FlowStream(changed, engine_settings, kafka_conf).preflight()

    text = str(refused.value)
    assert text.startswith(f"flow page_views: tidelake.testing.changes.{message.__name__} ")
    for fragment in expected:
        assert fragment in text
    assert DeltaTable(uri).version() == version  # nothing changed


def test_a_removed_optional_field_keeps_its_column_and_its_number(tmp_path):
    uri = str(tmp_path / "page_views")
    evolve_table(PAGE_VIEWS, uri)
    without_url = dataclasses.replace(PAGE_VIEWS, message=PageViewWithoutUrl)
    assert not evolve_table(without_url, uri).changed
    assert "url" in DeltaTable(uri).schema().to_arrow().names
    reusing = dataclasses.replace(PAGE_VIEWS, message=PageViewReusedNumber)
    with pytest.raises(SchemaChangeError, match="number 5 belonged to 'bounced'"):
        evolve_table(reusing, uri)


def test_a_table_written_before_contracts_is_stamped_once(tmp_path):
    from deltalake import write_deltalake

    from tidelake.streaming.flow.table_schema import table_schema

    uri = str(tmp_path / "page_views")
    schema = table_schema(PAGE_VIEWS)
    write_deltalake(uri, schema.empty_table(), partition_by=["date"])
    stamped = evolve_table(PAGE_VIEWS, uri)
    assert set(stamped.restamped) == {f.name for f in PAGE_VIEWS.message.DESCRIPTOR.fields}
    assert not evolve_table(PAGE_VIEWS, uri).changed


def test_a_backfill_refuses_a_breaking_change_before_spark(kafka_conf, v1, engine_settings):
    FlowStream(v1, engine_settings, kafka_conf).preflight()
    changed = dataclasses.replace(v1, message=PageViewLoadAsText)
    from tidelake.streaming.batch.backfill import plan_backfill

    with pytest.raises(BackfillError, match="'load_ms' changed type from double to string"):
        yesterday = datetime.now(UTC).date() - timedelta(days=1)
        plan_backfill(changed, [yesterday.isoformat()], engine_settings, kafka_conf)


def test_partitions_added_while_streaming_are_read_from_offset_zero_without_a_restart(
    spark, kafka_conf, v1, engine_settings
):
    first = produce(v1, kafka_conf, 200, seed=6)
    FlowStream(v1, engine_settings, kafka_conf).preflight()
    with running_stream(spark, v1, engine_settings, kafka_conf) as stream:
        assert wait_for_rows(stream.table_uri, 200) == 200
        assert add_partitions(kafka_conf, v1.topic, 4) == 2
        second = produce(v1, kafka_conf, 400, seed=7)
        assert wait_for_rows(stream.table_uri, 600) == 600
        checkpoint = stream.checkpoint

    in_new = Counter(r.partition for r in read_records(kafka_conf, v1.topic) if r.partition >= 2)
    assert in_new[2] > 0 and in_new[3] > 0  # the new partitions did get records
    rows = read_delta(stream.table_uri)
    keys = rows.column("view_id").to_pylist()
    assert sorted(keys) == sorted(first.keys + second.keys)  # every record once
    assert Counter(rows.column("kafka_partition").to_pylist())[2] == in_new[2]
    assert (
        min(
            o
            for p, o in zip(
                rows.column("kafka_partition").to_pylist(),
                rows.column("kafka_offset").to_pylist(),
                strict=True,
            )
            if p == 3
        )
        == 0
    )

    done = committed_batch(checkpoint, v1.topic)
    assert done is not None and set(done.offsets) == {0, 1, 2, 3}
    lag = stream_lag(kafka_ends(kafka_conf, v1.topic), done.offsets)
    assert lag.by_partition == {0: 0, 1: 0, 2: 0, 3: 0}

    day = next(iter(second.by_date))
    result = backfill_dates(spark, v1, [day], engine_settings, kafka_conf)
    assert result.plan.start.keys() >= {(v1.topic, 2), (v1.topic, 3)}
    assert result.rows_by_date[day] == sum(d.isoformat() == day for d in rows["date"].to_pylist())
