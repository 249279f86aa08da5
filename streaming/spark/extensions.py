"""tidelake's own JVM code (jvm/spark-extensions) as the active SparkSession sees it."""

from __future__ import annotations

from typing import Any


def tidelake_jvm(caller: str) -> Any:
    """The package dev.tidelake.spark in the active session's JVM."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None or spark._jvm is None:
        raise RuntimeError(f"{caller} needs an active SparkSession")
    return spark._jvm.dev.tidelake.spark
