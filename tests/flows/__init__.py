"""Test-only flows, declared exactly as real flows would be: PageView (scalar fields) and Order
(nested, repeated and map fields)."""

from __future__ import annotations

import random
from datetime import timedelta

from tidelake.streaming.flow.spec import FlowSpec

from .order_pb2 import Order
from .page_view_pb2 import PageView


def page_view(rng: random.Random, event_time_ms: int) -> PageView:
    return PageView(
        view_id=f"PV{rng.getrandbits(64):016x}",
        user=f"user-{rng.randrange(50)}",
        url=f"https://example.test/{rng.choice(['home', 'pricing', 'docs'])}",
        viewed_at_s=event_time_ms // 1000,
        bounced=rng.random() < 0.3,
        load_ms=rng.uniform(50, 900),
        device=rng.choice([PageView.DESKTOP, PageView.MOBILE]),
        scroll_percent=rng.randrange(101),
    )


PAGE_VIEWS = FlowSpec(
    name="page_views",
    message=PageView,
    topic="page-views",
    key_field="view_id",
    event_time_field="viewed_at_s",
    event_time_unit="s",
    required_fields=("user",),
    topic_partitions=2,
    allowed_lateness=timedelta(minutes=30),
    description="Test-only flow.",
    demo_event=page_view,
)


def order(rng: random.Random, event_time_ms: int) -> Order:
    """Every shape of nested and repeated value, and some left out (no ship_to, no lines)."""
    event = Order(order_id=f"OR{rng.getrandbits(64):016x}", placed_at_ms=event_time_ms)
    if rng.random() < 0.7:
        event.ship_to.city = rng.choice(["Berlin", "Lisbon"])
        event.ship_to.country = "DE"
        if rng.random() < 0.5:
            event.ship_to.floor = rng.randrange(-1, 9)
    event.coupons.extend(rng.sample(["NEW", "VIP", "XMAS"], rng.randrange(3)))
    for _ in range(rng.randrange(3)):
        line = event.lines.add(sku=f"SKU-{rng.randrange(100)}", quantity=rng.randrange(1, 5))
        line.kind = rng.choice([Order.Line.GOODS, Order.Line.SERVICE])
        line.options.extend(rng.randrange(-5, 5) for _ in range(rng.randrange(3)))
    event.scores.extend(rng.randrange(-(2**40), 2**40) for _ in range(rng.randrange(4)))
    event.unpacked_scores.extend(rng.randrange(100) for _ in range(rng.randrange(3)))
    event.attributes.update({k: rng.randrange(10) for k in rng.sample("abc", rng.randrange(3))})
    return event


ORDERS = FlowSpec(
    name="orders",
    message=Order,
    topic="orders",
    key_field="order_id",
    event_time_field="placed_at_ms",
    topic_partitions=2,
    description="Test-only flow with nested and repeated fields.",
    demo_event=order,
)
