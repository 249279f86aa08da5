"""Kafka administration against an address with no broker: a fast error naming it."""

from __future__ import annotations

import time

import pytest

from tidelake.streaming.kafka.admin import (
    KafkaUnreachableError,
    check_reachable,
    ensure_topic,
)


def test_unreachable_broker_fails_fast_naming_the_address(closed_port: int) -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{closed_port}"}
    started = time.monotonic()
    with pytest.raises(
        KafkaUnreachableError, match=rf"bootstrap\.servers=127\.0\.0\.1:{closed_port}"
    ):
        check_reachable(conf, timeout_s=5)
    with pytest.raises(KafkaUnreachableError):
        ensure_topic(conf, "never-created", 1, timeout_s=5)
    assert time.monotonic() - started < 2


def test_silent_address_times_out_within_the_limit(closed_port: int) -> None:
    # Mixed list: one refusing address and one that cannot be parsed, so the fast path is off
    # and librdkafka's own metadata timeout decides.
    conf = {"bootstrap.servers": f"127.0.0.1:{closed_port},not-a-port"}
    started = time.monotonic()
    with pytest.raises(KafkaUnreachableError, match=r"no metadata within 1s"):
        check_reachable(conf, timeout_s=1)
    assert time.monotonic() - started < 3
