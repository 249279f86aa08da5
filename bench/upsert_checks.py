"""An account_activity table checked at the end of a benchmark: equal to a recomputation from its
input in pandas (the table read back by delta-spark, an independent reader that honours deletion
vectors), and its live files and deletion vectors counted from delta-spark's snapshot."""

from __future__ import annotations

from typing import Any

import pandas as pd
from deltalake import DeltaTable
from pyspark.sql import DataFrame

COMPARED = ["calls", "failed_calls", "duration_s", "last_call_sid"]


def expected_activity(input_uri: str) -> tuple[pd.DataFrame, pd.Series]:
    """The recomputation, and per account the call_sids at its greatest event time (more than
    one where that time is tied: the sink breaks such a tie by its other columns, and any of
    them is the newest call)."""
    rows = DeltaTable(input_uri).to_pandas(
        columns=["account_sid", "call_sid", "event_time", "call_state", "duration"]
    )
    rows["failed"] = (rows["call_state"] == "failed").astype("int64")
    newest_time = rows.groupby("account_sid")["event_time"].transform("max")
    newest = rows[rows["event_time"] == newest_time].groupby("account_sid")["call_sid"]
    totals = rows.groupby("account_sid").agg(
        calls=("call_sid", "size"), failed_calls=("failed", "sum"), duration_s=("duration", "sum")
    )
    totals["last_call_sid"] = newest.min()
    return totals.sort_index(), newest.agg(frozenset)


def differences(spark: Any, input_uri: str, table_uri: str) -> dict[str, int]:
    """Per compared column, the accounts whose stored row differs from the recomputation (empty:
    equal); "accounts" when the sets of accounts differ; "tied_newest" counts accounts whose
    newest event time is tied (their stored newest call is one of the tied ones)."""
    stored = (
        spark.read.format("delta")
        .load(table_uri)
        .select("account_sid", *COMPARED)
        .toPandas()
        .set_index("account_sid")
        .sort_index()
    )
    expected, newest = expected_activity(input_uri)
    if len(stored) != len(expected) or not stored.index.equals(expected.index):
        return {"accounts": len(set(stored.index) ^ set(expected.index)) or len(expected)}
    tied = newest[newest.map(len) > 1]
    for account, calls in tied.items():
        if stored.at[account, "last_call_sid"] in calls:
            expected.at[account, "last_call_sid"] = stored.at[account, "last_call_sid"]
    found = {c: int((stored[c].astype(str) != expected[c].astype(str)).sum()) for c in COMPARED}
    return {c: n for c, n in found.items() if n} | ({"tied_newest": len(tied)} if len(tied) else {})


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
