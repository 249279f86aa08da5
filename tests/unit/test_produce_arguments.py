"""The demo producer refuses bad arguments and an unreachable broker before producing anything."""

from __future__ import annotations

from typing import Any

import pytest

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.kafka.admin import (
    KafkaUnreachableError,
)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give count, or duration_s"),
        ({"count": 10, "duration_s": 1.0}, "not both"),
        ({"count": 0}, "count must be an integer >= 1"),
        ({"count": 10, "rate": 0}, "rate must be a number > 0"),
        ({"duration_s": -1.0}, "duration_s must be a number > 0"),
        ({"count": 10, "malformed_share": 1.5}, "malformed_share must be between 0 and 1"),
        ({"count": 10, "late_share": -0.1}, "late_share must be between 0 and 1"),
        ({"count": 10, "days": 0}, "days must be an integer >= 1"),
    ],
)
def test_bad_arguments_fail_before_producing(kwargs: dict[str, Any], message: str) -> None:
    conf = {"bootstrap.servers": "127.0.0.1:1"}  # never contacted
    with pytest.raises(ValueError, match=message):
        produce_demo_events(CALL_EVENTS, conf, progress=False, **kwargs)


def test_unreachable_broker_raises(closed_port: int) -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{closed_port}"}
    with pytest.raises(KafkaUnreachableError, match=str(closed_port)):
        produce_demo_events(CALL_EVENTS, conf, count=10, progress=False)
