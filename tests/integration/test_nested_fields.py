"""A flow whose message nests messages and repeats fields: struct, array and map-entry columns,
through the real broker, Spark and Delta, read back with delta-rs and DuckDB."""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Any

from confluent_kafka import Producer
from flows import ORDERS, order
from flows.order_pb2 import Order
from lake_readers import duckdb_query, read_delta
from live_stream import run_available_now

from tidelake.assets.quality.expectations import validate_partition
from tidelake.streaming.kafka.admin import ensure_topic, quiet_client_config


def as_row(event: Order) -> dict[str, Any]:
    """The columns an Order must become."""
    ship_to = None
    if event.HasField("ship_to"):
        address = event.ship_to
        ship_to = {
            "city": address.city,
            "country": address.country,
            "floor": address.floor if address.HasField("floor") else None,
        }
    return {
        "ship_to": ship_to,
        "coupons": list(event.coupons),
        "lines": [
            {
                "sku": line.sku,
                "quantity": line.quantity,
                "kind": Order.Line.Kind.Name(line.kind),
                "options": list(line.options),
            }
            for line in event.lines
        ],
        "scores": list(event.scores),
        "unpacked_scores": list(event.unpacked_scores),
        "attributes": sorted(event.attributes.items()),
    }


def test_nested_and_repeated_fields_land_as_struct_and_array_columns(
    spark, kafka_conf, topic_name, engine_settings
):
    flow = dataclasses.replace(ORDERS, topic=topic_name)
    ensure_topic(kafka_conf, topic_name, flow.topic_partitions)
    rng = random.Random(11)
    now_ms = int(time.time() * 1000)
    events = [order(rng, now_ms - 1000 * i) for i in range(300)]
    unknown_kind = Order(order_id="ORbad", placed_at_ms=now_ms)
    unknown_kind.lines.add(sku="SKU-1", quantity=1, kind=7)
    producer = Producer(quiet_client_config(kafka_conf))
    for event in [*events, unknown_kind]:
        producer.produce(topic_name, event.SerializeToString(), key=event.order_id.encode())
    assert producer.flush(30) == 0

    stream = run_available_now(spark, flow, engine_settings, kafka_conf)

    table = read_delta(stream.table_uri)
    assert str(table.schema.field("ship_to").type) == (
        "struct<city: string, country: string, floor: int32>"
    )
    assert str(table.schema.field("lines").type.value_type) == (
        "struct<sku: string, quantity: int64, kind: string, options: list<element: int32>>"
    )
    rows = {r["order_id"]: r for r in table.to_pylist()}
    assert len(rows) == table.num_rows == len(events)
    for event in events:
        row = rows[event.order_id]
        got = {name: row[name] for name in as_row(event)}
        got["attributes"] = sorted((e["key"], e["value"]) for e in got["attributes"])
        assert got == as_row(event), event.order_id
    assert sum(e.HasField("ship_to") for e in events) < len(events)  # some were not sent

    (refused,) = read_delta(stream.quarantine_uri).to_pylist()
    assert refused["error"] == "lines.kind: unknown value 7; one of [GOODS, SERVICE]"

    uri = stream.table_uri
    assert duckdb_query(
        f"select count(*), count(ship_to), sum(len(lines)), sum(len(scores)), "
        f"count(*) filter (where ship_to.city = 'Berlin') from delta_scan('{uri}')"
    ) == [
        (
            len(events),
            sum(e.HasField("ship_to") for e in events),
            sum(len(e.lines) for e in events),
            sum(len(e.scores) for e in events),
            sum(e.ship_to.city == "Berlin" for e in events),
        )
    ]
    assert duckdb_query(
        f"select sum(l.quantity) from (select unnest(lines) as l from delta_scan('{uri}'))"
    ) == [(sum(line.quantity for e in events for line in e.lines),)]
    for day in {r["date"].isoformat() for r in rows.values()}:
        checked = validate_partition(spark, uri, flow, day)
        assert checked.success, checked.failures
