"""The librdkafka settings of KAFKA_* as Spark's Java Kafka client gets them, and what its
refusals are told as (pure logic)."""

from __future__ import annotations

import pytest

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.kafka.read import explain_query_failure, java_client_options


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


def test_acls_revoked_while_a_query_runs_are_one_line_naming_the_user_and_topic() -> None:
    """Spark's message as a stream on the secured broker printed it (an executor's read)."""
    spark_says = (
        "[STREAM_FAILED] Query [id = 2ea8e0a6] terminated with exception: Job aborted.\n"
        "Caused by: org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized "
        "to access topics: [call-events]\n\tat org.apache.kafka.clients.Metadata..."
    )
    conf = {"bootstrap.servers": "127.0.0.1:9093", "sasl.username": "stream"}
    assert explain_query_failure(spark_says, conf) == (
        "Kafka at bootstrap.servers=127.0.0.1:9093 does not let 'stream' READ topic(s) "
        "call-events (TopicAuthorizationException): grant it READ and DESCRIBE on them "
        "(docs/deployment.md). Nothing was committed."
    )
