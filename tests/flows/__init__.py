"""A test-only flow: PageView events, declared exactly as a real flow would be."""

from __future__ import annotations

import random
from datetime import timedelta

from tidelake.streaming.flow_spec import FlowSpec

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
