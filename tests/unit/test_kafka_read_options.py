"""The librdkafka settings of KAFKA_* as Spark's Java Kafka client gets them (pure logic)."""

from __future__ import annotations

import pytest

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.kafka.read import java_client_options


def test_sasl_and_tls_settings_become_the_java_clients() -> None:
    options = java_client_options(
        {
            "bootstrap.servers": "kafka-1:9093",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "scram-sha-512",
            "sasl.username": "tidelake",
            "sasl.password": 'pa"ss\\word',
            "ssl.ca.location": "/etc/ssl/kafka-ca.pem",
        }
    )
    assert options == {
        "bootstrap.servers": "kafka-1:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="tidelake" password="pa\\"ss\\\\word";',
        "ssl.truststore.location": "/etc/ssl/kafka-ca.pem",
        "ssl.truststore.type": "PEM",
    }


def test_a_mechanism_the_java_client_cannot_be_given_is_named() -> None:
    with pytest.raises(ConfigError, match="KAFKA_SASL_MECHANISM=OAUTHBEARER"):
        java_client_options({"sasl.mechanism": "OAUTHBEARER", "sasl.username": "u"})
