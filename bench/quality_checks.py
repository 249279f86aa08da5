"""Great Expectations on one date partition of CallEvent rows: the whole suite's time and the
peak memory of the process that runs it (Python and its Spark JVM), so that a run at 10 M rows
says what a day of 6,000 events/s (518 M) would cost."""

from __future__ import annotations

import os
import tempfile
import time
from datetime import UTC, date, datetime
from pathlib import Path

import click
import numpy as np
import pyarrow as pa
from common import TreeSampler, write_figures
from deltalake import write_deltalake

from tidelake.assets.quality.expectations import validate_partition
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.table_schema import table_schema
from tidelake.streaming.spark.session import build_spark_session

DAY = "2026-11-20"
CHUNK_ROWS = 2_000_000
"""Rows written per append, so that generating a large day does not hold it in memory."""


def partition(rows: int, first_offset: int = 0, seed: int = 5) -> pa.Table:
    """Clean CallEvent rows of DAY; kafka offsets from first_offset, keys random (unique)."""
    rng = np.random.default_rng(seed)
    start_us = int(datetime(2026, 11, 20, tzinfo=UTC).timestamp() * 1_000_000)
    event_us = np.sort(start_us + rng.integers(0, 86_400_000_000, rows))
    hex_ids = [f"{v:032x}" for v in rng.integers(0, 2**62, rows, dtype=np.int64)]
    offsets = np.arange(first_offset, first_offset + rows)
    schema = pa.schema([f for f in table_schema(CALL_EVENTS) if not f.name.startswith("_")])
    columns = {
        "call_sid": pa.array([f"CA{h}" for h in hex_ids]),
        "account_sid": pa.array([f"AC{i % 25:032x}" for i in range(rows)]),
        "duration": pa.array(rng.integers(0, 3600, rows), pa.int64()),
        "call_state": pa.array(np.where(rng.random(rows) < 0.04, "failed", "completed")),
        "region": pa.array(rng.choice(["us1", "us2", "de1"], rows)),
        "event_time": pa.array(event_us, pa.timestamp("us", "UTC")),
        "date": pa.array([date.fromisoformat(DAY)] * rows, pa.date32()),
        "kafka_topic": pa.array(["call-events"] * rows),
        "kafka_partition": pa.array(offsets % 4, pa.int32()),
        "kafka_offset": pa.array(offsets, pa.int64()),
        "kafka_timestamp": pa.array(event_us, pa.timestamp("us", "UTC")),
        "ingest_time": pa.array(event_us, pa.timestamp("us", "UTC")),
    }
    return pa.table([columns[f.name].cast(f.type) for f in schema], schema=schema)


def write_day(uri: str, rows: int) -> None:
    for n, first in enumerate(range(0, rows, CHUNK_ROWS)):
        chunk = partition(min(CHUNK_ROWS, rows - first), first, seed=5 + n)
        write_deltalake(uri, chunk, partition_by=["date"], mode="append")


@click.command()
@click.option("--rows", default=1_000_000, show_default=True)
@click.option("--runs", default=3, show_default=True)
@click.option("--out", type=click.Path(path_type=Path))
def main(rows: int, runs: int, out: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="tidelake-bench-") as tmp:
        uri = str(Path(tmp) / "call_events")
        write_day(uri, rows)
        spark = build_spark_session("local[2]")
        validate_partition(spark, uri, CALL_EVENTS, DAY)  # warm: GX's imports, the JVM's JIT
        seconds = []
        with TreeSampler(os.getpid(), interval_s=0.5) as sampler:
            for _ in range(runs):
                started = time.perf_counter()
                result = validate_partition(spark, uri, CALL_EVENTS, DAY)
                seconds.append(time.perf_counter() - started)
        assert result.success and result.rows == rows, result.failures
        spark.stop()
    peak_mb = sampler.peak_rss / 2**20
    by_kind = {kind: round(rss / 2**20) for kind, rss in sampler.peak_rss_by_kind.items()}
    click.echo(
        f"{len(result.outcomes)} expectations on {rows:,} rows: best {min(seconds):.2f} s, "
        f"runs {', '.join(f'{s:.2f}' for s in seconds)} s; peak RSS {peak_mb:,.0f} MB "
        f"({', '.join(f'{k} {v:,}' for k, v in by_kind.items())})"
    )
    write_figures(
        out,
        {
            "rows": rows,
            "expectations": len(result.outcomes),
            "seconds": seconds,
            "peak_rss_mb": peak_mb,
            "peak_rss_mb_by_kind": by_kind,
        },
    )


if __name__ == "__main__":
    main()
