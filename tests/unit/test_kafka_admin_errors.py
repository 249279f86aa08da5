"""Kafka administration against an address with no broker: a fast error naming it."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError

from tidelake.streaming.kafka.admin import (
    KafkaUnreachableError,
    _security_refusal,
    _SecurityErrors,
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


def test_a_refusal_heard_by_the_error_callback_names_what_to_check() -> None:
    """What the shared client's error callback keeps, and the one line it becomes: a refused
    login names the user and the settings, a failed handshake the CA or the certificate."""
    bootstrap = "127.0.0.1:9093"
    conf = {"bootstrap.servers": bootstrap, "sasl.username": "stream", "sasl.mechanism": "PLAIN"}
    login = KafkaError(
        KafkaError._AUTHENTICATION,
        f"sasl_ssl://{bootstrap}/bootstrap: SASL authentication error: Authentication failed",
    )
    verify = KafkaError(KafkaError._SSL, "SSL handshake failed: certificate verify failed")
    alert = KafkaError(KafkaError._TRANSPORT, "SSL/TLS alert: bad certificate")
    listener = _SecurityErrors()
    for error in (login, KafkaError(KafkaError._TRANSPORT, "Connection refused"), verify, alert):
        listener(error)
    assert list(listener.heard) == [login, verify, alert]  # transport failures alone are not

    refused = _security_refusal(conf, bootstrap, login)
    assert str(refused) == (
        f"Kafka at bootstrap.servers={bootstrap} refused user 'stream' (PLAIN): SASL "
        "authentication error: Authentication failed; check KAFKA_SASL_USERNAME and "
        "KAFKA_SASL_PASSWORD"
    )
    assert "KAFKA_SSL_CA_LOCATION" in str(_security_refusal(conf, bootstrap, verify))
    assert "KAFKA_SSL_CERTIFICATE_LOCATION" in str(_security_refusal(conf, bootstrap, alert))
    no_sasl = KafkaError(
        KafkaError._AUTHENTICATION, "Unsupported SASL mechanism: supported mechanisms:  (x)"
    )
    assert _security_refusal(conf, bootstrap, no_sasl) is None  # the caller names the protocol
