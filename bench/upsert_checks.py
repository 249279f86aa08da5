"""An account_activity table checked at the end of a benchmark: equal to a recomputation from its
input in pandas (the table read back by delta-spark, an independent reader that honours deletion
vectors), and its live files and deletion vectors counted from delta-spark's snapshot."""

from __future__ import annotations

from typing import Any

import pandas as pd
from deltalake import DeltaTable
from pyspark.sql import DataFrame

COMPARED = ["calls", "failed_calls", "duration_s", "last_call_sid"]


def expected_activity(input_uri: str) -> pd.DataFrame:
    rows = DeltaTable(input_uri).to_pandas(
        columns=["account_sid", "call_sid", "event_time", "call_state", "duration"]
    )
    rows["failed"] = (rows["call_state"] == "failed").astype("int64")
    newest = rows.sort_values("event_time").groupby("account_sid").tail(1).set_index("account_sid")
    totals = rows.groupby("account_sid").agg(
        calls=("call_sid", "size"), failed_calls=("failed", "sum"), duration_s=("duration", "sum")
    )
    totals["last_call_sid"] = newest["call_sid"]
    return totals.sort_index()


def differences(spark: Any, input_uri: str, table_uri: str) -> int:
    """Accounts whose stored row differs from the recomputation."""
    stored = (
        spark.read.format("delta")
        .load(table_uri)
        .select("account_sid", *COMPARED)
        .toPandas()
        .set_index("account_sid")
        .sort_index()
    )
    expected = expected_activity(input_uri)
    if len(stored) != len(expected) or not stored.index.equals(expected.index):
        return abs(len(stored) - len(expected)) or len(expected)
    return int((stored[COMPARED].astype(str) != expected[COMPARED].astype(str)).any(axis=1).sum())


def table_files(spark: Any, table_uri: str) -> dict[str, int]:
    """Live files of the table and how many carry a deletion vector (delta-rs's add actions
    leave the vectors out)."""
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table_uri)
    empty = jvm.scala.Option.empty()
    files = DataFrame(log.update(False, empty, empty).allFiles().toDF(), spark)
    return {
        "files": files.count(),
        "files_with_deletion_vector": files.where("deletionVector IS NOT NULL").count(),
    }
