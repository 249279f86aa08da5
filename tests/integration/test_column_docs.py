"""Column docs in the Delta tables: the .proto's comments on each field, the engine's description
of its own columns, in the `comment` key of the Delta column metadata (read back with delta-rs)."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from flows import PAGE_VIEWS
from flows.page_view_changes_pb2 import PageViewWithCountry
from live_stream import run_available_now

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.delta.evolution import TableEvolution, evolve_table
from tidelake.streaming.flow.engine_columns import ENGINE_COLUMN_DESCRIPTIONS, KAFKA_OFFSET
from tidelake.streaming.flow.table_schema import column_doc, table_schema


def column_docs(table_uri: str) -> dict[str, str | None]:
    """Each column's comment in the table's Delta column metadata, None if it has none."""
    return {f.name: f.metadata.get("comment") for f in DeltaTable(table_uri).schema().fields}


def test_the_table_the_stream_creates_has_the_protos_comments(
    spark, kafka_conf, flow, engine_settings
):
    produce_demo_events(
        flow, kafka_conf, count=50, malformed_share=0, late_share=0, seed=1, progress=False
    )
    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    assert DeltaTable(stream.table_uri).version() > 0  # rows appended since it was created

    docs = column_docs(stream.table_uri)
    assert docs["duration"] == "seconds"  # protos/call.proto
    assert docs["event_time"] == "epoch milliseconds, UTC"
    assert docs[KAFKA_OFFSET] == ENGINE_COLUMN_DESCRIPTIONS[KAFKA_OFFSET]
    assert docs["call_sid"] is None  # no comment in the .proto


def test_a_column_evolution_adds_has_its_comment(tmp_path):
    uri = str(tmp_path / "page_views")
    evolve_table(PAGE_VIEWS, uri)
    v2 = dataclasses.replace(PAGE_VIEWS, message=PageViewWithCountry)
    assert evolve_table(v2, uri) == TableEvolution(added=("country", "clicks"))
    docs = column_docs(uri)
    assert docs["country"] == "ISO 3166-1 alpha-2 code, when known"
    assert docs["clicks"] is None
    assert docs["viewed_at_s"] == "epoch seconds"


def test_docs_follow_the_message_on_a_table_that_has_other_docs(tmp_path):
    """A table written before columns had docs, or since the .proto's comments changed."""
    uri = str(tmp_path / "page_views")
    schema = table_schema(PAGE_VIEWS)
    old = pa.schema([f.remove_metadata() for f in schema])
    old = old.set(old.get_field_index("url"), old.field("url").with_metadata({"comment": "gone"}))
    write_deltalake(uri, old.empty_table(), partition_by=[PAGE_VIEWS.partition_column])

    assert set(evolve_table(PAGE_VIEWS, uri).restamped) == set(schema.names)
    docs = column_docs(uri)
    assert docs["url"] == ""  # its comment was removed from the .proto
    assert docs == {f.name: column_doc(f) or None for f in schema} | {"url": ""}
    assert not evolve_table(PAGE_VIEWS, uri).changed
