"""What an Upsert use case's micro-batch costs as its table grows: account_activity over a table
of 10,000 accounts and one of 1,000,000, the same batches of calls for existing accounts landed
on each in turn (the order alternating, since a loaded machine's speed drifts), both queries
running in one Spark session as the always-on job runs one.

Per batch, from the output table's history (delta-spark's MERGE metrics): rows rewritten (copied
+ updated), files removed, deletion vectors added, the MERGE's execution, scan and rewrite time,
and freshness (the input's commit to the output's). At the end each table is compared with a
recomputation from its input in pandas, read back by delta-spark, and its files and deletion
vectors are counted.

    python bench/upsert_scale.py --small 10000 --large 1000000 --batches 8 --events 3000
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import numpy as np
import pyarrow as pa
from common import write_figures
from deltalake import DeltaTable, write_deltalake
from upsert_checks import differences, table_files

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.use_cases import ACCOUNT_ACTIVITY
from tidelake.streaming.flow.table_schema import table_schema
from tidelake.streaming.polling import poll_until
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.spark.session import build_spark_session
from tidelake.streaming.usecase.position import committed_input_version
from tidelake.streaming.usecase.stream import UseCaseStream

START = datetime(2026, 12, 1, tzinfo=UTC)
REWRITTEN = ("numTargetRowsCopied", "numTargetRowsUpdated")


def calls(accounts: np.ndarray, first_us: int, seed: int) -> pa.Table:
    """One call per entry of `accounts` (account numbers), event times unique and increasing
    from `first_us` microseconds past START, in the call_events table's columns."""
    rng = np.random.default_rng(seed)
    count = len(accounts)
    failed = rng.random(count) < 0.1
    micros = first_us + np.arange(count, dtype="int64") * 7
    times = np.datetime64(START.replace(tzinfo=None), "us") + micros.astype("m8[us]")
    event_time = pa.array(times, pa.timestamp("us", tz="UTC"))
    schema = table_schema(CALL_EVENTS)
    columns = {
        "call_sid": pa.array([f"CA{seed:08x}{n:024x}" for n in range(count)]),
        "account_sid": pa.array([f"AC{n:032x}" for n in accounts]),
        "duration": pa.array(np.where(failed, 0, rng.integers(1, 3600, count))),
        "call_state": pa.array(np.where(failed, "failed", "completed")),
        "region": pa.array(np.array(["us1", "de1", "jp1"])[rng.integers(0, 3, count)]),
        "event_time": event_time,
        "date": pa.compute.cast(event_time, pa.date32()),
    }
    return pa.table(
        {
            f.name: columns[f.name].cast(f.type) if f.name in columns else pa.nulls(count, f.type)
            for f in schema
        },
        schema=schema,
    )


@dataclass
class Lake:
    """One input table and account_activity's stream on it."""

    name: str
    keys: int
    work: Path

    def __post_init__(self) -> None:
        self.settings = EngineSettings(lake=self.work / "lake", checkpoints=self.work / "cp")
        use_case = dataclasses.replace(ACCOUNT_ACTIVITY, name=f"account_activity_{self.name}")
        self.stream = UseCaseStream(use_case, CALL_EVENTS, self.settings)
        self.landed_us = 0

    @property
    def input_uri(self) -> str:
        return self.stream.input_uri

    def land(self, accounts: np.ndarray, seed: int) -> tuple[int, int]:
        """Append calls of `accounts` as one commit: (input version, its commit time in ms)."""
        write_deltalake(
            self.input_uri,
            calls(accounts, self.landed_us, seed),
            mode="append",
            partition_by=["date"],
        )
        self.landed_us += len(accounts) * 7 + 1000
        table = DeltaTable(self.input_uri)
        return table.version(), int(table.history(1)[0]["timestamp"])

    def wait_for(self, version: int) -> None:
        def read() -> bool | None:
            done = committed_input_version(self.stream.checkpoint)
            return True if done is not None and done >= version else None

        poll_until(
            read,
            timeout_s=1800,
            interval_s=0.1,
            timeout_error=lambda _: TimeoutError(f"{self.name}: version {version} not read"),
        )

    def version(self) -> int:
        return DeltaTable(self.stream.table_uri).version()

    def commits_since(self, version: int) -> list[dict[str, Any]]:
        """The output's commits after `version`: the batch's MERGE and any auto compaction."""
        table = DeltaTable(self.stream.table_uri)
        return table.history(table.version() - version)


def batch_figures(commits: list[dict[str, Any]], input_commit_ms: int) -> dict[str, float]:
    (entry,) = [c for c in commits if c["operation"] == "MERGE"]
    compactions = [c for c in commits if c["operation"] == "OPTIMIZE"]
    metrics = {k: int(v) for k, v in entry["operationMetrics"].items()}
    return {
        "rows_rewritten": sum(metrics[k] for k in REWRITTEN),
        "rows_copied": metrics["numTargetRowsCopied"],
        "rows_updated": metrics["numTargetRowsUpdated"],
        "rows_inserted": metrics["numTargetRowsInserted"],
        "files_removed": metrics["numTargetFilesRemoved"],
        "files_added": metrics["numTargetFilesAdded"],
        "deletion_vectors_added": metrics.get("numTargetDeletionVectorsAdded", 0),
        "merge_ms": metrics["executionTimeMs"],
        "scan_ms": metrics["scanTimeMs"],
        "rewrite_ms": metrics["rewriteTimeMs"],
        "freshness_ms": int(entry["timestamp"]) - input_commit_ms,
        "auto_compactions": len(compactions),
        "compaction_bytes_written": sum(
            int(c["operationMetrics"].get("numAddedBytes", 0)) for c in compactions
        ),
    }


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": float(np.percentile(values, 50)),
        "max": float(np.max(values)),
        "sum": float(np.sum(values)),
    }


@click.command()
@click.option("--small", default=10_000, show_default=True, help="accounts in the small table")
@click.option("--large", default=1_000_000, show_default=True, help="accounts in the large table")
@click.option("--batches", default=8, show_default=True, help="measured batches on each table")
@click.option("--events", default=3_000, show_default=True, help="calls per batch")
@click.option("--out", type=click.Path(path_type=Path), default=None)
def main(small: int, large: int, batches: int, events: int, out: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="tidelake-upsert-scale-") as work:
        lakes = [
            Lake(name, keys, Path(work) / name)
            for name, keys in [("small", small), ("large", large)]
        ]
        spark = build_spark_session("local[2]", app_name="bench-upsert-scale")
        rng = np.random.default_rng(7)
        started = {}
        for lake in lakes:  # every account's first call, as the first batch
            version, _ = lake.land(np.arange(lake.keys), seed=1)
            lake.stream.preflight()
            started[lake.name] = lake.stream.start(spark)
            began = time.monotonic()
            lake.wait_for(version)
            print(f"{lake.name}: {lake.keys:,} accounts loaded in {time.monotonic() - began:.1f}s")
        measured: dict[str, list[dict[str, float]]] = {lake.name: [] for lake in lakes}
        for n in range(batches):
            for lake in lakes if n % 2 == 0 else lakes[::-1]:
                accounts = rng.choice(lake.keys, size=events, replace=lake.keys < events)
                before = lake.version()
                version, committed_ms = lake.land(accounts, seed=100 + n)
                lake.wait_for(version)
                figures = batch_figures(lake.commits_since(before), committed_ms)
                measured[lake.name].append(figures)
                shown = ", ".join(f"{k} {v}" for k, v in figures.items())
                print(f"batch {n} {lake.name}: {shown}")
        for query in started.values():
            query.stop()
        result: dict[str, Any] = {"events_per_batch": events, "batches": batches}
        for lake in lakes:
            rows = measured[lake.name]
            result[lake.name] = {
                "keys": lake.keys,
                **{k: summary([r[k] for r in rows]) for k in rows[0]},
                **table_files(spark, lake.stream.table_uri),
                "differences_from_recomputation": differences(
                    spark, lake.input_uri, lake.stream.table_uri
                ),
            }
        spark.stop()
    s, g = result["small"], result["large"]
    result["large_over_small_merge_p50"] = round(g["merge_ms"]["p50"] / s["merge_ms"]["p50"], 2)
    result["large_over_small_freshness_p50"] = round(
        g["freshness_ms"]["p50"] / s["freshness_ms"]["p50"], 2
    )
    result["large_rows_rewritten_per_event_max"] = round(g["rows_rewritten"]["max"] / events, 2)
    result["large_compaction_bytes_per_batch"] = round(
        g["compaction_bytes_written"]["sum"] / batches
    )
    for key, value in result.items():
        print(f"{key}: {value}")
    write_figures(out, result)


if __name__ == "__main__":
    main()
