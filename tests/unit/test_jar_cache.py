"""The jar cache: artifact ids from jar names, and no jar that pyspark already ships."""

from __future__ import annotations

import pytest

from tidelake.streaming.spark.jars import artifact_id, pyspark_artifacts, spark_jars


@pytest.mark.parametrize(
    ("jar", "artifact"),
    [
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
        ("zstd-jni-1.5.7-6.jar", "zstd-jni"),
        ("kafka_2.13-4.4.0.jar", "kafka_2.13"),
        ("log4j-slf4j2-impl-2.26.1.jar", "log4j-slf4j2-impl"),
        ("jackson-annotations-2.21.jar", "jackson-annotations"),
        ("netty-codec-http2-4.1.118.Final.jar", "netty-codec-http2"),
    ],
)
def test_artifact_ids_from_jar_names(jar: str, artifact: str) -> None:
    assert artifact_id(jar) == artifact


def test_the_cache_holds_no_jar_that_pyspark_ships() -> None:
    cached = {artifact_id(j.name) for j in spark_jars()}
    assert {"spark-sql-kafka-0-10_2.13", "delta-spark_2.13", "delta-storage"} <= cached
    assert not cached & pyspark_artifacts()
