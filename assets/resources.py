"""Resources shared by every flow: where Kafka is, and the one Spark session of a run."""

from __future__ import annotations

import os

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from tidelake.streaming.settings import (
    EngineSettings,
    kafka_client_config,
    load_engine_settings,
    redact,
)
from tidelake.streaming.spark.session import spark_session_conf


class KafkaResource(dg.ConfigurableResource):
    """The Kafka cluster: KAFKA_* environment variables, else the running `tidelake broker`.

    Security settings (KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_*) stay in the
    environment so that they never appear in run configuration or in the UI.
    """

    bootstrap_servers: str | None = Field(
        default=None, description="host:port list; overrides KAFKA_BOOTSTRAP_SERVERS"
    )

    def client_config(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.bootstrap_servers:
            env["KAFKA_BOOTSTRAP_SERVERS"] = self.bootstrap_servers
        return kafka_client_config(env)

    def describe(self) -> dict[str, str]:
        """The client config with secrets masked, for logs and metadata."""
        return redact(self.client_config())


def engine_settings() -> EngineSettings:
    """TIDELAKE_* settings, read when definitions load (errors name the variable)."""
    return load_engine_settings()


def spark_resource(settings: EngineSettings) -> LazyPySparkResource:
    """The platform's Spark: built on first use, so sensors and the checks that read the Delta
    log alone never start a JVM (the `expectations` check does)."""
    return LazyPySparkResource(
        spark_config=spark_session_conf(settings.spark_master, settings.spark_conf, "tidelake")
    )
