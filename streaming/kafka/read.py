"""Reading a flow's topic with Spark's own Kafka source (`format("kafka")`), stream or batch.

tidelake's Kafka settings are librdkafka's (settings.kafka_client_config: the ingest service and
the driver-side probes use confluent-kafka); Spark's source runs the Java client, whose names
differ for security. `java_client_options` translates them, so one set of KAFKA_* variables
configures both. Every read is read_committed: records of aborted transactions are skipped and a
read never reaches into an open transaction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.offsets import (
    KafkaSourceError,
    Offsets,
    PartitionEnds,
    to_json_offsets,
)

_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_RENAMED = {
    "sasl.mechanisms": "sasl.mechanism",
    "ssl.ca.location": "ssl.truststore.location",
    "ssl.certificate.location": "ssl.keystore.certificate.chain",
    "ssl.key.location": "ssl.keystore.key",
}
_LIBRDKAFKA_ONLY = {"sasl.username", "sasl.password", "debug", "log_level"}


def java_client_options(kafka_conf: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings as the Java client's (unprefixed); SASL credentials become a JAAS
    config. A setting both clients share (client.id, security.protocol...) passes unchanged."""
    out: dict[str, str] = {}
    for name, value in kafka_conf.items():
        if name in _LIBRDKAFKA_ONLY:
            continue
        out[_RENAMED.get(name, name)] = str(value)
    if "ssl.ca.location" in kafka_conf:
        out["ssl.truststore.type"] = "PEM"
    if "sasl.username" in kafka_conf:
        mechanism = str(kafka_conf.get("sasl.mechanisms", kafka_conf.get("sasl.mechanism", "")))
        module = _JAAS_MODULES.get(mechanism.upper())
        if module is None:
            raise ConfigError(
                f"KAFKA_SASL_MECHANISM={mechanism or '(unset)'}: tidelake passes a username and "
                f"password to Spark's Kafka source only for {', '.join(_JAAS_MODULES)}"
            )
        out["sasl.mechanism"] = mechanism.upper()
        out["sasl.jaas.config"] = (
            f"{module} required username={_quoted(kafka_conf['sasl.username'])} "
            f"password={_quoted(kafka_conf.get('sasl.password', ''))};"
        )
    return out


FETCH_DEFAULTS = {
    "max.poll.records": "20000",
    "max.partition.fetch.bytes": str(16 * 1024 * 1024),
    "fetch.max.bytes": str(64 * 1024 * 1024),
}
"""The Java consumer's defaults (500 records a poll, 1 MB a partition) cap Spark's Kafka source at
~95k records/s on 2 cores; these reach ~134k (measured, 300k CallEvents, 4 partitions).
KAFKA_MAX_POLL_RECORDS etc. override them."""


def source_options(flow: FlowSpec, kafka_conf: Mapping[str, str]) -> dict[str, str]:
    """Options of `format("kafka")` shared by the stream and batch reads of a flow's topic."""
    client = {**FETCH_DEFAULTS, **java_client_options(kafka_conf)}
    options = {f"kafka.{k}": v for k, v in client.items()}
    options.update(
        {
            "subscribe": flow.topic,
            "kafka.isolation.level": "read_committed",
            "groupIdPrefix": f"tidelake-{flow.name}",
            "includeHeaders": "false",
        }
    )
    return options


def stream_records(
    spark: SparkSession,
    flow: FlowSpec,
    kafka_conf: Mapping[str, str],
    *,
    starting_offsets: str,
    max_offsets_per_trigger: int,
    fail_on_data_loss: bool,
) -> DataFrame:
    """The flow's topic as a streaming DataFrame of Spark's Kafka rows."""
    options = source_options(flow, kafka_conf)
    options.update(
        startingOffsets=starting_offsets,
        maxOffsetsPerTrigger=str(max_offsets_per_trigger),
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )
    return spark.readStream.format("kafka").options(**options).load()


def read_records(
    spark: SparkSession,
    flow: FlowSpec,
    kafka_conf: Mapping[str, str],
    start: Offsets,
    end: Offsets,
) -> DataFrame:
    """The records [start, end) of every partition of the flow's topic, as a batch DataFrame.

    failOnDataLoss stays on: a range that retention has already cut fails the read instead of
    silently returning less.
    """
    options = source_options(flow, kafka_conf)
    options.update(
        startingOffsets=json.dumps(to_json_offsets(start)),
        endingOffsets=json.dumps(to_json_offsets(end)),
        failOnDataLoss="true",
    )
    return spark.read.format("kafka").options(**options).load()


_LOST_RANGE = re.compile(
    r"Could not read records in offset \[(\d+), (\d+)\) for topic partition (\S+)-(\d+)"
)


def explain_data_loss(message: str, kafka_conf: Mapping[str, str]) -> str | None:
    """For Spark's "Some data may have been lost" failure: which offsets are gone (the read
    range up to what Kafka still holds) and the documented way past it; None for other
    failures."""
    found = _LOST_RANGE.search(message)
    if found is None:
        return None
    start, end, topic, partition = int(found[1]), int(found[2]), found[3], int(found[4])
    ends = PartitionEnds(kafka_conf, "tidelake-data-loss", 10.0)
    try:
        kept_from = ends.earliest([(topic, partition)]).get((topic, partition), end)
    except KafkaSourceError:
        kept_from = end
    finally:
        ends.close()
    last_lost = max(start, min(kept_from, end) - 1)
    return (
        f"offsets {start}..{last_lost} of {topic}/{partition} are no longer in Kafka (retention or "
        "deleted records) and the stream had not read them. Restore them into the topic if you "
        "can; or run the stream once with TIDELAKE_FAIL_ON_DATA_LOSS=false, which skips them "
        "(and logs the skip), then go back to the default."
    )


_KAFKA_TIMEOUT = re.compile(
    r"org\.apache\.kafka\.common\.errors\.TimeoutException: (.*?)(?: SQLSTATE: \w+)?$", re.M
)


def explain_unreachable(message: str, kafka_conf: Mapping[str, str]) -> str | None:
    """For a query that failed because the Kafka clients timed out (the broker stopped or became
    unreachable): one line naming the cluster; None for other failures."""
    found = _KAFKA_TIMEOUT.search(message)
    if found is None:
        return None
    return (
        f"cannot reach Kafka at bootstrap.servers={kafka_conf.get('bootstrap.servers')} "
        f"({found[1].strip()}). Nothing committed is lost: a restart resumes after the last "
        "committed batch once the broker is back."
    )


_KAFKA_AUTHORIZATION = re.compile(
    r"org\.apache\.kafka\.common\.errors\.TopicAuthorizationException: Not authorized to "
    r"access topics: \[([^\]]*)\]"
)


def explain_not_authorized(message: str, kafka_conf: Mapping[str, str]) -> str | None:
    """For a query whose Kafka reads were refused by the cluster's ACLs: one line naming the
    principal, the topics and the operations it needs; None for other failures."""
    found = _KAFKA_AUTHORIZATION.search(message)
    if found is None:
        return None
    user = kafka_conf.get("sasl.username") or "this client's certificate"
    return (
        f"Kafka at bootstrap.servers={kafka_conf.get('bootstrap.servers')} does not let {user!r} "
        f"READ topic(s) {found[1]} (TopicAuthorizationException): grant it READ and DESCRIBE on "
        "them (docs/deployment.md). Nothing was committed."
    )


def explain_query_failure(message: str, kafka_conf: Mapping[str, str]) -> str:
    """A failure of a query that reads Kafka, in tidelake's terms where we know better than
    Spark's message, else the first line of Spark's (the rest is the query plan; the log has the
    stack)."""
    return (
        explain_data_loss(message, kafka_conf)
        or explain_not_authorized(message, kafka_conf)
        or explain_unreachable(message, kafka_conf)
        or next(iter(message.strip().splitlines()), message)
    )


def _quoted(value: str) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
