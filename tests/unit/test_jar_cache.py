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


def test_the_driver_classpath_holds_the_jar_cache_then_the_users_own() -> None:
    # spark-submit resolves spark.jars through fs.file.impl (tidelake's), before spark.jars
    # are on the classpath: the driver JVM must start with them
    from tidelake.streaming.spark.session import spark_session_conf

    conf = spark_session_conf(
        "local[1]", {"spark.driver.extraClassPath": "/opt/extra.jar"}, use_class_archive=False
    )
    classpath = conf["spark.driver.extraClassPath"].split(":")
    assert classpath[:-1] == [str(j) for j in spark_jars()]
    assert classpath[-1] == "/opt/extra.jar"
    assert conf["spark.jars"].split(",") == classpath[:-1]
